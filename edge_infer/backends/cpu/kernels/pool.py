"""Pooling kernels: MaxPool (with optional Indices), AveragePool, GlobalAveragePool,
GlobalMaxPool; 1-D/2-D/3-D.

Windowed pools read a padded workspace (border filled once at prepare with -inf
for max, 0 for average; each run copies only the interior). Max and sum are
separable, so the window reduction runs one spatial dim at a time, outermost
first: ``sum(kernel)`` strided ufunc calls instead of ``prod(kernel)``, and the
first stage streams whole contiguous rows (about 2x faster for 3x3/2). MaxPool
with an Indices output compares all ``prod(kernel)`` taps directly.

``data_layout="NHWC"`` (passes/convert_layout.py): input and output are
channels-last, (N, *spatial, C); the same separable reductions then run over
contiguous channel rows. MaxPool's Indices output exists in NCHW only.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ....ops.pool import window_counts as _window_counts
from ....ir.padding import resolve_pads
from ....ops.conv import window_attrs
from ....ops.shapes import channels_last, join_layout, split_layout
from ..native import ops as native_ops
from ..registry import kernel
from .conv import padded_input, tap_views, view_as


def _geometry(node: Node, x: np.ndarray, y: np.ndarray):
    """(kernel, strides, dilations, pads, out dims, extra end padding) of a windowed pool."""
    nsp = x.ndim - 2
    ks = [int(k) for k in (node.attrs.get("kernel_shape") or [])]
    if len(ks) != nsp:
        raise ShapeError(f"{node.op} {node.name!r}: kernel_shape {ks} for input {x.shape}")
    last = channels_last(node)
    n, c, insp = split_layout(x.shape, last)
    wa = window_attrs(node, nsp, ks)
    pads, osp = resolve_pads(insp, ks, wa["strides"], wa["dilations"], wa["pads"],
                             wa["auto_pad"], wa["ceil_mode"])
    if tuple(y.shape) != join_layout(n, c, osp, last):
        raise ShapeError(f"{node.op} {node.name!r}: planned output {y.shape} != computed "
                         f"{join_layout(n, c, osp, last)}")
    # ceil_mode can make the last window run past the end padding
    extra = []
    for i in range(nsp):
        need = (osp[i] - 1) * wa["strides"][i] + (ks[i] - 1) * wa["dilations"][i] + 1
        have = insp[i] + pads[i] + pads[i + nsp]
        extra.append(max(0, need - have))
    return ks, wa["strides"], wa["dilations"], pads, osp, extra


def separable_reduce(ctx, xp: np.ndarray, y: np.ndarray, ks: Sequence[int], strides: Sequence[int],
                     dil: Sequence[int], osp: Sequence[int], ufunc, last: bool = False) -> Callable[[], None]:
    """Step computing ``y`` = ``ufunc``-reduction (np.maximum / np.add) of every
    window of ``xp`` (N, C, *padded), or (N, *padded, C) when ``last``, one spatial
    dim per stage."""
    nsp = len(ks)
    first = 1 if last else 2
    dims = [i for i in range(nsp)
            if not (ks[i] == 1 and strides[i] == 1 and osp[i] == xp.shape[first + i])]
    if not dims:
        return lambda: np.copyto(y, xp)
    stages = []
    cur = xp
    for k, i in enumerate(dims):
        shape = list(cur.shape)
        shape[first + i] = osp[i]
        dst = y if k == len(dims) - 1 else ctx.workspace(shape, y.dtype)
        taps = []
        for t in range(ks[i]):
            sl = [slice(None)] * cur.ndim
            start = t * dil[i]
            sl[first + i] = slice(start, start + (osp[i] - 1) * strides[i] + 1, strides[i])
            taps.append(cur[tuple(sl)])
        stages.append((dst, taps[0], taps[1] if len(taps) > 1 else None, taps[2:]))
        cur = dst
    copyto = np.copyto

    def run():
        for dst, t0, t1, rest in stages:
            if t1 is None:
                copyto(dst, t0)
                continue
            ufunc(t0, t1, out=dst)
            for t in rest:
                ufunc(dst, t, out=dst)
    return run


def _lowest(dtype) -> object:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return -np.inf
    if dt.kind == "b":
        return False
    return np.iinfo(dt).min


@kernel("MaxPool")
def max_pool(node: Node, ctx) -> Callable[[], None]:
    x = ctx.value(node.inputs[0])
    y = ctx.value(node.outputs[0])
    ks, strides, dil, pads, osp, extra = _geometry(node, x, y)
    want_idx = len(node.outputs) > 1 and bool(node.outputs[1])
    last = channels_last(node)
    if want_idx and last:
        raise UnsupportedOpError(f"MaxPool {node.name!r}: the Indices output needs data_layout NCHW")
    if y.size == 0:
        return lambda: None
    kdesc = "x".join(map(str, ks))
    if not want_idx and len(ks) == 2:
        if x.dtype == np.int8:
            fast = native_ops.maxpool_s8_step(x, y, ks, strides, dil, pads, last, threads=ctx.threads)
        else:
            fast = native_ops.pool2d_step(x, y, "max", ks, strides, dil, pads, last, threads=ctx.threads)
        if fast is not None:
            ctx.note(node, f"native {'NHWC ' if last else ''}{'int8 ' if x.dtype == np.int8 else ''}max pool {kdesc}")
            return fast
    xp, pad_step = padded_input(ctx, x, pads, extra, fill=_lowest(x.dtype), last=last)
    if not want_idx:
        reduce = separable_reduce(ctx, xp, y, ks, strides, dil, osp, np.maximum, last)

        def maxpool():
            pad_step()
            reduce()
        ctx.note(node, f"{'NHWC ' if last else ''}max pool {kdesc} (separable, {sum(ks)} strided maxima)")
        return maxpool
    taps = tap_views(xp, ks, dil, strides, osp)

    # Indices: flat positions into the unpadded input, first maximum wins (as ORT does)
    idx = ctx.value(node.outputs[1])
    nsp = x.ndim - 2
    insp = x.shape[2:]
    order = int(node.attrs.get("storage_order", 0))
    # element stride of each spatial dim: row-major, or column-major over spatial dims
    if order == 0:
        sp_mul = [int(np.prod(insp[i + 1:])) for i in range(nsp)]
    else:
        sp_mul = [int(np.prod(insp[:i])) for i in range(nsp)]
    tap_idx = []
    for tap in np.ndindex(*ks):
        flat = np.zeros(osp, np.int64)
        for i in range(nsp):
            pos = np.arange(osp[i]) * strides[i] + tap[i] * dil[i] - pads[i]
            pos = np.clip(pos, 0, insp[i] - 1)
            shape = [1] * nsp
            shape[i] = osp[i]
            flat = flat + (pos * sp_mul[i]).reshape(shape)
        tap_idx.append(flat)
    n, c = x.shape[:2]
    base = (np.arange(n * c, dtype=np.int64) * int(np.prod(insp))).reshape((n, c) + (1,) * nsp)
    mask = ctx.workspace(y.shape, bool)
    copyto, greater = np.copyto, np.greater
    pairs = list(zip(taps[1:], tap_idx[1:]))
    t0, i0 = taps[0], tap_idx[0]

    def maxpool_idx():
        pad_step()
        copyto(y, t0)
        copyto(idx, i0)
        for t, ti in pairs:
            greater(t, y, out=mask)
            copyto(y, t, where=mask)
            copyto(idx, ti, where=mask)
        np.add(idx, base, out=idx)
    ctx.note(node, f"max pool {kdesc} with indices (storage_order {order})")
    return maxpool_idx


@kernel("AveragePool")
def average_pool(node: Node, ctx) -> Callable[[], None]:
    x = ctx.value(node.inputs[0])
    y = ctx.value(node.outputs[0])
    ks, strides, dil, pads, osp, extra = _geometry(node, x, y)
    if y.size == 0:
        return lambda: None
    if x.dtype.kind != "f":
        raise UnsupportedOpError(f"AveragePool {node.name!r}: dtype {x.dtype} is not supported")
    nsp = x.ndim - 2
    last = channels_last(node)
    insp = split_layout(x.shape, last)[2]
    include_pad = bool(node.attrs.get("count_include_pad", 0))
    # divisor per output position, separable over spatial dims: taps inside the input
    # (count_include_pad=0) or inside input + explicit pads (=1); ceil_mode overhang never counts
    inv = np.ones(osp, np.float64)
    for i in range(nsp):
        lo = 0 if include_pad else pads[i]
        hi = pads[i] + insp[i] + (pads[i + nsp] if include_pad else 0)
        cnt = _window_counts(insp[i], osp[i], ks[i], strides[i], dil[i], lo, hi)
        shape = [1] * nsp
        shape[i] = osp[i]
        inv = inv * cnt.reshape(shape)
    if (inv == 0).any():
        raise ShapeError(f"AveragePool {node.name!r}: a window lies entirely in padding")
    kdesc = "x".join(map(str, ks))
    if nsp == 2:
        fast = native_ops.pool2d_step(x, y, "avg", ks, strides, dil, pads, last, include_pad, ctx.threads)
        if fast is not None:
            ctx.note(node, f"native {'NHWC ' if last else ''}average pool {kdesc}")
            return fast
    xp, pad_step = padded_input(ctx, x, pads, extra, fill=0, last=last)
    inv = (1.0 / inv).astype(y.dtype)
    if last:
        inv = inv[..., None]                  # broadcast over the trailing channel axis
    scale = inv.flat[0] if (inv == inv.flat[0]).all() else inv
    mul = np.multiply
    reduce = separable_reduce(ctx, xp, y, ks, strides, dil, osp, np.add, last)

    def avgpool():
        pad_step()
        reduce()
        mul(y, scale, out=y)
    ctx.note(node, f"{'NHWC ' if last else ''}average pool {kdesc} (separable sums, "
                   f"{'uniform' if np.ndim(scale) == 0 else 'per-position'} divisor)")
    return avgpool


def _global(node: Node, ctx, reduce) -> Callable[[], None]:
    x = ctx.value(node.inputs[0])
    y = ctx.value(node.outputs[0])
    last = channels_last(node)
    n, c, sp = split_layout(x.shape, last)
    p = int(np.prod(sp))
    if x.size == 0:
        return lambda: None
    op = "max" if reduce is np.max else "avg"
    if x.dtype == np.int8:      # max only: the int8 mean is int8_pool.py's
        fast = native_ops.global_pool_s8_step(x, y, op, last, ctx.threads) if op == "max" else None
    else:
        fast = native_ops.global_pool_step(x, y, op, last, ctx.threads)
    if fast is not None:
        ctx.note(node, f"native {ctx.notes.get(node.name, '')}")
        return fast
    y2 = view_as(y, (n, c))
    if last:
        # (N, P, C): the reduction adds whole contiguous channel rows
        x3 = view_as(x, (n, p, c))
        return lambda: reduce(x3, axis=1, out=y2)
    # a contiguous (N, C, P) view reduces along the fastest axis in one ufunc call
    x3 = view_as(x, (n, c, p))
    return lambda: reduce(x3, axis=2, out=y2)


@kernel("GlobalAveragePool")
def global_average_pool(node: Node, ctx) -> Callable[[], None]:
    ctx.note(node, ("NHWC " if channels_last(node) else "") + "mean over spatial dims")
    return _global(node, ctx, np.mean)


@kernel("GlobalMaxPool")
def global_max_pool(node: Node, ctx) -> Callable[[], None]:
    ctx.note(node, ("NHWC " if channels_last(node) else "") + "max over spatial dims")
    return _global(node, ctx, np.max)


@kernel("MaxUnpool")
def max_unpool(node: Node, ctx) -> Callable[[], None]:
    """Y = zeros, Y.flat[I] = X (ONNX MaxUnpool: I as MaxPool's Indices output gives it, flat
    positions into the unpooled tensor of the default shape, (in - 1) * stride + kernel - pads;
    a larger ``output_shape`` pads that tensor with zeros at the end of each dim, as ONNX's
    reference does). I is data: every run checks it lies inside."""
    x, ind, y = ctx.value(node.inputs[0]), ctx.value(node.inputs[1]), ctx.value(node.outputs[0])
    if ind.shape != x.shape or ind.dtype != np.int64:
        raise ShapeError(f"MaxUnpool {node.name!r}: indices {ind.dtype}{ind.shape} must be int64 of X's shape {x.shape}")
    if channels_last(node):
        raise UnsupportedOpError(f"MaxUnpool {node.name!r}: only data_layout NCHW")
    nsp = x.ndim - 2
    ks = [int(k) for k in node.attrs.get("kernel_shape") or []]
    strides = [int(s) for s in node.attrs.get("strides") or [1] * nsp]
    pads = [int(p) for p in node.attrs.get("pads") or [0] * (2 * nsp)]
    if len(ks) != nsp or len(strides) != nsp or len(pads) != 2 * nsp:
        raise ShapeError(f"MaxUnpool {node.name!r}: kernel_shape/strides/pads do not fit rank {x.ndim}")
    default = x.shape[:2] + tuple((d - 1) * s + k - pads[i] - pads[i + nsp]
                                  for i, (d, k, s) in enumerate(zip(x.shape[2:], ks, strides)))
    if any(d > e for d, e in zip(default, y.shape)):
        raise ShapeError(f"MaxUnpool {node.name!r}: output_shape {y.shape} is smaller than {default}")
    dense = y if default == y.shape else ctx.workspace(default, y.dtype)
    corner = tuple(slice(0, d) for d in default)
    flat = dense.reshape(-1)
    if not np.shares_memory(flat, dense):
        raise UnsupportedOpError(f"MaxUnpool {node.name!r}: output is not contiguous")
    xf, idx, size = x.reshape(-1), ind.reshape(-1), dense.size

    def unpool():
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= size):
            raise ShapeError(f"MaxUnpool {node.name!r}: an index lies outside the {size}-element output")
        flat.fill(0)
        flat[idx] = xf
        if dense is not y:
            y.fill(0)
            y[corner] = dense
    ctx.note(node, f"max unpool {x.shape} -> {y.shape} (scatter)")
    return unpool
