"""Shape rules for the ops the optimizer introduces: the fused ops with an epilogue
(FusedConv, FusedGemm, FusedMatMul; see passes/fuse_conv_activation.py) and SiLU.

A fused op has the shape of its base op; the residual Z of a FusedConv and the bias
of a FusedMatMul must broadcast onto that shape without growing it.
"""
from __future__ import annotations

from typing import List, Optional

from ..errors import ShapeError
from .graph import Node, Tensor
from .shape_inference import SHAPE_RULES, broadcast_shapes, rule

EPILOGUE_ATTRS = ("activation", "activation_params")


def base_node(node: Node, op: str, n_inputs: int) -> Node:
    """``node`` as its base op: the first ``n_inputs`` inputs, epilogue attributes dropped."""
    attrs = {k: v for k, v in node.attrs.items() if k not in EPILOGUE_ATTRS}
    return Node(op, list(node.inputs[:n_inputs]), list(node.outputs[:1]), attrs, node.name)


def _check_onto(out, extra: Optional[Tensor], what: str) -> None:
    if extra is None or extra.shape is None or out is None:
        return
    if len(extra.shape) > len(out) or tuple(broadcast_shapes(out, extra.shape)) != tuple(out):
        raise ShapeError(f"{what} {tuple(extra.shape)} does not broadcast onto the output {tuple(out)}")


@rule("FusedConv")
def _fused_conv(node: Node, ins: List[Optional[Tensor]]):
    res = SHAPE_RULES["Conv"](base_node(node, "Conv", 3), list(ins[:3]))
    _check_onto(res[0][1], ins[3] if len(ins) > 3 else None, "residual Z")
    return res


@rule("FusedGemm")
def _fused_gemm(node: Node, ins):
    return SHAPE_RULES["Gemm"](base_node(node, "Gemm", 3), list(ins[:3]))


@rule("FusedMatMul")
def _fused_matmul(node: Node, ins):
    res = SHAPE_RULES["MatMul"](base_node(node, "MatMul", 2), list(ins[:2]))
    _check_onto(res[0][1], ins[2] if len(ins) > 2 else None, "bias")
    return res


@rule("SiLU")
def _silu(node: Node, ins):
    return [(ins[0].dtype, ins[0].shape)]
