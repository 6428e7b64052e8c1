"""int8 Gemm / FusedGemm / MatMul / FusedMatMul (TFLite FULLY_CONNECTED / BATCH_MATMUL).

A is int8 per-tensor (s_a, zp_a). B is either an int8 constant, symmetric per output column
(s_b[n], zero point 0; ``axis`` is B's N axis: 1 for (K, N), 0 for Gemm's transB (N, K)),
or a computed int8 tensor, per-tensor (s_b, zp_b). The bias (Gemm's C, FusedMatMul's bias)
is int32 at scale s_a * s_b[n]. Gemm's alpha and beta must be 1 (the quantizer folds them
into B and C). y is int8 per-tensor; FusedGemm / FusedMatMul may clamp (Relu, Clip).

    acc[.., m, n] = sum_k a*b - zp_a * sum_k b[k, n] - zp_b * sum_k a[m, k] + K zp_a zp_b + bias[n]
    y             = clamp(zp_y + MBQM(acc, s_a s_b[n] / s_y), lo, hi)

Constant terms fold into one int64 vector at prepare; with a computed B the row and column
sums are taken every run. The products run as exact float32 BLAS over K-chunks (int8_common).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from .. import native
from ..native import kernels as native_kernels
from .conv import view_as
from ....ops.qmath import b_scales as _b_scales, conv_requant_params, int8_bias as _bias, requant_mode
from .int8_common import (ChunkedGemm, Requantizer, clamp_range, int8_kernel, per_tensor, qparams,
                          quantize_multipliers, scratch)


def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def _int8_matmul(node: Node, ctx, a: np.ndarray, a_name: str, b: np.ndarray, b_name: str, b_axis_n: int,
                 bias_name: str, a_view, b_view) -> Callable[[], None]:
    """Shared body: a_view(af) / b_view(bf) give the (..., M, K) / (..., K, N) float32 operands."""
    y = ctx.value(node.outputs[0])
    if a.dtype != np.int8 or b.dtype != np.int8 or y.dtype != np.int8:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 kernel wants int8 A, B, y; got "
                                 f"{a.dtype}, {b.dtype}, {y.dtype}")
    s_a, zp_a = per_tensor(ctx, a_name, "A")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    b_const = ctx.const(b_name) is not None
    n = y.shape[-1]
    s_b = _b_scales(ctx, node, b_name, n, b_axis_n)
    zp_b = 0
    if not b_const:
        s_bt, zp_b = per_tensor(ctx, b_name, "B")
    elif np.any(qparams(ctx, b_name).zero_point != 0):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: constant int8 B must be symmetric")
    if node.op in ("FusedGemm", "FusedMatMul"):
        act = str(node.attrs.get("activation", "") or "")
        lo, hi = clamp_range(act, node.attrs.get("activation_params", []) or [], s_y, zp_y)
    else:
        act, lo, hi = "", -128, 127
    if y.size == 0:
        return lambda: None
    q, sh = conv_requant_params(s_a, s_b, s_y, requant_mode(node))
    bias = _bias(ctx, node, bias_name, n)
    if b_const:
        step = _native_matmul(ctx, node, a, b_view(b), y, bias, zp_a, q, sh, zp_y, lo, hi, a_view, act)
        if step is not None:
            return step

    af = scratch(ctx, "in_f32", a.shape, np.float32)
    a2 = a_view(af)
    k = a2.shape[-1]
    if b_const:
        b2 = np.ascontiguousarray(b_view(b.astype(np.float32)))
        colsum = b_view(b).astype(np.int64).sum(axis=-2)          # (..., N)
        const_term = bias - zp_a * colsum                          # broadcasts on (..., M, N) rows
        bf = None
    else:
        bf = scratch(ctx, "in2_f32", b.shape, np.float32)
        b2 = b_view(bf)
        const_term = bias + k * zp_a * zp_b
    out_shape = np.broadcast_shapes(a2.shape[:-1] + (1,), b2.shape[:-2] + (1, b2.shape[-1]))
    if int(np.prod(out_shape)) != y.size or out_shape[-1] != n:
        raise ShapeError(f"{node.op} {node.name!r}: {a2.shape} @ {b2.shape} does not give {y.shape}")
    acc = scratch(ctx, "acc_i64", out_shape, np.int64)
    if const_term.ndim > 1:
        const_term = const_term[..., None, :]
    gemm = ChunkedGemm(a2, b2, acc, ctx, bias=const_term)        # constant terms added exactly
    rq = Requantizer(q, sh, out_shape, ctx, offset=zp_y)
    y_acc = y.reshape(out_shape)
    copyto, sub, clip, mul = np.copyto, np.subtract, np.clip, np.multiply
    a_int = a_view(a)
    b_int = None if b_const else b_view(b)
    if not b_const:
        colsum_b = ctx.workspace(b2.shape[:-2] + (1, n), np.int64)
        rowsum_a = ctx.workspace(a2.shape[:-1] + (1,), np.int64)

    def run():
        copyto(af, a)
        if bf is not None:
            copyto(bf, b)
        gemm()
        if b_int is not None:
            if zp_a:
                np.sum(b_int, axis=-2, keepdims=True, dtype=np.int64, out=colsum_b)
                mul(colsum_b, zp_a, out=colsum_b)
                sub(acc, colsum_b, out=acc)
            if zp_b:
                np.sum(a_int, axis=-1, keepdims=True, dtype=np.int64, out=rowsum_a)
                mul(rowsum_a, zp_b, out=rowsum_a)
                sub(acc, rowsum_a, out=acc)
        rq(acc)                             # + zp_y
        clip(acc, lo, hi, out=y_acc, casting="unsafe")
    ctx.note(node, f"int8 GEMM {a2.shape} @ {b2.shape}, float32 BLAS exact in {gemm.chunks} K-chunk(s); "
                   f"requantize {'per column' if len(set(q.tolist())) > 1 else 'per tensor'} (MBQM)"
                   + (f", clamp {act}" if act else "") + ("" if b_const else ", computed B"))
    return run


def _native_matmul(ctx, node: Node, a: np.ndarray, b_kn: np.ndarray, y: np.ndarray, bias, zp_a: int, q, sh,
                   zp_y: int, lo: int, hi: int, a_view, act: str):
    """A @ B with a constant 2-D B as the native int8 GEMM (src/int8_gemm.c: a 1x1 conv over the
    rows of A), or None. A's rows are contiguous, or strided (Gemm's transA: read as NCHW)."""
    if native.lib is None or b_kn.ndim != 2 or not a.flags.c_contiguous:
        return None
    k, n = b_kn.shape
    a2 = a_view(a)
    if a2.ndim != 2:
        if a.shape[-1] != k or a.ndim < 2:
            return None
        rows, trans = a.size // k, False
    else:
        trans = not a2.flags.c_contiguous
        rows = a2.shape[0]
    if rows * n != y.size or a2.shape[-1] != k:
        return None
    const = bias - zp_a * b_kn.astype(np.int64).sum(axis=0)
    geometry = (1, k, rows, 1, n, rows, 1, 1, 1, 1, 1, 1, 1, 0, 0)
    step = native_kernels.int8_conv_step(ctx, x=a, y=y, w_mk=np.ascontiguousarray(b_kn.T), bias=const, q=q,
                                         shift=sh, zp_x=0, zp_y=zp_y, lo=lo, hi=hi, geometry=geometry,
                                         in_nchw=trans, out_nchw=False)
    if step is not None:
        ctx.note(node, f"int8 native GEMM ({rows}x{k} @ {k}x{n}{', A transposed' if trans else ''}; "
                       f"{step.kind_name}, packed B, int32 accumulation); requantize per column "
                       f"(MBQM){', clamp ' + act if act else ''}")
    return step


@int8_kernel("Gemm", "FusedGemm")
def int8_gemm(node: Node, ctx) -> Callable[[], None]:
    a, b = ctx.value(node.inputs[0]), ctx.value(node.inputs[1])
    if float(node.attrs.get("alpha", 1.0)) != 1.0 or float(node.attrs.get("beta", 1.0)) != 1.0:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 Gemm needs alpha = beta = 1 "
                                 "(the quantizer folds them into B and C)")
    ta, tb = bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0))
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"{node.op} {node.name!r}: Gemm wants 2-D A and B, got {a.shape}, {b.shape}")
    return _int8_matmul(node, ctx, a, node.inputs[0], b, node.inputs[1], 0 if tb else 1, _opt(node, 2),
                        (lambda v: v.T) if ta else (lambda v: v),
                        (lambda v: v.T) if tb else (lambda v: v))


@int8_kernel("MatMul", "FusedMatMul")
def int8_matmul(node: Node, ctx) -> Callable[[], None]:
    a, b = ctx.value(node.inputs[0]), ctx.value(node.inputs[1])
    if a.ndim < 2 or b.ndim < 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 MatMul wants operands of rank >= 2")
    bias = _opt(node, 2) if node.op == "FusedMatMul" else ""
    if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
        # (..., M, K) @ (K, N): one GEMM over the flattened batch
        a_view = lambda v: view_as(v, (-1, v.shape[-1]))
    else:
        a_view = lambda v: v
    return _int8_matmul(node, ctx, a, node.inputs[0], b, node.inputs[1], b.ndim - 1, bias,
                        a_view, lambda v: v)
