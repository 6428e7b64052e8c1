"""Shape rules for the quantization boundary ops, QuantizeLinear and DequantizeLinear
(ONNX opset 21 forms: inputs x, scale, zero_point; attributes ``axis``, ``output_dtype``).

The other ops of an int8 graph keep their names (Conv with int8 tensors, as TFLite's CONV_2D),
and their rules already give the output the input's dtype.
"""
from __future__ import annotations

from .shape_inference import rule

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


# -- dynamic quantization (onnxruntime's quantize_dynamic) --------------------------------------

@rule("DynamicQuantizeLinear")
def _dynamic_quantize_linear(node, ins):
    return [("uint8", ins[0].shape), ("float32", ()), ("uint8", ())]


@rule("MatMulInteger")
def _matmul_integer(node, ins):
    from .shape_inference import SHAPE_RULES
    (_, shape), = SHAPE_RULES["MatMul"](node, ins[:2])
    return [("int32", shape)]


@rule("ConvInteger")
def _conv_integer(node, ins):
    from .shape_inference import SHAPE_RULES
    (_, shape), = SHAPE_RULES["Conv"](node, ins[:2])
    return [("int32", shape)]
