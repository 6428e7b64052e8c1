"""Dynamic quantization (onnxruntime's ``quantize_dynamic``): DynamicQuantizeLinear,
MatMulInteger, ConvInteger.

* DynamicQuantizeLinear: uint8 with the range of this run's x (widened to contain 0):
  ``scale = (max - min) / 255``, ``zp = round_half_even(clip(-min / scale, 0, 255))``,
  ``y = clip(round_half_even(x / scale) + zp, 0, 255)``, in float32 as the ONNX reference; an
  all-zero x gives scale 0, zero point 0 and y 0 (the reference divides by zero there).
* MatMulInteger / ConvInteger: ``(a - zp_a) (x) (b - zp_b)`` in int32 (zero points per tensor,
  per row of A / per output channel of W, per column of B). The products of two 8-bit values
  centred on their zero points are below 2^16 in magnitude, so their sums are exact in float64
  (2^53) whatever the order: the kernels multiply in float64 BLAS and store the int32 result.
  The constant operand is centred and widened once, at prepare.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ....ir.padding import resolve_pads
from ..registry import kernel


def _zero_point(node: Node, ctx, k: int):
    """(zero point as float64, or None when computed at run time (DynamicQuantizeLinear's),
    the run-time array)."""
    name = node.inputs[k] if len(node.inputs) > k else ""
    if not name:
        return np.zeros((), np.float64), None
    z = ctx.const(name)
    if z is None:
        return None, ctx.value(name)
    return np.asarray(z, np.float64), None


def _centred(node: Node, ctx, k: int, axis_shape):
    """(input ``k`` minus its zero point (input k + 2) as float64, update): a constant array
    and None, or a buffer that ``update()`` refreshes every run."""
    x = ctx.value(node.inputs[k])
    if x.dtype not in (np.int8, np.uint8):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: input {k} is {x.dtype} (int8/uint8 only)")
    zp, live = _zero_point(node, ctx, k + 2)
    if zp is not None and zp.size > 1:
        zp = axis_shape(zp)
    if ctx.const(node.inputs[k]) is not None and live is None:
        return np.asarray(x, np.float64) - zp, None
    buf = ctx.workspace(x.shape, np.float64)
    copyto, sub = np.copyto, np.subtract
    if live is not None:
        if live.size != 1:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: a computed zero point must be one value")
        zf = ctx.workspace((), np.float64)

        def update():
            copyto(buf, x, casting="unsafe")
            copyto(zf, live.reshape(()), casting="unsafe")
            sub(buf, zf, out=buf)
        return buf, update

    def update():
        copyto(buf, x, casting="unsafe")
        sub(buf, zp, out=buf)
    return buf, update


@kernel("MatMulInteger")
def matmul_integer(node: Node, ctx) -> Callable[[], None]:
    a, b, y = ctx.value(node.inputs[0]), ctx.value(node.inputs[1]), ctx.value(node.outputs[0])
    if a.ndim < 1 or b.ndim < 1:
        raise ShapeError(f"MatMulInteger {node.name!r}: operands of rank >= 1")
    af, upd_a = _centred(node, ctx, 0, lambda z: z.reshape(-1, 1) if a.ndim >= 2 else z)
    bf, upd_b = _centred(node, ctx, 1, lambda z: z.reshape(-1))
    acc = ctx.workspace(y.shape, np.float64)
    matmul, copyto = np.matmul, np.copyto
    ups = [u for u in (upd_a, upd_b) if u is not None]

    def run():
        for u in ups:
            u()
        matmul(af, bf, out=acc)
        copyto(y, acc, casting="unsafe")
    ctx.note(node, "integer matmul (exact in float64)")
    return run


@kernel("ConvInteger")
def conv_integer(node: Node, ctx) -> Callable[[], None]:
    x, w, y = ctx.value(node.inputs[0]), ctx.value(node.inputs[1]), ctx.value(node.outputs[0])
    nsp = x.ndim - 2
    if nsp < 1 or w.ndim != x.ndim:
        raise ShapeError(f"ConvInteger {node.name!r}: X {x.shape} and W {w.shape}")
    a = node.attrs
    group = int(a.get("group", 1))
    ks = list(a.get("kernel_shape") or w.shape[2:])
    strides = list(a.get("strides") or [1] * nsp)
    dil = list(a.get("dilations") or [1] * nsp)
    pads, osp = resolve_pads(x.shape[2:], ks, strides, dil, list(a.get("pads") or [0] * 2 * nsp),
                             str(a.get("auto_pad", "NOTSET") or "NOTSET"))
    n, c = x.shape[:2]
    m = w.shape[0]
    if c != w.shape[1] * group or m % group or tuple(y.shape) != (n, m, *osp):
        raise ShapeError(f"ConvInteger {node.name!r}: X {x.shape}, W {w.shape}, group {group}, Y {y.shape}")
    zx = _zero_point(node, ctx, 2)
    if (zx[0] if zx[0] is not None else zx[1]).size > 1:
        raise UnsupportedOpError(f"ConvInteger {node.name!r}: the input zero point must be one value")
    xf, upd = _centred(node, ctx, 0, lambda z: z)
    wf, upd_w = _centred(node, ctx, 1, lambda z: z.reshape((-1,) + (1,) * (w.ndim - 1)))
    # the centred input in a zero-padded buffer (padding is the real zero: x - zp_x = 0)
    xp = ctx.workspace((n, c) + tuple(x.shape[2 + i] + pads[i] + pads[i + nsp] for i in range(nsp)), np.float64)
    xp[...] = 0.0
    inner = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(nsp))
    st = xp.strides
    # windows (n, c, *osp, *ks): one strided view over the padded buffer, made once
    win = as_strided(xp, (n, c) + tuple(osp) + tuple(ks),
                     st[:2] + tuple(st[2 + i] * strides[i] for i in range(nsp))
                     + tuple(st[2 + i] * dil[i] for i in range(nsp)), writeable=False)
    cg, mg = c // group, m // group
    npos, kk = int(np.prod(osp)), int(np.prod(ks))
    cols = ctx.workspace((group, n, npos, cg * kk), np.float64)
    wt = wf.reshape(group, mg, cg * kk).transpose(0, 2, 1)
    # (G, C/G*k, M/G): packed once for constant weights, refreshed each run for computed ones
    wg = np.ascontiguousarray(wt) if upd_w is None else ctx.workspace(wt.shape, np.float64)
    acc = ctx.workspace((group, n, npos, mg), np.float64)
    colsv = cols.reshape(group, n, *osp, cg, *ks)
    src = [win[:, g * cg:(g + 1) * cg] for g in range(group)]
    order = (0,) + tuple(range(2, 2 + nsp)) + (1,) + tuple(range(2 + nsp, 2 + 2 * nsp))
    yv = y.reshape(n, group, mg, npos)
    copyto, matmul = np.copyto, np.matmul

    def run():
        if upd is not None:
            upd()
        if upd_w is not None:
            upd_w()
            copyto(wg, wt)
        copyto(xp[inner], xf)
        for g in range(group):
            copyto(colsv[g], src[g].transpose(order))
            matmul(cols[g], wg[g], out=acc[g])
        copyto(yv, acc.transpose(1, 0, 3, 2), casting="unsafe")
    ctx.note(node, "integer convolution (im2col, exact in float64)")
    return run


@kernel("DynamicQuantizeLinear")
def dynamic_quantize_linear(node: Node, ctx) -> Callable[[], None]:
    x = ctx.value(node.inputs[0])
    y, scale, zp = (ctx.value(o) for o in node.outputs[:3])
    if x.dtype not in (np.float32, np.float64):     # float64: the converter's verification run
        raise UnsupportedOpError(f"DynamicQuantizeLinear {node.name!r}: input is {x.dtype} (float32 only)")
    tmp = ctx.workspace(x.shape, x.dtype)
    f32 = x.dtype.type

    def run():
        lo = min(f32(0.0), f32(x.min())) if x.size else f32(0.0)
        hi = max(f32(0.0), f32(x.max())) if x.size else f32(0.0)
        s = f32((hi - lo) / f32(255.0))
        if s == 0:
            scale[...] = 0.0
            zp[...] = 0
            y[...] = 0
            return
        z = np.rint(np.clip(f32(0.0) - lo / s, f32(0.0), f32(255.0)))
        np.divide(x, s, out=tmp)
        np.rint(tmp, out=tmp)
        np.add(tmp, z, out=tmp)
        np.clip(tmp, 0, 255, out=tmp)
        np.copyto(y, tmp, casting="unsafe")
        scale[...] = s
        zp[...] = z
    ctx.note(node, "dynamic uint8 quantization")
    return run
