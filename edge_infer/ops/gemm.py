"""Gemm, MatMul and their fused forms: schemas and inner-dimension checks."""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .schema import BOOL, FLOAT, FLOATS, STR, fail, known, op, shape


def _check_gemm(node: Node, graph: Graph) -> None:
    a, b = shape(graph, node.inputs[0]), shape(graph, node.inputs[1])
    for k, s in ((0, a), (1, b)):
        if s is not None and len(s) != 2:
            fail(node, f"input {k}", f"Gemm takes 2-D operands, got shape {list(s)}")
    if a is None or b is None:
        return
    ka = a[0] if node.attrs.get("transA") else a[1]
    kb = b[1] if node.attrs.get("transB") else b[0]
    if known(ka) and known(kb) and ka != kb:
        fail(node, "attributes 'transA'/'transB'", f"inner dims {ka} and {kb} differ")


def _check_matmul(node: Node, graph: Graph) -> None:
    a, b = shape(graph, node.inputs[0]), shape(graph, node.inputs[1])
    if a is None or b is None or not a or not b:
        return
    ka, kb = a[-1], (b[-2] if len(b) > 1 else b[0])
    if known(ka) and known(kb) and ka != kb:
        fail(node, "input 1", f"inner dims {ka} and {kb} differ")


_FUSED = dict(activation=STR(), activation_params=FLOATS())
_GEMM = dict(alpha=FLOAT(), beta=FLOAT(), transA=BOOL, transB=BOOL)

SCHEMAS = {
    "Gemm": op((2, 3), check=_check_gemm, **_GEMM),
    "FusedGemm": op((2, 3), check=_check_gemm, **_GEMM, **_FUSED),
    "MatMul": op((2, 2), check=_check_matmul),
    "FusedMatMul": op((2, 3), check=_check_matmul, **_FUSED),
}
