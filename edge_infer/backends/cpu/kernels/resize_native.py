"""Resize in the compiled execution loop (src/resize.c, src/int8_ops.c's byte runs).

* nearest, any dtype: the source block of every output block (a pixel's channels in NHWC)
  comes from the float kernel's index math (``nn.nearest_blocks``); consecutive indices are
  merged into memcpy runs (``ei_runs_s8`` on the bytes), so a 2x upsample of a 40x40x128
  map is 3,200 copies of 512 bytes.
* linear over one axis or two adjacent axes, float32: per output row and column the two
  source indices and float32 weights of ``ops.resize.taps`` (every coordinate mode of the
  schema, exclude_outside included), applied by ``ei_resize_linear_f32`` in the numpy
  kernel's order (same bits).

What they do not cover (cubic, antialiased downscales with more than two taps, three or more
resized axes, tf_crop_and_resize's extrapolated points) stays on the numpy kernel, and
``why_not_native`` says why for inspect's note.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ....ops.resize import taps as _taps
from ..native import int8_ops as native_int8
from ..native import ops as native_ops

_P = ctypes.c_void_p


class ResizeLinearArgs(ctypes.Structure):
    """``ei_resize_linear_args`` of src/resize.c."""
    _fields_ = ([(f, _P) for f in ("x", "y", "iy", "ix", "wy", "wx")]
                + [(f, ctypes.c_int64) for f in ("planes", "h", "w", "inner", "oh", "ow")]
                + [("threads", ctypes.c_int32), ("pad_", ctypes.c_int32)])


def _bytes2d(arr: np.ndarray, lead: int) -> Optional[np.ndarray]:
    """``arr`` as (lead, bytes) int8, or None when it is not one contiguous block."""
    if not (arr.flags.c_contiguous and arr.flags.aligned) or arr.dtype.hasobject:
        return None
    return arr.reshape(lead, -1).view(np.int8)


def nearest_step(ctx, x: np.ndarray, y: np.ndarray, axes: Sequence[int], blocks: np.ndarray
                 ) -> Optional[Callable[[], None]]:
    """A nearest Resize as native memcpy runs: ``blocks`` holds, for every output block of the
    dims after the last resized axis, the flat index of its source block (``nn.nearest_blocks``).
    A strided ``y`` (a channel slice of a concat's output, memory/views.py) gets one run per
    output block at its strided place."""
    lead = int(np.prod(x.shape[:axes[0]], dtype=np.int64))
    inner = int(np.prod(x.shape[axes[-1] + 1:], dtype=np.int64)) * x.itemsize
    if x.dtype != y.dtype:
        return None
    if not y.flags.c_contiguous:
        return _strided_runs(ctx, x, y, axes, blocks, lead, inner)
    x2, y2 = _bytes2d(x, lead), _bytes2d(y, lead)
    if x2 is None or y2 is None:
        return None
    return native_int8.runs_step(x2, y2, blocks, ctx, inner=inner)


def _strided_runs(ctx, x, y, axes, blocks, lead, inner) -> Optional[Callable[[], None]]:
    a0, t = axes[0], axes[-1]
    tail = y.shape[t + 1:]
    c_order = [int(np.prod(tail[k + 1:], dtype=np.int64)) * y.itemsize for k in range(len(tail))]
    if (not x.flags.c_contiguous or not y.flags.aligned or list(y.strides[t + 1:]) != c_order
            or (lead > 1 and a0 != 1) or not native_ops._has("ei_runs_s8")):
        return None
    dst = np.zeros(y.shape[a0:t + 1], np.int64)
    for d in range(a0, t + 1):
        shape = [1] * (t + 1 - a0)
        shape[d - a0] = y.shape[d]
        dst = dst + (np.arange(y.shape[d], dtype=np.int64) * y.strides[d]).reshape(shape)
    seg = np.ascontiguousarray(np.stack([dst.ravel(), np.asarray(blocks, np.int64) * inner,
                                         np.full(dst.size, inner, np.int64)], axis=1))
    span = int(sum((n - 1) * st for n, st in zip(y.shape, y.strides))) + y.itemsize
    y_lead = y.strides[0] if lead > 1 else span
    args = native_int8.RunsArgs(x.ctypes.data, y.ctypes.data, seg.ctypes.data, seg.shape[0], lead,
                                x.nbytes // max(lead, 1), y_lead, max(1, int(ctx.threads or 1)), 0)
    return native_ops.native_step("ei_runs_s8", args, x, y, seg)


def _axis_taps(xo: np.ndarray, scale: float, in_len: int, antialias: bool, exclude: bool
               ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    idx, w = _taps(xo, "linear", scale, in_len, antialias, -0.75, exclude)
    if idx.shape[1] != 2:                 # an antialiased downscale: wider filters
        return None
    return np.ascontiguousarray(idx, np.int32), np.ascontiguousarray(w, np.float32)


def linear_step(ctx, x: np.ndarray, y: np.ndarray, axes: Sequence[int], coords: Dict[int, tuple],
                scale: Sequence[float], antialias: bool, exclude: bool) -> Optional[Callable[[], None]]:
    """A float32 linear Resize over ``axes`` (one axis, or two adjacent) as ``ei_resize_linear_f32``;
    None where it does not apply (see ``why_not_native``)."""
    if why_not_native("linear", x, y, axes, coords) or not native_ops._has("ei_resize_linear_f32"):
        return None
    tables: List[Tuple[np.ndarray, np.ndarray]] = []
    for a in axes:
        t = _axis_taps(coords[a][0], scale[a], x.shape[a], antialias, exclude)
        if t is None:
            return None
        tables.append(t)
    if len(axes) == 1:                    # seen as (planes, 1, W, inner): rows are a size-1 identity
        tables.insert(0, (np.zeros((1, 2), np.int32), np.array([[1, 0]], np.float32)))
        h = 1
    else:
        h = x.shape[axes[0]]
    (iy, wy), (ix, wx) = tables
    wa = axes[-1]
    planes = int(np.prod(x.shape[:axes[0]], dtype=np.int64))
    inner = int(np.prod(x.shape[wa + 1:], dtype=np.int64))
    args = ResizeLinearArgs(x.ctypes.data, y.ctypes.data, iy.ctypes.data, ix.ctypes.data, wy.ctypes.data,
                            wx.ctypes.data, planes, h, x.shape[wa], inner, iy.shape[0], ix.shape[0],
                            max(1, int(ctx.threads or 1)), 0)
    return native_ops.native_step("ei_resize_linear_f32", args, x, y, iy, ix, wy, wx)


def why_not_native(mode: str, x: np.ndarray, y: np.ndarray, axes: Sequence[int],
                   coords: Dict[int, tuple]) -> str:
    """Why a Resize stays on the numpy kernel ('' when the native kernels cover its shape)."""
    if not native_ops.enabled():
        return "no native library"
    if x.size == 0 or y.size == 0:
        return "empty tensor"
    if any(c[1] is not None and c[1].any() for c in coords.values()):
        return "tf_crop_and_resize extrapolation"
    if mode == "nearest":
        return ""
    if mode != "linear":
        return f"{mode} mode"
    if x.dtype != np.float32 or y.dtype != np.float32:
        return f"linear on {x.dtype}"
    if not (x.flags.c_contiguous and y.flags.c_contiguous):
        return "non-contiguous buffers"
    if len(axes) > 2 or (len(axes) == 2 and axes[1] != axes[0] + 1):
        return f"linear over axes {list(axes)} (the native kernel takes one axis or two adjacent)"
    return ""


def isa_name() -> str:
    """The vectors ``ei_resize_linear_f32`` uses under the current ISA mask."""
    fn = native_ops._pkg.lib.ei_resize_linear_isa
    fn.restype = ctypes.c_char_p
    return fn().decode()
