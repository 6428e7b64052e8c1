"""Reduction kernels: ReduceSum, Mean, Max, Min, Prod, L1, L2, SumSquare, LogSum, LogSumExp.

Each is a ``ufunc.reduce`` over the (constant) axes into the output buffer,
with an element-wise pre-pass into a workspace (abs, square, exp) or a
post-pass on the output (divide, sqrt, log) where the op needs one.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ....errors import UnsupportedOpError
from ....ops.reduce import REDUCE_OPS, reduce_axes
from ..registry import kernel
from .elementwise import quiet


def _extreme(dtype, low: bool):
    """The identity of max (low) or min (high) for ``dtype``: the value of an empty reduction."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return -np.inf if low else np.inf
    if dtype.kind == "b":
        return not low
    info = np.iinfo(dtype)
    return info.min if low else info.max


_ALONE = {"ReduceL1": np.absolute, "ReduceL2": np.absolute, "ReduceSumSquare": np.square,
          "ReduceLogSum": np.log}


@kernel(*REDUCE_OPS)
def reduce(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    axes = reduce_axes(node, [ctx.tensor(n) if n else None for n in node.inputs], x.ndim)
    if axes is None:
        raise UnsupportedOpError(f"{node.op} node {node.name!r}: axes must be constant on the CPU backend")
    if not axes:
        # noop_with_empty_axes: each element reduced alone, so the element-wise part
        # stays (ReduceL1 -> |x|, ReduceSumSquare -> x^2, ...), as in onnxruntime
        f = _ALONE.get(node.op)
        return quiet(partial(f, x, out=y)) if f else partial(np.copyto, y, x)
    keep = bool(node.attrs.get("keepdims", 1))
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    # float16 sums accumulate in float32 (as onnxruntime does); other types in their own
    # type, never numpy's default promotion of small ints to int64
    acc = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
    op = node.op

    if op in ("ReduceMax", "ReduceMin"):
        f = np.maximum if op == "ReduceMax" else np.minimum
        # an empty reduction has no element to start from: use the identity
        extra = {"initial": _extreme(x.dtype, op == "ReduceMax")} if count == 0 else {}
        return partial(f.reduce, x, axis=axes, out=y, keepdims=keep, **extra)

    def sum_into(src, out):
        if out.dtype == acc:
            np.add.reduce(src, axis=axes, dtype=acc, out=out, keepdims=keep)
        else:
            np.add.reduce(src, axis=axes, dtype=acc, out=tmp, keepdims=keep)
            np.copyto(out, tmp, casting="same_kind")
    tmp = ctx.workspace(y.shape, acc) if y.dtype != acc else None

    if op == "ReduceSum":
        return quiet(partial(sum_into, x, y))
    if op == "ReduceProd":
        return quiet(partial(np.multiply.reduce, x, axis=axes, dtype=acc, out=y, keepdims=keep))
    if op == "ReduceMean":
        def run_mean():
            sum_into(x, y)
            # ints: the sum divided and truncated, like C integer division
            np.divide(y, count, out=y, casting="unsafe")
        return quiet(run_mean)
    if op == "ReduceLogSum":
        def run_log_sum():
            sum_into(x, y)
            np.log(y, out=y, casting="unsafe")
        return quiet(run_log_sum)

    w = ctx.workspace(x.shape, x.dtype)
    if op in ("ReduceL1", "ReduceL2", "ReduceSumSquare"):
        pre = np.absolute if op == "ReduceL1" else np.square
        root = op == "ReduceL2"

        def run_norm():
            pre(x, out=w)
            sum_into(w, y)
            if root:
                np.sqrt(y, out=y, casting="unsafe")
        return quiet(run_norm)

    # ReduceLogSumExp, shifted by the max so exp never overflows:
    # m + log(sum(exp(x - m))), with m = 0 where the max is not finite
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    m = ctx.workspace(kept, x.dtype)
    bad = ctx.workspace(kept, "bool")
    m_out = m.reshape(y.shape)
    extra = {"initial": -np.inf} if count == 0 else {}

    def run_lse():
        np.maximum.reduce(x, axis=axes, out=m, keepdims=True, **extra)
        np.isfinite(m, out=bad)
        np.logical_not(bad, out=bad)
        np.copyto(m, 0, where=bad)
        np.subtract(x, m, out=w)
        np.exp(w, out=w)
        sum_into(w, y)
        np.log(y, out=y)
        np.add(y, m_out, out=y)
    return quiet(run_lse)
