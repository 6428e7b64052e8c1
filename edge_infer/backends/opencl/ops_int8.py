"""int8 ops on OpenCL, bit-exact with the CPU backend's int8 kernels (cpu/kernels/int8_*.py).

The integer math is the CPU backend's, term for term: int32 sums of (x - zp) products, the
int64 bias, TFLite's MultiplyByQuantizedMultiplier (``mbqm`` in kernels/common.cl, the same
single-division form as ``int8_common.Requantizer``), zero points and clamps; every
multiplier, lookup table and clamp bound is computed on the host by ``ops/`` (``qmath``,
``int8_tables``), the functions the CPU kernels use too, so both backends start from identical
integers. Registered as the kernel table's int8 entries (``registry.py``).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...ops.int8_tables import (LUT_OPS, activation_fn, add_params, lut_table, mul_multiplier, requant_table,
                                softmax_s8_params)
from ...ops.qmath import (requant_mode, INT32_MIN, QMAX, QMIN, b_scales, clamp_range, clip_bounds, conv_requant_params,
                          int8_bias, per_tensor, qparams, quantize_multiplier, quantize_multipliers,
                          requantize, round_half_away)
from ...ops.shapes import channels_last, split_layout
from .ops import (UNARY, _opt, broadcast_meta, conv_algorithm, conv_geometry, gemm_operands, gemm_variant,
                  geo_list, launch1d, matmul_batches, pack_conv_weights, pool_geometry, round_up, strides_of)
from .registry import kernel_for


def need_i8(pc, node: Node, names) -> None:
    for nm in names:
        if nm and pc.dtype(nm) != "int8":
            raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 kernel wants int8 {nm!r}, got {pc.dtype(nm)}")


def _q32(q, sh):
    q = np.asarray(q, np.int64).reshape(-1)
    if np.any(q <= INT32_MIN) or np.any(q > (1 << 31) - 1):
        raise UnsupportedOpError("multiplier outside (INT32_MIN, INT32_MAX]")
    return q.astype(np.int32), np.asarray(sh, np.int64).reshape(-1).astype(np.int32)


def _table_u(table: np.ndarray) -> np.ndarray:
    """A 256-entry int8 table indexed by v + 128 (v = -128..127)."""
    t = np.asarray(table, np.int8).reshape(-1)
    if t.size != 256:
        raise ValueError("table of 256 entries expected")
    return t


def lut_launch(node, pc, x, y, table, meta=(0,), n=None):
    n = int(np.prod(pc.shape(x))) if n is None else n
    launch1d(pc, node, "tensor", "lut_i8", n, [*pc.ref(x), *pc.ref(y), n, pc.upload(_table_u(table)), pc.meta(meta)])


@kernel_for(*[o for o in UNARY if o in LUT_OPS or o in ("Relu", "Clip")], dtype="int8")
def int8_unary(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_i8(pc, node, [x, y])
    s_x, zp_x = per_tensor(pc, x, "input")
    s_y, zp_y = per_tensor(pc, y, "output")
    n = int(np.prod(pc.shape(x)))
    if node.op in LUT_OPS:
        lut_launch(node, pc, x, y, lut_table(activation_fn(node.op, node.attrs), s_x, zp_x, s_y, zp_y))
        pc.note(node, f"int8 {node.op}: 256-entry lookup table")
        return
    if node.op not in ("Relu", "Clip"):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: no int8 OpenCL kernel")
    a, b = (0.0, None) if node.op == "Relu" else clip_bounds(node, pc)
    f32 = np.float32
    lo = QMIN if a is None else max(QMIN, min(QMAX, zp_y + int(round_half_away(f32(a) / f32(s_y)))))
    hi = QMAX if b is None else min(QMAX, max(QMIN, zp_y + int(round_half_away(f32(b) / f32(s_y)))))
    if a is not None and b is not None and a > b:
        lo = hi
    if f32(s_x) == f32(s_y) and zp_x == zp_y:
        launch1d(pc, node, "int8", "clamp_i8", n, [*pc.ref(x), *pc.ref(y), n, lo, hi])
        pc.note(node, f"int8 {node.op}: clamp to [{lo}, {hi}]")
        return
    lut_launch(node, pc, x, y, requant_table(s_x, zp_x, s_y, zp_y, lo, hi))
    pc.note(node, f"int8 {node.op}: requantize + clamp (exact table)")


@kernel_for("Softmax", dtype="int8")
def int8_softmax(node: Node, pc) -> None:
    """int8 Softmax over the last axis: the CPU kernel's integer exp table and exact quotient."""
    x, y = node.inputs[0], node.outputs[0]
    table, cols = softmax_s8_params(node, pc, pc.shape(x), pc.dtype(x), pc.dtype(y))
    rows = int(np.prod(pc.shape(x))) // max(cols, 1)
    launch1d(pc, node, "int8", "softmax_i8", rows, [*pc.ref(x), *pc.ref(y), rows, cols, pc.upload(table)])
    pc.note(node, f"int8 Softmax over {cols} (integer exp table, exact rounded quotient)")


@kernel_for("Add", "Sub", "Mul", dtype="int8")
def int8_binary(node: Node, pc) -> None:
    if node.op not in ("Add", "Sub", "Mul") or len(node.inputs) != 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: no int8 OpenCL kernel")
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    need_i8(pc, node, [a, b, y])
    ys = pc.shape(y)
    if np.broadcast_shapes(pc.shape(a), pc.shape(b)) != ys:
        raise ShapeError(f"{node.op} {node.name!r}: operands do not broadcast to {ys}")
    s1, zp1 = per_tensor(pc, a, "A")
    s2, zp2 = per_tensor(pc, b, "B")
    s_y, zp_y = per_tensor(pc, y, "output")
    meta = pc.meta(broadcast_meta(pc.shape(a), pc.shape(b), ys))
    n = int(np.prod(ys))
    if node.op == "Mul":
        q, sh = mul_multiplier(s1, s2, s_y, requant_mode(node))
        _q32(q, sh)
        launch1d(pc, node, "int8", "mul_i8", n, [*pc.ref(a), *pc.ref(b), *pc.ref(y), n, meta, zp1, zp2, q, sh, zp_y])
        pc.note(node, "int8 Mul (TFLite: (x1 - zp1)(x2 - zp2) requantized)")
        return
    (q1, sh1), (q2, sh2), (qy, shy) = add_params(s1, s2, s_y, node.op == "Sub")
    for q, sh in ((q1, sh1), (q2, sh2), (qy, shy)):
        _q32(q, sh)
    launch1d(pc, node, "int8", "add_i8", n, [*pc.ref(a), *pc.ref(b), *pc.ref(y), n, meta,
                                             zp1, q1, sh1, zp2, q2, sh2, qy, shy, zp_y])
    pc.note(node, f"int8 {node.op} (TFLite: inputs << 20, rescaled, summed, requantized)")


def _residual_table(pc, node, zname, s_y):
    """int64 table over z = -128..127 of MBQM(z - zp_z, s_z / s_y) (as int8_conv.residual_stage)."""
    if not zname:
        return None
    s_z, zp_z = per_tensor(pc, zname, "residual")
    qz, shz = quantize_multiplier(float(np.float32(s_z)) / float(np.float32(s_y)))
    return requantize(np.arange(-128, 128, dtype=np.int64) - zp_z, qz, shz).astype(np.int64)


def int8_gemm_launch(node, pc, M, N, K, nb1, nb2, A, zp_a, B, zp_b, C, bias, q, qs, qv, zp_y, Z, ztab, lo, hi):
    """A, B, C, Z: (buffer, off, rs, cs, s1, s2); bias: (buffer, rs, cs, s2) int64; q/qs int32
    buffers viewed by qv = (rs, cs, s2)."""
    if K * 255 * 255 >= (1 << 31):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: K = {K} could overflow the int32 sum")
    flags = (1 if bias is not None else 0) | (2 if Z is not None else 0)
    bias = bias or (None, 0, 0, 0)
    Z = Z or (None, 0, 0, 0, 0, 0)
    args = [*A, zp_a, *B, zp_b, *C, M, N, K, nb2, *bias, q, qs, *qv, zp_y, *Z, ztab, lo, hi, flags]
    if gemm_variant(pc) == "cpu":
        pc.launch(node, "gemm", "gemm_i8_cpu", (N, (M + 7) // 8, nb1 * nb2), args)
    else:
        pc.launch(node, "gemm", "gemm_i8", (round_up(N, 32) // 4, round_up(M, 32) // 4, nb1 * nb2), args, (8, 8, 1))


@kernel_for("Conv", "FusedConv", dtype="int8")
def int8_conv(node: Node, pc) -> None:
    x, wn, y = node.inputs[0], node.inputs[1], node.outputs[0]
    bname = _opt(node, 2)
    zname = _opt(node, 3) if node.op == "FusedConv" else ""
    need_i8(pc, node, [x, wn, y, zname])
    g = conv_geometry(node, pc)
    w = pc.const(wn)
    if w is None:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 conv needs constant weights")
    s_x, zp_x = per_tensor(pc, x, "input")
    s_y, zp_y = per_tensor(pc, y, "output")
    wq = qparams(pc, wn, "weights")
    m = g["M"]
    if np.any(wq.zero_point != 0):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 weights must be symmetric")
    if wq.scale.size not in (1, m) or (wq.scale.size == m and m > 1 and wq.axis not in (0, None)):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: weight scales per tensor or per output channel")
    s_w = wq.scale if wq.scale.size == m else np.full(m, wq.s, np.float32)
    act = str(node.attrs.get("activation", "") or "") if node.op == "FusedConv" else ""
    lo, hi = clamp_range(act, node.attrs.get("activation_params", []) or [], s_y, zp_y)
    q, sh = _q32(*conv_requant_params(s_x, s_w, s_y, requant_mode(node)))
    if bname:
        bc = pc.const(bname)
        if bc is None or bc.dtype != np.int32 or bc.size != m:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 conv bias must be a constant int32 per channel")
        bias = bc.reshape(-1).astype(np.int64)
    else:
        bias = np.zeros(m, np.int64)
    if zname and pc.shape(zname) != pc.shape(y):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: residual shape differs from y")
    ztab = _residual_table(pc, node, zname, s_y)
    ztab_buf = pc.upload(ztab) if ztab is not None else None
    zref = pc.ref(zname) if zname else (None, 0)
    algo = conv_algorithm(g, pc.options.get("conv_algorithm", "auto"))
    xref, yref = pc.ref(x), pc.ref(y)
    qb, sb, bb = pc.upload(q), pc.upload(sh), pc.upload(bias)
    lay = "NHWC" if g["last"] else "NCHW"
    tail = (", + residual" if zname else "") + (f", clamp {act}" if act else "")
    if algo == "direct":
        total = int(np.prod(pc.shape(y)))
        launch1d(pc, node, "conv", "conv_direct_i8", total,
                 [*xref, zp_x, pc.upload(np.asarray(w, np.int8), key=("conv_w", wn)), bb, qb, sb, zp_y, *zref, ztab_buf, *yref,
                  pc.meta(geo_list(g)), total, lo, hi, 2 if zname else 0])
        pc.note(node, f"{lay} int8 direct conv {g['KH']}x{g['KW']} (int32 sums, MBQM per channel{tail})")
        return
    wp = None if pc.dry else pc.upload(pack_conv_weights(np.asarray(w, np.int8), g, algo),
                                       key=("conv_packed", wn, g["last"], g["G"]))
    cols = None
    if algo == "im2col":
        P = g["OH"] * g["OW"]
        K = g["CG"] * g["KH"] * g["KW"]
        n_cols = g["N"] * g["G"] * P * K
        cols = pc.scratch("cols_i8", n_cols)
        launch1d(pc, node, "conv", "im2col_i8", n_cols, [*xref, cols, 0, pc.meta(geo_list(g)), zp_x])
    M, N, K, nb1, nb2, A, B, C = gemm_operands(g, xref, yref, wp, cols)
    # the activation operand is A (NHWC) or B (NCHW); its zero point is subtracted in the tiles
    zp_a, zp_b = (zp_x, 0) if g["last"] else (0, zp_x)
    if g["last"]:
        bias_v, qv = (bb, 0, 1, g["MG"]), (0, 1, g["MG"])
    else:
        bias_v, qv = (bb, 1, 0, g["MG"]), (1, 0, g["MG"])
    Z = (zref[0], zref[1], C[2], C[3], C[4], C[5]) if zname else None
    int8_gemm_launch(node, pc, M, N, K, nb1, nb2, A, zp_a, B, zp_b, C, bias_v, qb, sb, qv, zp_y, Z, ztab_buf, lo, hi)
    pc.note(node, f"{lay} int8 {'pointwise' if algo == 'pointwise' else 'im2col +'} {gemm_variant(pc)} GEMM "
                  f"(int32 sums, MBQM per channel{tail})")


def _int8_mm(node, pc, M, N, K, nb2, A, a_name, B, b_name, b_axis_n, bias_name, C):
    y = node.outputs[0]
    need_i8(pc, node, [a_name, b_name, y])
    s_a, zp_a = per_tensor(pc, a_name, "A")
    s_y, zp_y = per_tensor(pc, y, "output")
    s_b = b_scales(pc, node, b_name, N, b_axis_n)
    b_const = pc.const(b_name) is not None
    zp_b = 0
    if not b_const:
        _, zp_b = per_tensor(pc, b_name, "B")
    elif np.any(qparams(pc, b_name).zero_point != 0):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: constant int8 B must be symmetric")
    if node.op in ("FusedGemm", "FusedMatMul"):
        act = str(node.attrs.get("activation", "") or "")
        lo, hi = clamp_range(act, node.attrs.get("activation_params", []) or [], s_y, zp_y)
    else:
        lo, hi = QMIN, QMAX
    q, sh = _q32(*conv_requant_params(s_a, s_b, s_y, requant_mode(node)))
    bias = (pc.upload(int8_bias(pc, node, bias_name, N)), 0, 1, 0) if bias_name else None
    int8_gemm_launch(node, pc, M, N, K, 1, nb2, A, zp_a, B, zp_b, C, bias, pc.upload(q), pc.upload(sh),
                     (0, 1, 0), zp_y, None, None, lo, hi)
    pc.note(node, f"int8 {gemm_variant(pc)} GEMM {M}x{K} @ {K}x{N} (int32 sums, MBQM per {'column' if len(set(q.tolist())) > 1 else 'tensor'})")


@kernel_for("Gemm", "FusedGemm", dtype="int8")
def int8_gemm(node: Node, pc) -> None:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if float(node.attrs.get("alpha", 1.0)) != 1.0 or float(node.attrs.get("beta", 1.0)) != 1.0:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 Gemm needs alpha = beta = 1")
    sa, sb = pc.shape(a), pc.shape(b)
    if len(sa) != 2 or len(sb) != 2:
        raise ShapeError(f"{node.op} {node.name!r}: Gemm wants 2-D operands")
    ta, tb = bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0))
    M, K = (sa[1], sa[0]) if ta else sa
    N = sb[0] if tb else sb[1]
    ab, ao = pc.ref(a)
    bb, bo = pc.ref(b)
    A = (ab, ao, 1, sa[1], 0, 0) if ta else (ab, ao, sa[1], 1, 0, 0)
    B = (bb, bo, 1, sb[1], 0, 0) if tb else (bb, bo, sb[1], 1, 0, 0)
    yb, yo = pc.ref(y)
    _int8_mm(node, pc, M, N, K, 1, A, a, B, b, 0 if tb else 1, _opt(node, 2), (yb, yo, N, 1, 0, 0))


@kernel_for("MatMul", "FusedMatMul", dtype="int8")
def int8_matmul(node: Node, pc) -> None:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    sa, sb, sy = pc.shape(a), pc.shape(b), pc.shape(y)
    if len(sa) < 2 or len(sb) < 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 MatMul wants rank >= 2")
    M, K = sa[-2:]
    N = sb[-1]
    nbat, pa, pb = matmul_batches(node, sa, sb, sy)
    ab, ao = pc.ref(a)
    bb, bo = pc.ref(b)
    yb, yo = pc.ref(y)
    if pb == 1 and pa == nbat:
        M, nb2 = M * nbat, 1
        A, B, C = (ab, ao, K, 1, 0, 0), (bb, bo, N, 1, 0, 0), (yb, yo, N, 1, 0, 0)
    else:
        nb2 = nbat
        A = (ab, ao, K, 1, 0, M * K if pa > 1 else 0)
        B = (bb, bo, N, 1, 0, K * N if pb > 1 else 0)
        C = (yb, yo, N, 1, 0, M * N)
    bias = _opt(node, 2) if node.op == "FusedMatMul" else ""
    _int8_mm(node, pc, M, N, K, nb2, A, a, B, b, len(sb) - 1, bias, C)


def _same_params(pc, node):
    s_x, zp_x = per_tensor(pc, node.inputs[0], "input")
    s_y, zp_y = per_tensor(pc, node.outputs[0], "output")
    return (np.float32(s_x) == np.float32(s_y) and zp_x == zp_y), s_x, zp_x, s_y, zp_y


@kernel_for("AveragePool", dtype="int8")
def int8_average_pool(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_i8(pc, node, [x, y])
    geo = pool_geometry(node, pc)
    inc = int(bool(node.attrs.get("count_include_pad", 0)))
    ks = geo[6] * geo[7]
    # ceil-mode overhang with count_include_pad is refused by the CPU kernel too
    if inc:
        H, W, OH, OW, SH, SW, PH, PW, DH, DW, PHE, PWE = geo[2], geo[3], geo[4], geo[5], geo[8], geo[9], geo[10], geo[11], geo[12], geo[13], geo[15], geo[16]
        if (OH - 1) * SH + (geo[6] - 1) * DH + 1 > H + PH + PHE or (OW - 1) * SW + (geo[7] - 1) * DW + 1 > W + PW + PWE:
            raise UnsupportedOpError(f"AveragePool {node.name!r}: int8 count_include_pad with ceil overhang")
    same, s_x, zp_x, s_y, zp_y = _same_params(pc, node)
    if same:
        qm, qs = np.zeros(ks + 1, np.int32), np.zeros(ks + 1, np.int32)
    else:
        q, sh = quantize_multipliers([float(np.float32(s_x)) / (float(c) * float(np.float32(s_y))) for c in range(1, ks + 1)])
        qm, qs = _q32(np.concatenate([[0], q]), np.concatenate([[0], sh]))
    total = int(np.prod(pc.shape(y)))
    launch1d(pc, node, "pool", "avgpool_i8", total, [*pc.ref(x), *pc.ref(y), pc.meta(geo), total, inc, zp_x,
                                                    int(not same), pc.upload(qm), pc.upload(qs), zp_y])
    pc.note(node, f"int8 average pool {geo[6]}x{geo[7]} ({'TFLite rounded mean' if same else 'requantized mean'})")


@kernel_for("GlobalAveragePool", "GlobalMaxPool", dtype="int8")
def int8_global_pool(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_i8(pc, node, [x, y])
    last = channels_last(node)
    n, c, sp = split_layout(pc.shape(x), last)
    p = int(np.prod(sp))
    is_max = node.op == "GlobalMaxPool"
    q = sh = 0
    same, s_x, zp_x, s_y, zp_y = True, 0.0, 0, 0.0, 0
    if not is_max:
        same, s_x, zp_x, s_y, zp_y = _same_params(pc, node)
        if not same:
            q, sh = quantize_multiplier(float(np.float32(s_x)) / (float(p) * float(np.float32(s_y))))
            _q32(q, sh)
    launch1d(pc, node, "pool", "global_pool_i8", n * c, [*pc.ref(x), *pc.ref(y), c, p, int(last), int(is_max), zp_x,
                                                        int(not same), q, sh, zp_y])
    pc.note(node, f"int8 {'max' if is_max else 'mean'} over {p} positions")


@kernel_for("Concat", dtype="int8")
def int8_concat(node: Node, pc) -> None:
    y = node.outputs[0]
    need_i8(pc, node, [y] + [i for i in node.inputs if i])
    s_y, zp_y = per_tensor(pc, y, "output")
    ys = pc.shape(y)
    axis = int(node.attrs.get("axis", 0)) % len(ys)
    yst = strides_of(ys)
    at, requantized = 0, 0
    from .ops_tensor import copy_launch
    yb, yo = pc.ref(y)
    for name in node.inputs:
        if not name:
            continue
        s, zp = per_tensor(pc, name, "input")
        shp = pc.shape(name)
        if np.float32(s) == np.float32(s_y) and zp == zp_y:
            copy_launch(node, pc, name, y, shp, strides_of(shp), yst, dst_off=at * yst[axis])
        else:
            requantized += 1
            nd = len(shp)
            meta = [nd] + list(shp) + strides_of(shp) + yst
            n = int(np.prod(shp))
            xb, xo = pc.ref(name)
            launch1d(pc, node, "tensor", "lut_i8", n, [xb, xo, yb, yo + at * yst[axis], n,
                                                      pc.upload(_table_u(requant_table(s, zp, s_y, zp_y))), pc.meta(meta)])
        at += shp[axis]
    if at != ys[axis]:
        raise ShapeError(f"Concat {node.name!r}: inputs give {at} along axis {axis}")
    pc.note(node, f"int8 Concat ({requantized} input(s) requantized through exact tables)")


def _qdq_params(node, pc, x_name):
    scale = pc.const(node.inputs[1])
    zname = _opt(node, 2)
    zp = pc.const(zname) if zname else None
    if scale is None or (zname and zp is None):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: scale and zero point must be constants")
    scale = np.asarray(scale, np.float32).reshape(-1)
    zp = np.zeros(scale.size, np.int64) if zp is None else np.asarray(zp).astype(np.int64).reshape(-1)
    xs = pc.shape(x_name)
    if scale.size > 1:
        axis = int(node.attrs.get("axis", 1)) % len(xs)
        if scale.size != xs[axis]:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: {scale.size} scales for axis {axis}")
        c, inner = xs[axis], int(np.prod(xs[axis + 1:]))
        zp = np.broadcast_to(zp, (scale.size,))
    else:
        c, inner, zp = 1, 1, zp[:1]
    return scale, zp.astype(np.float32), c, inner


@kernel_for("QuantizeLinear")
def quantize_linear(node: Node, pc) -> None:
    import pyopencl as cl
    x, y = node.inputs[0], node.outputs[0]
    if pc.dtype(x) != "float32" or pc.dtype(y) != "int8":
        raise UnsupportedOpError(f"QuantizeLinear {node.name!r}: float32 -> int8 only")
    if pc.device is not None and not pc.device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
        raise UnsupportedOpError("QuantizeLinear needs correctly rounded float32 division on the device")
    scale, zp, c, inner = _qdq_params(node, pc, x)
    n = int(np.prod(pc.shape(x)))
    launch1d(pc, node, "int8", "quantize_i8", n, [*pc.ref(x), *pc.ref(y), n, pc.upload(scale), pc.upload(zp), c, inner])
    pc.note(node, "quantize to int8")


@kernel_for("DequantizeLinear")
def dequantize_linear(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    if pc.dtype(x) != "int8" or pc.dtype(y) != "float32":
        raise UnsupportedOpError(f"DequantizeLinear {node.name!r}: int8 -> float32 only")
    scale, zp, c, inner = _qdq_params(node, pc, x)
    n = int(np.prod(pc.shape(x)))
    launch1d(pc, node, "int8", "dequantize_i8", n, [*pc.ref(x), *pc.ref(y), n, pc.upload(scale), pc.upload(zp), c, inner])
    pc.note(node, "dequantize int8")
