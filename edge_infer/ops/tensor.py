"""Shape and data-movement ops: Concat, Split, Slice, Gather, Reshape, Transpose, Pad, ..."""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .schema import (BOOL, INT, INTS, STR, UNBOUNDED, check_axis, const, fail, int_values, known, op,
                     rank, shape)


def _axis_of_input(default: int = 0, extra: int = 0):
    """A check that ``axis`` is in range of input 0's rank (+ ``extra``: Flatten allows r)."""
    def check(node: Node, graph: Graph) -> None:
        r = rank(graph, node.inputs[0])
        axis = node.attrs.get("axis", default)
        check_axis(node, "attribute 'axis'", axis, None if r is None else r + extra)
        if extra and r is not None and axis == -r - 1:
            fail(node, "attribute 'axis'", f"axis {axis} is out of range for rank {r}")
    return check


def _check_concat(node: Node, graph: Graph) -> None:
    if "axis" not in node.attrs:
        fail(node, "attribute 'axis'", "is required")
    _axis_of_input()(node, graph)


def _check_gather(node: Node, graph: Graph) -> None:
    _axis_of_input()(node, graph)
    xs, idx = shape(graph, node.inputs[0]), const(graph, node.inputs[1])
    if xs is None or idx is None or node.op != "Gather":
        return
    axis = int(node.attrs.get("axis", 0))
    n = xs[axis]
    vals = int_values(node, graph, 1)
    if known(n) and vals and not all(-n <= v < n for v in vals):
        fail(node, "input 1 (indices)", f"an index outside [-{n}, {n}) for axis {axis}")


def _check_transpose(node: Node, graph: Graph) -> None:
    perm, r = node.attrs.get("perm"), rank(graph, node.inputs[0])
    if perm is not None and (sorted(perm) != list(range(len(perm))) or (r is not None and len(perm) != r)):
        fail(node, "attribute 'perm'", f"{list(perm)} is not a permutation of {r if r is not None else len(perm)} axes")


def _check_axes_input(k: int, extra: int = 0):
    """Constant axes in input ``k`` (Squeeze, Unsqueeze) in range and distinct."""
    def check(node: Node, graph: Graph) -> None:
        axes = int_values(node, graph, k) if len(node.inputs) > k else node.attrs.get("axes")
        if not axes:
            return
        r = rank(graph, node.inputs[0])
        r = None if r is None else r + (len(axes) if extra else 0)
        for a in axes:
            check_axis(node, "axes", a, r)
        if r is not None and len({a % r for a in axes}) != len(axes):
            fail(node, "axes", f"{list(axes)} repeats an axis")
    return check


def _check_reshape(node: Node, graph: Graph) -> None:
    dims = int_values(node, graph, 1)
    if dims is None:
        return
    if any(d < -1 for d in dims) or dims.count(-1) > 1:
        fail(node, "input 1 (shape)", f"{dims}: dims must be >= 0, with at most one -1")


def _check_blocksize(node: Node, graph: Graph) -> None:
    if "blocksize" not in node.attrs:
        fail(node, "attribute 'blocksize'", "is required")


SCHEMAS = {
    "Concat": op((1, UNBOUNDED), check=_check_concat, axis=INT()),
    "Split": op((1, 2), (1, UNBOUNDED), check=_axis_of_input(), axis=INT(), split=INTS(0), num_outputs=INT(1)),
    "Slice": op((3, 5), check=_check_axes_input(3), starts=INTS(), ends=INTS(), axes=INTS()),
    "Gather": op((2, 2), check=_check_gather, axis=INT()),
    "GatherElements": op((2, 2), check=_check_gather, axis=INT()),
    "Reshape": op((2, 2), check=_check_reshape, allowzero=BOOL),
    "Flatten": op(check=_axis_of_input(1, extra=1), axis=INT()),
    "Squeeze": op((1, 2), check=_check_axes_input(1), axes=INTS()),
    "Unsqueeze": op((1, 2), check=_check_axes_input(1, extra=1), axes=INTS()),
    "Transpose": op(check=_check_transpose, perm=INTS(0)),
    "Expand": op((2, 2)),
    "Tile": op((2, 2)),
    "ConstantOfShape": op(),
    "Range": op((3, 3)),
    "Shape": op(start=INT(), end=INT()),
    "Size": op(),
    "Pad": op((1, 4), mode=STR("constant", "reflect", "edge", "wrap"), pads=INTS()),
    "DepthToSpace": op(check=_check_blocksize, blocksize=INT(1, 1 << 16), mode=STR("DCR", "CRD")),
    "SpaceToDepth": op(check=_check_blocksize, blocksize=INT(1, 1 << 16)),
    "CumSum": op((2, 2), exclusive=BOOL, reverse=BOOL),
    "TopK": op((2, 2), (2, 2), check=_axis_of_input(-1), axis=INT(), largest=BOOL, sorted=BOOL),
}
