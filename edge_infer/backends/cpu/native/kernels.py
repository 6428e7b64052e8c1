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
import functools
import os
from typing import Callable, Optional, Sequence

import numpy as np

from ....memory.pages import private_copy
from ....ops.activations import codes_for
from ....ops.int8_tables import add_tables
from ....ops.qmath import FP32_SHIFT
from .. import native as _native
from ..kernels.conv_operands import _conv_geometry

_P = ctypes.c_void_p
_I = ctypes.c_int32


class Int8ConvArgs(ctypes.Structure):
    """``ei_int8_conv_args`` of src/int8_gemm.c."""
    _fields_ = ([(f, _P) for f in ("x", "y", "z", "wpack", "bias", "mult", "shift", "ztab", "scratch", "consts")]
                + [(f, _I) for f in ("zp_x", "zp_y", "lo", "hi", "kind", "in_nchw", "out_nchw", "n", "c",
                                     "h", "w", "m", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt",
                                     "pl", "threads")]
                + [("lut", _P), ("weights_cached", _I)])


class StemQuantArgs(ctypes.Structure):
    """``ei_int8_stem_q_args`` of src/int8_stem.c: the stem on a float input quantized in its
    line buffers (per tensor, QuantizeLinear's rounding)."""
    _fields_ = [("conv", Int8ConvArgs), ("xf", _P), ("scale", ctypes.c_float), ("zp", ctypes.c_float),
                ("nchw", _I)]


class Int8AddArgs(ctypes.Structure):
    """``ei_int8_add_args`` of src/epilogue.c."""
    _fields_ = [("a", _P), ("b", _P), ("y", _P), ("t1", _P), ("t2", _P), ("n", ctypes.c_int64),
                ("qy", _I), ("shy", _I), ("zp_y", _I), ("lo", _I), ("hi", _I), ("threads", _I)]


class DepthwiseArgs(ctypes.Structure):
    """``ei_dw_args`` of src/depthwise.h (int8 and fp32)."""
    _fields_ = ([(f, _P) for f in ("x", "y", "z", "wt", "bias", "mult", "shift", "ztab", "pad", "scratch")]
                + [(f, _I) for f in ("is_int8", "nchw", "n", "c", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw",
                                     "dh", "dw", "pt", "pl", "zp_x", "zp_y", "lo", "hi", "act", "threads")]
                + [(f, ctypes.c_float) for f in ("a0", "a1")] + [("consts", _P), ("lut", _P)])


#: fused fp32 activations the native depthwise kernel applies (src/depthwise.c ACT_*)
DW_ACTIVATIONS = codes_for(("", "Relu", "Clip", "HardSwish", "HardSigmoid", "LeakyRelu"))


def _fn(name, restype, *argtypes):
    f = getattr(_native.lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


INT32_LIMIT = 1 << 31
#: float32 bits of 2^-32 and 1.0: an fp32 multiplier's range
F32_MIN_BITS, F32_ONE_BITS = 0x2F800000, 0x3F800000


def _ptr(a: Optional[np.ndarray]) -> Optional[int]:
    return None if a is None else a.ctypes.data


def aligned(nbytes: int, ctx=None, align: int = 64) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` starting on an ``align`` boundary (from ctx.workspace)."""
    raw = ctx.workspace((nbytes + align,), np.uint8) if ctx is not None else np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


def _thread_scratch(ctx, threads: int, need: int) -> np.ndarray:
    """``need`` bytes per thread slot: the plan's "im2col" scratch role, the one every conv's
    column tiles use (steps run one at a time, so the convs of a plan share it); without a
    plan, its own."""
    if ctx is None or not hasattr(ctx, "scratch"):
        return aligned(max(need, 1) * threads, ctx)
    return ctx.scratch("im2col", (max(need, 1) * threads,), np.uint8)


def requant_ok(q: np.ndarray, shift: np.ndarray) -> bool:
    """Whether the native kernels take these multipliers: TFLite fixed-point ones, or float32
    ones (shift FP32_SHIFT, q the bits of a float32 in [2^-32, 1); see ops/qmath.py)."""
    q, shift = np.asarray(q, np.int64), np.asarray(shift, np.int64)
    fp32 = shift == FP32_SHIFT
    if np.any(fp32):
        return bool(np.all(fp32) and np.all((q >= F32_MIN_BITS) & (q < F32_ONE_BITS)))
    return bool(np.all((q >= 0) & (q < INT32_LIMIT)) and np.all(shift >= -31) and np.all(shift <= 30))


def residual_table(table: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """An int64 256-entry residual table (index: z's uint8 bit pattern) as int32, or None when
    an entry exceeds 2^29 (the native epilogue's bound)."""
    if table is None:
        return None
    if np.abs(table).max() > (1 << 29):
        return None
    return np.ascontiguousarray(table, np.int32)


def _lut_table(lut: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """A fused activation's table as the C kernels read it (ei_lut.h): 256 int8 indexed by the
    output's bit pattern (``fuse_int8_activation.activation_table``), contiguous."""
    if lut is None:
        return None
    lut = np.ascontiguousarray(lut, np.int8).reshape(-1)
    if lut.size != 256:
        raise ValueError(f"an int8 activation table has 256 entries, got {lut.size}")
    return lut


def threads_of(ctx) -> int:
    return max(1, int(getattr(ctx, "threads", 1) or 1))


@functools.lru_cache(maxsize=1)
def l2_bytes() -> int:
    """This CPU's L2 cache (Linux sysfs, cpu0, read once; 512 KB where the system does not say)."""
    import glob
    for d in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(d, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(d, "size")) as f:
                size = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
            return int(size.rstrip("KM")) * scale
        except (OSError, ValueError):
            continue
    return 512 << 10


def weights_cached(ctx) -> bool:
    """Whether the plan's int8 weights fit in half an L2 (a plan fact, computed once): then they
    stay in cache from run to run, and a batch-1 fully-connected layer is not bound by memory
    (the text classifier's 205 KB head took 2.1 us at one thread and 2.5-2.7 split in two; the
    2.5 MB MobileNetV3-small's 590 KB head 21.7 and 10.3 us)."""
    facts = getattr(ctx, "plan_facts", None)
    if facts is not None and "int8_weights_cached" in facts:
        return bool(facts["int8_weights_cached"])
    graph = getattr(ctx, "graph", None)
    total = sum(t.data.nbytes for t in graph.tensors.values()
                if t.is_const and t.dtype == "int8" and hasattr(t.data, "nbytes")) if graph is not None else 1 << 62
    cached = total <= l2_bytes() // 2
    if facts is not None:
        facts["int8_weights_cached"] = cached
    return cached


def int8_conv_step(ctx, *, x: np.ndarray, y: np.ndarray, w_mk: np.ndarray, bias: np.ndarray,
                   q: np.ndarray, shift: np.ndarray, zp_x: int, zp_y: int, lo: int, hi: int,
                   geometry: Sequence[int], in_nchw: bool, out_nchw: bool,
                   z: Optional[np.ndarray] = None, ztab: Optional[np.ndarray] = None,
                   lut: Optional[np.ndarray] = None, float_input=None) -> Optional[Callable[[], None]]:
    """The native int8 GEMM/conv step, or None when the node does not qualify.

    ``w_mk``: (M, K) int8 weights with K ordered (kernel row, kernel column, input channel);
    ``bias``: folded int64 bias per channel (M); ``geometry``: n, c, h, w, m, oh, ow, kh, kw,
    sh, sw, dh, dw, pt, pl (channels-last input rows are (h, w, c); NCHW input (c, h, w));
    ``lut``: a fused activation's 256-entry int8 table (indexed by the clamped output's bit pattern);
    ``float_input``: (xf, scale, nchw): the stem kernel reads float32 ``xf`` ((n, c, h, w) when
    ``nchw``, else (n, h, w, c)) and quantizes it with ``scale`` and ``zp_x`` itself; ``x`` is
    then None, and so is the result when the stem does not take the conv (no GEMM on floats)."""
    if _native.lib is None:
        return None
    m, k = w_mk.shape
    bias = np.asarray(bias, np.int64).reshape(-1)
    if bias.size != m or k * (1 << 14) + int(np.abs(bias).max(initial=0)) >= INT32_LIMIT:
        return None
    if not requant_ok(q, shift) or np.asarray(q).size != m:
        return None
    for arr in (y,) + tuple(v for v in (x, z, float_input[0] if float_input else None) if v is not None):
        if not arr.flags.c_contiguous:
            return None
    if z is not None:
        ztab = residual_table(ztab)
        if ztab is None or z.dtype != np.int8 or z.shape != y.shape:
            return None
    n_, _, _, _, _, oh, ow, kh, kw, sh_, sw_, _, _, pt, pl = geometry
    kind = gemm_kind(k, rows=int(n_) * int(oh) * int(ow), m=m,
                     pointwise=(kh, kw, sh_, sw_, pt, pl) == (1, 1, 1, 1, 0, 0))
    w_mk = np.ascontiguousarray(w_mk, np.int8)
    bias32 = bias.astype(np.int32)
    mult = np.asarray(q, np.int64).astype(np.int32).reshape(-1)
    sh = np.asarray(shift, np.int64).astype(np.int32).reshape(-1)
    threads = threads_of(ctx)
    a = Int8ConvArgs(x=None if float_input else x.ctypes.data, y=y.ctypes.data, z=_ptr(z), bias=bias32.ctypes.data, mult=mult.ctypes.data, shift=sh.ctypes.data,
                     ztab=_ptr(ztab) if z is not None else None, zp_x=zp_x, zp_y=zp_y, lo=lo, hi=hi,
                     kind=kind, in_nchw=int(in_nchw), out_nchw=int(out_nchw), threads=threads,
                     weights_cached=int(weights_cached(ctx)))
    lut = _lut_table(lut)
    a.lut = _ptr(lut)
    for name, v in zip(("n", "c", "h", "w", "m", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl"),
                       geometry):
        setattr(a, name, int(v))
    # first convs (c <= 4): the direct stem kernel, no im2col
    stem = int8_stem_step(ctx, a, w_mk, (x, y, bias32, mult, sh, lut), float_input)
    if stem is not None or float_input is not None:
        return stem
    psize = _fn("ei_int8_pack_size", ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int)(kind, m, k)
    wpack = aligned(int(psize))
    _fn("ei_int8_pack_weights", None, ctypes.c_int, _P, ctypes.c_int, ctypes.c_int, _P)(
        kind, w_mk.ctypes.data, m, k, wpack.ctypes.data)
    a.wpack = wpack.ctypes.data
    # every thread slot's tiles, for the slots the conv runs on (a small one runs on one)
    need = _fn("ei_int8_conv_scratch", ctypes.c_int64, _P)(ctypes.addressof(a))
    if need < 0:
        return None
    scr = _thread_scratch(ctx, 1, int(need))
    a.scratch = scr.ctypes.data
    # the per-channel requantization constants in the SIMD layout, made once here
    csize = _fn("ei_int8_conv_consts_size", ctypes.c_int64, _P)(ctypes.addressof(a))
    consts = aligned(int(csize)) if csize > 0 else None
    if consts is not None:
        _fn("ei_int8_conv_prepare", None, _P, _P)(ctypes.addressof(a), consts.ctypes.data)
        a.consts = consts.ctypes.data
    step = _native.native_step("ei_int8_conv", a, x, y, z, wpack, bias32, mult, sh, ztab, scr, consts, lut)
    step.kind_name = KIND_NAMES.get(kind, str(kind))
    if hasattr(_native.lib, "ei_int8_conv_path"):
        path = _fn("ei_int8_conv_path", ctypes.c_char_p, _P)(ctypes.addressof(a))
        step.path = path.decode() if path else ""
    return step


def depthwise_step(ctx, *, x: np.ndarray, y: np.ndarray, w_ct: np.ndarray, geometry: Sequence[int], nchw: bool,
                   bias: Optional[np.ndarray] = None, z: Optional[np.ndarray] = None, act: str = "",
                   params: Sequence[float] = (), q=None, shift=None, zp_x: int = 0, zp_y: int = 0,
                   lo: int = -128, hi: int = 127, ztab: Optional[np.ndarray] = None,
                   lut: Optional[np.ndarray] = None) -> Optional[Callable[[], None]]:
    """The native depthwise step (multiplier 1), or None when the node does not qualify.

    ``w_ct``: (C, taps) weights, int8 or float32, taps in (kernel row, kernel column) order;
    ``geometry``: n, c, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl. int8: ``bias`` is the
    folded int64 bias, ``q``/``shift``/``zp_*``/``lo``/``hi`` the epilogue, ``ztab`` the
    residual table, ``lut`` a fused activation's table (as ``int8_conv_step``); fp32: ``bias``
    float32 or None, ``act``/``params`` the fused activation."""
    if _native.lib is None:
        return None
    is_int8 = w_ct.dtype == np.int8
    c, taps = w_ct.shape
    for arr in (x, y) + ((z,) if z is not None else ()):
        if not arr.flags.c_contiguous or arr.dtype != (np.int8 if is_int8 else np.float32):
            return None
    if z is not None and z.shape != y.shape:
        return None
    threads = threads_of(ctx)
    a = DepthwiseArgs(x=x.ctypes.data, y=y.ctypes.data, z=_ptr(z), is_int8=int(is_int8), nchw=int(nchw),
                      threads=threads)
    for name, v in zip(("n", "c", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl"), geometry):
        setattr(a, name, int(v))
    keep = [x, y, z]
    if is_int8:
        bias = np.asarray(bias, np.int64).reshape(-1)
        if taps * (1 << 14) + int(np.abs(bias).max(initial=0)) >= INT32_LIMIT or not requant_ok(q, shift):
            return None
        if z is not None:
            ztab = residual_table(ztab)
            if ztab is None:
                return None
        wt = np.ascontiguousarray(w_ct if nchw else w_ct.T, np.int16)
        b32 = bias.astype(np.int32)
        mult = np.asarray(q, np.int64).astype(np.int32).reshape(-1)
        sh = np.asarray(shift, np.int64).astype(np.int32).reshape(-1)
        pad = np.full(c, zp_x, np.int8)
        a.mult, a.shift, a.zp_x, a.zp_y, a.lo, a.hi = mult.ctypes.data, sh.ctypes.data, zp_x, zp_y, lo, hi
        if z is not None:
            a.ztab = ztab.ctypes.data
        lut = _lut_table(lut)
        a.lut = _ptr(lut)
        keep += [mult, sh, ztab, lut]
    else:
        if act not in DW_ACTIVATIONS:
            return None
        # read at every run: own copies, never the file map (memory/pages.py)
        wt = private_copy(np.ascontiguousarray(w_ct if nchw else w_ct.T, np.float32))
        b32 = None if bias is None else private_copy(np.ascontiguousarray(bias, np.float32).reshape(-1))
        pad = np.zeros(c, np.float32)
        p = [float(np.float32(v)) for v in params] + [0.0, 0.0]
        a.act, a.a0, a.a1 = DW_ACTIVATIONS[act], p[0], p[1]
    a.wt, a.bias, a.pad = wt.ctypes.data, _ptr(b32), pad.ctypes.data
    need = _fn("ei_dw_scratch", ctypes.c_int64, _P)(ctypes.addressof(a))
    scr = _thread_scratch(ctx, threads, int(need))
    a.scratch = scr.ctypes.data
    # int8 NHWC: the packed weights and requantization constants, made once here
    csize = _fn("ei_dw_consts_size", ctypes.c_int64, _P)(ctypes.addressof(a)) if is_int8 else 0
    if csize > 0:
        consts = aligned(int(csize))
        _fn("ei_dw_prepare", None, _P, _P)(ctypes.addressof(a), consts.ctypes.data)
        a.consts = consts.ctypes.data
        keep.append(consts)
    # fp32 NHWC: the FMA kernel of depthwise_f32.c (the others: depthwise.c, numpy's order)
    fn = "ei_depthwise" if is_int8 or nchw else "ei_depthwise_f32"
    step = _native.native_step(fn, a, wt, b32, pad, scr, *keep)
    if is_int8:         # the kernel this machine runs, for the plan note
        step.kernel_name = _fn("ei_dw_kernel_name", ctypes.c_char_p, _P)(ctypes.addressof(a)).decode()
    return step


def fp32_depthwise(node, ctx) -> Optional[Callable[[], None]]:
    """Conv / FusedConv ``node`` as the native fp32 depthwise kernel (multiplier 1, 1-D/2-D,
    constant weights, a float32 graph, a fused activation the kernel knows), or None.
    FusedConv's residual and activation run inside the kernel, in the order of kernels/fused.py."""
    if _native.lib is None:
        return None
    from ....ops.shapes import channels_last
    if ctx.const(node.inputs[1]) is None or ctx.value(node.inputs[0]).dtype != np.float32:
        return None
    last = channels_last(node)
    x, y, w, n, c, m, cg, nsp, group, kernel, strides, dil, pads, osp = _conv_geometry(node, ctx, last)
    if not (group == c == m and cg == 1 and group > 1 and nsp in (1, 2) and y.dtype == np.float32):
        return None
    act, params, z = "", [], None
    if node.op == "FusedConv":
        act = str(node.attrs.get("activation", "") or "")
        params = [float(p) for p in node.attrs.get("activation_params", []) or []]
        if act not in DW_ACTIVATIONS or len(params) != {"Clip": 2, "HardSigmoid": 2, "LeakyRelu": 1}.get(act, 0):
            return None
        if len(node.inputs) > 3 and node.inputs[3]:
            z = ctx.value(node.inputs[3])
            if z.shape != y.shape or z.dtype != np.float32:
                return None
    bias = None
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = ctx.const(node.inputs[2])
        if bias is None or bias.size != m:
            return None
    if nsp == 1:
        insp, osp, kernel, strides, dil = [1, x.shape[-2 if last else -1]], [1] + list(osp), [1] + list(kernel), \
            [1] + list(strides), [1] + list(dil)
        pads = [0, pads[0]]
    else:
        insp = list(x.shape[1:3] if last else x.shape[2:])
    geometry = (n, c, insp[0], insp[1], osp[0], osp[1], kernel[0], kernel[1], strides[0], strides[1],
                dil[0], dil[1], pads[0], pads[1])
    step = depthwise_step(ctx, x=x, y=y, w_ct=np.asarray(w, np.float32).reshape(c, -1), geometry=geometry,
                          nchw=not last, bias=bias, z=z, act=act, params=params)
    if step is not None:
        extra = ", ".join(([("residual")] if z is not None else []) + ([act] if act else []))
        how = dw_f32_isa_name() if last else f"{isa_name()}, per-tap multiply-adds in the numpy kernel's order"
        ctx.note(node, f"{'NHWC ' if last else ''}depthwise {'x'.join(map(str, kernel[-nsp:]))} native "
                       f"(fp32, {how})"
                       f"{'; fused ' + extra if extra else ''}; {threads_of(ctx)} thread(s)")
    return step


def int8_add_step(ctx, a: np.ndarray, b: np.ndarray, y: np.ndarray, inputs, qy: int, shy: int, zp_y: int
                  ) -> Optional[Callable[[], None]]:
    """TFLite int8 ADD/SUB of two same-shape computed tensors as the native kernel, or None.

    ``inputs``: [(zp_i, q_i, shift_i)] per operand. Each operand's term
    MBQM((x - zp) << 20, q_i, shift_i) depends on its int8 value alone: a 256-entry table made
    here with the numpy kernels' own integer requantization."""
    if _native.lib is None or not (a.shape == b.shape == y.shape):
        return None
    for arr in (a, b, y):
        if not arr.flags.c_contiguous or arr.dtype != np.int8:
            return None
    tables = add_tables(inputs)
    if int(np.abs(tables[0]).max() + np.abs(tables[1]).max()) >= INT32_LIMIT or not requant_ok([qy], [shy]):
        return None
    t1, t2 = (np.ascontiguousarray(t, np.int32) for t in tables)
    args = Int8AddArgs(a=a.ctypes.data, b=b.ctypes.data, y=y.ctypes.data, t1=t1.ctypes.data, t2=t2.ctypes.data,
                       n=y.size, qy=int(qy), shy=int(shy), zp_y=int(zp_y), lo=-128, hi=127, threads=threads_of(ctx))
    return _native.native_step("ei_int8_add", args, a, b, y, t1, t2)


def isa_name() -> str:
    """The SIMD the run-time dispatched kernels use under the current ISA mask."""
    f = _native.features()
    if f.get("avx2") and _native.lib.ei_rq_simd():
        return "AVX2"
    if f.get("neon") and _native.lib.ei_rq_simd():
        return "NEON"
    return "scalar"


def dw_f32_isa_name() -> str:
    """The vectors of the fp32 NHWC depthwise kernel (FMAs, four pixels in registers)."""
    return _fn("ei_depthwise_f32_isa", ctypes.c_char_p)().decode() + " FMA"


def dw_int8_isa_name(channels_last: bool) -> str:
    """The SIMD of the native int8 depthwise kernel: channels-last picks AVX-512 VNNI (vpdpwssd,
    requantized in registers) exactly where the int8 GEMM does."""
    if channels_last and _fn("ei_int8_gemm_kind", ctypes.c_int)() in (4, 5):
        return "AVX-512 VNNI vpdpwssd"
    return isa_name()


#: the deepest GEMM (K) that runs on AVX-512 VNNI where AMX is there: AMX pads K to whole tiles
#: of 64, and its results go through memory to the epilogue; with K <= 16 the VNNI kernel,
#: requantizing in registers, measured 1.2-1.8x faster (MobileNet-v2 112x112 16->96: 456 ->
#: 355 us; 56x56 16->64: 78 -> 55 us; loaded machine), at K = 24-32 the two were even
AMX_MIN_K = 17


#: GEMMs of fewer output rows (pixels) stay on VNNI where AMX is there: AMX hands tiles of at
#: most 8 rows to the VNNI kernels anyway, but on weights padded to whole 64-byte K tiles.
#: MobileNetV3's squeeze-excite convs and 1x1x576 -> 1024 head (one row): 0.2-2.1 us less each,
#: about 10 us of the plan's 1.02 ms (1 thread, loaded machine, per-step minimums)
AMX_MIN_ROWS = 9
#: pointwise convs of fewer output channels (one 32-channel panel, K past AMX_MIN_K) stay on
#: VNNI: a half-used 32 x 32 tile and its tile store cost more than the VNNI tile requantized in
#: registers (MobileNetV3's 28x28 72/88 -> 24 projections: 14.0 -> 11.8 and, with the residual,
#: 33.7 -> 26.8 us); the 3x3 stride-2 stem (16 channels, im2col rows by vpermb) stays on AMX
AMX_MIN_M = 33
KIND_NAMES = {0: "scalar", 1: "AVX2 madd_epi16", 2: "NEON smlal", 3: "NEON sdot", 4: "AVX-512 VNNI vpdpbusd",
              5: "AMX tdpbusd"}


def gemm_kind(k: Optional[int] = None, rows: Optional[int] = None, m: Optional[int] = None,
              pointwise: bool = False) -> int:
    """The int8 GEMM micro-kernel (ei_int8_gemm_kind) for a GEMM of depth ``k``, ``rows`` output
    rows and ``m`` output channels (a ``pointwise`` conv: 1x1, stride 1, no pads) on this machine,
    with the current ISA mask: the machine's best, but VNNI instead of AMX below AMX_MIN_K,
    AMX_MIN_ROWS, or (pointwise) AMX_MIN_M."""
    kind = _fn("ei_int8_gemm_kind", ctypes.c_int)()
    if kind != 5:
        return kind
    small = ((k is not None and k < AMX_MIN_K) or (rows is not None and rows < AMX_MIN_ROWS)
             or (pointwise and m is not None and m < AMX_MIN_M))
    return 4 if small else kind


def kind_name(k: Optional[int] = None) -> str:
    """The int8 GEMM micro-kernel prepare picks on this machine (with the current ISA mask) for
    a GEMM of depth ``k`` (None: the deepest)."""
    k = gemm_kind(k)
    return KIND_NAMES.get(k, str(k))


STEM_KINDS = {0: "scalar", 1: "AVX2 vpmaddwd", 2: "NEON smlal", 3: "NEON sdot", 4: "AVX-512 VNNI vpdpbusd"}


def int8_stem_step(ctx, a: ctypes.Structure, w_mk: np.ndarray, keep: Sequence,
                   float_input=None) -> Optional[Callable[[], None]]:
    """The direct stem convolution (src/int8_stem.c) for the int8 conv ``a`` (an
    ``Int8ConvArgs`` with its pointers, geometry, epilogue and lut filled by int8_conv_step), or
    None when that kernel does not take it (NCHW, a residual, more than 4 input or 64 output
    channels, a dilated width): then the GEMM serves. ``w_mk``: (M, K) int8 weights, K ordered
    (kernel row, kernel column, channel); ``keep``: the arrays ``a`` points into. The step's
    ``path`` names the kernel for the plan note. ``float_input``: (xf, scale, nchw), as
    ``int8_conv_step``: the step quantizes float32 ``xf`` in its line buffers (ei_int8_stem_q)."""
    lib = _native.lib
    if lib is None or not hasattr(lib, "ei_int8_stem"):
        return None
    for name, res in (("ei_int8_stem_kind", ctypes.c_int), ("ei_int8_stem_pack_size", ctypes.c_int64),
                      ("ei_int8_stem_scratch", ctypes.c_int64)):
        getattr(lib, name).restype, getattr(lib, name).argtypes = res, [_P]
    lib.ei_int8_stem_pack.restype, lib.ei_int8_stem_pack.argtypes = None, [_P, _P, _P]
    addr = ctypes.addressof(a)
    kind = lib.ei_int8_stem_kind(addr)
    if kind < 0:
        return None
    a.kind = kind
    pack = aligned(int(lib.ei_int8_stem_pack_size(addr)))
    w_mk = np.ascontiguousarray(w_mk, np.int8)
    lib.ei_int8_stem_pack(addr, w_mk.ctypes.data, pack.ctypes.data)
    if float_input is not None:
        xf, scale, nchw = float_input
        if xf.dtype != np.float32 or not np.isfinite(scale) or not 0 < abs(float(scale)) < float("inf"):
            return None
        q = StemQuantArgs(conv=a, xf=xf.ctypes.data, scale=float(scale), zp=float(a.zp_x), nchw=int(bool(nchw)))
        lib.ei_int8_stem_q_scratch.restype, lib.ei_int8_stem_q_scratch.argtypes = ctypes.c_int64, [_P]
        need = int(lib.ei_int8_stem_q_scratch(ctypes.addressof(q)))
    else:
        need = int(lib.ei_int8_stem_scratch(addr))
    scr = _thread_scratch(ctx, max(1, int(a.threads)), need)
    a.wpack, a.scratch, a.consts = pack.ctypes.data, scr.ctypes.data, None
    # the rows it runs (AMX tiles for the VNNI kind where AMX runs)
    rows = _native.function("ei_int8_stem_path", _P, restype=ctypes.c_char_p)(addr).decode() \
        if hasattr(lib, "ei_int8_stem_path") else STEM_KINDS.get(kind, str(kind))
    if float_input is not None:
        q.conv = a                  # a copy: the struct embeds the conv args by value
        step = _native.native_step("ei_int8_stem_q", q, pack, scr, float_input[0], *keep)
        step.path = (f"{rows}, int32 accumulation, no im2col; its float "
                     f"{'NCHW' if nchw else 'NHWC'} input quantized into the line buffers")
    else:
        step = _native.native_step("ei_int8_stem", a, pack, scr, *keep)
        step.path = f"{rows}, int32 accumulation, no im2col"
    step.stem = True
    step.kind_name = f"direct stem, {rows}"   # what a GEMM's note names
    return step


def int8_stem_takes(geometry: Sequence[int]) -> bool:
    """Whether the stem kernel (src/int8_stem.c) runs an NHWC int8 conv of this ``geometry``
    (as ``int8_conv_step``'s: n, c, h, w, m, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl) without a
    residual on this machine, under the current ISA mask: what fuse_int8_input.py asks before
    handing the conv its float input."""
    lib = _native.lib
    if lib is None or not hasattr(lib, "ei_int8_stem_q"):
        return False
    a = Int8ConvArgs()
    for name, v in zip(("n", "c", "h", "w", "m", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl"),
                       geometry):
        setattr(a, name, int(v))
    lib.ei_int8_stem_kind.restype, lib.ei_int8_stem_kind.argtypes = ctypes.c_int, [_P]
    return lib.ei_int8_stem_kind(ctypes.addressof(a)) >= 0
