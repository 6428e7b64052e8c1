"""Transformer building blocks: LayerNormalization, GroupNormalization, Einsum.

The normalizations keep their statistics in the op's ``stash_type`` (float32 by default,
so float16 inputs are normalized in float32 as onnxruntime does) and compute the
variance as the mean of squared deviations (two passes, as the exporters' decomposed
graphs do); every buffer is planned at prepare.
"""
from __future__ import annotations

from typing import Callable, Tuple

import numpy as np

from ....ir import Node
from ....ops.shapes import channels_last
from ....ops.sequence import STASH_DTYPES, parse_einsum
from ..registry import kernel
from .conv import view_as


def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def _opt_out(node: Node, i: int) -> str:
    return node.outputs[i] if len(node.outputs) > i else ""


def _stat_buffer(ctx, node: Node, k: int, shape: Tuple[int, ...], dtype) -> np.ndarray:
    """Statistics of ``shape``: the requested output ``k`` itself when its dtype is the
    compute dtype, else a workspace."""
    name = _opt_out(node, k) if k else ""
    if name:
        out = ctx.value(name)
        if out.dtype == dtype:
            return view_as(out, shape)
    return ctx.workspace(shape, dtype)


def standardize(ctx, node: Node, x: np.ndarray, y: np.ndarray, axes: Tuple[int, ...], eps: float,
                dtype, mean_out: int = 0, inv_out: int = 0) -> Callable[[], None]:
    """A step writing (x - mean) / sqrt(var + eps) into ``y``, statistics over ``axes`` of
    ``x``, computed in ``dtype`` (a cast copy when the data has another dtype).
    ``mean_out``/``inv_out``: the node outputs that receive the mean and 1/std (0: none)."""
    keep = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
    count = int(np.prod([x.shape[k] for k in axes], dtype=np.int64))
    cast = x.dtype != dtype
    xc = ctx.workspace(x.shape, dtype) if cast else x
    yc = ctx.workspace(y.shape, dtype) if cast else y
    mean = _stat_buffer(ctx, node, mean_out, keep, dtype)
    inv = _stat_buffer(ctx, node, inv_out, keep, dtype)
    letters = "abcdefgh"[:x.ndim]
    kept = "".join(c for k, c in enumerate(letters) if k not in axes)
    squares = f"{letters},{letters}->{kept}"            # sum of squares, no temporary
    inv_kept = view_as(inv, tuple(d for k, d in enumerate(x.shape) if k not in axes))
    # requested statistics of another dtype than the compute one: copied out at the end
    stats = [(ctx.value(_opt_out(node, k)), buf) for k, buf in ((mean_out, mean), (inv_out, inv)) if k]
    copies = [(view_as(out, keep), buf) for out, buf in stats if not np.shares_memory(out, buf)]
    inv_n = 1.0 / count if count else 0.0

    def run():
        if cast:
            np.copyto(xc, x, casting="unsafe")
        np.mean(xc, axis=axes, keepdims=True, out=mean)
        np.subtract(xc, mean, out=yc)
        np.einsum(squares, yc, yc, out=inv_kept)
        np.multiply(inv, inv_n, out=inv)
        np.add(inv, eps, out=inv)
        np.sqrt(inv, out=inv)
        np.reciprocal(inv, out=inv)
        np.multiply(yc, inv, out=yc)
        if cast:
            np.copyto(y, yc, casting="unsafe")
        for dst, src in copies:
            np.copyto(dst, src, casting="unsafe")
    return run


def _affine_operand(ctx, name: str, shape: Tuple[int, ...], dtype) -> np.ndarray:
    """Scale or bias as an array broadcasting against ``shape``: a constant is broadcast
    and cast once here; a computed one is used as it is (numpy broadcasts it per run)."""
    c = ctx.const(name)
    if c is None:
        return ctx.value(name)
    return np.ascontiguousarray(np.broadcast_to(np.asarray(c, dtype), shape))


@kernel("LayerNormalization")
def layer_norm(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if x.size == 0:
        return lambda: None
    axis = int(node.attrs.get("axis", -1)) % x.ndim
    eps = float(node.attrs.get("epsilon", 1e-5))
    stash = np.dtype(STASH_DTYPES[int(node.attrs.get("stash_type", 1))])
    dtype = np.result_type(x.dtype, stash)
    norm = tuple(x.shape[axis:])
    rows, cols = int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(norm, dtype=np.int64))
    x2, y2 = view_as(x, (rows, cols)), view_as(y, (rows, cols))
    steps = [standardize(ctx, node, x2, y2, (1,), eps, dtype, 1 if _opt_out(node, 1) else 0,
                         2 if _opt_out(node, 2) else 0)]
    yn = view_as(y, (rows,) + norm)
    steps.append(lambda s=_affine_operand(ctx, node.inputs[1], norm, y.dtype): np.multiply(yn, s, out=yn))
    if _opt(node, 2):
        steps.append(lambda b=_affine_operand(ctx, node.inputs[2], norm, y.dtype): np.add(yn, b, out=yn))
    ctx.note(node, f"{rows} rows of {cols}, statistics in {dtype.name}")

    def run():
        for s in steps:
            s()
    return run


@kernel("GroupNormalization")
def group_norm(node: Node, ctx) -> Callable[[], None]:
    """Opset 21: scale and bias per channel (the frontend expands opset 18's per-group ones).
    NCHW: one row per (image, group); NHWC (``data_layout``, the layout pass): statistics over
    the positions and the group's channels of a (N, P, G, C/G) view."""
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if x.size == 0:
        return lambda: None
    last = channels_last(node)
    n, c = (x.shape[0], x.shape[-1]) if last else x.shape[:2]
    g = int(node.attrs["num_groups"])
    eps = float(node.attrs.get("epsilon", 1e-5))
    stash = np.dtype(STASH_DTYPES[int(node.attrs.get("stash_type", 1))])
    dtype = np.result_type(x.dtype, stash)
    p = x.size // (n * c)
    scale = _affine_operand(ctx, node.inputs[1], (c,), y.dtype)
    bias = _affine_operand(ctx, node.inputs[2], (c,), y.dtype)
    if last:
        norm = standardize(ctx, node, view_as(x, (n, p, g, c // g)), view_as(y, (n, p, g, c // g)), (1, 3),
                           eps, dtype)
        y3 = view_as(y, (n, p, c))
    else:
        norm = standardize(ctx, node, view_as(x, (n * g, c // g * p)), view_as(y, (n * g, c // g * p)), (1,),
                           eps, dtype)
        y3 = view_as(y, (n, c, p))
        scale, bias = scale.reshape(c, 1), bias.reshape(c, 1)
    ctx.note(node, f"{g} groups of {c // g} channels x {p}{' (NHWC)' if last else ''}")

    def run():
        norm()
        np.multiply(y3, scale, out=y3)
        np.add(y3, bias, out=y3)
    return run


@kernel("Einsum")
def einsum(node: Node, ctx) -> Callable[[], None]:
    """np.einsum on the equation as ``parse_einsum`` normalized it (explicit output, no
    spaces); the contraction order is found once here."""
    ops = [ctx.value(i) for i in node.inputs]
    y = ctx.value(node.outputs[0])
    terms, out = parse_einsum(node.attrs["equation"], [a.ndim for a in ops])
    eq = ",".join(terms) + "->" + out
    # two or more operands: a contraction order (and BLAS where a pair is a tensordot)
    path = np.einsum_path(eq, *ops, optimize="greedy")[0] if len(ops) > 1 else False
    ctx.note(node, f"einsum {eq}")
    return lambda: np.einsum(eq, *ops, out=y, optimize=path)
