"""Data-dependent and index ops: NonZero, NonMaxSuppression, Compress, Unique, GatherND,
ScatterND, ScatterElements, OneHot, CenterCropPad.

Indices that arrive at run time are checked by the kernels (an out-of-range index is an
``InputError`` naming the node); constant ones are checked here, at load.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Graph, Node
from .reduce import REDUCE_OPS
from .schema import BOOL, INT, INTS, STR, check_axis, const, fail, op, rank, shape
from .shapes import axis_index, fresh, is_int, mul_dims, rule

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


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

#: ops whose output size depends on the values of their data
DATA_DEPENDENT_OPS = frozenset({"NonZero", "NonMaxSuppression", "Compress", "Unique"})


#: op -> indices of the inputs whose values decide the output shape or what the CPU kernel
#: prepares; when one is not a constant the plan is made per value of it
PLAN_VALUE_INPUTS: Dict[str, Tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Pad": (1, 3), "Slice": (1, 2, 3, 4),
    "Resize": (1, 2, 3), "Upsample": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "TopK": (1,), "OneHot": (1,),
    "CumSum": (1,), "CenterCropPad": (1,), "MaxUnpool": (2,), "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2),
    **{op: (1,) for op in REDUCE_OPS},
}


def value_inputs(node, graph: Graph) -> Tuple[str, ...]:
    """The inputs of ``node`` whose values its plan needs and that are not constants."""
    out = []
    for k in PLAN_VALUE_INPUTS.get(node.op, ()):
        if k < len(node.inputs) and node.inputs[k] and not graph.tensors[node.inputs[k]].is_const:
            out.append(node.inputs[k])
    return tuple(out)


def data_dependent_tensors(graph: Graph) -> Dict[str, str]:
    """{tensor: why} for the tensors of a specialized graph whose shape is decided at run time
    (for ``backend_report`` and ``inspect``)."""
    out: Dict[str, str] = {}
    for n in graph.nodes:
        if n.op in DATA_DEPENDENT_OPS and not all(graph.tensors[o].is_static for o in n.outputs if o):
            for o in n.outputs:
                if o:
                    out[o] = f"data-dependent size ({n.op} {n.name!r})"
            continue
        vals = value_inputs(n, graph)
        for v in vals:
            out.setdefault(v, f"value decides a shape ({n.op} {n.name!r}); plans are made per value")
        for o in n.outputs:
            if o and o not in out and not graph.tensors[o].is_static:
                out[o] = "shape known at run time"
    return out


@rule("NonZero")
def _nonzero(node, ins):
    x = ins[0]
    r = None if x.shape is None else max(len(x.shape), 1)
    if x.is_const:
        return [("int64", (r, int(np.count_nonzero(x.data))))]
    return [("int64", None if r is None else (r, fresh(node, 1)))]


@rule("NonMaxSuppression")
def _nms(node, ins):
    return [("int64", (fresh(node, 0), 3))]


@rule("Compress")
def _compress(node, ins):
    x, cond = ins
    axis = node.attrs.get("axis")
    n = int(np.count_nonzero(cond.data)) if cond.is_const else fresh(node, 0)
    if axis is None:
        return [(x.dtype, (n,))]
    if x.shape is None:
        return [(x.dtype, None)]
    a = axis_index(axis, len(x.shape))
    return [(x.dtype, tuple(x.shape[:a]) + (n,) + tuple(x.shape[a + 1:]))]


@rule("GatherND")
def _gather_nd(node, ins):
    x, idx = ins
    if x.shape is None or idx.shape is None:
        return [(x.dtype, None)]
    b = int(node.attrs.get("batch_dims", 0))
    k = idx.shape[-1]
    if not is_int(k):
        return [(x.dtype, None)]
    if b + k > len(x.shape):
        raise ShapeError(f"index tuples of {k} into rank {len(x.shape)} after {b} batch dims")
    return [(x.dtype, tuple(idx.shape[:-1]) + tuple(x.shape[b + k:]))]


@rule("ScatterND", "ScatterElements")
def _scatter(node, ins):
    return [(ins[0].dtype, ins[0].shape)]


@rule("OneHot")
def _onehot(node, ins):
    idx, depth, values = ins
    if idx.shape is None:
        return [(values.dtype, None)]
    r = len(idx.shape) + 1
    a = axis_index(node.attrs.get("axis", -1), r)
    d = fresh(node, a)
    if depth.is_const:
        d = int(np.asarray(depth.data).reshape(-1)[0])
        if d < 1:
            raise ShapeError(f"depth {d} must be positive")
    return [(values.dtype, tuple(idx.shape[:a]) + (d,) + tuple(idx.shape[a:]))]


@rule("Unique")
def _unique(node, ins):
    x = ins[0]
    axis = node.attrs.get("axis")
    u = fresh(node, 0)                      # the number of unique elements (or slices)
    if x.shape is None:
        return [(x.dtype, None)] + [("int64", None)] * 3
    if axis is None:
        n_in = mul_dims(x.shape)
        y = (u,)
    else:
        a = axis_index(axis, len(x.shape))
        n_in = x.shape[a]
        y = tuple(x.shape[:a]) + (u,) + tuple(x.shape[a + 1:])
    return [(x.dtype, y), ("int64", (u,)), ("int64", (n_in,)), ("int64", (u,))]


@rule("CenterCropPad")
def _center_crop_pad(node, ins):
    x, s = ins
    if x.shape is None:
        return [(x.dtype, None)]
    r = len(x.shape)
    axes = [axis_index(a, r) for a in (node.attrs.get("axes") or range(r))]
    sizes = None if not s.is_const else [int(v) for v in np.asarray(s.data).reshape(-1)]
    if sizes is not None and len(sizes) != len(axes):
        raise ShapeError(f"shape has {len(sizes)} values for {len(axes)} axes")
    out = list(x.shape)
    for k, a in enumerate(axes):
        out[a] = fresh(node, a) if sizes is None else sizes[k]
    return [(x.dtype, tuple(out))]
