"""Reductions and ArgMax/ArgMin: axes in range."""
from __future__ import annotations

from typing import Optional, Tuple

from ..ir.graph import Graph, Node
from .cost import flops, per_input
from .schema import BOOL, INT, INTS, check_axis, fail, int_values, op, rank
from .shapes import axes_input, axis_index, fresh_shape, is_int, rule

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


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

def reduce_one(node, x, axis: int, keepdims: bool):
    if x.shape is None:
        return None
    a = axis_index(axis, len(x.shape))
    if keepdims:
        return tuple(1 if i == a else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i != a)


@rule("ArgMax", "ArgMin")
def _argmax(node, ins):
    return [("int64", reduce_one(node, ins[0], node.attrs.get("axis", 0), node.attrs.get("keepdims", 1)))]


REDUCE_OPS = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


def reduce_axes(node, ins, rank: int) -> Optional[Tuple[int, ...]]:
    """The normalised axes a Reduce op reduces over (() for none: a copy), or None if unknown."""
    axes, known = axes_input(node, ins)
    if not known:
        return None
    if not axes:
        return () if node.attrs.get("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({axis_index(a, rank) for a in axes}))


@rule(*REDUCE_OPS)
def _reduce(node, ins):
    x = ins[0]
    keep = node.attrs.get("keepdims", 1)
    if x.shape is None:
        return [(x.dtype, None)]
    r = len(x.shape)
    axes = reduce_axes(node, ins, r)
    if axes is None:
        if keep:
            return [(x.dtype, fresh_shape(node, r))]
        t = ins[1]
        if t.shape and is_int(t.shape[0]):
            return [(x.dtype, fresh_shape(node, r - t.shape[0]))]
        return [(x.dtype, None)]
    if keep:
        return [(x.dtype, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))]
    return [(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

flops("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
      "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin")(per_input)
