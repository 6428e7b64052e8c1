"""Gemm, MatMul and their fused forms: schemas and inner-dimension checks."""
from __future__ import annotations

from typing import Sequence, Tuple

from ..errors import ShapeError
from ..ir.graph import Graph, Node
from .cost import flops, numel, shape_of
from .int8 import int8_limit
from .schema import BOOL, FLOAT, FLOATS, STR, fail, known, op, shape
from .shapes import SHAPE_RULES, base_node, broadcast_shapes, check_onto, is_int, rule


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


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

@rule("Gemm")
def _gemm(node: Node, ins):
    a, b = ins[0], ins[1]
    if a.shape is None or b.shape is None:
        return [(a.dtype, None)]
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    m, ka = (a.shape[1], a.shape[0]) if node.attrs.get("transA", 0) else a.shape
    kb, n = (b.shape[1], b.shape[0]) if node.attrs.get("transB", 0) else b.shape
    if is_int(ka) and is_int(kb) and ka != kb:
        raise ShapeError(f"Gemm inner dims differ: A {a.shape} transA={node.attrs.get('transA', 0)}, "
                         f"B {b.shape} transB={node.attrs.get('transB', 0)}")
    c = ins[2] if len(ins) > 2 else None
    if c is not None and c.shape is not None:
        try:
            full = broadcast_shapes((m, n), c.shape)
        except ShapeError:
            raise ShapeError(f"Gemm: C {c.shape} does not broadcast to ({m}, {n})") from None
        if len(c.shape) > 2 or any(is_int(f) and is_int(o) and f != o for f, o in zip(full, (m, n))):
            raise ShapeError(f"Gemm: C {c.shape} does not broadcast to ({m}, {n})")
    return [(a.dtype, (m, n))]


def matmul_shape(a: Sequence, b: Sequence) -> Tuple:
    """numpy.matmul output shape for shapes that may hold symbolic dims."""
    if len(a) == 0 or len(b) == 0:
        raise ShapeError("MatMul inputs must have rank >= 1")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    ka, kb = a2[-1], b2[-2]
    if is_int(ka) and is_int(kb) and ka != kb:
        raise ShapeError(f"MatMul inner dims differ: {tuple(a)} @ {tuple(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2]) if (len(a2) > 2 or len(b2) > 2) else ()
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return tuple(out)


@rule("MatMul")
def _matmul(node: Node, ins):
    a, b = ins
    if a.shape is None or b.shape is None:
        return [(a.dtype, None)]
    return [(a.dtype, matmul_shape(a.shape, b.shape))]


@rule("FusedGemm")
def _fused_gemm(node: Node, ins):
    return SHAPE_RULES["Gemm"](base_node(node, "Gemm", 3), list(ins[:3]))


@rule("FusedMatMul")
def _fused_matmul(node: Node, ins):
    res = SHAPE_RULES["MatMul"](base_node(node, "MatMul", 2), list(ins[:2]))
    check_onto(res[0][1], ins[2] if len(ins) > 2 else None, "bias")
    return res


# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

@flops("Gemm")
def _gemm_flops(node: Node, graph: Graph) -> int:
    a = shape_of(graph, node.inputs[0])
    if a is None or len(a) != 2:
        return 0
    n_out = numel(graph, node.outputs[0])
    k = int(a[0] if node.attrs.get("transA", 0) else a[1])
    c = n_out if len(node.inputs) > 2 and node.inputs[2] else 0
    return 2 * n_out * k + c


@flops("MatMul")
def _matmul_flops(node: Node, graph: Graph) -> int:
    a = shape_of(graph, node.inputs[0])
    if a is None or len(a) == 0:
        return 0
    return 2 * numel(graph, node.outputs[0]) * int(a[-1])


# -- int8 (``ops/int8.py``: what the int8 kernel of these ops covers) ------------------------------

def gemm_n(node: Node, g: Graph) -> int:
    """N (output columns) of a Gemm."""
    b = g.tensors[node.inputs[1]]
    shape = b.data.shape if b.is_const else b.shape
    return int(shape[0] if node.attrs.get("transB", 0) else shape[1])


@int8_limit("Gemm", "FusedGemm")
def _gemm_int8(node: Node, g: Graph):
    T = g.tensors
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    b = T[node.inputs[1]]
    if c and (not T[c].is_const or T[c].data.size not in (1, gemm_n(node, g))):
        return "C is not a per-column constant"
    if b.is_const and b.data.ndim != 2:
        return "B is not 2-D"
    if not b.is_const and (float(node.attrs.get("alpha", 1.0)) != 1.0 or float(node.attrs.get("beta", 1.0)) != 1.0):
        return "alpha/beta with a computed B"
    return None


@int8_limit("MatMul", "FusedMatMul")
def _matmul_int8(node: Node, g: Graph):
    T = g.tensors
    a, b = T[node.inputs[0]], T[node.inputs[1]]
    if a.shape is None or len(a.shape) < 2 or b.shape is None or len(b.shape) < 2:
        return "operands of rank < 2"
    bias = node.inputs[2] if node.op == "FusedMatMul" and len(node.inputs) > 2 else ""
    if bias:
        bt = T[bias]
        n = b.shape[-1]
        if not bt.is_const or bt.data.size not in (1, n) or (bt.data.size == n and bt.data.shape[-1] != n):
            return "bias is not a per-column constant"
    return None
