"""Quantized op math shared by every backend (CPU, OpenCL, CUDA): quantization parameters of a
tensor, TFLite's fixed-point requantization, the int8 clamp of a fused activation, the
requantization multipliers of a conv, the int8 bias and weight scales of a GEMM, Clip's bounds.

Fixed point (exactly TFLite's reference kernels, ``tensorflow/lite/kernels/internal/common.h``
without ``TFLITE_SINGLE_ROUNDING``):

* ``quantize_multiplier(m)`` (``QuantizeMultiplier``): a real multiplier ``m > 0`` as an
  int32 ``q`` in [2^30, 2^31) and a power-of-two ``shift``: ``m ~= q * 2^(shift - 31)``;
* ``MultiplyByQuantizedMultiplier(x, q, shift)`` =
  ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * 2^max(shift, 0), q), max(-shift, 0))``:
  ``Requantizer`` evaluates it on whole int64 arrays (per-tensor or per-channel ``q``/``shift``)
  with in-place numpy integer ops, into workspaces allocated once at prepare.

Float32 requantization (a node's ``requant`` attribute ``"fp32"``: onnxruntime's and XNNPACK's):
the multiplier of channel c is the float32 ``s_c = (s_x * s_w[c]) / s_y`` evaluated in float32
arithmetic (as both compute it), and ``MBQM(x) = rint(float32(x) * s_c)``, one rounding, half to
even. Such a multiplier travels through every kernel as the same (q, shift) pair as a fixed-point
one: ``q`` holds the float32's bits and ``shift`` is ``FP32_SHIFT``, a value no fixed-point
multiplier has (TFLite's shifts lie in [-31, 30]), so a kernel's one requantization routine
tells the two apart per channel and the kernels' arguments do not change. It needs
2^-32 <= s_c < 1 (then |x s_c| < 2^31); a node with a multiplier outside keeps "fixed".

Functions taking ``ctx`` read tensors through ``ctx.tensor(name)`` / ``ctx.const(name)`` /
``ctx.value(name)``: any backend's prepare context (or, for ``qparams``, a graph).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.graph import Node

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
#: the shift marking a float32 multiplier (q: its bits); native/src/ei_int8.h EI_RQ_FP32
FP32_SHIFT = 64
#: a node's requantization modes (its ``requant`` attribute; absent: "fixed", TFLite's)
REQUANT_MODES = ("fixed", "fp32")
#: the int8 ops whose output requantization the ``requant`` attribute selects (Mul: the product
#: (x1 - zp1)(x2 - zp2) times s1 s2 / s_y, as a conv's accumulator)
REQUANT_OPS = frozenset({"Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul", "Mul"})
QMIN, QMAX = -128, 127
#: K-chunk of the exact float32 int8 GEMM: 1024 * 128 * 128 = 2^24
EXACT_K = 1024


def is_int8_node(node, ctx) -> bool:
    """True when the node computes on int8 tensors: its first input (or its output) is int8."""
    for name in (node.inputs[:1] + node.outputs[:1]):
        if name and ctx.tensor(name).dtype == "int8":
            return True
    return False


def scratch(ctx, role: str, shape, dtype) -> np.ndarray:
    """``ctx.scratch(role, shape, dtype)`` (the plan's scratch shared by role, see
    ``memory/scratch.py``); without a plan context (tests, folding) a fresh array. The
    im2col columns ("im2col") are tileable: their size follows the workspace budget."""
    if ctx is None or not hasattr(ctx, "scratch"):
        return np.empty(tuple(int(d) for d in shape), np.dtype(dtype))
    return ctx.scratch(role, shape, dtype, tileable=role == "im2col")


class QParams:
    """Scale(s) and zero point(s) of a quantized tensor (``Tensor.quant``)."""

    def __init__(self, scale, zero_point, axis: Optional[int] = None):
        self.scale = np.asarray(scale, np.float32).reshape(-1)
        self.zero_point = np.asarray(zero_point, np.int64).reshape(-1)
        self.axis = axis
        if self.scale.size == 0 or (self.zero_point.size not in (1, self.scale.size)):
            raise UnsupportedOpError(f"bad quantization parameters: scale {scale}, zero_point {zero_point}")

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    @property
    def s(self) -> float:
        """The per-tensor scale (float32 value, as a Python float)."""
        return float(self.scale[0])

    @property
    def zp(self) -> int:
        return int(self.zero_point[0])


def qparams(ctx_or_graph, name: str, what: str = "") -> QParams:
    """The quantization parameters of tensor ``name``; error when it has none."""
    t = ctx_or_graph.tensor(name) if hasattr(ctx_or_graph, "tensor") else ctx_or_graph.tensors[name]
    q = t.quant
    if not q or "scale" not in q:
        raise UnsupportedOpError(f"int8 tensor {name!r}{' (' + what + ')' if what else ''} has no "
                                 "quantization parameters")
    return QParams(q["scale"], q.get("zero_point", [0]), q.get("axis"))


def per_tensor(ctx, name: str, what: str = "") -> Tuple[float, int]:
    p = qparams(ctx, name, what)
    if not p.per_tensor:
        raise UnsupportedOpError(f"tensor {name!r} ({what}): per-tensor quantization expected, "
                                 f"got {p.scale.size} scales")
    return p.s, p.zp


def conv_transpose_weight_scales(ctx, node, m: int) -> np.ndarray:
    """The ``m`` per-output-channel scales of an int8 ConvTranspose's weights (ONNX layout
    (C_in, C_out, ...): axis 1), which must be symmetric; a per-tensor scale is repeated."""
    wq = qparams(ctx, node.inputs[1], "weights")
    if np.any(wq.zero_point != 0) or wq.scale.size not in (1, m) or (wq.scale.size == m > 1 and wq.axis != 1):
        raise UnsupportedOpError(f"ConvTranspose {node.name!r}: weights must be symmetric, per output channel "
                                 "(axis 1)")
    return wq.scale if wq.scale.size == m else np.full(m, wq.s, np.float32)


def quantize_multiplier(m: float) -> Tuple[int, int]:
    """TFLite ``QuantizeMultiplier``: (q, shift) with m ~= q * 2^(shift - 31), q in [2^30, 2^31)."""
    m = float(m)
    if m == 0.0:
        return 0, 0
    if not m > 0 or not math.isfinite(m):
        raise ValueError(f"multiplier must be positive and finite, got {m}")
    frac, shift = math.frexp(m)
    q = int(math.floor(frac * (1 << 31) + 0.5))        # std::round of a positive value
    if q == (1 << 31):
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return (1 << 31) - 1, 30
    return q, shift


def quantize_multipliers(ms) -> Tuple[np.ndarray, np.ndarray]:
    """``quantize_multiplier`` element-wise: (q int64 array, shift int64 array)."""
    pairs = [quantize_multiplier(float(m)) for m in np.asarray(ms, np.float64).reshape(-1)]
    return (np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64))


def requant_mode(node: Node) -> str:
    """The node's requantization mode: its ``requant`` attribute, "fixed" when absent."""
    mode = node.attrs.get("requant", "fixed") if node.op in REQUANT_OPS else "fixed"
    if mode not in REQUANT_MODES:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: requant={mode!r} is not one of {REQUANT_MODES}")
    return mode


def fp32_scales(s_x: float, s_w, s_y: float) -> np.ndarray:
    """Per-channel float32 multipliers (s_x * s_w[c]) / s_y in float32 arithmetic (onnxruntime's
    and XNNPACK's formula, so a QDQ file's outputs match onnxruntime's)."""
    with np.errstate(all="ignore"):
        return (np.float32(s_x) * np.asarray(s_w, np.float32).reshape(-1)) / np.float32(s_y)


def fp32_ok(scales) -> bool:
    """Whether float32 multipliers can requantize in the fp32 mode: all in [2^-32, 1)."""
    s = np.asarray(scales, np.float32)
    return bool(s.size and np.all(np.isfinite(s)) and np.all(s >= np.float32(2.0 ** -32)) and np.all(s < 1))


def fp32_multipliers(scales) -> Tuple[np.ndarray, np.ndarray]:
    """Float32 multipliers as the kernels' (q, shift) pairs: (their bits as int64, FP32_SHIFT)."""
    s = np.ascontiguousarray(np.asarray(scales, np.float32).reshape(-1))
    if not fp32_ok(s):
        raise UnsupportedOpError(f"requant='fp32' needs multipliers in [2^-32, 1); got {s.min():.6g} .. {s.max():.6g} "
                                 "(the converter keeps such a node 'fixed')")
    return s.view(np.int32).astype(np.int64), np.full(s.size, FP32_SHIFT, np.int64)


def wrap_int32(a: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Two's complement wrap of int64 values to the int32 range (what C's int32 arithmetic does)."""
    out = a if out is None else out
    np.add(a, 1 << 31, out=out)
    np.bitwise_and(out, (1 << 32) - 1, out=out)
    np.subtract(out, 1 << 31, out=out)
    return out


class Requantizer:
    """``MultiplyByQuantizedMultiplier`` on int64 arrays, in place.

    ``q`` and ``shift`` are scalars or arrays broadcasting onto the data (per channel);
    ``shape`` is the data's shape: scratch buffers of it are taken from ``ctx`` (or
    allocated) once. ``__call__(acc)`` overwrites ``acc`` (int64, values in the int32 range)
    with the result.

    Fast path (any multiplier but INT32_MIN): with e the right shift, S = 31 + e and
    c = 2^30 + (2^(30+e) if e else 0), SaturatingRoundingDoublingHighMul rounds xq / 2^31 half
    up for xq >= 0 and half toward zero below (its nudge), RoundingDivideByPOT rounds half away
    from zero, and floor(floor(y) / 2^e) = floor(y / 2^e) merges the two, so

        MBQM = floor((xq + c) / 2^S)            for xq >= 0
             = floor((xq - c + 2^S) / 2^S)      for xq < 0   (= -floor((|xq| + c - 1) / 2^S))

    i.e. ``(xq + c + (m & (2^S - 2c))) >> S`` with m = xq >> 63 (all ones below zero): six
    int64 array passes, checked bit for bit against the step-by-step form in
    tests/int8_reference.py.
    """

    def __init__(self, q, shift, shape: Sequence[int], ctx=None, offset: int = 0):
        """``offset``: an integer added to the result (an output zero point); folded into the
        rounding constant as offset * 2^S when that cannot overflow, else added after."""
        q = np.asarray(q, np.int64)
        shift = np.asarray(shift, np.int64)
        self.q = q
        self.offset = int(offset)
        fp32 = shift == FP32_SHIFT
        self.fp32 = None
        if np.any(fp32):
            if not np.all(fp32 | ((q == 0) & (shift == 0))):
                raise ValueError("a float32 multiplier beside fixed-point ones")
            # channels that only fill (q 0) multiply by 0.0, as in the native kernels
            self.fp32 = np.where(fp32, q, 0).astype(np.int32).view(np.float32)
            self.f32 = scratch(ctx, "rq_f32", tuple(shape), np.float32)
            return
        left = np.maximum(shift, 0)
        right = np.maximum(-shift, 0)
        if np.any(right > 31):
            raise ValueError("right shift above 31")
        self.left = left if np.any(left) else None
        alloc = ctx.workspace if ctx is not None else (lambda s, d: np.empty(s, d))
        shape = tuple(shape)
        self.fast = bool(np.all(q > INT32_MIN))
        if self.fast:
            self.c = (1 << 30) + np.where(right > 0, np.left_shift(np.int64(1), 30 + right), 0)
            self.total_shift = 31 + right
            self.d = np.left_shift(np.int64(1), self.total_shift) - 2 * self.c
            self.mask = scratch(ctx, "rq_mask", shape, np.int64)
            if self.offset and abs(self.offset) <= 256 and np.all(self.total_shift <= 52):
                # |xq| <= 2^62 and |offset| 2^S <= 2^60: the sum stays inside int64
                self.c = self.c + np.left_shift(np.int64(self.offset), self.total_shift)
                self.offset = 0
            return
        self.flag = alloc(shape, np.bool_)
        self.right = right if np.any(right) else None
        self.mask = (np.left_shift(np.int64(1), right) - 1) if self.right is not None else None
        self.half = (self.mask >> 1) if self.mask is not None else None
        self.sat = bool(np.any(q == INT32_MIN))
        self.tmp = alloc(shape, np.int64)
        self.flag2 = alloc(shape, np.bool_) if self.sat else None

    def __call__(self, acc: np.ndarray) -> np.ndarray:
        if self.fp32 is not None:               # rint(float32(x) * s): one rounding, half to even
            f = self.f32
            np.copyto(f, acc, casting="unsafe")
            np.multiply(f, self.fp32, out=f)
            np.rint(f, out=f)
            np.copyto(acc, f, casting="unsafe")
            if self.offset:
                np.add(acc, self.offset, out=acc)
            return acc
        if self.left is not None:
            np.left_shift(acc, self.left, out=acc)
            wrap_int32(acc)                                # x * (1 << left_shift) in int32
        if self.fast:
            m = self.mask
            np.multiply(acc, self.q, out=acc)                # xq: |.| <= 2^62
            np.right_shift(acc, 63, out=m)                   # all ones where xq < 0
            np.add(acc, self.c, out=acc)
            np.bitwise_and(m, self.d, out=m)                 # 2^S - 2c below zero, else 0
            np.add(acc, m, out=acc)
            np.right_shift(acc, self.total_shift, out=acc)   # floor division by 2^S
            if self.offset:
                np.add(acc, self.offset, out=acc)
            return acc
        tmp, flag = self.tmp, self.flag
        if self.sat:                                       # a == b == INT32_MIN saturates
            np.equal(acc, INT32_MIN, out=self.flag2)
            np.logical_and(self.flag2, self.q == INT32_MIN, out=self.flag2)
        # SaturatingRoundingDoublingHighMul: (ab + nudge) / 2^31, C division (toward zero)
        np.multiply(acc, self.q, out=acc)
        np.right_shift(acc, 63, out=tmp)                   # -1 where ab < 0, else 0
        np.bitwise_and(tmp, 1 - (1 << 31), out=tmp)        # nudge - 2^30: 0 or 1 - 2^31
        np.add(acc, tmp, out=acc)
        np.add(acc, 1 << 30, out=acc)
        np.right_shift(acc, 63, out=tmp)
        np.bitwise_and(tmp, (1 << 31) - 1, out=tmp)        # truncate, not floor, below zero
        np.add(acc, tmp, out=acc)
        np.right_shift(acc, 31, out=acc)
        if self.sat:
            np.copyto(acc, INT32_MAX, where=self.flag2)
        if self.right is not None:
            # RoundingDivideByPOT: (x >> e) + (remainder > (mask >> 1) + (x < 0))
            np.bitwise_and(acc, self.mask, out=tmp)
            np.less(acc, 0, out=flag)
            np.subtract(tmp, flag, out=tmp)
            np.right_shift(acc, self.right, out=acc)
            np.greater(tmp, self.half, out=flag)
            np.add(acc, flag, out=acc)
        if self.offset:
            np.add(acc, self.offset, out=acc)
        return acc


def requantize(x, q, shift) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier`` of an integer array (a new int64 array)."""
    acc = np.array(x, dtype=np.int64, copy=True)
    q = np.asarray(q, np.int64)
    shift = np.asarray(shift, np.int64)
    shape = np.broadcast_shapes(acc.shape, q.shape, shift.shape)
    acc = np.array(np.broadcast_to(acc, shape), dtype=np.int64, copy=True)     # keeps 0-d arrays 0-d
    return Requantizer(q, shift, shape)(acc)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """std::round: halves away from zero (float64 in, float64 out)."""
    v = np.asarray(v, np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def clamp_range(activation: str, params: Sequence[float], scale: float, zp: int) -> Tuple[int, int]:
    """The int8 output range [lo, hi] of a fused Relu / Clip(min, max) at output (scale, zp)."""
    lo, hi = QMIN, QMAX
    if not activation:
        return lo, hi
    if activation == "Relu":
        return max(lo, zp), hi
    if activation == "Clip":
        a, b = float(params[0]), float(params[1])
        # TFLite's CalculateActivationRangeQuantized: zp + round(f / scale), f / scale in float32
        if math.isfinite(a):
            lo = max(lo, min(hi, zp + int(round_half_away(np.float32(a) / np.float32(scale)))))
        if math.isfinite(b):
            hi = min(hi, max(QMIN, zp + int(round_half_away(np.float32(b) / np.float32(scale)))))
        return lo, hi
    raise UnsupportedOpError(f"int8 epilogue: activation {activation!r} is not a clamp (the quantizer "
                             "splits other activations into their own lookup-table op)")


def conv_requant_params(s_x: float, s_w: np.ndarray, s_y: float, mode: str = "fixed"):
    """Per-channel (q, shift) of s_x * s_w[m] / s_y: in the "fixed" mode TFLite's, computed in
    double from float32 scales; in "fp32" the float32 multipliers (``fp32_multipliers``)."""
    if mode == "fp32":
        return fp32_multipliers(fp32_scales(s_x, s_w, s_y))
    ms = [float(np.float32(s_x)) * float(sw) / float(np.float32(s_y)) for sw in np.asarray(s_w, np.float32)]
    return quantize_multipliers(ms)


def int8_bias(ctx, node: Node, name: str, n: int) -> np.ndarray:
    """The int32 bias ``name`` of an int8 GEMM as n int64 values (one value broadcast; none: zeros)."""
    if not name:
        return np.zeros(n, np.int64)
    b = ctx.const(name)
    if b is None or b.dtype != np.int32:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 bias must be a constant int32 tensor")
    if b.size == 1:
        return np.full(n, int(b.reshape(-1)[0]), np.int64)
    if b.size != n or (b.ndim > 1 and b.shape[-1] != n):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 bias of shape {b.shape} is not per "
                                 f"output column ({n})")
    return b.reshape(-1).astype(np.int64)


def b_scales(ctx, node: Node, bname: str, n: int, axis_n: int) -> np.ndarray:
    """The n float32 scales of an int8 GEMM's B: per tensor, or per output column along ``axis_n``."""
    bq = qparams(ctx, bname, "B")
    if bq.scale.size == 1:
        return np.full(n, bq.s, np.float32)
    b_ndim = len(ctx.tensor(bname).shape)
    ax = bq.axis if bq.axis is None or bq.axis >= 0 else bq.axis + b_ndim
    if bq.scale.size != n or ax != axis_n:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: B scales must be per tensor or per output "
                                 f"column (axis {axis_n}); got {bq.scale.size} along axis {bq.axis}")
    return bq.scale


def clip_bounds(node: Node, ctx) -> list:
    """[min, max] of a Clip as real values (None where absent): constants, int8 ones dequantized."""
    vals = []
    for i in (1, 2):
        nm = node.inputs[i] if len(node.inputs) > i else ""
        if not nm:
            vals.append(None)
            continue
        v = ctx.const(nm)
        if v is None:
            raise UnsupportedOpError(f"Clip {node.name!r}: int8 Clip needs constant min/max")
        if ctx.tensor(nm).dtype == "int8" and ctx.tensor(nm).quant:
            s, zp = per_tensor(ctx, nm)
            vals.append(float(s) * (int(v.reshape(-1)[0]) - zp))
        else:
            vals.append(float(np.asarray(v, np.float64).reshape(-1)[0]))
    return vals
