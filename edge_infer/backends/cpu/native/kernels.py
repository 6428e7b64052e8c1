"""Python glue of the native int8 and depthwise kernels (src/int8_gemm.c, depthwise.c, epilogue.c).

Each ``*_step`` function is called by a kernel's prepare: it checks that the node fits the
native kernel (returning None when it does not, so the numpy kernel serves), packs the
weights once, fills the C argument struct with pointers to the plan's preallocated buffers,
and returns ``native.native_step(...)``. Nothing is allocated per run.

Exactness conditions checked here (the C kernels accumulate in int32, the numpy ones in
int64): |folded bias| + K * 2^14 < 2^31, multipliers in [0, 2^31), right shifts <= 31, and
residual table entries within +-2^29 (see src/ei_int8.h).
"""
from __future__ import annotations

import ctypes
from typing import Callable, Optional, Sequence

import numpy as np

from .. import native as _native

_P = ctypes.c_void_p
_I = ctypes.c_int32


class Int8ConvArgs(ctypes.Structure):
    """``ei_int8_conv_args`` of src/int8_gemm.c."""
    _fields_ = ([(f, _P) for f in ("x", "y", "z", "wpack", "bias", "mult", "shift", "ztab", "scratch")]
                + [(f, _I) for f in ("zp_x", "zp_y", "lo", "hi", "kind", "in_nchw", "out_nchw", "n", "c",
                                     "h", "w", "m", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt",
                                     "pl", "threads")])


class Int8AddArgs(ctypes.Structure):
    """``ei_int8_add_args`` of src/epilogue.c."""
    _fields_ = [("a", _P), ("b", _P), ("y", _P), ("t1", _P), ("t2", _P), ("n", ctypes.c_int64),
                ("qy", _I), ("shy", _I), ("zp_y", _I), ("lo", _I), ("hi", _I), ("threads", _I)]


class DepthwiseArgs(ctypes.Structure):
    """``ei_dw_args`` of src/depthwise.c (int8 and fp32)."""
    _fields_ = ([(f, _P) for f in ("x", "y", "z", "w", "bias", "mult", "shift", "ztab", "pad")]
                + [(f, _I) for f in ("is_int8", "nchw", "n", "c", "h", "w", "oh", "ow", "kh", "kw",
                                     "sh", "sw", "pt", "pl", "zp_y", "lo", "hi", "act", "threads")]
                + [(f, ctypes.c_float) for f in ("a0", "a1")])


def _fn(name, restype, *argtypes):
    f = getattr(_native.lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


INT32_LIMIT = 1 << 31
SCRATCH_PER_THREAD = 256 << 10


def _ptr(a: Optional[np.ndarray]) -> Optional[int]:
    return None if a is None else a.ctypes.data


def aligned(nbytes: int, ctx=None, align: int = 64) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` starting on an ``align`` boundary (from ctx.workspace)."""
    raw = ctx.workspace((nbytes + align,), np.uint8) if ctx is not None else np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


def _thread_scratch(ctx, threads: int, need: int) -> np.ndarray:
    """Per-thread scratch: one buffer per plan (steps run one at a time) of SCRATCH_PER_THREAD
    bytes per thread; a kernel needing more gets its own."""
    if need > SCRATCH_PER_THREAD or ctx is None or not hasattr(ctx, "graph"):
        return aligned(max(need, 1) * threads, ctx)
    store = ctx.__dict__.setdefault("_native_scratch", {})
    if threads not in store:
        store[threads] = aligned(SCRATCH_PER_THREAD * threads, ctx)
    return store[threads]


def requant_ok(q: np.ndarray, shift: np.ndarray) -> bool:
    q, shift = np.asarray(q, np.int64), np.asarray(shift, np.int64)
    return bool(np.all((q >= 0) & (q < INT32_LIMIT)) and np.all(shift >= -31) and np.all(shift <= 30))


def residual_table(table: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """An int64 256-entry residual table (index: z's uint8 bit pattern) as int32, or None when
    an entry exceeds 2^29 (the native epilogue's bound)."""
    if table is None:
        return None
    if np.abs(table).max() > (1 << 29):
        return None
    return np.ascontiguousarray(table, np.int32)


def threads_of(ctx) -> int:
    return max(1, int(getattr(ctx, "threads", 1) or 1))


def int8_conv_step(ctx, *, x: np.ndarray, y: np.ndarray, w_mk: np.ndarray, bias: np.ndarray,
                   q: np.ndarray, shift: np.ndarray, zp_x: int, zp_y: int, lo: int, hi: int,
                   geometry: Sequence[int], in_nchw: bool, out_nchw: bool,
                   z: Optional[np.ndarray] = None, ztab: Optional[np.ndarray] = None
                   ) -> Optional[Callable[[], None]]:
    """The native int8 GEMM/conv step, or None when the node does not qualify.

    ``w_mk``: (M, K) int8 weights with K ordered (kernel row, kernel column, input channel);
    ``bias``: folded int64 bias per channel (M); ``geometry``: n, c, h, w, m, oh, ow, kh, kw,
    sh, sw, dh, dw, pt, pl (channels-last input rows are (h, w, c); NCHW input (c, h, w))."""
    if _native.lib is None:
        return None
    m, k = w_mk.shape
    bias = np.asarray(bias, np.int64).reshape(-1)
    if bias.size != m or k * (1 << 14) + int(np.abs(bias).max(initial=0)) >= INT32_LIMIT:
        return None
    if not requant_ok(q, shift) or np.asarray(q).size != m:
        return None
    for arr in (x, y) + ((z,) if z is not None else ()):
        if not arr.flags.c_contiguous:
            return None
    if z is not None:
        ztab = residual_table(ztab)
        if ztab is None or z.dtype != np.int8 or z.shape != y.shape:
            return None
    kind = _fn("ei_int8_gemm_kind", ctypes.c_int)()
    psize = _fn("ei_int8_pack_size", ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int)(kind, m, k)
    wpack = aligned(int(psize))
    w_mk = np.ascontiguousarray(w_mk, np.int8)
    _fn("ei_int8_pack_weights", None, ctypes.c_int, _P, ctypes.c_int, ctypes.c_int, _P)(
        kind, w_mk.ctypes.data, m, k, wpack.ctypes.data)
    bias32 = bias.astype(np.int32)
    mult = np.asarray(q, np.int64).astype(np.int32).reshape(-1)
    sh = np.asarray(shift, np.int64).astype(np.int32).reshape(-1)
    threads = threads_of(ctx)
    a = Int8ConvArgs(x=x.ctypes.data, y=y.ctypes.data, z=_ptr(z), wpack=wpack.ctypes.data,
                     bias=bias32.ctypes.data, mult=mult.ctypes.data, shift=sh.ctypes.data,
                     ztab=_ptr(ztab) if z is not None else None, zp_x=zp_x, zp_y=zp_y, lo=lo, hi=hi,
                     kind=kind, in_nchw=int(in_nchw), out_nchw=int(out_nchw), threads=threads)
    for name, v in zip(("n", "c", "h", "w", "m", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl"),
                       geometry):
        setattr(a, name, int(v))
    need = _fn("ei_int8_conv_scratch", ctypes.c_int64, _P)(ctypes.addressof(a))
    if need < 0:
        return None
    scr = _thread_scratch(ctx, threads, int(need))
    a.scratch = scr.ctypes.data
    return _native.native_step("ei_int8_conv", a, x, y, z, wpack, bias32, mult, sh, ztab, scr)


def kind_name() -> str:
    """The int8 GEMM micro-kernel prepare picks on this machine (with the current ISA mask)."""
    k = _fn("ei_int8_gemm_kind", ctypes.c_int)()
    return {0: "scalar", 1: "AVX2 madd_epi16", 2: "NEON smlal", 3: "NEON sdot"}.get(k, str(k))
