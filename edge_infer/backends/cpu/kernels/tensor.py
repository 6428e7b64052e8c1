"""Tensor-manipulation kernels: reshapes, transposes, concat/split, slicing,
padding, gathers, broadcasting copies, shape queries, casts, ranges,
depth/space rearrangements, arg-reductions, TopK and CumSum.

Most of these are data movement. Prepare builds numpy *views* of the input
(and output) buffers that already have the right layout (a reshape, a
transpose, a slice, an interleaved broadcast), so eval is a single
``np.copyto``. Shape-determining inputs (Slice starts, Pad pads, ...) must be
constant by prepare time: the output buffer's shape depends on them.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ....errors import UnsupportedOpError
from ....ops.shapes import SHAPE_RULES
from ....ops.tensor import pad_amounts, shape_range, slice_bounds, slice_params, transpose_perm
from ..native import ops as native_ops
from ..registry import kernel
from .elementwise import operands, quiet


def copy_steps(pairs, threads: int = 1):
    """One step doing ``np.copyto(dst, src)`` for each pair in order: the native strided
    copy (batched with its native neighbours) where it covers the arrays, else numpy.
    ``threads`` > 1 (pairs that do not overlap): a large copy is split across the pool."""
    fast = native_ops.copy_step(list(pairs), threads)
    if fast is not None:
        return fast
    pairs = [(d, s) for d, s in pairs if not native_ops.same_view(d, s)]
    if len(pairs) == 1:
        return partial(np.copyto, *pairs[0])

    def run():
        for dst, src in pairs:
            np.copyto(dst, src)
    return run


def _ins(node, ctx):
    return [ctx.tensor(n) if n else None for n in node.inputs]


def _require(value, node, what):
    if value is None:
        raise UnsupportedOpError(f"{node.op} node {node.name!r}: {what} must be constant on the CPU backend")
    return value


def _const_int_list(ctx, name):
    c = ctx.const(name)
    return None if c is None else [int(v) for v in np.asarray(c).reshape(-1)]


def reshaped(arr, shape):
    """A view of ``arr`` with ``shape``, or None when only a copy would do.

    Buffers are contiguous, so this is normally a view; constants never
    change, so a copy of one is as good as a view.
    """
    if arr.flags.c_contiguous or arr.size == 0:
        return arr.reshape(shape)
    return None


# -- copies through a view ---------------------------------------------------------------

@kernel("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def reshape(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    src = reshaped(x, y.shape)
    if src is None and ctx.const(node.inputs[0]) is not None:
        src = x.reshape(y.shape)
    if src is not None:
        return copy_steps([(y, src)])
    dst = reshaped(y, x.shape)
    if dst is not None:
        return copy_steps([(dst, x)])
    return lambda: np.copyto(y, x.reshape(y.shape))


@kernel("Transpose")
def transpose(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    src = x.transpose(transpose_perm(node, x.ndim))
    fast = native_ops.interleave_step(y, src, ctx.threads)
    if fast is not None:
        ctx.note(node, f"native plane interleave ({src.shape[-1]} planes of {y.dtype})")
        return fast
    step = copy_steps([(y, src)])
    if getattr(step, "native_step", None) is not None:
        ctx.note(node, f"native strided copy ({y.dtype})")
    return step


@kernel("Concat")
def concat(node, ctx):
    ins = [v for v in operands(node, ctx) if v is not None]
    y = ctx.value(node.outputs[0])
    axis = node.attrs.get("axis", 0)
    axis = axis + y.ndim if axis < 0 else axis
    # one copy per input into its slab of the output
    pairs, at = [], 0
    for v in ins:
        n = v.shape[axis]
        idx = (slice(None),) * axis + (slice(at, at + n),)
        pairs.append((y[idx], v))
        at += n
    _note_placed(node, ctx, pairs, "input(s) written in place by their producers")
    return copy_steps(pairs, ctx.threads)


def _note_placed(node, ctx, pairs, what):
    """Say in inspect's note how many of the pieces the arena planner placed (no copy)."""
    placed = sum(native_ops.same_view(d, s) for d, s in pairs)
    if placed:
        ctx.note(node, f"{placed} of {len(pairs)} {what} (memory/views.py); "
                       f"{'nothing copied' if placed == len(pairs) else 'the rest copied natively'}")


@kernel("Split")
def split(node, ctx):
    x = ctx.value(node.inputs[0])
    axis = node.attrs.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    # the sizes come from the shape rule (which also covers outputs left unnamed)
    shapes = SHAPE_RULES["Split"](node, _ins(node, ctx))
    pairs, at = [], 0
    for o, (_, out_shape) in zip(node.outputs, shapes):
        n = out_shape[axis]
        if o:
            idx = (slice(None),) * axis + (slice(at, at + n),)
            pairs.append((ctx.value(o), x[idx]))
        at += n
    _note_placed(node, ctx, pairs, "output(s) are views of the input")
    return copy_steps(pairs, ctx.threads)


@kernel("Slice")
def slice_(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    params = _require(slice_params(node, _ins(node, ctx), x.ndim), node, "starts/ends/axes/steps")
    idx = [slice(None)] * x.ndim
    for k, (s, e, st) in params.items():
        start, stop, _ = slice_bounds(x.shape[k], s, e, st)
        # ONNX's clamped stop of -1 means "through index 0" going backwards
        idx[k] = slice(start, stop if stop >= 0 else None, st)
    return copy_steps([(y, x[tuple(idx)])])


@kernel("Expand")
def expand(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    return copy_steps([(y, x)])          # copyto broadcasts x to y's shape


@kernel("Tile")
def tile(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if y.size == 0:
        return lambda: None
    if x.ndim == 0:
        return partial(np.copyto, y, x)
    # view y as (r0, d0, r1, d1, ...) and broadcast x as (1, d0, 1, d1, ...)
    reps = [yd // xd if xd else 1 for yd, xd in zip(y.shape, x.shape)]
    dst = reshaped(y, [v for r, d in zip(reps, x.shape) for v in (r, d)])
    src = x.reshape([v for d in x.shape for v in (1, d)])
    if dst is None:
        return lambda: np.copyto(y, np.tile(x, reps))
    return partial(np.copyto, dst, src)


@kernel("Pad")
def pad(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    amounts = _require(pad_amounts(node, _ins(node, ctx), x.ndim), node, "pads and axes")
    mode = node.attrs.get("mode", "constant")
    # negative pads crop: slice those off the input, then pad by the positive parts
    src = x[tuple(slice(-b if b < 0 else 0, x.shape[k] + e if e < 0 else None)
                  for k, (b, e) in enumerate(amounts))]
    amounts = [(max(b, 0), max(e, 0)) for b, e in amounts]
    inner = tuple(slice(b, b + n) for (b, _), n in zip(amounts, src.shape))
    center = y[inner]
    if mode == "constant":
        cname = node.inputs[2] if len(node.inputs) > 2 else ""
        value = ctx.value(cname) if cname else np.zeros((), y.dtype)
        if ctx.const(cname) is not None:
            value = np.asarray(value, y.dtype).reshape(())
        # fill only the border slabs (corners twice, harmlessly), then copy the middle
        border = []
        for k, (b, e) in enumerate(amounts):
            pre = (slice(None),) * k
            if b:
                border.append(y[pre + (slice(0, b),)])
            if e:
                border.append(y[pre + (slice(y.shape[k] - e, None),)])

        def run_constant():
            for v in border:
                np.copyto(v, value, casting="unsafe")
            np.copyto(center, src)
        return run_constant
    if mode not in ("reflect", "edge", "wrap"):
        raise UnsupportedOpError(f"Pad mode {mode!r} is not supported")
    if src.size == 0 and any(b or e for b, e in amounts):
        raise UnsupportedOpError(f"Pad mode {mode!r} cannot pad an empty input")
    # Axis by axis: the border along axis k is gathered from the part of y already
    # filled (axes < k at full extent, axis k and later at the input's extent).
    # np.pad on a range gives the source index of every output position in each mode.
    steps = []
    for k, (b, e) in enumerate(amounts):
        if not (b or e):
            continue
        n = src.shape[k]
        index = np.pad(np.arange(n), (b, e), mode=mode)
        lead = tuple(slice(None) for _ in range(k))
        tail = tuple(inner[k + 1:])
        region = y[lead + (slice(None),) + tail]
        body = region[(slice(None),) * k + (slice(b, b + n),)]
        if b:
            steps.append((body, index[:b], k, region[(slice(None),) * k + (slice(0, b),)]))
        if e:
            steps.append((body, index[b + n:], k, region[(slice(None),) * k + (slice(b + n, None),)]))

    def run_gather():
        np.copyto(center, src)
        for body, index, k, dst in steps:
            np.take(body, index, axis=k, out=dst, mode="clip")
    return run_gather


@kernel("Gather")
def gather(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    axis = node.attrs.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    n = x.shape[axis]
    ci = ctx.const(node.inputs[1])
    if ci is not None:
        idx = np.asarray(ci).astype(np.intp)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise UnsupportedOpError(f"Gather node {node.name!r}: index out of range for axis of size {n}")
        idx = np.where(idx < 0, idx + n, idx)
        return partial(np.take, x, idx, axis=axis, out=y, mode="clip")
    # runtime indices: 'wrap' maps negatives Python-style (and avoids take's
    # buffered 'raise' path); out-of-range indices wrap instead of raising
    idx = ctx.value(node.inputs[1])
    if y.size == 0:
        return lambda: None
    return partial(np.take, x, idx, axis=axis, out=y, mode="wrap")


@kernel("GatherElements")
def gather_elements(node, ctx):
    x, idx, y = ctx.value(node.inputs[0]), ctx.value(node.inputs[1]), ctx.value(node.outputs[0])
    axis = node.attrs.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    n = x.shape[axis]
    if ctx.const(node.inputs[1]) is not None:
        fixed = np.where(idx < 0, idx + n, idx).astype(np.intp)
        return lambda: np.copyto(y, np.take_along_axis(x, fixed, axis))
    return lambda: np.copyto(y, np.take_along_axis(x, np.where(idx < 0, idx + n, idx), axis))


# -- values made from shapes -------------------------------------------------------------------

@kernel("Shape")
def shape(node, ctx):
    # the input's shape is static here; its buffer may not exist when folding
    dims = ctx.tensor(node.inputs[0]).shape
    s, e = shape_range(node, len(dims))
    return partial(np.copyto, ctx.value(node.outputs[0]), np.array(dims[s:e], np.int64))


@kernel("Size")
def size(node, ctx):
    n = int(np.prod(ctx.tensor(node.inputs[0]).shape, dtype=np.int64))
    return partial(np.copyto, ctx.value(node.outputs[0]), np.array(n, np.int64))


@kernel("ConstantOfShape")
def constant_of_shape(node, ctx):
    y = ctx.value(node.outputs[0])
    value = np.asarray(node.attrs.get("value", 0)).reshape(-1)
    value = value[0] if value.size else 0
    return partial(y.fill, np.array(value).astype(y.dtype)[()])


@kernel("Cast", "CastLike")
def cast(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    # 'unsafe' is numpy's astype: float->int truncates toward zero, nonzero->True
    return quiet(partial(np.copyto, y, x, casting="unsafe"))


@kernel("Range")
def range_(node, ctx):
    y = ctx.value(node.outputs[0])
    start, _, delta = (ctx.value(n) for n in node.inputs)
    steps = np.arange(y.shape[0])
    if ctx.const(node.inputs[0]) is not None and ctx.const(node.inputs[2]) is not None:
        values = (start + steps * delta).astype(y.dtype)
        return partial(np.copyto, y, values)

    def run():
        np.multiply(steps, delta, out=y, casting="unsafe")
        np.add(y, start, out=y, casting="unsafe")
    return run


# -- rearrangements --------------------------------------------------------------------------

@kernel("DepthToSpace", "SpaceToDepth")
def depth_space(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    bs = node.attrs["blocksize"]
    if node.op == "DepthToSpace":
        b, c, h, w = x.shape
        c2 = c // (bs * bs)
        if node.attrs.get("mode", "DCR") == "DCR":
            src = x.reshape(b, bs, bs, c2, h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            src = x.reshape(b, c2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        dst = y.reshape(b, c2, h, bs, w, bs)
    else:
        b, c, h, w = x.shape
        src = x.reshape(b, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
        dst = y.reshape(b, bs, bs, c, h // bs, w // bs)
    return copy_steps([(dst, src)])


@kernel("ArgMax", "ArgMin")
def argmax(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    axis = node.attrs.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    keep = bool(node.attrs.get("keepdims", 1))
    f = np.argmax if node.op == "ArgMax" else np.argmin
    last = node.attrs.get("select_last_index", 0)
    # numpy picks the first extreme; searching the flipped axis picks the last
    src = np.flip(x, axis) if last else x
    n = x.shape[axis]
    # argmax writes intp (int32 on 32-bit ARM): go through a workspace if needed
    out = y if y.dtype == np.intp else ctx.workspace(y.shape, np.intp)

    def run():
        f(src, axis=axis, out=out, keepdims=keep)
        if last:
            np.subtract(n - 1, out, out=out)
        if out is not y:
            np.copyto(y, out, casting="unsafe")
    return run


@kernel("TopK")
def topk(node, ctx):
    x = ctx.value(node.inputs[0])
    values, indices = (ctx.value(o) if o else None for o in node.outputs)
    axis = node.attrs.get("axis", -1)
    axis = axis + x.ndim if axis < 0 else axis
    k = ctx.tensor(next(o for o in node.outputs if o)).shape[axis]
    n = x.shape[axis]
    largest = node.attrs.get("largest", 1)
    head = (slice(None),) * axis + (slice(0, k),)

    def run():
        # ties keep the lower index first (onnxruntime's order): a stable ascending
        # sort of the flipped axis, read backwards, is a stable descending sort
        if largest:
            order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
            order = (n - 1) - order[head]
        else:
            order = np.argsort(x, axis=axis, kind="stable")[head]
        if values is not None:
            np.copyto(values, np.take_along_axis(x, order, axis))
        if indices is not None:
            np.copyto(indices, order, casting="unsafe")
    return run


@kernel("CumSum")
def cumsum(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    axis = _require(_const_int_list(ctx, node.inputs[1]), node, "axis")[0]
    axis = axis + x.ndim if axis < 0 else axis
    if node.attrs.get("reverse", 0):
        x, y = np.flip(x, axis), np.flip(y, axis)     # views: accumulate from the end
    if not node.attrs.get("exclusive", 0):
        return partial(np.cumsum, x, axis=axis, dtype=y.dtype, out=y)
    pre = (slice(None),) * axis
    first, rest, src = y[pre + (slice(0, 1),)], y[pre + (slice(1, None),)], x[pre + (slice(0, -1),)]

    def run():
        # exclusive: y[0] = 0, y[i] = x[0] + ... + x[i-1]
        first.fill(0)
        np.cumsum(src, axis=axis, dtype=y.dtype, out=rest)
    return run if x.shape[axis] else (lambda: None)
