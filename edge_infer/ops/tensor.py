"""Shape and data-movement ops: Concat, Split, Slice, Gather, Reshape, Transpose, Pad, ..."""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Graph, Node
from .cost import flops, free, per_input
from .int8 import int8_limit
from .schema import (BOOL, INT, INTS, STR, UNBOUNDED, check_axis, const, fail, int_values, known, op, rank,
                     shape)
from .shapes import (INT32_MAX, INT64_MAX, add_dims, axes_input, axis_index, broadcast_shapes, const_ints,
                     div_dims, dtype_name, fresh, fresh_shape, is_int, mul_dims, operand_dtype, rule)


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


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

@rule("Reshape")
def _reshape(node, ins):
    x, s = ins[0], ins[1]
    target = const_ints(s)
    if target is None:
        if s.shape is not None and len(s.shape) == 1 and is_int(s.shape[0]):
            return [(x.dtype, fresh_shape(node, s.shape[0]))]
        return [(x.dtype, None)]
    allowzero = node.attrs.get("allowzero", 0)
    if target.count(-1) > 1:
        raise ShapeError(f"shape {target} has more than one -1")
    out: List = []
    for i, v in enumerate(target):
        if v == 0 and not allowzero:
            if x.shape is None:
                out.append(fresh(node, i))
            elif i >= len(x.shape):
                raise ShapeError(f"shape {target}: 0 at position {i} but input has rank {len(x.shape)}")
            else:
                out.append(x.shape[i])
        elif v < -1:
            raise ShapeError(f"invalid shape value {v} in {target}")
        else:
            out.append(v)
    if -1 in target:
        k = target.index(-1)
        known = mul_dims([d for i, d in enumerate(out) if i != k])
        if known == 0:
            raise ShapeError(f"shape {target}: -1 is ambiguous next to a zero dim")
        total = mul_dims(x.shape) if x.shape is not None else None
        dim = div_dims(total, known) if total is not None else None
        if dim is None and total is not None and is_int(total) and is_int(known):
            raise ShapeError(f"cannot reshape {x.shape} ({total} elements) to {target}")
        out[k] = dim if dim is not None else fresh(node, k)
    if x.shape is not None and all(is_int(d) for d in x.shape) and all(is_int(d) for d in out):
        if mul_dims(x.shape) != mul_dims(out):
            raise ShapeError(f"cannot reshape {tuple(x.shape)} to {tuple(out)}")
    return [(x.dtype, tuple(out))]


@rule("Flatten")
def _flatten(node, ins):
    x = ins[0]
    if x.shape is None:
        return [(x.dtype, fresh_shape(node, 2))]
    r = len(x.shape)
    a = node.attrs.get("axis", 1)
    if not -r <= a <= r:
        raise ShapeError(f"axis {a} out of range for rank {r}")
    a = a + r if a < 0 else a
    return [(x.dtype, (mul_dims(x.shape[:a]), mul_dims(x.shape[a:])))]


def transpose_perm(node, rank: int) -> List[int]:
    perm = node.attrs.get("perm") or list(range(rank))[::-1]
    if sorted(axis_index(p, rank, "perm axis") for p in perm) != list(range(rank)):
        raise ShapeError(f"perm {perm} is not a permutation of rank {rank}")
    return [axis_index(p, rank) for p in perm]


@rule("Transpose")
def _transpose(node, ins):
    x = ins[0]
    if x.shape is None:
        perm = node.attrs.get("perm")
        return [(x.dtype, fresh_shape(node, len(perm)) if perm else None)]
    return [(x.dtype, tuple(x.shape[p] for p in transpose_perm(node, len(x.shape))))]




@rule("Squeeze")
def _squeeze(node, ins):
    x = ins[0]
    axes, known = axes_input(node, ins)
    if x.shape is None:
        return [(x.dtype, None)]
    r = len(x.shape)
    if not known:
        n = ins[1].shape[0] if ins[1].shape and is_int(ins[1].shape[0]) else None
        return [(x.dtype, fresh_shape(node, r - n) if n is not None else None)]
    if not axes:
        if any(not is_int(d) for d in x.shape):
            return [(x.dtype, None)]    # which symbolic dims are 1 is unknown
        return [(x.dtype, tuple(d for d in x.shape if d != 1))]
    axes = {axis_index(a, r) for a in axes}
    for a in axes:
        if is_int(x.shape[a]) and x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {x.shape[a]}")
    return [(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


@rule("Unsqueeze")
def _unsqueeze(node, ins):
    x = ins[0]
    axes, known = axes_input(node, ins)
    if x.shape is None:
        return [(x.dtype, None)]
    if not known:
        n = ins[1].shape[0] if ins[1].shape and is_int(ins[1].shape[0]) else None
        return [(x.dtype, fresh_shape(node, len(x.shape) + n) if n is not None else None)]
    r = len(x.shape) + len(axes)
    axes = [axis_index(a, r) for a in axes]
    if len(axes) != len(set(axes)):
        raise ShapeError(f"repeated axes {axes}")
    dims = iter(x.shape)
    return [(x.dtype, tuple(1 if i in axes else next(dims) for i in range(r)))]


@rule("Concat")
def _concat(node, ins):
    live = [t for t in ins if t is not None]
    dtype = operand_dtype(live)
    if any(t.shape is None for t in live):
        return [(dtype, None)]
    r = len(live[0].shape)
    if any(len(t.shape) != r for t in live):
        raise ShapeError(f"inputs of different ranks: {[t.shape for t in live]}")
    a = axis_index(node.attrs.get("axis", 0), r)
    out = []
    for k in range(r):
        dims = [t.shape[k] for t in live]
        if k == a:
            out.append(add_dims(dims))
            continue
        ints = {d for d in dims if is_int(d)}
        if len(ints) > 1:
            raise ShapeError(f"dim {k} differs between inputs: {[t.shape for t in live]}")
        out.append(ints.pop() if ints else dims[0])
    return [(dtype, tuple(out))]


def split_sizes(dim: int, n: int, split: Optional[List[int]], num_outputs: Optional[int]) -> List[int]:
    """Sizes of Split's outputs along the axis (ONNX 18: the last chunk may be smaller)."""
    if split is not None:
        if len(split) != n or sum(split) != dim:
            raise ShapeError(f"split {split} does not cut {dim} into {n} outputs")
        return split
    chunk = -(-dim // n)
    if num_outputs is None and dim % n:
        raise ShapeError(f"dim {dim} does not split evenly into {n} outputs")
    sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    if sizes[-1] < 0:
        raise ShapeError(f"dim {dim} cannot be split into {n} outputs")
    return sizes


@rule("Split")
def _split(node, ins):
    x = ins[0]
    n = len(node.outputs)
    if x.shape is None:
        return [(x.dtype, None)] * n
    r = len(x.shape)
    a = axis_index(node.attrs.get("axis", 0), r)
    split_t = ins[1] if len(ins) > 1 else None
    split = const_ints(split_t)
    d = x.shape[a]
    if split_t is not None and split is None:
        sizes = [fresh(node, a, j) for j in range(n)]
    elif split is not None or is_int(d):
        sizes = split_sizes(d, n, split, node.attrs.get("num_outputs")) if is_int(d) else split
    elif n == 1:
        sizes = [d]
    else:
        sizes = [fresh(node, a, j) for j in range(n)]
    shapes = []
    for s in sizes:
        shapes.append((x.dtype, tuple(x.shape[:a]) + (s,) + tuple(x.shape[a + 1:])))
    return shapes


def slice_bounds(dim: int, start: int, end: int, step: int) -> Tuple[int, int, int]:
    """ONNX Slice bounds clamped to a dim: (start, stop or -1 for "before 0", length)."""
    if step == 0:
        raise ShapeError("slice step 0")
    if step < 0 and end in (INT32_MAX, INT64_MAX):
        # onnxruntime reads an INT_MAX end as "to the end" in either direction
        # (the spec would clamp it to dim-1 and give nothing); models rely on it
        end = -dim - 1
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        n = max(0, -(-(end - start) // step))
    else:
        start = min(max(start, 0), dim - 1)
        end = min(max(end, -1), dim - 1)
        n = max(0, -(-(start - end) // -step))
    return start, end, n


def slice_params(node, ins, rank: int):
    """Per-axis (start, end, step) of a Slice with constant inputs, or None."""
    starts, ends = const_ints(ins[1]), const_ints(ins[2])
    axes_t = ins[3] if len(ins) > 3 else None
    steps_t = ins[4] if len(ins) > 4 else None
    axes = const_ints(axes_t) if axes_t is not None else None
    steps = const_ints(steps_t) if steps_t is not None else None
    if starts is None or ends is None or (axes_t is not None and axes is None) \
            or (steps_t is not None and steps is None):
        return None
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"starts/ends/axes/steps lengths differ: {starts}, {ends}, {axes}, {steps}")
    axes = [axis_index(a, rank) for a in axes]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"repeated axes {axes}")
    return {a: (s, e, st) for a, s, e, st in zip(axes, starts, ends, steps)}


def _symbolic_slice_dim(node, k, d, start, end, step):
    """A slice of a symbolic dim, for the common whole-tail cases; else a fresh symbol."""
    big = INT64_MAX // 2
    if step == 1 and end >= big:
        if start >= 0:
            return add_dims([d, -start]) if start else d
        return -start          # x[-k:] has k elements (assuming the dim is at least k)
    if step == -1 and (end <= -big or end in (INT32_MAX, INT64_MAX)) and (start == -1 or start >= big):
        return d
    return fresh(node, k)


@rule("Slice")
def _slice(node, ins):
    x = ins[0]
    if x.shape is None:
        return [(x.dtype, None)]
    r = len(x.shape)
    params = slice_params(node, ins, r)
    if params is None:
        axes_t = ins[3] if len(ins) > 3 else None
        axes = const_ints(axes_t)
        if axes is None and axes_t is None and ins[1].shape and is_int(ins[1].shape[0]):
            axes = list(range(ins[1].shape[0]))
        sliced = {axis_index(a, r) for a in axes} if axes is not None else set(range(r))
        return [(x.dtype, tuple(fresh(node, k) if k in sliced else d for k, d in enumerate(x.shape)))]
    out = list(x.shape)
    for k, (s, e, st) in params.items():
        d = x.shape[k]
        out[k] = slice_bounds(d, s, e, st)[2] if is_int(d) else _symbolic_slice_dim(node, k, d, s, e, st)
    return [(x.dtype, tuple(out))]


def pad_amounts(node, ins, rank: int) -> Optional[List[Tuple[int, int]]]:
    """Per-axis (begin, end) padding of a Pad with constant pads/axes, or None."""
    pads = const_ints(ins[1])
    axes_t = ins[3] if len(ins) > 3 else None
    axes = const_ints(axes_t) if axes_t is not None else list(range(rank))
    if pads is None or axes is None:
        return None
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"pads {pads} do not match {len(axes)} axes")
    out = [(0, 0)] * rank
    for i, a in enumerate(axes):
        out[axis_index(a, rank)] = (pads[i], pads[i + len(axes)])
    return out


@rule("Pad")
def _pad(node, ins):
    x = ins[0]
    if x.shape is None:
        return [(x.dtype, None)]
    amounts = pad_amounts(node, ins, len(x.shape))
    if amounts is None:
        return [(x.dtype, fresh_shape(node, len(x.shape)))]
    out = tuple(add_dims([d, b, e]) for d, (b, e) in zip(x.shape, amounts))
    if any(is_int(d) and d < 0 for d in out):
        raise ShapeError(f"negative pads {amounts} crop more than the input {x.shape}")
    return [(x.dtype, out)]


@rule("Gather")
def _gather(node, ins):
    x, idx = ins
    if x.shape is None or idx.shape is None:
        return [(x.dtype, None)]
    a = axis_index(node.attrs.get("axis", 0), len(x.shape))
    return [(x.dtype, tuple(x.shape[:a]) + tuple(idx.shape) + tuple(x.shape[a + 1:]))]


@rule("GatherElements")
def _gather_elements(node, ins):
    return [(ins[0].dtype, ins[1].shape)]


@rule("Expand")
def _expand(node, ins):
    x, s = ins
    target = const_ints(s)
    if target is not None:
        return [(x.dtype, broadcast_shapes(x.shape, tuple(target)) if x.shape is not None else None)]
    if x.shape is None or not s.shape or not is_int(s.shape[0]):
        return [(x.dtype, None)]
    r = max(len(x.shape), s.shape[0])
    xs = (1,) * (r - len(x.shape)) + tuple(x.shape)
    # a dim the input has as an int above 1 survives any valid expand
    return [(x.dtype, tuple(d if is_int(d) and d > 1 else fresh(node, i) for i, d in enumerate(xs)))]


@rule("Tile")
def _tile(node, ins):
    x, rep = ins
    reps = const_ints(rep)
    if x.shape is None:
        return [(x.dtype, fresh_shape(node, len(reps)) if reps is not None else None)]
    if reps is None:
        return [(x.dtype, fresh_shape(node, len(x.shape)))]
    if len(reps) != len(x.shape):
        raise ShapeError(f"repeats {reps} do not match rank {len(x.shape)}")
    return [(x.dtype, tuple(mul_dims([d, k]) for d, k in zip(x.shape, reps)))]


def shape_range(node, rank: int) -> Tuple[int, int]:
    """Shape's [start, end) after ONNX's negative-index and clamping rules."""
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end")
    end = rank if end is None else end
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(start, end)


@rule("Shape")
def _shape(node, ins):
    x = ins[0]
    if x.shape is None:
        return [("int64", fresh_shape(node, 1))]
    s, e = shape_range(node, len(x.shape))
    return [("int64", (e - s,))]


@rule("Size")
def _size(node, ins):
    return [("int64", ())]


@rule("ConstantOfShape")
def _constant_of_shape(node, ins):
    dtype = dtype_name(node.attrs.get("dtype", "float32"))
    s = ins[0]
    dims = const_ints(s)
    if dims is not None:
        if any(d < 0 for d in dims):
            raise ShapeError(f"negative dim in {dims}")
        return [(dtype, tuple(dims))]
    if s.shape is not None and len(s.shape) == 1 and is_int(s.shape[0]):
        return [(dtype, fresh_shape(node, s.shape[0]))]
    return [(dtype, None)]


def range_length(start, limit, delta) -> int:
    if delta == 0:
        raise ShapeError("Range delta is 0")
    return max(int(math.ceil((limit - start) / delta)), 0)


@rule("Range")
def _range(node, ins):
    start, limit, delta = ins
    if all(t.is_const for t in ins):
        s, l, d = (np.asarray(t.data).reshape(()).item() for t in ins)
        if all(isinstance(v, int) for v in (s, l, d)):
            n = max(-(-(l - s) // d), 0) if d else range_length(s, l, d)   # exact for int64
        else:
            n = range_length(s, l, d)
        return [(start.dtype, (n,))]
    return [(start.dtype, fresh_shape(node, 1))]


@rule("DepthToSpace", "SpaceToDepth")
def _depth_space(node, ins):
    x = ins[0]
    if x.shape is None:
        return [(x.dtype, fresh_shape(node, 4))]
    if len(x.shape) != 4:
        raise ShapeError(f"expected a 4-D input, got {x.shape}")
    bs = node.attrs["blocksize"]
    n, c, h, w = x.shape
    if node.op == "DepthToSpace":
        c2 = div_dims(c, bs * bs)
        if c2 is None:
            raise ShapeError(f"channels {c} not divisible by blocksize^2 = {bs * bs}")
        return [(x.dtype, (n, c2, mul_dims([h, bs]), mul_dims([w, bs])))]
    h2, w2 = div_dims(h, bs), div_dims(w, bs)
    if h2 is None or w2 is None:
        raise ShapeError(f"spatial dims {h}x{w} not divisible by blocksize {bs}")
    return [(x.dtype, (n, mul_dims([c, bs * bs]), h2, w2))]


@rule("TopK")
def _topk(node, ins):
    x, k_t = ins
    if x.shape is None:
        return [(x.dtype, None), ("int64", None)]
    a = axis_index(node.attrs.get("axis", -1), len(x.shape))
    k = const_ints(k_t)
    dim = k[0] if k is not None else fresh(node, a)
    if k is not None and is_int(x.shape[a]) and not 0 <= dim <= x.shape[a]:
        raise ShapeError(f"k={dim} out of range for axis of size {x.shape[a]}")
    shape = tuple(x.shape[:a]) + (dim,) + tuple(x.shape[a + 1:])
    return [(x.dtype, shape), ("int64", shape)]



@rule("CumSum")
def _cumsum(node, ins):
    return [(ins[0].dtype, ins[0].shape)]

# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

flops("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather",
      "GatherElements", "Expand", "Tile", "Pad", "Shape", "Size", "ConstantOfShape", "Range", "DepthToSpace",
      "SpaceToDepth")(free)

flops("CumSum")(per_input)


# -- int8 (``ops/int8.py``: what the int8 kernel of these ops covers) ------------------------------

@int8_limit("Pad")
def _pad_int8(node: Node, g: Graph):
    cv = node.inputs[2] if len(node.inputs) > 2 else ""
    if cv and not g.tensors[cv].is_const:
        return "pad value is not a constant"
    return None
