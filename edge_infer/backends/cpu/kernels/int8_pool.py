"""int8 AveragePool and GlobalAveragePool (TFLite AVERAGE_POOL_2D; MEAN when requantizing).

With the output's quantization parameters equal to the input's (what the quantizer
assigns, and TFLite's int8 spec requires for AVERAGE_POOL_2D), each output is the rounded
mean of raw int8 values, rounding as ``integer_ops/pooling.h``::

    acc = sum of window values;  y = acc > 0 ? (acc + n/2) / n : (acc - n/2) / n   (C division)

``n`` counts the taps inside the input (``count_include_pad=0``), or inside input + explicit
pads (``=1``, where a pad holds zp, the quantized real zero). Window sums run as float32
separable sums (exact: at most 2^24 / 128 taps). If the output parameters differ, the sum of
(x - zp_x) is requantized instead: ``y = zp_y + MBQM(sum, s_x / (n s_y))`` (TFLite MEAN).
MaxPool and GlobalMaxPool need no int8 kernel: the float kernels already run on any dtype
(padding with the dtype's minimum) and max commutes with the monotone quantization.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ....ops.shapes import channels_last, split_layout
from ..native import ops as native_ops
from .conv import padded_input, view_as
from .int8_common import QMAX, QMIN, Requantizer, int8_kernel, per_tensor, quantize_multiplier, quantize_multipliers, scratch
from .pool import _geometry, _window_counts, separable_reduce


def rounded_mean_step(acc: np.ndarray, count, y: np.ndarray, ctx) -> Callable[[], None]:
    """acc (int64 sums, in place) -> TFLite's rounded division by ``count`` -> clamp -> y."""
    count = np.asarray(count, np.int64)
    half = count // 2
    m = scratch(ctx, "rq_mask", acc.shape, np.int64)

    def step():
        np.right_shift(acc, 63, out=m)              # -1 below zero, else 0
        np.absolute(acc, out=acc)
        np.add(acc, half, out=acc)
        np.floor_divide(acc, count, out=acc)        # (|acc| + n/2) / n: C truncation of either sign
        np.bitwise_xor(acc, m, out=acc)             # restore the sign: (u ^ m) - m
        np.subtract(acc, m, out=acc)
        np.clip(acc, QMIN, QMAX, out=y, casting="unsafe")
    return step


def _same_params(ctx, node: Node):
    s_x, zp_x = per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    return (np.float32(s_x) == np.float32(s_y) and zp_x == zp_y), s_x, zp_x, s_y, zp_y


def _requant_mean_step(acc, count, s_x, zp_x, s_y, zp_y, y, ctx):
    """acc holds raw sums: subtract n zp_x, MBQM by s_x / (n s_y), add zp_y, clamp."""
    count = np.asarray(count, np.int64)
    flat = count.reshape(-1)
    q, sh = quantize_multipliers([float(np.float32(s_x)) / (float(c) * float(np.float32(s_y))) for c in flat])
    q, sh = q.reshape(count.shape), sh.reshape(count.shape)
    rq = Requantizer(q, sh, acc.shape, ctx)
    offs = count * zp_x

    def step():
        np.subtract(acc, offs, out=acc)
        rq(acc)
        if zp_y:
            np.add(acc, zp_y, out=acc)
        np.clip(acc, QMIN, QMAX, out=y, casting="unsafe")
    return step


@int8_kernel("AveragePool")
def int8_average_pool(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if x.dtype != np.int8 or y.dtype != np.int8:
        raise UnsupportedOpError(f"AveragePool {node.name!r}: int8 kernel wants int8 in and out")
    ks, strides, dil, pads, osp, extra = _geometry(node, x, y)
    if y.size == 0:
        return lambda: None
    same, s_x, zp_x, s_y, zp_y = _same_params(ctx, node)
    last = channels_last(node)
    nsp = x.ndim - 2
    insp = split_layout(x.shape, last)[2]
    include_pad = bool(node.attrs.get("count_include_pad", 0))
    if include_pad and any(extra):
        raise UnsupportedOpError(f"AveragePool {node.name!r}: int8 with count_include_pad and ceil_mode "
                                 "overhang is not supported")
    cnt = np.ones(osp, np.int64)
    for i in range(nsp):
        lo = 0 if include_pad else pads[i]
        hi = pads[i] + insp[i] + (pads[i + nsp] if include_pad else 0)
        c = _window_counts(insp[i], osp[i], ks[i], strides[i], dil[i], lo, hi)
        shape = [1] * nsp
        shape[i] = osp[i]
        cnt = cnt * c.reshape(shape)
    if (cnt == 0).any():
        raise ShapeError(f"AveragePool {node.name!r}: a window lies entirely in padding")
    if same and not include_pad and nsp == 2:
        fast = native_ops.maxpool_s8_step(x, y, ks, strides, dil, pads, last, ctx.threads, op="avg")
        if fast is not None:
            ctx.note(node, f"int8 native average pool {'x'.join(map(str, ks))} (TFLite rounded mean)")
            return fast
    # pads hold raw 0 (not counted) or zp (a counted real zero)
    xp, pad_step = padded_input(ctx, x, pads, extra, fill=zp_x if include_pad else 0, last=last)
    xf = scratch(ctx, "in_f32", xp.shape, np.float32)
    if last:
        cnt = cnt[..., None]
    count = int(cnt.flat[0]) if (cnt == cnt.flat[0]).all() else cnt
    sums = scratch(ctx, "gemm_f32", y.shape, np.float32)
    reduce = separable_reduce(ctx, xf, sums, ks, strides, dil, osp, np.add, last)
    acc = scratch(ctx, "acc_i64", y.shape, np.int64)
    if same:
        final = rounded_mean_step(acc, count, y, ctx)
    else:
        final = _requant_mean_step(acc, np.broadcast_to(np.asarray(count), y.shape).copy()
                                   if np.ndim(count) else count, s_x, zp_x, s_y, zp_y, y, ctx)
    copyto = np.copyto

    def avgpool():
        pad_step()
        copyto(xf, xp)
        reduce()
        copyto(acc, sums, casting="unsafe")
        final()
    ctx.note(node, f"int8 average pool {'x'.join(map(str, ks))} (exact float32 sums, "
                   f"{'TFLite rounded mean' if same else 'requantized mean'})")
    return avgpool


@int8_kernel("GlobalAveragePool")
def int8_global_average_pool(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if x.dtype != np.int8 or y.dtype != np.int8:
        raise UnsupportedOpError(f"GlobalAveragePool {node.name!r}: int8 kernel wants int8 in and out")
    last = channels_last(node)
    n, c, sp = split_layout(x.shape, last)
    p = int(np.prod(sp))
    if x.size == 0:
        return lambda: None
    same, s_x, zp_x, s_y, zp_y = _same_params(ctx, node)
    acc = scratch(ctx, "acc_i64", (n, c), np.int64)
    y2 = view_as(y, (n, c))
    x3 = view_as(x, (n, p, c)) if last else view_as(x, (n, c, p))
    axis = 1 if last else 2
    if same:
        fast = native_ops.global_pool_s8_step(x, y, "avg", last, ctx.threads)
        if fast is not None:
            ctx.note(node, f"int8 native mean over {p} positions (TFLite rounded mean)")
            return fast
    else:
        q, sh = quantize_multiplier(float(np.float32(s_x)) / (float(p) * float(np.float32(s_y))))
        fast = native_ops.global_pool_s8_step(x, y, "avg", last, ctx.threads, (q, sh, zp_x, zp_y))
        if fast is not None:
            ctx.note(node, f"int8 native mean over {p} positions (requantized)")
            return fast
    final = rounded_mean_step(acc, p, y2, ctx) if same else \
        _requant_mean_step(acc, p, s_x, zp_x, s_y, zp_y, y2, ctx)

    def gap():
        np.sum(x3, axis=axis, dtype=np.int64, out=acc)
        final()
    ctx.note(node, f"int8 mean over {p} positions ({'TFLite rounded mean' if same else 'requantized'})")
    return gap
