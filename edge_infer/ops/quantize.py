"""QuantizeLinear / DequantizeLinear and the quantization parameters of every tensor."""
from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from ..ir.graph import Graph, Node, Tensor
from .schema import BOOL, INT, ValidationError, check_axis, const, fail, op, rank, shape
from .shapes import SHAPE_RULES, rule

#: the range a zero point may take for each quantized dtype
ZP_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
            "int32": (-2 ** 31, 2 ** 31 - 1)}


def _numbers(v, what: str, integral: bool):
    vals = v if isinstance(v, (list, tuple)) else [v]
    for x in vals:
        ok = isinstance(x, Integral) if integral else isinstance(x, Real) and math.isfinite(x)
        if not ok or isinstance(x, bool):
            raise ValidationError(f"{what}: {x!r} is not a{'n integer' if integral else ' finite number'}")
    return list(vals)


def check_quant(t: Tensor) -> None:
    """A tensor's ``quant``: positive finite scales, zero points in the dtype's range, a valid axis."""
    q, where = t.quant, f"tensor {t.name!r} quant"
    if not isinstance(q, dict) or "scale" not in q:
        return  # other keys (observers' ranges) carry no kernel parameter
    scale = _numbers(q["scale"], f"{where} 'scale'", False)
    if not scale or not all(s > 0 and np.isfinite(np.float32(s)) for s in scale):
        raise ValidationError(f"{where} 'scale': {scale[:4]} must be positive and finite (as float32)")
    zp = _numbers(q.get("zero_point", [0]), f"{where} 'zero_point'", True)
    lo, hi = ZP_RANGE.get(t.dtype, (-2 ** 63, 2 ** 63 - 1))
    if not all(lo <= z <= hi for z in zp):
        raise ValidationError(f"{where} 'zero_point': {zp[:4]} outside the {t.dtype} range [{lo}, {hi}]")
    if len(zp) not in (1, len(scale)):
        raise ValidationError(f"{where}: {len(zp)} zero points for {len(scale)} scales")
    axis = q.get("axis")
    s = t.data.shape if t.data is not None else t.shape
    if axis is not None:
        if not isinstance(axis, Integral) or isinstance(axis, bool):
            raise ValidationError(f"{where} 'axis': {axis!r} is not an integer")
        if s is not None and not -len(s) <= axis < max(len(s), 1):
            raise ValidationError(f"{where} 'axis': {axis} is out of range for rank {len(s)}")
        if s is not None and len(scale) > 1 and len(s) and isinstance(s[axis], Integral) and s[axis] != len(scale):
            raise ValidationError(f"{where}: {len(scale)} scales for axis {axis} of size {s[axis]}")
    elif len(scale) > 1:
        raise ValidationError(f"{where}: {len(scale)} scales need an axis")


def _check_qdq(node: Node, graph: Graph) -> None:
    scale = const(graph, node.inputs[1])
    zname = node.inputs[2] if len(node.inputs) > 2 else ""
    zp = const(graph, zname) if zname else None
    if scale is not None:
        s = np.asarray(scale, np.float64).reshape(-1)
        if not s.size or not np.all(np.isfinite(s.astype(np.float32))) or not np.all(s > 0):
            fail(node, "input 1 (scale)", "scales must be positive and finite")
        if s.size > 1:
            check_axis(node, "attribute 'axis'", node.attrs.get("axis", 1), rank(graph, node.inputs[0]))
    if zp is not None and scale is not None and np.asarray(zp).size not in (1, np.asarray(scale).size):
        fail(node, "input 2 (zero_point)", f"{np.asarray(zp).size} zero points for {np.asarray(scale).size} scales")
    q_name = node.outputs[0] if node.op == "QuantizeLinear" else node.inputs[0]
    qt = graph.tensors.get(q_name)
    if qt is None:
        return
    if zp is not None:
        z = np.asarray(zp).reshape(-1)
        lo, hi = ZP_RANGE.get(qt.dtype, (-2 ** 63, 2 ** 63 - 1))
        if z.dtype.kind not in "iu" or (z.size and (int(z.min()) < lo or int(z.max()) > hi)):
            fail(node, "input 2 (zero_point)", f"zero points must be {qt.dtype} values in [{lo}, {hi}]")
    q = qt.quant
    if not isinstance(q, dict) or "scale" not in q or scale is None:
        return
    # the CPU kernel reads the inputs, an exported TFLite model the tensor's parameters: they must agree
    qs = np.float32(np.asarray(q["scale"], np.float64).reshape(-1))
    s32 = np.float32(np.asarray(scale, np.float64).reshape(-1))
    if qs.size != s32.size and min(qs.size, s32.size) > 1 or not np.all(qs == s32):
        fail(node, "input 1 (scale)", f"{s32[:4].tolist()} disagrees with tensor {q_name!r}'s quant scale "
             f"{qs[:4].tolist()}")
    qz = np.asarray(q.get("zero_point", [0]), np.int64).reshape(-1)
    z = np.zeros(1, np.int64) if zp is None else np.asarray(zp).astype(np.int64).reshape(-1)
    if not np.all(qz == z):
        fail(node, "input 2 (zero_point)", f"{z[:4].tolist()} disagrees with tensor {q_name!r}'s quant "
             f"zero point {qz[:4].tolist()}")


def _check_integer_zero_points(node: Node, graph: Graph) -> None:
    """ConvInteger / MatMulInteger: int8/uint8 operands, zero points of their operand's dtype,
    one value or one per row of A / column of B / output channel of W (ConvInteger's input
    zero point: one value)."""
    conv = node.op == "ConvInteger"
    for k in (2, 3):
        xt = graph.tensors.get(node.inputs[k - 2])
        known_dtype = xt is not None and (xt.is_const or xt.name in graph.inputs)   # else not inferred yet
        if known_dtype and xt.dtype not in ("int8", "uint8"):
            fail(node, f"input {k - 2}", f"{xt.dtype} (int8 or uint8)")
        zname = node.inputs[k] if len(node.inputs) > k else ""
        if not zname:
            continue
        zt = graph.tensors.get(zname)
        if known_dtype and zt is not None and zt.is_const and zt.dtype != xt.dtype:
            fail(node, f"input {k} (zero point)", f"{zt.dtype} for a {xt.dtype} operand")
        zs = shape(graph, zname)
        if zs is None:
            continue
        if len(zs) > 1:
            fail(node, f"input {k} (zero point)", "a scalar or a 1-D tensor")
        n = int(np.prod(zs)) if all(isinstance(d, int) for d in zs) else None
        xs = shape(graph, node.inputs[k - 2])
        if n is None or n == 1 or xs is None or not xs:
            continue
        if conv and k == 2:
            fail(node, "input 2 (x zero point)", f"{n} values; ConvInteger's input zero point is one value")
        dim = xs[0] if conv else (xs[-2] if k == 2 and len(xs) >= 2 else xs[-1])
        if isinstance(dim, int) and n != dim:
            fail(node, f"input {k} (zero point)", f"{n} values for a dimension of {dim}")


SCHEMAS = {
    "DynamicQuantizeLinear": op((1, 1), (3, 3)),
    "MatMulInteger": op((2, 4), check=_check_integer_zero_points),
    "QuantizeLinear": op((2, 3), check=_check_qdq, axis=INT(), saturate=BOOL, block_size=INT(0)),
    "DequantizeLinear": op((2, 3), check=_check_qdq, axis=INT(), block_size=INT(0)),
}


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

_ONNX_INT = {2: "uint8", 3: "int8", 6: "int32"}


@rule("QuantizeLinear")
def _quantize_linear(node, ins):
    x = ins[0]
    zp = ins[2] if len(ins) > 2 else None
    dtype = zp.dtype if zp is not None else _ONNX_INT.get(int(node.attrs.get("output_dtype", 0) or 0), "uint8")
    return [(dtype, x.shape)]


@rule("DequantizeLinear")
def _dequantize_linear(node, ins):
    scale = ins[1]
    return [(scale.dtype if scale is not None else "float32", ins[0].shape)]


@rule("DynamicQuantizeLinear")
def _dynamic_quantize_linear(node, ins):
    return [("uint8", ins[0].shape), ("float32", ()), ("uint8", ())]


@rule("MatMulInteger")
def _matmul_integer(node, ins):
    (_, shape), = SHAPE_RULES["MatMul"](node, ins[:2])
    return [("int32", shape)]
