"""Shape rules of data-dependent and index ops, and what the planner must know about values.

Two kinds of shapes are not known from the input shapes alone:

* **data-dependent** (``DATA_DEPENDENT_OPS``): the output size depends on every value of
  the data (NonZero, NonMaxSuppression, Compress). The rule gives the rank and a fresh
  symbol for the size; the runtime learns it only by running the node.
* **value-dependent** (``PLAN_VALUE_INPUTS``): the output shape, or what the kernel prepares,
  depends on the values of a few small inputs (Reshape's target, Pad's pads, Range's bounds,
  TopK's k, OneHot's depth, axes given as inputs). When those values arrive at run time
  instead of as constants, the runtime freezes them into the plan and keys the plan on them
  (``backends/cpu/staged.py``).
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from ..errors import ShapeError
from .graph import Graph
from .shape_inference import rule
from .shape_rules_tensor import REDUCE_OPS, _axis, fresh, is_int, mul_dims

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
    a = _axis(axis, len(x.shape))
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
    a = _axis(node.attrs.get("axis", -1), r)
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
        a = _axis(axis, len(x.shape))
        n_in = x.shape[a]
        y = tuple(x.shape[:a]) + (u,) + tuple(x.shape[a + 1:])
    return [(x.dtype, y), ("int64", (u,)), ("int64", (n_in,)), ("int64", (u,))]


@rule("CenterCropPad")
def _center_crop_pad(node, ins):
    x, s = ins
    if x.shape is None:
        return [(x.dtype, None)]
    r = len(x.shape)
    axes = [_axis(a, r) for a in (node.attrs.get("axes") or range(r))]
    sizes = None if not s.is_const else [int(v) for v in np.asarray(s.data).reshape(-1)]
    if sizes is not None and len(sizes) != len(axes):
        raise ShapeError(f"shape has {len(sizes)} values for {len(axes)} axes")
    out = list(x.shape)
    for k, a in enumerate(axes):
        out[a] = fresh(node, a) if sizes is None else sizes[k]
    return [(x.dtype, tuple(out))]
