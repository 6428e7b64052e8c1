"""int8 lookup tables and multipliers shared by every backend: the float function of each unary
activation, its 256-entry table (TFLite's PopulateLookupTable), the exact requantization table,
TFLite ADD's multipliers, and the int8 Softmax's exp table (TFLite's SOFTMAX parameters)."""
from __future__ import annotations

import math
from typing import Callable, Tuple

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.graph import Node
from .qmath import QMAX, QMIN, conv_requant_params, per_tensor, quantize_multiplier, requantize, round_half_away

LEFT_SHIFT = 20
_VALUES = np.arange(QMIN, QMAX + 1, dtype=np.int64)           # -128 .. 127


def by_bits(table: np.ndarray) -> np.ndarray:
    """A table over v = -128..127 (index v + 128) reordered to index by v's uint8 bit pattern:
    the order the table-lookup kernels read (native int8_ops.c / ei_lut.h, np.take on a uint8
    view or with mode="wrap" on v itself)."""
    tu = np.empty(256, np.int8)
    tu[_VALUES.astype(np.int8).view(np.uint8)] = table
    return tu


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in np.asarray(x, np.float64).reshape(-1)]).reshape(np.shape(x))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def activation_fn(op: str, attrs: dict) -> Callable[[np.ndarray], np.ndarray]:
    """The float function of a unary activation op (float64 in, float64 out)."""
    a = attrs
    if op == "Sigmoid":
        return _sigmoid
    if op == "Tanh":
        return np.tanh
    if op == "HardSigmoid":
        alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
        return lambda x: np.clip(alpha * x + beta, 0, 1)
    if op == "HardSwish":
        return lambda x: x * np.clip(x / 6 + 0.5, 0, 1)
    if op == "LeakyRelu":
        alpha = float(a.get("alpha", 0.01))
        return lambda x: np.where(x >= 0, x, alpha * x)
    if op in ("Elu", "Celu"):
        alpha = float(a.get("alpha", 1.0))
        div = alpha if op == "Celu" else 1.0
        return lambda x: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0) / div))
    if op == "Selu":
        alpha = float(a.get("alpha", 1.67326319217681884765625))
        gamma = float(a.get("gamma", 1.05070102214813232421875))
        return lambda x: gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))
    if op == "Softplus":
        return _softplus
    if op == "Softsign":
        return lambda x: x / (1 + np.abs(x))
    if op == "Mish":
        return lambda x: x * np.tanh(_softplus(x))
    if op == "SiLU":
        return lambda x: x * _sigmoid(x)
    if op == "Gelu":
        if a.get("approximate", "none") == "tanh":
            c = math.sqrt(2 / math.pi)
            return lambda x: 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))
        return lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if op == "Erf":
        return _erf
    raise UnsupportedOpError(f"no int8 lookup table for {op}")


#: unary ops run as a 256-entry table in an int8 graph
LUT_OPS = ("Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Celu", "Selu",
           "Softplus", "Softsign", "Mish", "SiLU", "Gelu", "Erf")


def lut_table(fn: Callable, s_x: float, zp_x: int, s_y: float, zp_y: int) -> np.ndarray:
    """int8 table over v = -128..127 (index v + 128) of f, as TFLite's PopulateLookupTable."""
    f32 = np.float32
    deq = f32(s_x) * (_VALUES - zp_x).astype(f32)                     # float32 multiply
    with np.errstate(all="ignore"):
        tr = np.asarray(fn(deq.astype(np.float64)), np.float64).astype(f32)
    inv = f32(1) / f32(s_y)
    rescaled = round_half_away((tr * inv).astype(np.float64))        # float32 product, std::round
    q = np.clip(np.nan_to_num(rescaled, nan=0.0, posinf=1e9, neginf=-1e9) + zp_y, QMIN, QMAX)
    return q.astype(np.int8)


def requant_table(s_x: float, zp_x: int, s_y: float, zp_y: int, lo: int = QMIN, hi: int = QMAX) -> np.ndarray:
    """int8 table (index v + 128) of clamp(zp_y + MBQM(v - zp_x, s_x / s_y), lo, hi): exact integer math."""
    q, sh = quantize_multiplier(float(np.float32(s_x)) / float(np.float32(s_y)))
    r = requantize(_VALUES - zp_x, q, sh) + zp_y
    return np.clip(r, lo, hi).astype(np.int8)


def mul_multiplier(s1: float, s2: float, s_y: float, mode: str = "fixed") -> Tuple[int, int]:
    """(q, shift) of an int8 Mul: in the "fixed" mode TFLite MUL's, the product of the inputs'
    scales over the output's, each a float32 value, multiplied in double; in "fp32" the float32
    (s1 * s2) / s_y as ``conv_requant_params`` makes it (``ops/qmath.py``)."""
    if mode == "fp32":
        q, sh = conv_requant_params(s1, [s2], s_y, "fp32")
        return int(q[0]), int(sh[0])
    return quantize_multiplier(float(np.float32(s1)) * float(np.float32(s2)) / float(np.float32(s_y)))


def gated_table(fn: Callable, s_x: float, zp_x: int, s_h: float, zp_h: int, s_y: float, zp_y: int,
                mode: str = "fixed") -> np.ndarray:
    """int8 table (index v + 128) of ``Mul(x, act(x))`` with act an int8 table op (x * HardSigmoid(x),
    x * Sigmoid(x): how quantizers that know no HardSwish / SiLU write them): h = act's table at
    (s_h, zp_h), then TFLite MUL's integers, clamp(zp_y + MBQM((v - zp_x)(h - zp_h))). Both steps
    see only v, so the one table gives the two steps' bytes exactly. ``mode``: the Mul's
    requantization (its ``requant`` attribute)."""
    h = lut_table(fn, s_x, zp_x, s_h, zp_h).astype(np.int64)
    q, sh = mul_multiplier(s_x, s_h, s_y, mode)
    r = requantize((_VALUES - zp_x) * (h - zp_h), q, sh) + zp_y
    return np.clip(r, QMIN, QMAX).astype(np.int8)


def add_params(s1: float, s2: float, s_y: float, sub: bool = False):
    """TFLite ADD/SUB multipliers: ((q1, sh1), (q2, sh2), (qy, shy))."""
    f32 = np.float32
    twice_max = float(2 * max(f32(s1), f32(s2)))                           # float, then double
    m1 = float(f32(s1)) / twice_max
    m2 = float(f32(s2)) / twice_max
    my = twice_max / float(f32((1 << LEFT_SHIFT) * f32(s_y)))
    q1, q2, qy = quantize_multiplier(m1), quantize_multiplier(m2), quantize_multiplier(my)
    if sub:
        q2 = (-q2[0], q2[1])
    return q1, q2, qy


#: TFLite's int8 SOFTMAX output parameters
SOFTMAX_OUTPUT = (1.0 / 256.0, -128)


def add_tables(inputs) -> list:
    """TFLite ADD's per-operand terms MBQM((v - zp) << 20, q, shift) for v = -128..127, as int64
    (256,) tables indexed by v's uint8 bit pattern."""
    idx = _VALUES.astype(np.int8).view(np.uint8)
    out = []
    for zp, q, sh in inputs:
        t = np.empty(256, np.int64)
        t[idx] = requantize((_VALUES - zp) << LEFT_SHIFT, q, sh)
        out.append(t)
    return out


def softmax_exp_table(s_x: float, beta: float = 1.0) -> np.ndarray:
    """e[d] = round(2^20 exp(-beta s_x d)), d = 0..255 (int32)."""
    d = np.arange(256, dtype=np.float64)
    return np.rint(np.exp(-float(beta) * float(np.float32(s_x)) * d) * (1 << 20)).astype(np.int32)


def softmax_s8_params(node: Node, ctx, shape, x_dtype, y_dtype) -> Tuple[np.ndarray, int]:
    """(exp table, row length) of an int8 Softmax, checked: what every backend's kernel needs."""
    if np.dtype(x_dtype) != np.int8 or np.dtype(y_dtype) != np.int8:
        raise UnsupportedOpError(f"Softmax {node.name!r}: int8 kernel wants int8 in and out")
    s_x, _ = per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    if (np.float32(s_y), zp_y) != (np.float32(SOFTMAX_OUTPUT[0]), SOFTMAX_OUTPUT[1]):
        raise UnsupportedOpError(f"Softmax {node.name!r}: int8 output must be (1/256, -128), got ({s_y}, {zp_y})")
    axis = int(node.attrs.get("axis", -1)) % len(shape)
    if any(d != 1 for d in shape[axis + 1:]):
        raise UnsupportedOpError(f"Softmax {node.name!r}: int8 Softmax runs over the last axis")
    return softmax_exp_table(s_x), int(shape[axis])
