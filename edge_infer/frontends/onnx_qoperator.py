"""ONNX QOperator ops (onnxruntime's ``QuantFormat.QOperator``) as their QDQ form.

Each quantized operator becomes DequantizeLinear on its quantized inputs, the float op, and
QuantizeLinear on its output, with the node's own scales and zero points:

    QLinearConv(x, s_x, zp_x, w, s_w, zp_w, s_y, zp_y, B)
      -> DQ(x) ; DQ(w, axis 0) ; DQ(B int32 at s_x * s_w) -> Conv -> Q(s_y, zp_y)

so ``quantize/import_qdq.py`` turns them into int8 ops exactly as it does a QDQ model, and a
graph that is never converted (``load_onnx`` + ``Runtime``) still computes what the file
means. Covered: QLinearConv, QLinearMatMul (default domain); QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearGlobalAveragePool,
QLinearAveragePool, QLinearConcat, QGemm, QuantizeLinear, DequantizeLinear (com.microsoft,
what onnxruntime's quantizer writes). ConvInteger, MatMulInteger and DynamicQuantizeLinear
(dynamic quantization) have kernels of their own (backends/cpu/kernels/integer.py).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ..errors import ConversionError


def _dq(c, x: str, s: str, zp: str, axis: Optional[int] = None, tag: str = "dq") -> str:
    out = c.new_name(f"{x}_{tag}" if x else f"{c.node_name}_{tag}")
    c.emit("DequantizeLinear", [x, s] + ([zp] if zp else []), [out], {} if axis is None else {"axis": axis})
    return out


def _q(c, x: str, s: str, zp: str, y: str) -> None:
    c.emit("QuantizeLinear", [x, s] + ([zp] if zp else []), [y], {})


def _tmp(c, tag: str) -> str:
    return c.new_name(f"{c.node_name}_{tag}")


def _arg(ins: List[str], i: int) -> str:
    return ins[i] if len(ins) > i else ""


def _bias_scale(c, s_x: str, s_w: str) -> str:
    """s_x * s_w in float32 (a constant when both are; else a Mul the runtime folds)."""
    a, b = c.const(s_x), c.const(s_w)
    if a is not None and b is not None:
        return c.add_const("bias_scale", (np.asarray(a, np.float32) * np.asarray(b, np.float32)).astype(np.float32))
    out = _tmp(c, "bias_scale")
    c.emit("Mul", [s_x, s_w], [out], {})
    return out


def _per_axis(c, s: str) -> bool:
    v = c.const(s)
    if v is not None:
        return np.asarray(v).size > 1
    shape = c.static_shape(s)
    return shape is not None and int(np.prod(shape)) > 1


def _qlinear_conv(c, node, attrs, given, schema) -> None:
    ins = list(node.input)
    x, s_x, z_x, w, s_w, z_w, s_y, z_y = (_arg(ins, i) for i in range(8))
    bias = _arg(ins, 8)
    xf = _dq(c, x, s_x, z_x)
    wf = _dq(c, w, s_w, z_w, 0 if _per_axis(c, s_w) else None)
    conv_ins = [xf, wf]
    if bias:
        zero = c.add_const("bias_zero_point", np.zeros(np.asarray(c.const(s_w)).shape if c.const(s_w) is not None
                                                        else (), np.int32))
        conv_ins.append(_dq(c, bias, _bias_scale(c, s_x, s_w), zero, 0 if _per_axis(c, s_w) else None))
    a = dict(given)
    wv = c.const(w)
    wshape = tuple(wv.shape) if wv is not None else c.static_shape(w)
    if "kernel_shape" not in a and wshape is not None:
        a["kernel_shape"] = [int(d) for d in wshape[2:]]
    n = len(a["kernel_shape"]) if "kernel_shape" in a else None
    if n is not None:
        a.setdefault("strides", [1] * n)
        a.setdefault("dilations", [1] * n)
        a.setdefault("pads", [0] * (2 * n))
    yf = _tmp(c, "conv")
    c.emit("Conv", conv_ins, [yf], a)
    _q(c, yf, s_y, z_y, node.output[0])


def _qlinear_matmul(c, node, attrs, given, schema) -> None:
    a, s_a, z_a, b, s_b, z_b, s_y, z_y = (_arg(list(node.input), i) for i in range(8))
    af = _dq(c, a, s_a, z_a)
    bf = _dq(c, b, s_b, z_b, -1 if _per_axis(c, s_b) else None)
    yf = _tmp(c, "matmul")
    c.emit("MatMul", [af, bf], [yf], {})
    _q(c, yf, s_y, z_y, node.output[0])


def _qgemm(c, node, attrs, given, schema) -> None:
    ins = list(node.input)
    a, s_a, z_a, b, s_b, z_b, bias, s_y, z_y = (_arg(ins, i) for i in range(9))
    trans_b = int(given.get("transB", 0))
    af = _dq(c, a, s_a, z_a)
    bf = _dq(c, b, s_b, z_b, (0 if trans_b else 1) if _per_axis(c, s_b) else None)
    gins = [af, bf]
    if bias:
        zero = c.add_const("bias_zero_point", np.zeros(np.asarray(c.const(s_b)).shape if c.const(s_b) is not None
                                                        else (), np.int32))
        gins.append(_dq(c, bias, _bias_scale(c, s_a, s_b), zero, 0 if _per_axis(c, s_b) else None))
    g = {"alpha": float(given.get("alpha", 1.0)), "transA": int(given.get("transA", 0)), "transB": trans_b}
    if not s_y:                                   # QGemm without output parameters: float output
        c.emit("Gemm", gins, [node.output[0]], g)
        return
    yf = _tmp(c, "gemm")
    c.emit("Gemm", gins, [yf], g)
    _q(c, yf, s_y, z_y, node.output[0])


def _binary(op: str):
    def norm(c, node, attrs, given, schema) -> None:
        a, s_a, z_a, b, s_b, z_b, s_y, z_y = (_arg(list(node.input), i) for i in range(8))
        yf = _tmp(c, op.lower())
        c.emit(op, [_dq(c, a, s_a, z_a), _dq(c, b, s_b, z_b)], [yf], {})
        _q(c, yf, s_y, z_y, node.output[0])
    return norm


def _unary(op: str, keep=()):
    def norm(c, node, attrs, given, schema) -> None:
        x, s_x, z_x, s_y, z_y = (_arg(list(node.input), i) for i in range(5))
        a = {k: given[k] for k in keep if k in given}
        if op == "AveragePool" and "kernel_shape" in a:
            n = len(a["kernel_shape"])
            a.setdefault("strides", [1] * n)
            a.setdefault("pads", [0] * (2 * n))
            a.setdefault("dilations", [1] * n)
        if op == "Softmax":
            if int(given.get("opset", 13)) < 13 and int(a.get("axis", -1)) not in (-1,):
                rank = c.rank(x)
                if rank is None or int(a["axis"]) % rank != rank - 1:
                    raise ConversionError(f"node {c.node_name!r} (QLinearSoftmax): opset < 13 semantics "
                                          "over a non-last axis are not supported")
            a = {"axis": int(a.get("axis", -1))}
        xf = _dq(c, x, s_x, z_x)
        yf = _tmp(c, op.lower())
        if op in ("GlobalAveragePool", "AveragePool") and int(given.get("channels_last", 0)):
            rank = c.rank(x)
            if rank is None:
                raise ConversionError(f"node {c.node_name!r} ({node.op}): channels_last needs a known rank")
            first = _tmp(c, "nchw")
            c.emit("Transpose", [xf], [first], {"perm": [0, rank - 1] + list(range(1, rank - 1))})
            mid = _tmp(c, "pool")
            c.emit(op, [first], [mid], a)
            c.emit("Transpose", [mid], [yf], {"perm": [0] + list(range(2, rank)) + [1]})
        else:
            c.emit(op, [xf], [yf], a)
        _q(c, yf, s_y, z_y, node.output[0])
    return norm


def _qlinear_concat(c, node, attrs, given, schema) -> None:
    ins = list(node.input)
    s_y, z_y = _arg(ins, 0), _arg(ins, 1)
    rest = ins[2:]
    if len(rest) % 3 or not rest:
        raise ConversionError(f"node {c.node_name!r} (QLinearConcat): inputs come in (X, scale, zero point) triples")
    fl = [_dq(c, rest[k], rest[k + 1], rest[k + 2]) for k in range(0, len(rest), 3)]
    yf = _tmp(c, "concat")
    c.emit("Concat", fl, [yf], {"axis": int(given.get("axis", 0))})
    _q(c, yf, s_y, z_y, node.output[0])


def _ms_qdq(op: str):
    def norm(c, node, attrs, given, schema) -> None:
        c.emit(op, list(node.input), list(node.output), {"axis": int(given.get("axis", 1))})
    return norm


#: default-domain QOperator ops
NORMALIZERS: Dict[str, object] = {"QLinearConv": _qlinear_conv, "QLinearMatMul": _qlinear_matmul}

_POOL_KEEP = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
#: com.microsoft ops onnxruntime's quantizer writes
MS_NORMALIZERS: Dict[str, object] = {
    "QLinearAdd": _binary("Add"), "QLinearMul": _binary("Mul"),
    "QLinearSigmoid": _unary("Sigmoid"), "QLinearLeakyRelu": _unary("LeakyRelu", ("alpha",)),
    "QLinearSoftmax": _unary("Softmax", ("axis",)),
    "QLinearGlobalAveragePool": _unary("GlobalAveragePool"),
    "QLinearAveragePool": _unary("AveragePool", _POOL_KEEP),
    "QLinearConcat": _qlinear_concat, "QGemm": _qgemm,
    "QuantizeLinear": _ms_qdq("QuantizeLinear"), "DequantizeLinear": _ms_qdq("DequantizeLinear"),
}
