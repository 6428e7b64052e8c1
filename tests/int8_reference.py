"""A straightforward integer reference for the int8 kernels (tests only).

Written independently of ``edge_infer/backends/cpu/kernels/int8_*.py``: scalar Python-int
fixed point following TFLite's reference C++ line by line (int32 wrap-around, C division),
and convolutions / GEMMs / pools as explicit loops over output positions with np.int64
dot products: no float arithmetic anywhere in the integer paths (lookup tables are defined
by float math, as in TFLite's PopulateLookupTable, and are built here on their own).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


# -- fixed point (scalars, Python ints) ------------------------------------------------------

def wrap32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


def c_div(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def srdhm(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else (1 - (1 << 30))
    return wrap32(c_div(ab + nudge, 1 << 31))


def rdbpot(x: int, exponent: int) -> int:
    """gemmlowp RoundingDivideByPOT (arithmetic shift; Python's >> on ints is arithmetic)."""
    assert 0 <= exponent <= 31
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def mbqm(x: int, q: int, shift: int) -> int:
    """TFLite MultiplyByQuantizedMultiplier (double rounding)."""
    left = shift if shift > 0 else 0
    right = 0 if shift > 0 else -shift
    return rdbpot(srdhm(wrap32(x * (1 << left)), q), right)


def quantize_multiplier(m: float):
    """TFLite QuantizeMultiplier."""
    if m == 0.0:
        return 0, 0
    frac, shift = math.frexp(m)
    qf = int(math.floor(frac * (1 << 31) + 0.5))
    if qf == (1 << 31):
        qf //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return (1 << 31) - 1, 30
    return qf, shift


def fp32_multiplier(s_x: float, s_w: float, s_y: float) -> np.float32:
    """The "fp32" requantization's multiplier: (s_x * s_w) / s_y in float32 arithmetic."""
    return np.float32(np.float32(np.float32(s_x) * np.float32(s_w)) / np.float32(s_y))


def mbqm_fp32(x: int, s) -> int:
    """The "fp32" requantization (onnxruntime's / XNNPACK's): float32(x) * s rounded to float32,
    then to the nearest integer, ties to even (Python's round)."""
    return int(round(float(np.float32(np.float32(x) * np.float32(s)))))


def multipliers(s_x: float, ws, s_y: float, requant: str = "fixed"):
    """Per-channel requantization functions acc -> int of a conv / matmul in mode ``requant``."""
    if requant == "fp32":
        return [(lambda acc, f=fp32_multiplier(s_x, w, s_y): mbqm_fp32(acc, f)) for w in ws]
    pairs = [quantize_multiplier(float(np.float32(s_x)) * float(np.float32(w)) / float(np.float32(s_y))) for w in ws]
    return [(lambda acc, p=p: mbqm(acc, *p)) for p in pairs]


def mbqm_array(x, q, shift) -> np.ndarray:
    """mbqm element-wise (q, shift broadcast) over an integer array: Python ints, one at a time."""
    x = np.asarray(x, np.int64)
    q = np.broadcast_to(np.asarray(q, np.int64), x.shape)
    shift = np.broadcast_to(np.asarray(shift, np.int64), x.shape)
    out = np.empty(x.shape, np.int64)
    for idx in np.ndindex(*x.shape):
        out[idx] = mbqm(int(x[idx]), int(q[idx]), int(shift[idx]))
    return out


def clamp8(v, lo: int = -128, hi: int = 127) -> np.ndarray:
    return np.minimum(np.maximum(np.asarray(v, np.int64), lo), hi).astype(np.int8)


def round_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def act_range(act: str, params, s_y: float, zp_y: int):
    lo, hi = -128, 127
    if act == "Relu":
        lo = max(lo, zp_y)
    elif act == "Clip":
        a, b = params
        lo = max(lo, min(hi, zp_y + round_away(float(np.float32(a) / np.float32(s_y)))))
        hi = min(hi, max(-128, zp_y + round_away(float(np.float32(b) / np.float32(s_y)))))
    return lo, hi


# -- kernels ---------------------------------------------------------------------------------

def conv2d(x, xq, w, ws, b, yq, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1,
           act="", act_params=(), z=None, zq=None, requant: str = "fixed") -> np.ndarray:
    """int8 NCHW conv: loops over (n, m, oh, ow), int64 dot products over (c, kh, kw);
    ``requant``: the output's requantization, "fixed" (TFLite) or "fp32"."""
    s_x, zp_x = xq
    s_y, zp_y = yq
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    sh_, sw_ = strides
    dh, dw = dilations
    pt, pl, pb, pr = pads
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh_ + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw_ + 1
    xp = np.full((n, c, h + pt + pb, wd + pl + pr), zp_x, np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    mults = multipliers(s_x, [ws[k] for k in range(m)], s_y, requant)
    if z is not None:
        qz, shz = quantize_multiplier(float(np.float32(zq[0])) / float(np.float32(s_y)))
    lo, hi = act_range(act, act_params, s_y, zp_y)
    mg = m // group
    w64 = w.astype(np.int64)
    y = np.empty((n, m, oh, ow), np.int8)
    for b_ in range(n):
        for k in range(m):
            g = k // mg
            for i in range(oh):
                for j in range(ow):
                    patch = xp[b_, g * cg:(g + 1) * cg,
                               i * sh_: i * sh_ + dh * (kh - 1) + 1: dh,
                               j * sw_: j * sw_ + dw * (kw - 1) + 1: dw]
                    acc = int(np.sum((patch - zp_x) * w64[k]))
                    if b is not None:
                        acc += int(b[k])
                    v = mults[k](acc)
                    if z is not None:
                        v += mbqm(int(z[b_, k, i, j]) - zq[1], qz, shz)
                    y[b_, k, i, j] = min(max(v + zp_y, lo), hi)
    return y


def matmul(a, aq, bmat, bs, bias, yq, b_zp: int = 0, act="", act_params=(), requant: str = "fixed") -> np.ndarray:
    """int8 (M, K) @ (K, N): int64 dot per output; bs: per-column scales (len N) of B."""
    s_a, zp_a = aq
    s_y, zp_y = yq
    mrows, k = a.shape
    n = bmat.shape[1]
    lo, hi = act_range(act, act_params, s_y, zp_y)
    y = np.empty((mrows, n), np.int8)
    a64, b64 = a.astype(np.int64), bmat.astype(np.int64)
    rq = multipliers(s_a, list(bs), s_y, requant)
    for j in range(n):
        for i in range(mrows):
            acc = int(np.dot(a64[i] - zp_a, b64[:, j] - b_zp)) + (int(bias[j]) if bias is not None else 0)
            y[i, j] = min(max(rq[j](acc) + zp_y, lo), hi)
    return y


def add(x1, q1, x2, q2, yq, sub: bool = False) -> np.ndarray:
    (s1, zp1), (s2, zp2), (s_y, zp_y) = q1, q2, yq
    f32 = np.float32
    twice_max = float(2 * max(f32(s1), f32(s2)))
    m1 = quantize_multiplier(float(f32(s1)) / twice_max)
    m2 = quantize_multiplier(float(f32(s2)) / twice_max)
    my = quantize_multiplier(twice_max / float(f32((1 << 20) * f32(s_y))))
    if sub:
        m2 = (-m2[0], m2[1])
    a, b = np.broadcast_arrays(np.asarray(x1, np.int64), np.asarray(x2, np.int64))
    y = np.empty(a.shape, np.int8)
    for idx in np.ndindex(*a.shape):
        v1 = mbqm((int(a[idx]) - zp1) * (1 << 20), *m1)
        v2 = mbqm((int(b[idx]) - zp2) * (1 << 20), *m2)
        y[idx] = min(max(mbqm(v1 + v2, *my) + zp_y, -128), 127)
    return y


def mul(x1, q1, x2, q2, yq, requant: str = "fixed") -> np.ndarray:
    """TFLite MUL ("fixed"), or its product requantized with the "fp32" mode's float multiplier."""
    (s1, zp1), (s2, zp2), (s_y, zp_y) = q1, q2, yq
    rq = multipliers(s1, [s2], s_y, requant)[0]
    a, b = np.broadcast_arrays(np.asarray(x1, np.int64), np.asarray(x2, np.int64))
    y = np.empty(a.shape, np.int8)
    for idx in np.ndindex(*a.shape):
        y[idx] = min(max(rq((int(a[idx]) - zp1) * (int(b[idx]) - zp2)) + zp_y, -128), 127)
    return y


def requant(x, xq, yq, lo=-128, hi=127) -> np.ndarray:
    """clamp(zp_y + MBQM(x - zp_x, s_x / s_y)) per element (Relu/Clip/Concat requantization)."""
    q, sh = quantize_multiplier(float(np.float32(xq[0])) / float(np.float32(yq[0])))
    out = np.empty(np.shape(x), np.int8)
    for idx in np.ndindex(*np.shape(x)):
        out[idx] = min(max(mbqm(int(x[idx]) - xq[1], q, sh) + yq[1], lo), hi)
    return out


def lut(x, xq, yq, fn) -> np.ndarray:
    """TFLite PopulateLookupTable in float32, then a lookup per element."""
    s_x, zp_x = xq
    s_y, zp_y = yq
    table = {}
    inv = np.float32(1) / np.float32(s_y)
    for v in range(-128, 128):
        deq = np.float32(s_x) * np.float32(v - zp_x)
        tr = np.float32(fn(np.float64(deq)))
        r = round_away(float(np.float32(tr * inv)))
        table[v] = min(max(r + zp_y, -128), 127)
    return np.vectorize(lambda v: table[int(v)], otypes=[np.int8])(x)


def avg_pool2d(x, kernel, strides=(1, 1), pads=(0, 0, 0, 0), count_include_pad=False, zp: int = 0):
    """TFLite AveragePool rounding on raw int8 values (same in/out params)."""
    n, c, h, w = x.shape
    kh, kw = kernel
    pt, pl, pb, pr = pads
    oh = (h + pt + pb - kh) // strides[0] + 1
    ow = (w + pl + pr - kw) // strides[1] + 1
    y = np.empty((n, c, oh, ow), np.int8)
    for b in range(n):
        for ch in range(c):
            for i in range(oh):
                for j in range(ow):
                    acc, cnt = 0, 0
                    for u in range(kh):
                        for v in range(kw):
                            r, s = i * strides[0] + u - pt, j * strides[1] + v - pl
                            inside = 0 <= r < h and 0 <= s < w
                            if inside:
                                acc += int(x[b, ch, r, s])
                                cnt += 1
                            elif count_include_pad and -pt <= r < h + pb and -pl <= s < w + pr:
                                acc += zp
                                cnt += 1
                    acc = c_div(acc + cnt // 2, cnt) if acc > 0 else c_div(acc - cnt // 2, cnt)
                    y[b, ch, i, j] = min(max(acc, -128), 127)
    return y


def global_avg_pool(x) -> np.ndarray:
    n, c = x.shape[:2]
    y = np.empty((n, c) + (1,) * (x.ndim - 2), np.int8)
    cnt = int(np.prod(x.shape[2:]))
    for b in range(n):
        for ch in range(c):
            acc = int(np.sum(x[b, ch].astype(np.int64)))
            acc = c_div(acc + cnt // 2, cnt) if acc > 0 else c_div(acc - cnt // 2, cnt)
            y[(b, ch) + (0,) * (x.ndim - 2)] = min(max(acc, -128), 127)
    return y


def quantize(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    """ONNX QuantizeLinear (float32 division, round half to even, saturate)."""
    v = np.rint(np.asarray(x, np.float32) / np.float32(scale)) + np.float32(zp)
    return np.clip(v, -128, 127).astype(np.int8)


def dequantize(q: np.ndarray, scale, zp=0, axis: Optional[int] = None) -> np.ndarray:
    q = np.asarray(q, np.int64)
    scale = np.asarray(scale, np.float32)
    zp = np.asarray(zp, np.int64)
    if axis is not None and scale.size > 1:
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zp = scale.reshape(shape), np.broadcast_to(zp, scale.shape).reshape(shape)
    return (q - zp).astype(np.float32) * scale
