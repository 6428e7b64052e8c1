"""Reductions and ArgMax/ArgMin: axes in range."""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .schema import BOOL, INT, INTS, check_axis, fail, int_values, op, rank

REDUCE = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
          "ReduceProd", "ReduceSum", "ReduceSumSquare")


def _check_axes(node: Node, graph: Graph) -> None:
    axes = int_values(node, graph, 1) if len(node.inputs) > 1 else node.attrs.get("axes")
    r = rank(graph, node.inputs[0])
    for a in axes or ():
        check_axis(node, "axes", a, r)
    if axes and r is not None and len({a % r for a in axes}) != len(axes):
        fail(node, "axes", f"{list(axes)} repeats an axis")


def _check_arg(node: Node, graph: Graph) -> None:
    check_axis(node, "attribute 'axis'", node.attrs.get("axis", 0), rank(graph, node.inputs[0]))


SCHEMAS = {name: op((1, 2), check=_check_axes, axes=INTS(), keepdims=BOOL, noop_with_empty_axes=BOOL)
           for name in REDUCE}
SCHEMAS.update({name: op(check=_check_arg, axis=INT(), keepdims=BOOL, select_last_index=BOOL)
                for name in ("ArgMax", "ArgMin")})
