"""Prepare-time builders of the native int8 element-wise and data-movement steps (src/int8_ops.c):
lookup tables, broadcast Add/Mul, byte-run gathers, integer bilinear Resize, int8 Softmax.

Each returns a ``native_step`` closure, or None when the library is missing or the case is not
covered (the caller keeps its numpy closure). Tables and multipliers come from the numpy
kernels, so both paths compute the same integers.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Callable, Optional

import numpy as np

from . import native_step
from .ops import _bcast_strides, _collapse

_pkg = sys.modules[__package__]
_P, _I, _L = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
_L4 = ctypes.c_int64 * 4


def _has(fn: str) -> bool:
    return _pkg.lib is not None and hasattr(_pkg.lib, fn)


def _threads(ctx) -> int:
    return max(1, min(int(getattr(ctx, "threads", 1) or 1), 64))


class LutArgs(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P), ("tab", _P), ("rows", _L), ("inner", _L), ("xs", _L), ("ys", _L),
                ("ntab", _I), ("per_col", _I), ("threads", _I), ("pad_", _I)]


class BcastArgs(ctypes.Structure):
    _fields_ = [("a", _P), ("b", _P), ("y", _P), ("t1", _P), ("t2", _P), ("shape", _L4), ("sa", _L4),
                ("sb", _L4)] + [(f, _I) for f in ("op", "zp1", "zp2", "q", "shift", "zp_y", "lo", "hi",
                                                  "threads", "pad_")]


class RunsArgs(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P), ("seg", _P), ("nseg", _L), ("lead", _L), ("x_lead", _L),
                ("y_lead", _L), ("threads", _I), ("pad_", _I)]


class BilinearArgs(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P), ("ry", _P), ("rx", _P)] + \
               [(f, _L) for f in ("n", "c", "h", "w", "oh", "ow")] + [("nhwc", _I), ("threads", _I)]


class SoftmaxS8Args(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P), ("etab", _P), ("rows", _L), ("cols", _L), ("threads", _I), ("pad_", _I)]


def lut_isa() -> str:
    """The SIMD of the native LUT kernel under the current ISA mask."""
    if not _has("ei_lut_isa"):
        return "scalar"
    _pkg.lib.ei_lut_isa.restype = ctypes.c_int
    return {0: "scalar", 1: "AVX2 pshufb", 2: "NEON tbl", 3: "AVX-512 VBMI vpermi2b"}.get(_pkg.lib.ei_lut_isa(), "?")


def _rows(arr: np.ndarray, inner: int):
    """(rows, row stride) of ``arr`` seen as rows of ``inner`` contiguous int8 values, or None."""
    if arr.dtype != np.int8 or not arr.flags.aligned or arr.size == 0:
        return None
    if arr.flags.c_contiguous:
        return arr.size // inner, inner
    # a slice along one axis of a C-contiguous buffer (a Concat destination): rows of the slice
    shape, (st,) = _collapse(arr.shape, arr.strides)
    if len(shape) == 2 and st[1] == 1 and shape[1] == inner:
        return shape[0], st[0]
    if len(shape) == 1 and st[0] == 1 and shape[0] == inner:
        return 1, inner
    if len(shape) == 1 and inner == 1:
        return shape[0], st[0]
    return None


def lut_step(x: np.ndarray, y: np.ndarray, tables: np.ndarray, ctx=None, per: str = "tensor",
             channels: int = 1) -> Optional[Callable[[], None]]:
    """y = table[x] (tables: (ntab, 256) int8 indexed by x's uint8 bit pattern). ``per``:
    "tensor" (one table), "row" (NCHW channels: the table of row r is r % ntab, rows of the
    inner spatial size), "col" (channels-last: element j of a row of ``channels`` uses j % ntab).
    ``y`` may be a strided slice (rows of the inner size, a Concat destination) and may be x."""
    if not _has("ei_lut_s8") or x.shape != y.shape or x.size == 0:
        return None
    tables = np.ascontiguousarray(np.asarray(tables, np.int8).reshape(-1, 256))
    ntab = tables.shape[0]
    if per == "tensor":
        if y.flags.c_contiguous:
            inner = y.size
        else:
            shp, (sty,) = _collapse(y.shape, y.strides)
            inner = shp[-1] if sty[-1] == 1 else 1      # rows of one value (a 1-channel slice)
    elif per == "row":
        inner = x.size // (x.shape[0] * ntab) if x.ndim >= 2 else 0
    else:
        inner = channels
    if inner <= 0:
        return None
    rx, ry = _rows(x, inner), _rows(y, inner)
    if rx is None or ry is None or rx[0] != ry[0]:
        return None
    args = LutArgs(x.ctypes.data, y.ctypes.data, tables.ctypes.data, rx[0], inner, rx[1], ry[1], ntab,
                   int(per == "col"), _threads(ctx), 0)
    return native_step("ei_lut_s8", args, x, y, tables)


def bcast_step(op: str, a: np.ndarray, b: np.ndarray, y: np.ndarray, ctx, *, tables=None, zp1=0, zp2=0,
               q=0, shift=0, zp_y=0) -> Optional[Callable[[], None]]:
    """Broadcast int8 Add (``tables``: two int32 (256,) per-value terms) or Mul as one native step."""
    from .kernels import requant_ok
    if not _has("ei_int8_bcast") or not requant_ok([q], [shift]):
        return None
    for arr in (a, b, y):
        if not isinstance(arr, np.ndarray) or arr.dtype != np.int8 or not arr.flags.c_contiguous \
                or not arr.flags.aligned:
            return None
    try:
        if np.broadcast_shapes(a.shape, b.shape) != y.shape or y.size == 0:
            return None
    except ValueError:
        return None
    shape, (sa, sb) = _collapse(y.shape, _bcast_strides(a.shape, y.shape), _bcast_strides(b.shape, y.shape))
    if not shape:
        shape, sa, sb = [1], [0], [0]
    if len(shape) > 4:
        return None
    pad = 4 - len(shape)
    shape, sa, sb = [1] * pad + shape, [0] * pad + sa, [0] * pad + sb
    keep = [a, b, y]
    t1 = t2 = None
    if op == "Add":
        t1, t2 = (np.ascontiguousarray(t, np.int32) for t in tables)
        keep += [t1, t2]
    args = BcastArgs(a.ctypes.data, b.ctypes.data, y.ctypes.data, None if t1 is None else t1.ctypes.data,
                     None if t2 is None else t2.ctypes.data, _L4(*shape), _L4(*sa), _L4(*sb),
                     int(op == "Mul"), int(zp1), int(zp2), int(q), int(shift), int(zp_y), -128, 127,
                     _threads(ctx), 0)
    return native_step("ei_int8_bcast", args, *keep)


def runs_step(x2: np.ndarray, y2: np.ndarray, flat: np.ndarray, ctx=None, inner: int = 1
              ) -> Optional[Callable[[], None]]:
    """y2[l, j] = x2[l, flat[j]] for (lead, n) int8 views, as memcpy runs of consecutive indices.
    ``inner``: ``flat`` indexes blocks of that many consecutive elements (block j of y2 is
    block flat[j] of x2), so a resize keeps one index per pixel, not per value."""
    if not _has("ei_runs_s8") or x2.dtype != np.int8 or y2.dtype != np.int8 or x2.ndim != 2:
        return None
    if not (x2.flags.c_contiguous and y2.flags.c_contiguous) or y2.size == 0 or y2.shape[1] != flat.size * inner:
        return None
    flat = np.asarray(flat, np.int64)
    brk = np.flatnonzero(np.diff(flat) != 1) + 1
    starts = np.concatenate([[0], brk])
    lens = np.diff(np.concatenate([starts, [flat.size]]))
    seg = np.ascontiguousarray(np.stack([starts, flat[starts], lens], axis=1).astype(np.int64) * inner)
    if seg.shape[0] > max(64, flat.size * inner // 2):  # runs of one or two bytes: a gather is better
        return None
    args = RunsArgs(x2.ctypes.data, y2.ctypes.data, seg.ctypes.data, seg.shape[0], x2.shape[0], x2.shape[1],
                    y2.shape[1], _threads(ctx), 0)
    return native_step("ei_runs_s8", args, x2, y2, seg)


class D2sArgs(ctypes.Structure):
    _fields_ = [("x", _P), ("y", _P), ("rows", _L), ("w", _L), ("kh", _L), ("seg", _L), ("threads", _I), ("pad_", _I)]


def d2s_step(x: np.ndarray, y: np.ndarray, kh: int, seg: int, ctx=None) -> Optional[Callable[[], None]]:
    """Depth to space of a kernel = stride ConvTranspose's taps: x (rows, w, kh * seg) int8 ->
    y (rows, kh, w * seg): y[r, ky, i * seg + j] = x[r, i, ky * seg + j]; both C-contiguous."""
    if not _has("ei_d2s_s8") or x.dtype != np.int8 or y.dtype != np.int8 or x.ndim != 3 or x.size == 0:
        return None
    if not (x.flags.c_contiguous and y.flags.c_contiguous) or x.shape[2] != kh * seg or \
            y.shape != (x.shape[0], kh, x.shape[1] * seg):
        return None
    args = D2sArgs(x.ctypes.data, y.ctypes.data, x.shape[0], x.shape[1], kh, seg, _threads(ctx), 0)
    return native_step("ei_d2s_s8", args, x, y)


def bilinear_step(x: np.ndarray, y: np.ndarray, ry: np.ndarray, rx: np.ndarray, nhwc: bool, ctx=None
                  ) -> Optional[Callable[[], None]]:
    """TFLite integer bilinear Resize of 4-D int8 x; ry/rx: (out, 3) int32 (lower, upper, d)."""
    if not _has("ei_bilinear_s8") or x.ndim != 4 or x.dtype != np.int8 or y.dtype != np.int8:
        return None
    if not (x.flags.c_contiguous and y.flags.c_contiguous):
        return None
    ry, rx = (np.ascontiguousarray(v, np.int32) for v in (ry, rx))
    if nhwc:
        (n, h, w, c), (oh, ow) = x.shape, y.shape[1:3]
    else:
        (n, c, h, w), (oh, ow) = x.shape, y.shape[2:4]
    args = BilinearArgs(x.ctypes.data, y.ctypes.data, ry.ctypes.data, rx.ctypes.data, n, c, h, w, oh, ow,
                        int(nhwc), _threads(ctx))
    return native_step("ei_bilinear_s8", args, x, y, ry, rx)


def softmax_s8_step(x: np.ndarray, y: np.ndarray, etab: np.ndarray, ctx=None) -> Optional[Callable[[], None]]:
    """int8 Softmax over the last axis of contiguous x with the exp table ``etab`` (256 int32)."""
    if not _has("ei_softmax_s8") or x.dtype != np.int8 or y.dtype != np.int8 or x.size == 0:
        return None
    if not (x.flags.c_contiguous and y.flags.c_contiguous) or x.shape != y.shape:
        return None
    etab = np.ascontiguousarray(etab, np.int32)
    cols = x.shape[-1]
    args = SoftmaxS8Args(x.ctypes.data, y.ctypes.data, etab.ctypes.data, x.size // cols, cols, _threads(ctx), 0)
    return native_step("ei_softmax_s8", args, x, y, etab)


#: the stem kernel's kinds (src/int8_gemm.h KIND_*), for plan notes
