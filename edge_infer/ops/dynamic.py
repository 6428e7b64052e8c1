"""Data-dependent and index ops: NonZero, NonMaxSuppression, Compress, Unique, GatherND,
ScatterND, ScatterElements, OneHot, CenterCropPad.

Indices that arrive at run time are checked by the kernels (an out-of-range index is an
``InputError`` naming the node); constant ones are checked here, at load.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node
from .schema import BOOL, INT, INTS, STR, check_axis, const, fail, op, rank, shape

_REDUCTION = STR("none", "add", "mul", "max", "min")


def _check_gather_nd(node: Node, graph: Graph) -> None:
    b = int(node.attrs.get("batch_dims", 0))
    rd, ri = rank(graph, node.inputs[0]), rank(graph, node.inputs[1])
    if ri is not None and ri < 1:
        fail(node, "input 1 (indices)", "must have rank >= 1")
    if ri is not None and b >= ri or rd is not None and b >= rd:
        fail(node, "attribute 'batch_dims'", f"{b} must be below the ranks of data and indices")
    si = shape(graph, node.inputs[1])
    if rd is not None and si is not None and isinstance(si[-1], int) and b + si[-1] > rd:
        fail(node, "input 1 (indices)", f"tuples of {si[-1]} indices into a rank-{rd} input after "
             f"{b} batch dims")


def _check_scatter_nd(node: Node, graph: Graph) -> None:
    rd, si = rank(graph, node.inputs[0]), shape(graph, node.inputs[1])
    if si is not None and len(si) < 1:
        fail(node, "input 1 (indices)", "must have rank >= 1")
    if rd is not None and si is not None and isinstance(si[-1], int) and si[-1] > rd:
        fail(node, "input 1 (indices)", f"tuples of {si[-1]} indices into a rank-{rd} input")


def _check_scatter_elements(node: Node, graph: Graph) -> None:
    r = rank(graph, node.inputs[0])
    check_axis(node, "attribute 'axis'", node.attrs.get("axis", 0), r)
    ri, ru = rank(graph, node.inputs[1]), rank(graph, node.inputs[2])
    if None not in (r, ri, ru) and not r == ri == ru:
        fail(node, "inputs", f"data, indices and updates must share a rank (got {r}, {ri}, {ru})")


def _check_onehot(node: Node, graph: Graph) -> None:
    ri = rank(graph, node.inputs[0])
    check_axis(node, "attribute 'axis'", node.attrs.get("axis", -1), None if ri is None else ri + 1)
    depth = const(graph, node.inputs[1])
    if depth is not None:
        d = np.asarray(depth)
        if d.size != 1 or not np.isfinite(d).all() or d.reshape(-1)[0] < 1:
            fail(node, "input 1 (depth)", f"must be one positive number, got {d.reshape(-1)[:4].tolist()}")
    values = shape(graph, node.inputs[2])
    if values is not None and values not in ((2,),):
        fail(node, "input 2 (values)", f"must hold 2 values [off, on], got shape {list(values)}")


def _check_nms(node: Node, graph: Graph) -> None:
    b, s = shape(graph, node.inputs[0]), shape(graph, node.inputs[1])
    if b is not None and (len(b) != 3 or b[2] != 4):
        fail(node, "input 0 (boxes)", f"must be [batches, boxes, 4], got {list(b)}")
    if s is not None and len(s) != 3:
        fail(node, "input 1 (scores)", f"must be [batches, classes, boxes], got {list(s)}")
    for k in (2, 3, 4):
        v = const(graph, node.inputs[k]) if len(node.inputs) > k and node.inputs[k] else None
        if v is not None and np.asarray(v).size != 1:
            fail(node, f"input {k}", f"must hold one value, got shape {list(np.asarray(v).shape)}")


def _check_compress(node: Node, graph: Graph) -> None:
    r = rank(graph, node.inputs[0])
    if "axis" in node.attrs and node.attrs["axis"] is not None:
        check_axis(node, "attribute 'axis'", node.attrs["axis"], r)
    if rank(graph, node.inputs[1]) not in (None, 1):
        fail(node, "input 1 (condition)", "must be 1-D")


def _check_unique(node: Node, graph: Graph) -> None:
    axis = node.attrs.get("axis")
    if axis is not None:
        check_axis(node, "attribute 'axis'", axis, rank(graph, node.inputs[0]))


def _check_center_crop_pad(node: Node, graph: Graph) -> None:
    r = rank(graph, node.inputs[0])
    axes = node.attrs.get("axes") or []
    for a in axes:
        check_axis(node, "attribute 'axes'", a, r)
    if r is not None and len({a % r for a in axes}) != len(axes):
        fail(node, "attribute 'axes'", f"{list(axes)} repeats an axis")
    s = const(graph, node.inputs[1])
    if s is not None:
        v = np.asarray(s)
        if v.dtype.kind not in "iu" or np.any(v < 0):
            fail(node, "input 1 (shape)", "must be non-negative integers")
        if v.size != (len(axes) if axes else (r if r is not None else v.size)):
            fail(node, "input 1 (shape)", f"{v.size} sizes for {len(axes) if axes else r} axes")


SCHEMAS = {
    "NonZero": op(),
    "NonMaxSuppression": op((2, 5), check=_check_nms, center_point_box=BOOL),
    "Compress": op((2, 2), check=_check_compress, axis=INT()),
    "GatherND": op((2, 2), check=_check_gather_nd, batch_dims=INT(0, 1 << 10)),
    "ScatterND": op((3, 3), check=_check_scatter_nd, reduction=_REDUCTION),
    "ScatterElements": op((3, 3), check=_check_scatter_elements, axis=INT(), reduction=_REDUCTION),
    "OneHot": op((3, 3), check=_check_onehot, axis=INT()),
    "Unique": op((1, 1), (1, 4), check=_check_unique, axis=INT(), sorted=BOOL),
    "CenterCropPad": op((2, 2), check=_check_center_crop_pad, axes=INTS()),
}
