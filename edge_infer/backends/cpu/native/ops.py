"""Prepare-time builders of native fp32 element-wise, softmax, pooling and copy steps
(src/elementwise.c, src/pool.c).

Each builder returns a ``native_step`` closure (batched by the executor into one C call
with its neighbours) when the native library is loaded and the case is covered, else None,
and the caller keeps its numpy closure. Arrays are the plan's buffers or constants: their
addresses go into a ctypes struct once; nothing is allocated per run. Structs mirror
src/elementwise.h.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ....ops.activations import codes_for
from ....ops.elementwise import broadcast_strides as _bcast_strides  # noqa: F401 (int8_ops)
from ....ops.elementwise import collapse_dims as _collapse
from . import EiStep, native_step

_pkg = sys.modules[__package__]      # read ``lib`` there at prepare: tests switch it off


def enabled() -> bool:
    """Whether the native library is loaded (and not switched off)."""
    return _pkg.lib is not None


def _has(fn: str) -> bool:
    """The library is loaded and exports ``fn`` (a library built from older sources may not)."""
    return _pkg.lib is not None and hasattr(_pkg.lib, fn)

MAX_RANK = 6
_I64x = ctypes.c_int64 * MAX_RANK

#: unary op codes (EI_U_* of elementwise.h); also the activations of a binary epilogue
UNARY = codes_for(("", "Identity", "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish",
                   "SiLU", "Gelu", "GeluTanh", "Exp", "Neg", "Abs", "Sqrt", "Reciprocal", "Floor", "Ceil",
                   "Round"))
#: binary op codes (EI_B_*)
BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5, "PRelu": 6}


class UnaryArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("n", ctypes.c_int64),
                ("op", ctypes.c_int32), ("threads", ctypes.c_int32),
                ("p0", ctypes.c_float), ("p1", ctypes.c_float)]


class BinaryArgs(ctypes.Structure):
    _fields_ = [("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("op", ctypes.c_int32), ("act", ctypes.c_int32),
                ("p0", ctypes.c_float), ("p1", ctypes.c_float),
                ("rank", ctypes.c_int32), ("threads", ctypes.c_int32),
                ("shape", _I64x), ("sa", _I64x), ("sb", _I64x)]


class SoftmaxArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("rows", ctypes.c_int64),
                ("cols", ctypes.c_int64), ("threads", ctypes.c_int32), ("pad_", ctypes.c_int32)]


class CopyDesc(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("dst", ctypes.c_void_p),
                ("rank", ctypes.c_int32), ("elsize", ctypes.c_int32),
                ("shape", _I64x), ("ss", _I64x), ("ds", _I64x)]


class CopyArgs(ctypes.Structure):
    _fields_ = [("descs", ctypes.c_void_p), ("count", ctypes.c_int64)]


class CopyParArgs(ctypes.Structure):
    _fields_ = [("c", CopyArgs), ("threads", ctypes.c_int64)]


class InterleaveArgs(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("dst", ctypes.c_void_p)] + \
               [(f, ctypes.c_int64) for f in ("outer", "planes", "len", "s_outer", "s_plane", "d_outer")] + \
               [("elsize", ctypes.c_int32), ("threads", ctypes.c_int32)]


class Pool2dArgs(ctypes.Structure):
    _fields_ = ([("x", ctypes.c_void_p), ("y", ctypes.c_void_p)] +
                [(f, ctypes.c_int64) for f in ("n", "c", "h", "w", "oh", "ow")] +
                [(f, ctypes.c_int32) for f in ("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "pb", "pr",
                                               "op", "count_include_pad", "nhwc", "threads")])


class GlobalPoolArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("n", ctypes.c_int64),
                ("c", ctypes.c_int64), ("p", ctypes.c_int64), ("op", ctypes.c_int32),
                ("nhwc", ctypes.c_int32), ("threads", ctypes.c_int32), ("pad_", ctypes.c_int32),
                ("mult", ctypes.c_int32), ("shift", ctypes.c_int32), ("zp_x", ctypes.c_int32),
                ("zp_y", ctypes.c_int32)]


class SeqArgs(ctypes.Structure):
    _fields_ = [("steps", ctypes.c_void_p), ("n", ctypes.c_int64)]


def sequence_step(steps: Sequence[Callable[[], None]]) -> Optional[Callable[[], None]]:
    """Several native steps as one native step (so a fused kernel made of native parts is
    batched with its neighbours like any other); None unless every step is native."""
    if not _has("ei_seq") or not steps or any(getattr(s, "native_step", None) is None for s in steps):
        return None
    if len(steps) == 1:
        return steps[0]
    table = (EiStep * len(steps))(*[EiStep(*s.native_step) for s in steps])
    return native_step("ei_seq", SeqArgs(ctypes.addressof(table), len(steps)), table, tuple(steps))


#: fused-epilogue activation -> (unary op, its p0/p1 from the activation params)
_EPILOGUE = {"": ("", lambda p: (0.0, 0.0)), "Relu": ("Relu", lambda p: (0.0, 0.0)),
             "Clip": ("Clip", lambda p: (p[0], p[1])), "LeakyRelu": ("LeakyRelu", lambda p: (p[0], 0.0)),
             "HardSigmoid": ("HardSigmoid", lambda p: (p[0], p[1])),
             "HardSwish": ("HardSwish", lambda p: (1 / 6, 0.5)), "Sigmoid": ("Sigmoid", lambda p: (0.0, 0.0)),
             "Tanh": ("Tanh", lambda p: (0.0, 0.0)), "SiLU": ("SiLU", lambda p: (0.0, 0.0)),
             "Gelu": ("Gelu", lambda p: (0.0, 0.0)), "GeluTanh": ("GeluTanh", lambda p: (0.0, 0.0))}


def epilogue_steps(y: np.ndarray, addends: Sequence[np.ndarray], activation: str, params: Sequence[float],
                   threads: int = 1) -> Optional[List[Callable[[], None]]]:
    """Native in-place epilogue on float32 ``y``: ``y += a`` for each addend (broadcast: bias,
    residual), the activation folded into the last add (or alone); None where not covered."""
    if not _has("ei_binary_f32") or activation not in _EPILOGUE:
        return None
    op, pp = _EPILOGUE[activation]
    p0, p1 = (float(v) for v in pp(list(params)))
    steps = []
    for k, a in enumerate(addends):
        last = k == len(addends) - 1
        steps.append(binary_step("Add", y, a, y, threads, op if last else "", p0 if last else 0.0,
                                 p1 if last else 0.0))
    if not addends and op:
        steps.append(unary_step(op, y, y, threads, p0, p1))
    return None if any(s is None for s in steps) else steps


def _f32(arr) -> bool:
    """A float32 C-contiguous aligned ndarray (what the fp32 kernels read and write)."""
    return (isinstance(arr, np.ndarray) and arr.dtype == np.float32 and arr.flags.c_contiguous
            and arr.flags.aligned)


def _threads(threads) -> int:
    return max(1, min(int(threads or 1), 64))


def unary_step(op: str, x: np.ndarray, y: np.ndarray, threads: int = 1, p0: float = 0.0,
               p1: float = 0.0) -> Optional[Callable[[], None]]:
    """``y = op(x)`` (same shape, float32); LeakyRelu p0=alpha, Clip p0=lo p1=hi,
    HardSigmoid/HardSwish p0=alpha p1=beta. y may be x."""
    if not _has("ei_unary_f32") or op not in UNARY or not (_f32(x) and _f32(y)) or x.shape != y.shape:
        return None
    args = UnaryArgs(x.ctypes.data, y.ctypes.data, y.size, UNARY[op], _threads(threads), p0, p1)
    return native_step("ei_unary_f32", args, x, y)


def binary_step(op: str, a: np.ndarray, b: np.ndarray, y: np.ndarray, threads: int = 1,
                act: str = "", p0: float = 0.0, p1: float = 0.0) -> Optional[Callable[[], None]]:
    """``y = act(a op b)`` with numpy broadcasting (float32, rank <= 6 after merging dims);
    ``act``/``p0``/``p1`` as in ``unary_step``. y may be a or b."""
    if not _has("ei_binary_f32") or op not in BINARY or act not in UNARY:
        return None
    if not (_f32(a) and _f32(b) and _f32(y)):
        return None
    try:
        if np.broadcast_shapes(a.shape, b.shape) != y.shape:
            return None
    except ValueError:
        return None
    shape, (sa, sb) = _collapse(y.shape, _bcast_strides(a.shape, y.shape), _bcast_strides(b.shape, y.shape))
    if len(shape) > MAX_RANK:
        return None
    if not shape:
        shape, sa, sb = [1], [0], [0]
    r = len(shape)
    pad = [0] * (MAX_RANK - r)
    args = BinaryArgs(a.ctypes.data, b.ctypes.data, y.ctypes.data, BINARY[op], UNARY[act], p0, p1,
                      r, _threads(threads), _I64x(*shape, *pad), _I64x(*sa, *pad), _I64x(*sb, *pad))
    return native_step("ei_binary_f32", args, a, b, y)


def softmax_step(x: np.ndarray, y: np.ndarray, axis: int, threads: int = 1) -> Optional[Callable[[], None]]:
    """Softmax of float32 ``x`` over ``axis`` when every dim after it is 1 (the last axis)."""
    if not _has("ei_softmax_f32") or not (_f32(x) and _f32(y)) or x.shape != y.shape or x.size == 0:
        return None
    if any(d != 1 for d in x.shape[axis + 1:]):
        return None
    cols = x.shape[axis]
    args = SoftmaxArgs(x.ctypes.data, y.ctypes.data, x.size // cols, cols, _threads(threads), 0)
    return native_step("ei_softmax_f32", args, x, y)


def _long_inner(shape, ss, ds, elsize):
    """Dims reordered so the innermost loop is long and contiguous on one side: a transpose
    whose destination rows are short (NCHW <-> NHWC with few channels, channel shuffles)
    then reads long contiguous source rows instead of gathering a few elements per row."""
    if len(shape) < 2 or (shape[-1] >= 16 and elsize in (abs(ss[-1]), abs(ds[-1]))):
        return shape, ss, ds
    cands = [k for k in range(len(shape)) if elsize in (abs(ss[k]), abs(ds[k]))]
    if not cands:
        return shape, ss, ds
    k = max(cands, key=lambda j: shape[j])
    if shape[k] <= shape[-1]:
        return shape, ss, ds
    order = [j for j in range(len(shape)) if j != k] + [k]
    shape, (ss, ds) = _collapse([shape[j] for j in order], [ss[j] for j in order], [ds[j] for j in order])
    return shape, ss, ds


def interleave_step(dst: np.ndarray, src: np.ndarray, threads: int = 1) -> Optional[Callable[[], None]]:
    """``np.copyto(dst, src)`` where it interleaves 2-4 planes (NCHW -> NHWC of an image
    input) of 1- or 4-byte elements: src/layout.c's block copy; else None."""
    if not (_has("ei_interleave") and isinstance(dst, np.ndarray) and isinstance(src, np.ndarray)):
        return None
    es = dst.itemsize
    if (dst.dtype != src.dtype or es not in (1, 4) or dst.dtype.hasobject or src.shape != dst.shape
            or not (dst.flags.aligned and src.flags.aligned and dst.flags.writeable) or dst.size == 0):
        return None
    shape, (ss, ds) = _collapse(dst.shape, src.strides, dst.strides)
    if not 2 <= len(shape) <= 3:
        return None
    (length, planes), (s_in, s_plane), (d_in, d_plane) = shape[-2:], ss[-2:], ds[-2:]
    if not (2 <= planes <= 4 and s_in == es and d_plane == es and d_in == planes * es):
        return None
    outer, s_outer, d_outer = (shape[0], ss[0], ds[0]) if len(shape) == 3 else (1, 0, 0)
    args = InterleaveArgs(src.ctypes.data, dst.ctypes.data, outer, planes, length, s_outer, s_plane, d_outer,
                          es, _threads(threads))
    return native_step("ei_interleave", args, dst, src)


def same_view(dst: np.ndarray, src: np.ndarray) -> bool:
    """Whether copying ``src`` to ``dst`` would write every element onto itself: a tensor the
    arena planner placed inside the other (memory/views.py), so the copy is skipped."""
    if dst.shape != src.shape or dst.dtype != src.dtype:
        return False
    if dst.__array_interface__["data"][0] != src.__array_interface__["data"][0]:
        return False
    return all(a == b for n, a, b in zip(dst.shape, dst.strides, src.strides) if n > 1)


def copy_step(pairs: Sequence[Tuple[np.ndarray, np.ndarray]], threads: int = 1) -> Optional[Callable[[], None]]:
    """``np.copyto(dst, src)`` for each pair, in order, as one native step: any numpy views
    (strided, transposed, sliced, broadcast src) of one plain dtype, rank <= 6 after merging.
    Pairs that are one view of the same bytes (``same_view``) cost nothing. With ``threads``
    > 1 a large copy is split across the pool by outer rows (the pairs must not overlap)."""
    if not _has("ei_copy"):
        return None
    descs = []
    keep = []
    for dst, src in pairs:
        if not (isinstance(dst, np.ndarray) and isinstance(src, np.ndarray)):
            return None
        if dst.dtype != src.dtype or dst.dtype.hasobject or not dst.flags.writeable:
            return None
        if not (dst.flags.aligned and src.flags.aligned):
            return None
        try:
            src = np.broadcast_to(src, dst.shape)
        except ValueError:
            return None
        keep += [dst, src]
        if dst.size == 0 or same_view(dst, src):
            continue
        shape, (ss, ds) = _collapse(dst.shape, src.strides, dst.strides)
        shape, ss, ds = _long_inner(shape, ss, ds, dst.itemsize)
        if len(shape) > MAX_RANK:
            return None
        r = len(shape)
        pad = [0] * (MAX_RANK - r)
        descs.append(CopyDesc(src.ctypes.data, dst.ctypes.data, r, dst.itemsize,
                              _I64x(*shape, *pad), _I64x(*ss, *pad), _I64x(*ds, *pad)))
    table = (CopyDesc * max(1, len(descs)))(*descs)
    args = CopyArgs(ctypes.addressof(table), len(descs))
    if threads > 1 and _has("ei_copy_par"):
        return native_step("ei_copy_par", CopyParArgs(args, threads), table, keep)
    return native_step("ei_copy", args, table, keep)


def pool2d_step(x: np.ndarray, y: np.ndarray, op: str, kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int], pads: Sequence[int], nhwc: bool, count_include_pad: bool = False,
                threads: int = 1) -> Optional[Callable[[], None]]:
    """2-D MaxPool ("max") / AveragePool ("avg") of float32 (N,C,H,W) or (N,H,W,C) ``x``;
    ``pads`` ONNX order (top, left, bottom, right), resolved; ``y`` planned by the caller."""
    if not _has("ei_pool2d_f32") or x.ndim != 4 or not (_f32(x) and _f32(y)) or y.size == 0:
        return None
    if nhwc:
        (n, h, w, c), (oh, ow) = x.shape, y.shape[1:3]
    else:
        (n, c, h, w), (oh, ow) = x.shape, y.shape[2:4]
    kh, kw = kernel
    # a window entirely in padding averages nothing: leave that case to the numpy kernel's error
    args = Pool2dArgs(x.ctypes.data, y.ctypes.data, n, c, h, w, oh, ow, kh, kw, strides[0], strides[1],
                      dilations[0], dilations[1], pads[0], pads[1], pads[2], pads[3],
                      0 if op == "max" else 1, int(bool(count_include_pad)), int(bool(nhwc)),
                      _threads(threads))
    return native_step("ei_pool2d_f32", args, x, y)


def global_pool_step(x: np.ndarray, y: np.ndarray, op: str, nhwc: bool, threads: int = 1
                     ) -> Optional[Callable[[], None]]:
    """GlobalAveragePool ("avg") / GlobalMaxPool ("max") of float32 x, (N, C, *sp) or (N, *sp, C)."""
    if not _has("ei_global_pool_f32") or x.ndim < 3 or not (_f32(x) and _f32(y)) or x.size == 0:
        return None
    n, c = x.shape[0], x.shape[-1] if nhwc else x.shape[1]
    p = x.size // (n * c)
    args = GlobalPoolArgs(x.ctypes.data, y.ctypes.data, n, c, p, 0 if op == "max" else 1, int(bool(nhwc)),
                          _threads(threads), 0)
    return native_step("ei_global_pool_f32", args, x, y)


# -- int8 boundaries (src/qdq.c) and pools (src/int8_misc.c) ------------------------------------------------

class QdqArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("n", ctypes.c_int64),
                ("scale", ctypes.c_float), ("zp", ctypes.c_float),
                ("is_u8", ctypes.c_int32), ("threads", ctypes.c_int32)]


class GlobalPoolS8Args(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("n", ctypes.c_int64),
                ("c", ctypes.c_int64), ("p", ctypes.c_int64), ("op", ctypes.c_int32),
                ("nhwc", ctypes.c_int32), ("threads", ctypes.c_int32), ("pad_", ctypes.c_int32),
                ("mult", ctypes.c_int32), ("shift", ctypes.c_int32), ("zp_x", ctypes.c_int32),
                ("zp_y", ctypes.c_int32)]


class MaxPoolS8Args(ctypes.Structure):
    _fields_ = ([("x", ctypes.c_void_p), ("y", ctypes.c_void_p)] +
                [(f, ctypes.c_int64) for f in ("n", "c", "h", "w", "oh", "ow")] +
                [(f, ctypes.c_int32) for f in ("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "nhwc", "threads")])


def _dense(*arrays) -> bool:
    return all(isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.aligned for a in arrays)


def qdq_step(x: np.ndarray, y: np.ndarray, scale: float, zero_point: int, threads: int = 1
             ) -> Optional[Callable[[], None]]:
    """Per-tensor QuantizeLinear (float32 x -> int8/uint8 y) or DequantizeLinear (int8/uint8 x ->
    float32 y), by the dtypes; None where the native kernel does not cover the case."""
    if x.shape != y.shape or not _dense(x, y) or x.size == 0:
        return None
    quant = _f32(x) and y.dtype in (np.int8, np.uint8)
    dequant = _f32(y) and x.dtype in (np.int8, np.uint8)
    fn = "ei_quantize_f32" if quant else "ei_dequantize_f32"
    if not (quant or dequant) or not _has(fn):
        return None
    small = y if quant else x
    args = QdqArgs(x.ctypes.data, y.ctypes.data, x.size, float(np.float32(scale)), float(np.float32(zero_point)),
                   int(small.dtype == np.uint8), _threads(threads))
    return native_step(fn, args, x, y)


def global_pool_s8_step(x: np.ndarray, y: np.ndarray, op: str, nhwc: bool, threads: int = 1,
                        requant: Optional[Tuple[int, int, int, int]] = None) -> Optional[Callable[[], None]]:
    """int8 GlobalMaxPool ("max") or GlobalAveragePool at equal input/output parameters ("avg":
    TFLite's rounded mean) of x (N, C, *sp) or (N, *sp, C); ``requant`` = (q, shift, zp_x, zp_y)
    of s_x / (n s_y): the mean to other output parameters (one MultiplyByQuantizedMultiplier)."""
    if not _has("ei_global_pool_s8") or x.ndim < 3 or x.dtype != np.int8 or y.dtype != np.int8:
        return None
    if not _dense(x, y) or x.size == 0:
        return None
    n, c = x.shape[0], x.shape[-1] if nhwc else x.shape[1]
    p = x.size // (n * c)
    if p >= (1 << 23 if requant else 1 << 24):      # the sums (and sum - p zp_x) stay int32
        return None
    q, sh, zx, zy = requant or (0, 0, 0, 0)
    args = GlobalPoolS8Args(x.ctypes.data, y.ctypes.data, n, c, p, 2 if requant else int(op == "avg"),
                            int(bool(nhwc)), _threads(threads), 0, q, sh, zx, zy)
    return native_step("ei_global_pool_s8", args, x, y)


def maxpool_s8_step(x: np.ndarray, y: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
                    dilations: Sequence[int], pads: Sequence[int], nhwc: bool, threads: int = 1,
                    op: str = "max") -> Optional[Callable[[], None]]:
    """2-D int8 MaxPool of (N,C,H,W) or (N,H,W,C) x; pads ONNX order (top, left, bottom, right).
    op="avg": AveragePool at equal input/output parameters, count_include_pad=0 (TFLite's
    rounded mean over the taps inside the input; the caller rejects windows with none)."""
    fn = "ei_avgpool_s8" if op == "avg" else "ei_maxpool_s8"
    if not _has(fn) or x.ndim != 4 or x.dtype != np.int8 or y.dtype != np.int8:
        return None
    if op == "avg" and kernel[0] * kernel[1] >= 1 << 22:       # int32 sums, exact double quotients
        return None
    if not _dense(x, y) or y.size == 0:
        return None
    if nhwc:
        (n, h, w, c), (oh, ow) = x.shape, y.shape[1:3]
    else:
        (n, c, h, w), (oh, ow) = x.shape, y.shape[2:4]
    args = MaxPoolS8Args(x.ctypes.data, y.ctypes.data, n, c, h, w, oh, ow, kernel[0], kernel[1], strides[0],
                         strides[1], dilations[0], dilations[1], pads[0], pads[1], int(bool(nhwc)),
                         _threads(threads))
    return native_step(fn, args, x, y)


# -- per-axis QuantizeLinear / DequantizeLinear (src/qdq.c) ---------------------------------------

class QdqAxisArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("scale", ctypes.c_void_p),
                ("zp", ctypes.c_void_p), ("outer", ctypes.c_int64), ("c", ctypes.c_int64),
                ("inner", ctypes.c_int64), ("is_u8", ctypes.c_int32), ("threads", ctypes.c_int32)]


def qdq_axis_step(x: np.ndarray, y: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, axis: int,
                  threads: int = 1) -> Optional[Callable[[], None]]:
    """Per-axis QuantizeLinear (float32 x -> int8/uint8 y) or DequantizeLinear (int8/uint8 x ->
    float32 y), by the dtypes: one scale and zero point per index of ``axis``; else None."""
    if x.shape != y.shape or not _dense(x, y) or x.size == 0 or not 0 <= axis < x.ndim:
        return None
    c = x.shape[axis]
    scale = np.ascontiguousarray(np.asarray(scale, np.float32).reshape(-1))
    zpf = np.ascontiguousarray(np.asarray(zero_point).reshape(-1).astype(np.float32))
    if scale.size != c or zpf.size != c:
        return None
    quant = _f32(x) and y.dtype in (np.int8, np.uint8)
    dequant = _f32(y) and x.dtype in (np.int8, np.uint8)
    fn = "ei_quantize_axis_f32" if quant else "ei_dequantize_axis_f32"
    if not (quant or dequant) or not _has(fn):
        return None
    small = y if quant else x
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    args = QdqAxisArgs(x.ctypes.data, y.ctypes.data, scale.ctypes.data, zpf.ctypes.data, outer, c, inner,
                       int(small.dtype == np.uint8), _threads(threads))
    return native_step(fn, args, x, y, scale, zpf)
