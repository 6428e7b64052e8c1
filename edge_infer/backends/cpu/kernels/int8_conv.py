"""int8 Conv / FusedConv (TFLite CONV_2D / DEPTHWISE_CONV_2D semantics, 1-D/2-D/3-D).

Tensors: x int8 per-tensor (s_x, zp_x); W int8 constant, symmetric per output channel
(s_w[m], zero point 0, axis 0); bias int32 (scale s_x * s_w[m], zero point 0) or none;
y int8 per-tensor (s_y, zp_y). FusedConv adds a residual Z (int8 per-tensor (s_z, zp_z))
and a clamp (Relu / Clip; other activations are separate lookup-table ops in an int8 graph,
which the CPU plan may fuse into the conv: ``fuse_int8_activation.py``; the conv then
requantizes to the activation's input parameters and maps each clamped output q through the
activation's table (indexed by q's bit pattern), after the residual).

Math, per output channel m::

    acc[m]  = sum_k x_pad[k] * w[m, k] + (bias[m] - zp_x * sum_k w[m, k])      (int32)
    y       = clamp(zp_y + MBQM(acc, M_m) [+ MBQM(z - zp_z, M_z)], lo, hi)

with M_m = s_x * s_w[m] / s_y and M_z = s_z / s_y as (int32 multiplier, shift) pairs
(``quantize_multiplier``), MBQM = TFLite's MultiplyByQuantizedMultiplier, and [lo, hi] the
quantized clamp. The input is padded with zp_x (the quantized real zero), so folding the
zero-point term into the bias at prepare is exact. The sum runs as float32 BLAS on int8
values over K-chunks of <= 1024 (exact, see int8_common), then in int64.

Algorithms as in the float kernel: pointwise (1x1: the input is the column matrix),
depthwise (per-tap multiply-adds; <= 1024 taps stay exact in float32), im2col (grouped when
group > 1); NCHW, or NHWC with ``data_layout="NHWC"``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ....ops.shapes import channels_last
from .. import native
from ..native import kernels as native_kernels
from .conv import COLS_CAP, band_note, band_rows, bands, padded_input, tap_views, view_as
from ....ops.conv import conv_geometry
from ....ops.qmath import conv_requant_params, requant_mode
from .int8_common import (EXACT_K, ChunkedGemm, Requantizer, clamp_range, int8_kernel, per_tensor,
                          qparams, quantize_multiplier, requantize, scratch)
from ..fuse_int8_activation import activation_table, fused_activation
from ..fuse_int8_input import prologue, quantized_input


def folded_bias(ctx, node: Node, w_int: np.ndarray, zp_x: int, m: int) -> np.ndarray:
    """bias[m] - zp_x * sum_k w[m, k] as int64 (bias: input 2, int32, or zeros)."""
    bname = node.inputs[2] if len(node.inputs) > 2 else ""
    if bname:
        b = ctx.const(bname)
        if b is None:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 conv needs a constant bias")
        if b.dtype != np.int32:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 conv bias must be int32, got {b.dtype}")
        b = b.reshape(-1).astype(np.int64)
        if b.size != m:
            raise ShapeError(f"{node.op} {node.name!r}: bias has {b.size} values for {m} channels")
    else:
        b = np.zeros(m, np.int64)
    return b - int(zp_x) * w_int.reshape(m, -1).astype(np.int64).sum(axis=1)


def residual_table(ctx, node: Node, z_name: str, s_y: float):
    """(z, table): the residual's array and MBQM(v - zp_z, s_z / s_y) for every int8 value v,
    an int64 table indexed by v's uint8 bit pattern."""
    z = ctx.value(z_name)
    if z.dtype != np.int8:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: residual {z_name!r} must be int8, got {z.dtype}")
    s_z, zp_z = per_tensor(ctx, z_name, "residual")
    qz, shz = quantize_multiplier(float(np.float32(s_z)) / float(np.float32(s_y)))
    values = np.arange(-128, 128, dtype=np.int64)
    table = np.empty(256, np.int64)
    table[values.astype(np.int8).view(np.uint8)] = requantize(values - zp_z, qz, shz)
    return z, table


def residual_stage(ctx, node: Node, z_name: str, s_y: float, shape) -> Callable:
    """A function adding MBQM(z - zp_z, s_z / s_y) onto an int64 accumulator (None without Z).

    The term depends on the int8 value of z alone, so it is a 256-entry table computed with
    the integer requantization at prepare: one gather per run instead of a requantization."""
    if not z_name:
        return None
    z, table = residual_table(ctx, node, z_name, s_y)
    zt = scratch(ctx, "residual_i64", shape, np.int64)
    zu = z.view(np.uint8).reshape(shape)
    take, add = np.take, np.add

    def add_residual(acc):
        take(table, zu, out=zt, mode="clip")
        add(acc, zt, out=acc)
    return add_residual


@int8_kernel("Conv", "FusedConv")
def int8_conv(node: Node, ctx) -> Callable[[], None]:
    fin = quantized_input(node)
    if fin is None:
        return _int8_conv(node, ctx, ctx.value(node.inputs[0]), node.inputs[0])
    # the plan handed this stem conv its float input (fuse_int8_input.py): the stem kernel
    # quantizes it; should the kernel refuse the conv, a prologue quantizes into a workspace
    step = _int8_conv(node, ctx, None, fin.via, fin)
    if step is not None:
        return step
    x, quantize = prologue(node, ctx)
    conv = _int8_conv(node, ctx, x, fin.via)

    def quantize_then_conv():
        quantize()
        conv()
    return quantize_then_conv


def _int8_conv(node: Node, ctx, x, x_name: str, fin=None) -> Callable[[], None]:
    """The int8 conv ``node`` on ``x`` (int8, the quantization of tensor ``x_name``); with
    ``fin`` (a ``QuantizedInput``) x is None and node.inputs[0] the float tensor: the native
    stem step quantizing it, or None."""
    last = channels_last(node)
    y = ctx.value(node.outputs[0])
    x_shape = tuple(ctx.tensor(x_name).shape) if x is None else x.shape
    wname = node.inputs[1]
    w = ctx.const(wname)
    if w is None:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 conv needs constant weights")
    x_dtype = np.dtype(np.int8) if x is None else x.dtype
    if x_dtype != np.int8 or w.dtype != np.int8 or y.dtype != np.int8:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 conv wants int8 x, W, y; got "
                                 f"{x_dtype}, {w.dtype}, {y.dtype}")
    s_x, zp_x = per_tensor(ctx, x_name, "input")
    fused = fused_activation(node)          # a table activation after the conv, in this plan
    lut = activation_table(node, ctx)
    # the conv's own requantization: to its output, or to the fused activation's input
    s_y, zp_y = per_tensor(ctx, fused.via if fused else node.outputs[0], "output")
    wq = qparams(ctx, wname, "weights")
    if np.any(wq.zero_point != 0):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 weights must be symmetric (zero point 0)")
    geo = conv_geometry(node, x_shape, w.shape, y.shape, last)
    n, c, m, cg, group, nsp = geo.n, geo.c, geo.m, geo.cg, geo.group, geo.nsp
    insp, kernel, strides, dil = list(geo.in_sp), list(geo.kernel), list(geo.strides), list(geo.dilations)
    pads, osp = list(geo.pads), list(geo.out_sp)
    s_w = wq.scale if wq.scale.size == m else np.full(m, wq.s, np.float32)
    if wq.scale.size not in (1, m) or (wq.scale.size == m and m > 1 and wq.axis not in (0, None)):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: weight scales must be per tensor or per "
                                 f"output channel (axis 0); got {wq.scale.size} along axis {wq.axis}")
    act = str(node.attrs.get("activation", "") or "") if node.op == "FusedConv" else ""
    lo, hi = clamp_range(act, node.attrs.get("activation_params", []) or [], s_y, zp_y)
    ksize = int(np.prod(kernel))
    p = int(np.prod(osp))
    if y.size == 0:
        return lambda: None

    q, sh = conv_requant_params(s_x, s_w, s_y, requant_mode(node))
    bias = folded_bias(ctx, node, w, zp_x, m)
    float_input = (ctx.value(node.inputs[0]), fin.scale, fin.nchw) if fin is not None else None
    step = _native_conv(ctx, node, x=x, y=y, w=w, bias=bias, q=q, shift=sh, zp_x=zp_x, zp_y=zp_y, lo=lo, hi=hi,
                        act=act, s_y=s_y, last=last, group=group,
                        window=(kernel, strides, dil, pads, insp, osp), lut=lut, n=n, float_input=float_input)
    if step is not None or fin is not None:
        return step
    # accumulator layout: NCHW (N, M, P), per-channel params (M, 1); NHWC (N, P, M), params (M,)
    acc_shape = (n, p, m) if last else (n, m, p)
    cshape = (m,) if last else (m, 1)
    bias_b = bias.reshape(cshape)
    z_name = node.inputs[3] if node.op == "FusedConv" and len(node.inputs) > 3 else ""
    add = np.add
    store = clamp_store(lo, hi, lut)
    algo = _algorithm(group, c, cg, ksize, strides, pads)
    if algo != "im2col":                    # im2col requantizes band by band (_im2col_bands)
        acc = scratch(ctx, "acc_i64", acc_shape, np.int64)
        rq = Requantizer(q.reshape(cshape), sh.reshape(cshape), acc_shape, ctx, offset=zp_y)
        residual = residual_stage(ctx, node, z_name, s_y, acc_shape)
        y_acc = y.reshape(acc_shape)

        def output_stage():                 # the bias is already in acc (added by the GEMM step)
            rq(acc)                         # + zp_y
            if residual is not None:
                residual(acc)
            store(acc, y_acc)
    kdesc = "x".join(map(str, kernel))
    tag = ("NHWC " if last else "") + "int8 "
    epi = f"; {epilogue_note(z_name, act, fused)}"
    wf = w.astype(np.float32)

    if algo == "pointwise":
        xf = scratch(ctx, "in_f32", x.shape, np.float32)
        if last:
            gemm = ChunkedGemm(view_as(xf, (n * p, c)), np.ascontiguousarray(wf.reshape(m, c).T),
                               view_as(acc, (n * p, m)), ctx, bias=bias)
        else:
            gemm = ChunkedGemm(np.ascontiguousarray(wf.reshape(m, c)), view_as(xf, (n, c, p)), acc, ctx,
                               bias=bias_b)
        copyto = np.copyto

        def pointwise():
            copyto(xf, x)
            gemm()
            output_stage()
        ctx.note(node, f"{tag}pointwise 1x1 GEMM, float32 BLAS exact in {gemm.chunks} K-chunk(s){epi}")
        return pointwise

    xp, pad_step = padded_input(ctx, x, pads, fill=zp_x, last=last)

    if algo == "depthwise":
        mult = m // c
        if ksize > EXACT_K:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: depthwise kernel of {ksize} taps")
        taps = tap_views(xp, kernel, dil, strides, osp, last=last)
        wt = wf.reshape(c, mult, ksize)
        if last:
            if mult == 1:
                wtaps = [np.ascontiguousarray(wt[:, 0, k]) for k in range(ksize)]    # (C,)
                accf = scratch(ctx, "dw_acc_f32", y.shape, np.float32)
            else:
                taps = [t[..., None] for t in taps]                                  # (N,*out,C,1)
                wtaps = [np.ascontiguousarray(wt[:, :, k]) for k in range(ksize)]    # (C, mult)
                accf = scratch(ctx, "dw_acc_f32", (n, *osp, c, mult), np.float32)
        else:
            taps = [np.expand_dims(t, 2) for t in taps]                              # (N,C,1,*out)
            wtaps = [np.ascontiguousarray(wt[:, :, k].reshape((c, mult) + (1,) * nsp)) for k in range(ksize)]
            accf = scratch(ctx, "dw_acc_f32", (n, c, mult, *osp), np.float32)
        tmp = scratch(ctx, "dw_tmp_f32", accf.shape, np.float32)
        acc_v = acc.reshape(accf.shape)
        bias_dw = bias.reshape(c, mult) if last else bias.reshape((c, mult) + (1,) * nsp)
        if last and mult == 1:
            bias_dw = bias
        # the bias joins the float32 sums when they all stay below 2^24 (exact), else in int64
        f32_bias = ksize * 128 * 128 + int(np.abs(bias).max(initial=0)) <= (1 << 24)
        bias_f = bias_dw.astype(np.float32) if f32_bias else None
        first = (taps[0], wtaps[0])
        rest = list(zip(taps[1:], wtaps[1:]))
        mul, copyto = np.multiply, np.copyto

        def depthwise():
            pad_step()
            mul(first[0], first[1], out=accf)
            for xv, wv in rest:
                mul(xv, wv, out=tmp)
                add(accf, tmp, out=accf)
            if bias_f is not None:
                add(accf, bias_f, out=accf)
                copyto(acc_v, accf, casting="unsafe")
            else:
                copyto(acc_v, accf, casting="unsafe")
                add(acc_v, bias_dw, out=acc_v)
            output_stage()
        ctx.note(node, f"{tag}depthwise {kdesc} (multiplier {mult}, {ksize} exact float32 "
                       f"multiply-adds){epi}")
        return depthwise

    # im2col; the column rows are (channel, tap) in NCHW and (tap, channel) in NHWC,
    # matching the packed weights. In bands of output rows (first spatial dim), each band
    # multiplied, requantized and written before the next, so the columns and the int64
    # accumulator scratch hold one band (at most COLS_CAP bytes unless one row needs more,
    # less under a workspace budget): the sums are exact, so banded and whole results are
    # equal bit for bit.
    kc = cg * ksize
    mg = m // group
    rest = p // osp[0]
    # per output row: float32 columns, and per output value the int64 accumulator, its
    # requantization mask, the float32 product, the grouped copy and the residual term
    per_value = 8 + 8 + 4 + (8 if group > 1 else 0) + (8 if z_name else 0)
    row_bytes = group * kc * rest * 4 + m * rest * per_value
    rows = band_rows(ctx, row_bytes, osp[0], 0, COLS_CAP)
    flat = scratch(ctx, "im2col", (group * kc * rows * rest,), np.float32)
    accs = scratch(ctx, "acc_i64", (rows * rest * m,), np.int64)
    zu = None
    if z_name:
        z, table = residual_table(ctx, node, z_name, s_y)
        zu = z.view(np.uint8).reshape(acc_shape)
    requantizers = {}                     # per band length (the last band may be shorter)
    take, copyto = np.take, np.copyto

    def band_stage(b: int, r0: int, r1: int):
        """(the band's accumulator, the step requantizing it into y's band)."""
        nb = (r1 - r0) * rest
        band = slice(r0 * rest, r1 * rest)
        a = view_as(accs[:nb * m], (nb, m) if last else (m, nb))
        if nb not in requantizers:
            requantizers[nb] = Requantizer(q.reshape(cshape), sh.reshape(cshape), a.shape, ctx, offset=zp_y)
        rq = requantizers[nb]
        yb = y.reshape(acc_shape)[b][band] if last else y.reshape(acc_shape)[b][:, band]
        zb = None if zu is None else (zu[b][band] if last else zu[b][:, band])
        zt = None if zu is None else scratch(ctx, "residual_i64", a.shape, np.int64)

        def stage():
            rq(a)                             # + zp_y (the bias is already in a)
            if zb is not None:
                take(table, zb, out=zt, mode="clip")
                add(a, zt, out=a)
            store(a, yb)
        return a, stage

    jobs = []            # (window band, its column view, GEMM into the band accumulator, output stage)
    if not last:
        s_n, s_c = xp.strides[:2]
        sp_st = xp.strides[2:]
        win_shape = (group, cg, *kernel, *osp)
        win_strides = ((s_c * cg, s_c) + tuple(sp_st[i] * dil[i] for i in range(nsp))
                       + tuple(sp_st[i] * strides[i] for i in range(nsp)))
        wins = [as_strided(xp[b], win_shape, win_strides, writeable=False) for b in range(n)]
        w3 = np.ascontiguousarray(wf.reshape(group, mg, kc))
        for b in range(n):
            for r0, r1 in bands(osp[0], rows):
                nb = (r1 - r0) * rest
                cols = view_as(flat[:group * kc * nb], (group, kc, nb))
                a, stage = band_stage(b, r0, r1)
                jobs.append((wins[b][(slice(None),) * (nsp + 2) + (slice(r0, r1),)],
                             view_as(cols, (group, cg, *kernel, r1 - r0, *osp[1:])),
                             ChunkedGemm(w3, cols, view_as(a, (group, mg, nb)), ctx,
                                         bias=bias.reshape(group, mg, 1)), stage))
    else:
        sp_st = xp.strides[1:1 + nsp]
        s_c = xp.strides[-1]
        win_shape = (group, *osp, *kernel, cg)
        win_strides = ((s_c * cg,) + tuple(sp_st[i] * strides[i] for i in range(nsp))
                       + tuple(sp_st[i] * dil[i] for i in range(nsp)) + (s_c,))
        wins = [as_strided(xp[b], win_shape, win_strides, writeable=False) for b in range(n)]
        # W (g, Mg, Cg, *k) -> (g, *k, Cg, Mg) -> (g, kc, Mg)
        wv = wf.reshape(group, mg, cg, ksize).transpose(0, 3, 2, 1)
        w3 = np.ascontiguousarray(wv).reshape(group, kc, mg)
        res = scratch(ctx, "grouped_i64", (group, rows * rest, mg), np.int64) if group > 1 else None
        for b in range(n):
            for r0, r1 in bands(osp[0], rows):
                nb = (r1 - r0) * rest
                cols = view_as(flat[:group * kc * nb], (group, nb, kc))
                cols_v = view_as(cols, (group, r1 - r0, *osp[1:], *kernel, cg))
                win = wins[b][:, r0:r1]
                a, stage = band_stage(b, r0, r1)
                if group == 1:
                    jobs.append((win, cols_v, ChunkedGemm(cols[0], w3[0], a, ctx, bias=bias), stage))
                    continue
                g = ChunkedGemm(cols, w3, res[:, :nb], ctx, bias=bias.reshape(group, 1, mg))
                dst = view_as(a, (nb, group, mg)).transpose(1, 0, 2)

                def grouped(g=g, dst=dst, r=res[:, :nb]):
                    g()
                    copyto(dst, r)
                grouped.chunks = g.chunks
                jobs.append((win, cols_v, grouped, stage))
    chunks = jobs[0][2].chunks if jobs else 1

    def im2col():
        pad_step()
        for win, cols_v, gemm, stage in jobs:
            copyto(cols_v, win)
            gemm()
            stage()
    ctx.note(node, f"{tag}{'grouped ' if group > 1 else ''}im2col {kdesc} + GEMM ({m}x{kc} @ {kc}x{p}"
                   f"{f', {group} groups' if group > 1 else ''}), float32 BLAS exact in {chunks} "
                   f"K-chunk(s){epi}" + band_note(ctx, node, osp[0], rows, row_bytes))
    return im2col


#: fuse_int8_activation.py hands this kernel the table of the activation it fuses
int8_conv.applies_table_activation = True


def clamp_store(lo: int, hi: int, lut) -> Callable:
    """store(acc, y): the int64 accumulator (requantized, + zp_y) clamped to [lo, hi] into int8
    ``y``; with a fused activation's table ``lut`` (indexed by q's uint8 bit pattern,
    ``activation_table``), y = lut[q mod 256] (acc is clamped in place first)."""
    clip = np.clip
    if lut is None:
        return lambda acc, y: clip(acc, lo, hi, out=y, casting="unsafe")
    take = np.take

    def store(acc, y):
        clip(acc, lo, hi, out=acc)
        take(lut, acc, out=y, mode="wrap")      # q = -128..127 -> its bit pattern q mod 256
    return store


def epilogue_note(z_name: str, act: str, fused) -> str:
    """The plan note's epilogue: requantization, residual, clamp, a fused activation's table."""
    return (f"requantize per channel (MBQM){', + residual' if z_name else ''}{', clamp ' + act if act else ''}"
            + (f", + {f'x * {fused.op}(x)' if fused.gate else fused.op} "
               f"({', '.join(repr(n) for n in (fused.node, fused.gate) if n)}) as a 256-entry table" if fused else ""))


def _native_conv(ctx, node: Node, *, x, y, w, bias, q, shift, zp_x: int, zp_y: int, lo: int, hi: int, act: str,
                 s_y: float, last: bool, group: int, window, lut=None, n: int = 1, float_input=None):
    """The native kernel for a group-1 conv (src/int8_gemm.c: packed weights, int32 accumulation,
    fused epilogue) or a depthwise one (src/depthwise.c), 1-D or 2-D; None when the library is
    missing or the node does not fit (the numpy algorithms serve). ``float_input``: as
    native_kernels.int8_conv_step's (x None): the stem kernel quantizes it, or None."""
    kernel, strides, dil, pads, insp, osp = window
    m, cg = w.shape[:2]
    c, nsp = cg * group, len(kernel)
    depthwise = group == c == m and cg == 1 and group > 1
    if native.lib is None or (group != 1 and not depthwise) or nsp not in (1, 2) or (float_input and depthwise):
        return None
    kdesc = "x".join(map(str, kernel))
    if nsp == 1:                            # a 1-D conv as a 2-D one of height 1
        kernel, strides, dil, osp, insp = [1] + kernel, [1] + strides, [1] + dil, [1] + list(osp), [1] + list(insp)
        pads = [0, pads[0], 0, pads[1]]
    z_name = node.inputs[3] if node.op == "FusedConv" and len(node.inputs) > 3 else ""
    z = ztab = None
    if z_name:
        z, ztab = residual_table(ctx, node, z_name, s_y)
    epi = f"{epilogue_note(z_name, act, fused_activation(node))}; {native_kernels.threads_of(ctx)} thread(s)"
    geometry = (n, c, insp[0], insp[1], m, osp[0], osp[1], kernel[0], kernel[1], strides[0], strides[1],
                dil[0], dil[1], pads[0], pads[1])
    if depthwise:
        step = native_kernels.depthwise_step(ctx, x=x, y=y, w_ct=w.reshape(c, -1), geometry=geometry[:4] + geometry[5:],
                                             nchw=not last, bias=bias, z=z, q=q, shift=shift, zp_x=zp_x,
                                             zp_y=zp_y, lo=lo, hi=hi, ztab=ztab, lut=lut)
        if step is not None:
            ctx.note(node, f"{'NHWC ' if last else ''}int8 native depthwise {kdesc} ({getattr(step, 'kernel_name', native_kernels.dw_int8_isa_name(last))}, "
                           f"int32 accumulation); {epi}")
        return step
    w_mk = w.reshape(m, cg, -1).transpose(0, 2, 1).reshape(m, -1)          # K: (tap, channel)
    step = native_kernels.int8_conv_step(ctx, x=x, y=y, w_mk=w_mk, bias=bias, q=q, shift=shift, zp_x=zp_x,
                                         zp_y=zp_y, lo=lo, hi=hi, geometry=geometry, in_nchw=not last,
                                         out_nchw=not last, z=z, ztab=ztab, lut=lut, float_input=float_input)
    if step is not None:
        algo = "pointwise" if _algorithm(1, c, c, int(np.prod(kernel)), strides, pads) == "pointwise" \
            else f"im2col {kdesc}"
        path = getattr(step, "path", "")
        if getattr(step, "stem", False):      # few input channels: native/kernels.int8_stem_step
            ctx.note(node, f"NHWC int8 native stem conv {kdesc} ({path}); {epi}")
            return step
        ctx.note(node, f"{'NHWC ' if last else ''}int8 native {algo} GEMM ({step.kind_name}, packed "
                       f"weights, int32 accumulation{'; ' + path if path else ''}); {epi}")
    return step


def _algorithm(group: int, c: int, cg: int, ksize: int, strides, pads) -> str:
    if group == 1 and ksize == 1 and all(s == 1 for s in strides) and not any(pads):
        return "pointwise"
    if group == c and cg == 1 and group > 1:
        return "depthwise"
    return "im2col"
