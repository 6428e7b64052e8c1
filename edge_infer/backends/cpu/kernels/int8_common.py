"""Shared pieces of the CPU int8 kernels: exact int8 GEMMs through float32 BLAS and the int8
registration. The fixed-point arithmetic and the quantization parameters every backend uses
are ``ops/qmath.py`` (re-exported here for the kernels).

Exact int8 GEMM in float32: a product of two int8 values is at most 2^14 in magnitude, so
every partial sum of at most 1024 of them is an integer of magnitude <= 2^24, which float32
represents exactly whatever order BLAS adds in (FMA or not). ``ChunkedGemm`` multiplies int8
values held in float32 over K-chunks of <= 1024 and adds the chunks in int64: bit-exact, and
about as fast as a float32 GEMM (numpy's integer matmul is ~60x slower).

Registration: ``int8_kernel("Conv", ...)`` registers an int8 prepare function as the
registry's (op, dtype="int8") entry (``registry.py``); ``lookup`` picks it when the node's
first input (or output) is int8, else the op's generic entry. The choice is made once per
plan, at prepare; the eval closure is the chosen kernel's own.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..registry import is_int8_node, kernel_for  # noqa: F401  (is_int8_node: re-exported)
from ....ops.qmath import (EXACT_K, INT32_MAX, INT32_MIN, QMAX, QMIN, QParams, Requantizer,  # noqa: F401
                           clamp_range, per_tensor, qparams, quantize_multiplier, quantize_multipliers,
                           requantize, round_half_away, scratch, wrap_int32)  # (re-exported)


# -- registration ----------------------------------------------------------------------------

def int8_kernel(*ops: str):
    """Register the int8 prepare function of ``ops``: the registry's (op, dtype="int8") entry,
    which ``lookup`` picks when the node's first input (or output) is int8."""
    return kernel_for(*ops, dtype="int8")


# -- shared scratch -----------------------------------------------------------------------------


# -- quantization parameters ------------------------------------------------------------------


# -- fixed point ---------------------------------------------------------------------------------


class OutputStage:
    """acc (int64, in place) -> requantize -> + zero point -> clamp -> int8 output buffer."""

    def __init__(self, q, shift, zp_out: int, lo: int, hi: int, y: np.ndarray, acc_shape=None, ctx=None):
        shape = tuple(acc_shape if acc_shape is not None else y.shape)
        self.rq = Requantizer(q, shift, shape, ctx)
        self.zp, self.lo, self.hi, self.y = int(zp_out), int(lo), int(hi), y
        self.y_acc = y.reshape(shape) if acc_shape is not None else y

    def __call__(self, acc: np.ndarray) -> None:
        self.rq(acc)
        if self.zp:
            np.add(acc, self.zp, out=acc)
        np.clip(acc, self.lo, self.hi, out=self.y_acc, casting="unsafe")


# -- exact int8 GEMM through float32 -----------------------------------------------------------

class ChunkedGemm:
    """``acc (int64) = a @ b`` for int8 values held in float32, exact.

    ``a`` (..., M, K) and ``b`` (..., K, N) are float32 arrays (views are fine); ``acc`` an int64
    array of the product's shape. K <= ``EXACT_K``: one BLAS call into a float32 workspace and one
    converting copy; above: one call per K-chunk, each added into ``acc`` exactly.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray, acc: np.ndarray, ctx=None, chunk: int = EXACT_K,
                 bias: Optional[np.ndarray] = None):
        k = a.shape[-1]
        if b.shape[-2] != k:
            raise ValueError(f"inner dims {a.shape} @ {b.shape}")
        self.acc = acc
        self.parts = [(a[..., k0:k0 + chunk], b[..., k0:k0 + chunk, :]) for k0 in range(0, max(k, 1), chunk)]
        self.buf = scratch(ctx, "gemm_f32", acc.shape, np.float32)
        self.chunks = len(self.parts)
        #: int64 terms added to the product: in float32 when every sum stays below 2^24 (one
        #: chunk, small bias: exact, and the cheapest), else in int64 after the conversion
        self.bias = self.bias_f32 = None
        if bias is not None:
            bias = np.asarray(bias, np.int64)
            if self.chunks == 1 and k * 128 * 128 + int(np.abs(bias).max(initial=0)) <= (1 << 24):
                self.bias_f32 = bias.astype(np.float32)
            else:
                self.bias = bias

    def __call__(self) -> None:
        buf, acc = self.buf, self.acc
        a0, b0 = self.parts[0]
        np.matmul(a0, b0, out=buf)
        if self.bias_f32 is not None:
            np.add(buf, self.bias_f32, out=buf)
        np.copyto(acc, buf, casting="unsafe")
        if self.bias is not None:
            np.add(acc, self.bias, out=acc)
        for a1, b1 in self.parts[1:]:
            np.matmul(a1, b1, out=buf)
            np.add(acc, buf, out=acc, casting="unsafe")


