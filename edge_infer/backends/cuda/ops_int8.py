"""int8 CUDA launchers (taken when a node's input or output is int8, as the CPU dispatch does).

The quantization parameters, multipliers, clamps and lookup tables are made by the CPU
backend's own functions (cpu/kernels/int8_*.py); the kernels (kernels/int8.cu, pool.cu) then
compute the same integers: int32 sums of (x - zp_x) * w (the CPU folds zp_x * sum(w) into
its bias and pads with zp_x: the same value), MultiplyByQuantizedMultiplier, zero point,
residual table, clamp. Results are bit-exact with the CPU backend as long as accumulators
stay in the int32 range (TFLite's own limit; |acc| < 2^31 holds for K < 33,000 at worst case).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...ops.shapes import channels_last, split_layout
from ...ops import qmath as I8
from ...ops.pool import window_counts as axis_window_counts
from ...ops.qmath import b_scales, clip_bounds, conv_requant_params, int8_bias, round_half_away
from ...ops.int8_tables import (LUT_OPS, activation_fn, add_params, lut_table, mul_multiplier, requant_table,
                                softmax_s8_params)
from .ops import BLOCK, _opt, broadcast_meta, copy_step, gemm_grid, grid_1d, i32, i64
from .registry import launcher
from .ops_nn import ConvGeom, _conv_setup, _pool_geom, conv_transpose_args

_VALUES = np.arange(-128, 128, dtype=np.int64)


def _int8(node: Node, ctx, *names):
    for nm in names:
        if nm and ctx.tensor(nm).dtype != "int8":
            raise UnsupportedOpError(f"{node.op} {node.name!r}: {nm!r} is {ctx.tensor(nm).dtype}, int8 expected")


def residual_table(ctx, node: Node, z_name: str, s_y: float):
    """(has_res, z buffer, int32 table) of MBQM(z - zp_z, s_z / s_y) over the 256 int8 values."""
    if not z_name:
        return i32(0), ctx.dummy(np.int8), ctx.dummy(np.int32)
    _int8(node, ctx, z_name)
    s_z, zp_z = I8.per_tensor(ctx, z_name, "residual")
    qz, shz = I8.quantize_multiplier(float(np.float32(s_z)) / float(np.float32(s_y)))
    table = I8.requantize(_VALUES - zp_z, qz, shz).astype(np.int32)
    return i32(1), ctx.buf(z_name), ctx.upload(table)


def _requant_arrays(ctx, q, sh):
    return ctx.upload(np.asarray(q, np.int64).astype(np.int32)), ctx.upload(np.asarray(sh, np.int64).astype(np.int32))


@launcher("Conv", "FusedConv", int8=True)
def int8_conv(node: Node, ctx):
    _int8(node, ctx, node.inputs[0], node.inputs[1], node.outputs[0])
    g, group, m, cg = _conv_setup(node, ctx)
    w = ctx.const(node.inputs[1])
    if w is None:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 conv needs constant weights")
    s_x, zp_x = I8.per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    wq = I8.qparams(ctx, node.inputs[1], "weights")
    if np.any(wq.zero_point != 0):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 weights must be symmetric (zero point 0)")
    if wq.scale.size not in (1, m) or (wq.scale.size == m and m > 1 and wq.axis not in (0, None)):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: weight scales must be per tensor or per output channel")
    s_w = wq.scale if wq.scale.size == m else np.full(m, wq.s, np.float32)
    act = str(node.attrs.get("activation", "") or "") if node.op == "FusedConv" else ""
    lo, hi = I8.clamp_range(act, node.attrs.get("activation_params", []) or [], s_y, zp_y)
    q, sh = _requant_arrays(ctx, *conv_requant_params(s_x, s_w, s_y, I8.requant_mode(node)))
    bname = _opt(node, 2)
    if bname:
        b = ctx.const(bname)
        if b is None or b.dtype != np.int32 or b.size != m:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 conv bias must be a constant int32 per channel")
        bias = ctx.upload(np.ascontiguousarray(b.reshape(-1), np.int32))
    else:
        bias = ctx.upload(np.zeros(m, np.int32))
    z_name = _opt(node, 3) if node.op == "FusedConv" else ""
    has_res, z, ztable = residual_table(ctx, node, z_name, s_y)
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    total = g.n * m * g.p
    if total == 0:
        return []
    tail = f"; MBQM per channel{', + residual' if z_name else ''}{', clamp ' + act if act else ''}"
    if group == g.c and cg == 1 and group > 1:
        wt = ctx.upload(np.ascontiguousarray(w.reshape(m, -1), np.int8))
        ctx.note(node, f"int8 depthwise {g.kh}x{g.kw}, one output per thread{tail}")
        return [ctx.launch("depthwise_s8", grid_1d(total), (BLOCK,),
                           (x, wt, bias, q, sh, z, ztable, y, i32(g.n), i32(g.c), i32(g.h), i32(g.w), i32(m),
                            i32(g.oh), i32(g.ow), i32(g.kh), i32(g.kw), i32(g.sh), i32(g.sw), i32(g.ph),
                            i32(g.pw), i32(g.dh), i32(g.dw), i32(int(g.last)), i32(zp_x), i32(zp_y), i32(lo),
                            i32(hi), has_res))]
    kg = cg * g.kh * g.kw
    mg = m // group
    rows = g.n * g.p
    wt = ctx.upload(np.ascontiguousarray(w.reshape(m, kg), np.int8))           # (M, Kg), K-contiguous
    pointwise = (group == 1 and g.last and g.kh == g.kw == 1 and g.sh == g.sw == 1
                 and not (g.ph or g.pw or g.ph_end or g.pw_end))
    steps = []
    if pointwise:
        cols = ctx.reshape(x, (rows, kg))                                       # NHWC 1x1: x is the matrix
    else:
        cols = ctx.scratch("cols_s8", (group, rows, kg), np.int8)
        steps.append(ctx.launch("im2col_s8", grid_1d(group * rows * kg), (BLOCK,),
                                (x, cols, *g.args(), i32(int(g.last)), i32(group), i32(zp_x))))
    ys = (g.p * m, m, 1) if g.last else (m * g.p, 1, g.p)
    steps.append(ctx.launch("gemm_s8_nt", gemm_grid(rows, mg, group), (256,),
                            (cols, wt, bias, q, sh, z, ztable, y, i32(rows), i32(mg), i32(kg), i32(kg), i32(kg),
                             i32(zp_x), i32(0), i32(zp_y), i32(lo), i32(hi), has_res, i64(rows * kg),
                             i64(mg * kg), i32(mg), i64(0), i32(g.p), i64(ys[0]), i64(ys[1]), i64(ys[2]))))
    ctx.note(node, f"int8 {'pointwise' if pointwise else 'im2col'} {g.kh}x{g.kw} + tiled int32 GEMM "
                   f"({rows}x{kg} . {mg}x{kg}{f', {group} groups' if group > 1 else ''}){tail}")
    return steps


@launcher("ConvTranspose", int8=True)
def int8_conv_transpose(node: Node, ctx):
    _int8(node, ctx, node.inputs[0], node.inputs[1], node.outputs[0])
    args = conv_transpose_args(node, ctx)
    m = int(args[4])
    w = ctx.const(node.inputs[1])
    if w is None:
        raise UnsupportedOpError(f"ConvTranspose {node.name!r}: int8 transposed conv needs constant weights")
    s_x, zp_x = I8.per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    s_w = I8.conv_transpose_weight_scales(ctx, node, m)
    q, sh = _requant_arrays(ctx, *conv_requant_params(s_x, s_w, s_y))
    bias = _bias_i32(ctx, node, _opt(node, 2), m)
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    total = int(np.prod(y.shape, dtype=np.int64))
    if total == 0:
        return []
    ctx.note(node, f"int8 direct transposed conv {int(args[7])}x{int(args[8])} stride {int(args[9])}, one "
                   "output per thread; MBQM per channel")
    return [ctx.launch("conv_transpose_s8", grid_1d(total), (BLOCK,),
                       (x, ctx.upload(np.ascontiguousarray(w, np.int8)), bias, q, sh, y, *args, i32(zp_x),
                        i32(zp_y)))]


def _gemm_s8(node, ctx, a, a_name, s_b, b_mat_nk, bias, n_cols, k_len, rows, zp_a, zp_b, batches=1,
             a_zs=0, b_zs=0, y_zs=0, extra_steps=()):
    """The int8 GEMM launch shared by Gemm and MatMul: y (rows x n_cols per batch)."""
    y = ctx.buf(node.outputs[0])
    s_a = I8.per_tensor(ctx, a_name, "A")[0]
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    if node.op in ("FusedGemm", "FusedMatMul"):
        act = str(node.attrs.get("activation", "") or "")
        lo, hi = I8.clamp_range(act, node.attrs.get("activation_params", []) or [], s_y, zp_y)
    else:
        lo, hi = -128, 127
    q, sh = _requant_arrays(ctx, *conv_requant_params(s_a, s_b, s_y, I8.requant_mode(node)))
    steps = list(extra_steps)
    steps.append(ctx.launch("gemm_s8_nt", gemm_grid(rows, n_cols, batches), (256,),
                            (a, b_mat_nk, bias, q, sh, ctx.dummy(np.int8), ctx.dummy(np.int32), y, i32(rows),
                             i32(n_cols), i32(k_len), i32(k_len), i32(k_len), i32(zp_a), i32(zp_b), i32(zp_y),
                             i32(lo), i32(hi), i32(0), i64(a_zs), i64(b_zs), i32(0), i64(y_zs), i32(rows),
                             i64(0), i64(n_cols), i64(1))))
    return steps


def _bias_i32(ctx, node, name, n):
    b = int8_bias(ctx, node, name, n)                        # int64, checked by the shared helper
    if np.abs(b).max(initial=0) >= 2 ** 31:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: bias outside int32")
    return ctx.upload(b.astype(np.int32))


@launcher("Gemm", "FusedGemm", int8=True)
def int8_gemm(node: Node, ctx):
    _int8(node, ctx, node.inputs[0], node.inputs[1], node.outputs[0])
    if float(node.attrs.get("alpha", 1.0)) != 1.0 or float(node.attrs.get("beta", 1.0)) != 1.0:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 Gemm needs alpha = beta = 1")
    at, bt = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    if len(at.shape) != 2 or len(bt.shape) != 2:
        raise ShapeError(f"{node.op} {node.name!r}: Gemm wants 2-D A and B")
    ta, tb = bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0))
    bh = ctx.const(node.inputs[1])
    if bh is None:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 Gemm needs a constant B on CUDA")
    if np.any(I8.qparams(ctx, node.inputs[1]).zero_point != 0):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: constant int8 B must be symmetric")
    b_nk = np.ascontiguousarray(bh if tb else bh.T, np.int8)                      # (N, K)
    n, k = b_nk.shape
    rows = int(at.shape[1] if ta else at.shape[0])
    s_b = b_scales(ctx, node, node.inputs[1], n, 0 if tb else 1)
    a = ctx.buf(node.inputs[0])
    extra = []
    if ta:
        a2 = ctx.scratch("gemm_at_s8", (rows, k), np.int8)
        extra = copy_step(ctx, a, lambda v: v.T, a2)
        a = a2
    zp_a = I8.per_tensor(ctx, node.inputs[0], "A")[1]
    steps = _gemm_s8(node, ctx, a, node.inputs[0], s_b, ctx.upload(b_nk),
                     _bias_i32(ctx, node, _opt(node, 2), n), n, k, rows, zp_a, 0, extra_steps=extra)
    ctx.note(node, f"int8 tiled GEMM {rows}x{k} . {n}x{k}, int32 sums, MBQM per column")
    return steps


@launcher("MatMul", "FusedMatMul", int8=True)
def int8_matmul(node: Node, ctx):
    _int8(node, ctx, node.inputs[0], node.inputs[1], node.outputs[0])
    at, bt = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    ash, bsh = tuple(at.shape), tuple(bt.shape)
    if len(ash) < 2 or len(bsh) < 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 MatMul wants operands of rank >= 2")
    k, n = bsh[-2], bsh[-1]
    zp_a = I8.per_tensor(ctx, node.inputs[0], "A")[1]
    s_b = b_scales(ctx, node, node.inputs[1], n, len(bsh) - 1)
    bias = _bias_i32(ctx, node, _opt(node, 2) if node.op == "FusedMatMul" else "", n)
    a = ctx.buf(node.inputs[0])
    bh = ctx.const(node.inputs[1])
    if len(bsh) == 2:
        rows = int(np.prod(ash[:-1], dtype=np.int64))
        if bh is not None:
            if np.any(I8.qparams(ctx, node.inputs[1]).zero_point != 0):
                raise UnsupportedOpError(f"{node.op} {node.name!r}: constant int8 B must be symmetric")
            b_nk, zp_b, extra = ctx.upload(np.ascontiguousarray(bh.T, np.int8)), 0, []
        else:
            zp_b = I8.per_tensor(ctx, node.inputs[1], "B")[1]
            b_nk = ctx.scratch("matmul_bt_s8", (n, k), np.int8)
            extra = copy_step(ctx, ctx.buf(node.inputs[1]), lambda v: v.T, b_nk)
        steps = _gemm_s8(node, ctx, a, node.inputs[0], s_b, b_nk, bias, n, k, rows, zp_a, zp_b,
                         extra_steps=extra)
    else:
        if ash[:-2] != bsh[:-2]:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 batched MatMul needs equal batch dims on CUDA")
        batches = int(np.prod(ash[:-2], dtype=np.int64))
        m = ash[-2]
        if bh is not None and np.any(I8.qparams(ctx, node.inputs[1]).zero_point != 0):
            raise UnsupportedOpError(f"{node.op} {node.name!r}: constant int8 B must be symmetric")
        zp_b = 0 if bh is not None else I8.per_tensor(ctx, node.inputs[1], "B")[1]
        b_nk = ctx.scratch("matmul_bt_s8", bsh[:-2] + (n, k), np.int8)
        extra = copy_step(ctx, ctx.buf(node.inputs[1]), lambda v: np.swapaxes(v, -1, -2), b_nk)
        steps = _gemm_s8(node, ctx, a, node.inputs[0], s_b, b_nk, bias, n, k, m, zp_a, zp_b,
                         batches=batches, a_zs=m * k, b_zs=n * k, y_zs=m * n, extra_steps=extra)
    ctx.note(node, f"int8 tiled GEMM ({'computed' if bh is None else 'constant'} B), int32 sums, MBQM")
    return steps


# -- element-wise ----------------------------------------------------------------------------------

@launcher(*LUT_OPS, int8=True)
def int8_lut(node: Node, ctx):
    _int8(node, ctx, node.inputs[0], node.outputs[0])
    s_x, zp_x = I8.per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    table = lut_table(activation_fn(node.op, node.attrs), s_x, zp_x, s_y, zp_y)      # index v + 128
    return _lut_step(ctx, node, table)


def _lut_step(ctx, node, table, x=None, y=None):
    x = ctx.buf(node.inputs[0]) if x is None else x
    y = ctx.buf(node.outputs[0]) if y is None else y
    n = int(np.prod(y.shape, dtype=np.int64))
    ctx.note(node, "int8 256-entry lookup table")
    return [ctx.launch("lut_s8", grid_1d(n), (BLOCK,), (x, y, ctx.upload(np.asarray(table, np.int8)), i64(n)))]


@launcher("Softmax", int8=True)
def int8_softmax(node: Node, ctx):
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    t = ctx.tensor(node.inputs[0])
    table, cols = softmax_s8_params(node, ctx, t.shape, t.dtype, ctx.tensor(node.outputs[0]).dtype)
    rows = int(np.prod(t.shape, dtype=np.int64)) // max(cols, 1)
    ctx.note(node, f"int8 Softmax over {cols} (integer exp table, exact rounded quotient)")
    return [ctx.launch("softmax_s8", grid_1d(rows), (BLOCK,), (x, y, ctx.upload(table), i64(rows), i64(cols)))]


@launcher("Relu", "Clip", int8=True)
def int8_clamp(node: Node, ctx):
    _int8(node, ctx, node.inputs[0], node.outputs[0])
    s_x, zp_x = I8.per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    a, b = (0.0, None) if node.op == "Relu" else clip_bounds(node, ctx)
    f = np.float32
    lo = -128 if a is None else max(-128, min(127, zp_y + int(round_half_away(f(a) / f(s_y)))))
    hi = 127 if b is None else min(127, max(-128, zp_y + int(round_half_away(f(b) / f(s_y)))))
    if a is not None and b is not None and a > b:
        lo = hi
    if f(s_x) == f(s_y) and zp_x == zp_y:
        x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
        n = int(np.prod(y.shape, dtype=np.int64))
        ctx.note(node, f"int8 clamp to [{lo}, {hi}]")
        return [ctx.launch("clamp_s8", grid_1d(n), (BLOCK,), (x, y, i64(n), i32(lo), i32(hi)))]
    return _lut_step(ctx, node, requant_table(s_x, zp_x, s_y, zp_y, lo, hi))


@launcher("Add", "Sub", "Mul", int8=True)
def int8_binary(node: Node, ctx):
    if len(node.inputs) != 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 {node.op} takes two inputs")
    _int8(node, ctx, node.inputs[0], node.inputs[1], node.outputs[0])
    a, b, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    if np.broadcast_shapes(tuple(a.shape), tuple(b.shape)) != tuple(y.shape):
        raise ShapeError(f"{node.op} {node.name!r}: {a.shape} and {b.shape} do not broadcast to {y.shape}")
    s1, zp1 = I8.per_tensor(ctx, node.inputs[0], "A")
    s2, zp2 = I8.per_tensor(ctx, node.inputs[1], "B")
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    if node.op == "Mul":
        op = 1
        (q1, sh1), (q2, sh2) = (0, 0), (0, 0)
        qy, shy = mul_multiplier(s1, s2, s_y, I8.requant_mode(node))
    else:
        op = 0
        (q1, sh1), (q2, sh2), (qy, shy) = add_params(s1, s2, s_y, node.op == "Sub")
    n = int(np.prod(y.shape, dtype=np.int64))
    contiguous, meta, rank = broadcast_meta(ctx, a.shape, b.shape, y.shape)
    ctx.note(node, f"int8 {node.op} (TFLite integer arithmetic)")
    return [ctx.launch("binary_s8", grid_1d(n), (BLOCK,),
                       (a, b, y, i64(n), i32(op), rank, meta, contiguous, i32(zp1), i32(q1),
                        i32(sh1), i32(zp2), i32(q2), i32(sh2), i32(zp_y), i32(qy), i32(shy)))]


@launcher("Concat", int8=True)
def int8_concat(node: Node, ctx):
    y = ctx.buf(node.outputs[0])
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    axis = int(node.attrs.get("axis", 0)) % len(y.shape)
    steps, at = [], 0
    for name in node.inputs:
        if not name:
            continue
        _int8(node, ctx, name)
        x = ctx.buf(name)
        s, zp = I8.per_tensor(ctx, name, "input")
        k = x.shape[axis]
        sl = (slice(None),) * axis + (slice(at, at + k),)
        if np.float32(s) != np.float32(s_y) or zp != zp_y:
            tmp = ctx.scratch("concat_s8", tuple(x.shape), np.int8)
            steps += _lut_step(ctx, node, requant_table(s, zp, s_y, zp_y), x=x, y=tmp)
            x = tmp
        steps += copy_step(ctx, x, lambda v: v, y, lambda v, sl=sl: v[sl])
        at += k
    if at != y.shape[axis]:
        raise ShapeError(f"Concat {node.name!r}: inputs give {at} along axis {axis}, output has {y.shape[axis]}")
    ctx.note(node, f"int8 concat ({len(steps)} launches)")
    return steps


# -- pools -------------------------------------------------------------------------------------------

def window_counts(g: ConvGeom, include_pad: bool) -> np.ndarray:
    """(oh, ow) taps counted by each average-pool window (the divisor), as the CPU kernel."""
    cy = axis_window_counts(g.h, g.oh, g.kh, g.sh, g.dh, 0 if include_pad else g.ph,
                             g.ph + g.h + (g.ph_end if include_pad else 0))
    cx = axis_window_counts(g.w, g.ow, g.kw, g.sw, g.dw, 0 if include_pad else g.pw,
                             g.pw + g.w + (g.pw_end if include_pad else 0))
    return cy[:, None] * cx[None, :]


@launcher("AveragePool", int8=True)
def int8_average_pool(node: Node, ctx):
    _int8(node, ctx, node.inputs[0], node.outputs[0])
    g = _pool_geom(node, ctx)
    include_pad = bool(node.attrs.get("count_include_pad", 0))
    need_h = (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1
    need_w = (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1
    overhang = need_h > g.h + g.ph + g.ph_end or need_w > g.w + g.pw + g.pw_end
    if include_pad and overhang:
        raise UnsupportedOpError(f"AveragePool {node.name!r}: int8 with count_include_pad and ceil_mode overhang")
    cnt = window_counts(g, include_pad)
    if (cnt == 0).any():
        raise ShapeError(f"AveragePool {node.name!r}: a window lies entirely in padding")
    s_x, zp_x = I8.per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    same = np.float32(s_x) == np.float32(s_y) and zp_x == zp_y
    kmax = g.kh * g.kw
    ms = [float(np.float32(s_x)) / (float(c) * float(np.float32(s_y))) for c in range(1, kmax + 1)]
    qs, shs = I8.quantize_multipliers(ms)
    q, sh = _requant_arrays(ctx, np.concatenate([[0], qs]), np.concatenate([[0], shs]))   # index = count
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    total = g.n * g.c * g.p
    ctx.note(node, f"int8 average pool {g.kh}x{g.kw} ({'rounded mean' if same else 'requantized mean'})")
    return [ctx.launch("avgpool_s8", grid_1d(total), (BLOCK,),
                       (x, y, *g.args(), i32(int(g.last)), i32(int(include_pad)), i32(g.ph_end), i32(g.pw_end),
                        i32(int(same)), i32(zp_x), i32(zp_y), q, sh))] if total else []


@launcher("GlobalAveragePool", int8=True)
def int8_global_average_pool(node: Node, ctx):
    _int8(node, ctx, node.inputs[0], node.outputs[0])
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    last = channels_last(node)
    n, c, sp = split_layout(tuple(x.shape), last)
    p = int(np.prod(sp, dtype=np.int64))
    if n * c * p == 0:
        return []
    s_x, zp_x = I8.per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = I8.per_tensor(ctx, node.outputs[0], "output")
    same = np.float32(s_x) == np.float32(s_y) and zp_x == zp_y
    q, sh = I8.quantize_multiplier(float(np.float32(s_x)) / (float(p) * float(np.float32(s_y))))
    return [ctx.launch("global_avgpool_s8", grid_1d(n * c), (BLOCK,),
                       (x, y, i32(n), i32(c), i64(p), i32(int(last)), i32(int(same)), i32(zp_x), i32(zp_y),
                        i32(q), i32(sh)))]
