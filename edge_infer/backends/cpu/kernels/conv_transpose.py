"""ConvTranspose (float): the native NHWC sub-pixel kernel (``convt_native``), else numpy.

The layout pass puts 2-D ConvTranspose in NHWC (``data_layout="NHWC"``), like Conv. There the
native kernel runs it as one GEMM per output phase with the bias fused (native/src/convtranspose.c).
The numpy kernel (either layout: the native library missing, a computed weight, 3-D) is a
matmul giving every kernel tap's contribution of every input pixel, then col2im: a strided
accumulation per tap into a zeroed output workspace covering the uncropped output, cropped into y.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ....errors import ShapeError
from ....ir import Node
from ....ops.conv import conv_transpose_geometry
from ....ops.shapes import channels_last, join_layout, split_layout
from ..registry import kernel
from . import convt_native
from .conv import _bias_step, _chain, view_as
from .conv_operands import _weights


@kernel("ConvTranspose")
def conv_transpose(node: Node, ctx) -> Callable[[], None]:
    last = channels_last(node)
    if last:
        step, why = convt_native.convt_f32_step(node, ctx)
        if step is not None:
            return step
    else:                           # 3-D, or a graph converted with --layout nchw
        why = "NCHW (the sub-pixel kernel is NHWC-only)" if convt_native._lib_ok() else ""
    x = ctx.value(node.inputs[0])
    y = ctx.value(node.outputs[0])
    dtype = y.dtype
    w = _weights(ctx, node.inputs[1], dtype)
    n, c, insp = split_layout(x.shape, last)
    insp = [int(d) for d in insp]
    nsp = x.ndim - 2
    group = int(node.attrs.get("group", 1))
    if w.shape[0] != c or c % group:
        raise ShapeError(f"ConvTranspose {node.name!r}: X {x.shape}, W {w.shape}, group {group} disagree")
    cg, mg = c // group, w.shape[1]
    m = mg * group
    kernel_ = [int(k) for k in w.shape[2:]]
    ksize = int(np.prod(kernel_))
    strides = [int(s) for s in (node.attrs.get("strides") or [1] * nsp)]
    dil = [int(d) for d in (node.attrs.get("dilations") or [1] * nsp)]
    pads, osp = conv_transpose_geometry(insp, kernel_, node.attrs)
    if tuple(y.shape) != join_layout(n, m, osp, last):
        raise ShapeError(f"ConvTranspose {node.name!r}: planned output {y.shape} != computed "
                         f"{join_layout(n, m, osp, last)}")
    pin = int(np.prod(insp))
    bias = _bias_step(ctx, node, y, m)
    if y.size == 0:
        return lambda: None
    # the accumulation buffer covers the full (uncropped) output and the crop window
    full = [strides[i] * (insp[i] - 1) + (kernel_[i] - 1) * dil[i] + 1 for i in range(nsp)]
    base = [max(0, -pads[i]) for i in range(nsp)]
    size = [base[i] + max(full[i], pads[i] + osp[i]) for i in range(nsp)]
    const_w = ctx.const(node.inputs[1]) is not None
    wstep = None
    if last:
        # per group (Cg, k*Mg): cols (group, pixel, tap, Mg); acc (*size, group, Mg)
        wv = view_as(w, (group, cg, mg, ksize)).transpose(0, 1, 3, 2)
        if const_w:
            wt = np.ascontiguousarray(wv).reshape(group, cg, ksize * mg)
        else:                   # a computed weight: repacked every run
            wbuf = ctx.workspace(wv.shape, dtype)
            wt = view_as(wbuf, (group, cg, ksize * mg))
            wstep = lambda: np.copyto(wbuf, wv)  # noqa: E731
        xs = [view_as(x[b], (pin, group, cg)).transpose(1, 0, 2) for b in range(n)]
        cols = ctx.scratch("deconv_cols", (group, pin, ksize, mg), dtype)
        cols_m = view_as(cols, (group, pin, ksize * mg))
        acc = ctx.scratch("deconv_acc", (*size, group, mg), dtype)       # zeroed every run
        sp_st, ch_st = acc.strides[:nsp], acc.strides[nsp:]
        adds = []
        for t, tap in enumerate(np.ndindex(*kernel_)):
            start = acc[tuple(slice(base[i] + tap[i] * dil[i], None) for i in range(nsp))]
            dst = as_strided(start, (*insp, group, mg), tuple(sp_st[i] * strides[i] for i in range(nsp)) + ch_st)
            src = np.moveaxis(view_as(cols[:, :, t, :], (group, *insp, mg)), 0, -2)
            adds.append((dst, src))
        crop = acc[tuple(slice(base[i] + pads[i], base[i] + pads[i] + osp[i]) for i in range(nsp))]
        ys = [view_as(y[b], (*osp, group, mg)) for b in range(n)]
        jobs = list(zip(xs, ys))
        mm = lambda xb: np.matmul(xb, wt, out=cols_m)  # noqa: E731
    else:
        # W (C, Mg, *k) -> per group (Mg*k, Cg): W^T packed once when constant
        wt = np.swapaxes(view_as(w, (group, cg, mg * ksize)), 1, 2)
        if const_w:
            wt = np.ascontiguousarray(wt)
        x3 = view_as(x, (n, group, cg, pin))
        cols = ctx.scratch("deconv_cols", (group, mg * ksize, pin), dtype)
        cols_t = view_as(cols, (m, ksize, *insp))
        acc = ctx.scratch("deconv_acc", (m, *size), dtype)       # zeroed every run
        sp_strides = acc.strides[1:]
        adds = []
        for t, tap in enumerate(np.ndindex(*kernel_)):
            start = acc[(slice(None),) + tuple(slice(base[i] + tap[i] * dil[i], None) for i in range(nsp))]
            dst = as_strided(start, (m, *insp), (acc.strides[0],) + tuple(sp_strides[i] * strides[i]
                                                                          for i in range(nsp)))
            adds.append((dst, cols_t[:, t]))
        crop = acc[(slice(None),) + tuple(slice(base[i] + pads[i], base[i] + pads[i] + osp[i]) for i in range(nsp))]
        jobs = [(x3[b], y[b]) for b in range(n)]
        mm = lambda xb: np.matmul(wt, xb, out=cols)  # noqa: E731
    add, copyto = np.add, np.copyto

    def deconv():
        for xb, yb in jobs:
            mm(xb)
            acc.fill(0)
            for dst, src in adds:
                add(dst, src, out=dst)
            copyto(yb, crop)
    ctx.note(node, f"{'NHWC ' if last else ''}matmul + col2im {'x'.join(map(str, kernel_))} ({group} group(s), "
                   f"{ksize} strided tap accumulations)" + (f"; not the sub-pixel kernel: {why}" if why else ""))
    return _chain([wstep, deconv, bias])
