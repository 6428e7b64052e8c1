"""Dense and normalisation kernels: Gemm, MatMul, BatchNormalization, LRN,
InstanceNormalization, Softmax, LogSoftmax, Dropout, Resize and Upsample.

BatchNormalization, LRN and InstanceNormalization honour ``data_layout="NHWC"``
(channels last; passes/convert_layout.py). Resize needs no layout attribute: the
layout pass permutes its scales/sizes/roi (or remaps ``axes``) instead."""
from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ....ops.resize import resize_plan
from ....ops.shapes import channels_last
from ....ops.resize import cubic as _cubic, nearest_index as _nearest_index  # noqa: F401
from ....ops.resize import source_coords as _source_coords, taps as _taps  # noqa: F401
from ..native import ops as native_ops
from ..registry import kernel
from .conv import view_as
from . import conv_native, resize_native


def _opt(node: Node, i: int) -> str:
    """Name of optional input ``i``, or '' when absent."""
    return node.inputs[i] if len(node.inputs) > i else ""


def _opt_out(node: Node, i: int) -> str:
    """Name of optional output ``i``, or '' when not requested."""
    return node.outputs[i] if len(node.outputs) > i else ""


# -- Gemm / MatMul --------------------------------------------------------------------

@kernel("Gemm")
def gemm(node: Node, ctx) -> Callable[[], None]:
    step = conv_native.gemm_step(node, ctx)             # the native packed SGEMM, or None
    if step is not None:
        return step
    a, b = ctx.value(node.inputs[0]), ctx.value(node.inputs[1])
    y = ctx.value(node.outputs[0])
    alpha = float(node.attrs.get("alpha", 1.0))
    beta = float(node.attrs.get("beta", 1.0))
    a2 = a.T if node.attrs.get("transA", 0) else a
    b2 = b.T if node.attrs.get("transB", 0) else b
    if ctx.const(node.inputs[1]) is not None:
        # pack B once: contiguous, in the compute dtype, alpha folded in; a B that already is
        # a BLAS operand (C- or Fortran-ordered, as with transB) is used in place: the
        # artifact's mapped pages, not a copy (AlexNet: 234 MB of FC weights)
        if not (alpha == 1.0 and b2.dtype == y.dtype and (b2.flags.c_contiguous or b2.flags.f_contiguous)):
            b2 = np.ascontiguousarray(b2 * alpha if alpha != 1.0 else b2, dtype=y.dtype)
        alpha = 1.0
    cname = _opt(node, 2)
    c = ctx.value(cname) if cname else None
    steps: List[Callable[[], None]] = []
    matmul = np.matmul
    steps.append(lambda: matmul(a2, b2, out=y))
    if alpha != 1.0:
        steps.append(lambda: np.multiply(y, alpha, out=y))
    if c is not None and beta != 0.0:
        if ctx.const(cname) is not None:
            cb = np.ascontiguousarray(c * beta if beta != 1.0 else c, dtype=y.dtype)
            steps.append(lambda: np.add(y, cb, out=y))
        elif beta == 1.0:
            steps.append(lambda: np.add(y, c, out=y))
        else:
            tmp = ctx.workspace(np.broadcast_shapes(c.shape, y.shape), y.dtype)
            steps.append(lambda: (np.multiply(c, beta, out=tmp), np.add(y, tmp, out=y)))
    ctx.note(node, f"BLAS matmul {a2.shape} @ {b2.shape}" + (" + C" if c is not None else ""))
    if len(steps) == 1:
        return steps[0]

    def run():
        for s in steps:
            s()
    return run


@kernel("MatMul")
def matmul(node: Node, ctx) -> Callable[[], None]:
    step = conv_native.gemm_step(node, ctx)             # constant B: the native packed SGEMM, or None
    if step is not None:
        return step
    a, b = ctx.value(node.inputs[0]), ctx.value(node.inputs[1])
    y = ctx.value(node.outputs[0])
    mm = np.matmul
    if y.size == 0:
        return lambda: None
    if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
        # (..., M, K) @ (K, N): one big GEMM over the flattened batch beats a batch loop
        a2 = view_as(a, (-1, a.shape[-1]))
        y2 = view_as(y, (-1, y.shape[-1]))
        ctx.note(node, f"flattened GEMM {a2.shape} @ {b.shape}")
        return lambda: mm(a2, b, out=y2)
    ctx.note(node, f"matmul {a.shape} @ {b.shape}")
    return lambda: mm(a, b, out=y)


# -- normalisation ----------------------------------------------------------------------

def _channel_shape(x: np.ndarray, last: bool = False) -> Tuple[int, ...]:
    """Shape that broadcasts a per-channel vector (axis 1; the last axis when
    ``last``) against ``x``."""
    if last:
        return (x.shape[-1],)
    return (x.shape[1],) + (1,) * (x.ndim - 2)


@kernel("BatchNormalization")
def batch_norm(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    eps = float(node.attrs.get("epsilon", 1e-5))
    names = node.inputs[1:5]
    last = channels_last(node)
    cshape = _channel_shape(x, last)
    if node.attrs.get("training_mode", 0):
        return _batch_norm_training(node, ctx, x, y, eps, cshape, last)
    if all(ctx.const(nm) is not None for nm in names):
        gamma, beta, mean, var = (ctx.const(nm).astype(np.float64) for nm in names)
        scale64 = gamma / np.sqrt(var + eps)
        scale = (scale64).astype(y.dtype).reshape(cshape)
        shift = (beta - mean * scale64).astype(y.dtype).reshape(cshape)
        ctx.note(node, "folded scale/shift")

        def bn():
            np.multiply(x, scale, out=y)
            np.add(y, shift, out=y)
        return bn
    gamma, beta, mean, var = (view_as(ctx.value(nm), cshape) for nm in names)
    scale = ctx.workspace(cshape, y.dtype)
    shift = ctx.workspace(cshape, y.dtype)

    def bn_dynamic():
        np.add(var, eps, out=scale)
        np.sqrt(scale, out=scale)
        np.divide(gamma, scale, out=scale)
        np.multiply(mean, scale, out=shift)
        np.subtract(beta, shift, out=shift)
        np.multiply(x, scale, out=y)
        np.add(y, shift, out=y)
    ctx.note(node, "scale/shift computed per run (non-constant statistics)")
    return bn_dynamic


def _batch_norm_training(node: Node, ctx, x, y, eps: float, cshape, last: bool = False
                         ) -> Callable[[], None]:
    """training_mode=1: normalise with the batch's own mean and (population)
    variance; optional outputs 1 and 2 are the momentum-updated running stats."""
    momentum = float(node.attrs.get("momentum", 0.9))
    gamma, beta, rmean, rvar = (view_as(ctx.value(nm), cshape) for nm in node.inputs[1:5])
    outs = [_opt_out(node, k) for k in (1, 2)]
    out_mean, out_var = (ctx.value(o).reshape(cshape) if o else None for o in outs)
    axes = tuple(range(x.ndim - 1)) if last else (0,) + tuple(range(2, x.ndim))
    mean = ctx.workspace(cshape, y.dtype)
    var = ctx.workspace(cshape, y.dtype)
    inv = ctx.workspace(cshape, y.dtype)
    sq = ctx.workspace(y.shape, y.dtype)
    mean1, var1 = mean.reshape(-1), var.reshape(-1)

    def bn_train():
        np.mean(x, axis=axes, out=mean1)
        np.subtract(x, mean, out=y)
        np.multiply(y, y, out=sq)
        np.mean(sq, axis=axes, out=var1)
        np.add(var, eps, out=inv)
        np.sqrt(inv, out=inv)
        np.divide(gamma, inv, out=inv)
        np.multiply(y, inv, out=y)
        np.add(y, beta, out=y)
        # running stats: momentum * old + (1 - momentum) * batch (inv is free again)
        if out_mean is not None:
            np.multiply(mean, 1 - momentum, out=inv)
            np.multiply(rmean, momentum, out=out_mean)
            np.add(out_mean, inv, out=out_mean)
        if out_var is not None:
            np.multiply(var, 1 - momentum, out=inv)
            np.multiply(rvar, momentum, out=out_var)
            np.add(out_var, inv, out=out_var)
    ctx.note(node, "training mode: batch statistics computed per run")
    return bn_train


@kernel("InstanceNormalization")
def instance_norm(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    eps = float(node.attrs.get("epsilon", 1e-5))
    last = channels_last(node)
    n, c = (x.shape[0], x.shape[-1]) if last else x.shape[:2]
    p = int(np.prod(x.shape[1:-1] if last else x.shape[2:]))
    if last:
        # (N, P, C): statistics over axis 1, per-channel vectors broadcast along the rows
        ax, cshape, shape3, sshape = 1, (c,), (n, p, c), (n, 1, c)
    else:
        ax, cshape, shape3, sshape = 2, (c, 1), (n, c, p), (n, c, 1)
    gamma = view_as(ctx.value(node.inputs[1]), cshape)
    beta = view_as(ctx.value(node.inputs[2]), cshape)
    x3, y3 = view_as(x, shape3), view_as(y, shape3)
    mean = ctx.workspace(sshape, y.dtype)
    var = ctx.workspace(sshape, y.dtype)
    sq = ctx.workspace(shape3, y.dtype)

    def inorm():
        np.mean(x3, axis=ax, keepdims=True, out=mean)
        np.subtract(x3, mean, out=y3)
        np.multiply(y3, y3, out=sq)
        np.mean(sq, axis=ax, keepdims=True, out=var)
        np.add(var, eps, out=var)
        np.sqrt(var, out=var)
        np.divide(gamma, var, out=var)
        np.multiply(y3, var, out=y3)
        np.add(y3, beta, out=y3)
    ctx.note(node, "two-pass mean/variance")
    return inorm


@kernel("LRN")
def lrn(node: Node, ctx) -> Callable[[], None]:
    """y = x / (bias + alpha/size * sum of x^2 over a window of channels) ** beta."""
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    size = int(node.attrs["size"])
    alpha = float(node.attrs.get("alpha", 1e-4))
    beta = float(node.attrs.get("beta", 0.75))
    bias = float(node.attrs.get("bias", 1.0))
    last = channels_last(node)
    c = x.shape[-1] if last else x.shape[1]
    if x.size == 0:
        return lambda: None
    # as (lead, C, positions): NCHW (N, C, S); NHWC (N*S, C) seen as (1, N*S, C) with the
    # channel axis last. The sums only mix channels, so the positions run in bands whose
    # squares fit LRN_BAND bytes (the same values as in one pass, in cache, a small scratch)
    if last:
        x3, y3 = view_as(x, (1, x.size // c, c)), view_as(y, (1, y.size // c, c))
        npos = x3.shape[1]
        pos = lambda a, b: (slice(None), slice(a, b), slice(None))
        chan = lambda a, b: (Ellipsis, slice(a, b))
    else:
        x3 = view_as(x, (x.shape[0], c, x.size // (x.shape[0] * c)))
        y3 = view_as(y, x3.shape)
        npos = x3.shape[2]
        pos = lambda a, b: (slice(None), slice(None), slice(a, b))
        chan = lambda a, b: (slice(None), slice(a, b))
    per_pos = x3.shape[0] * (c + size - 1) * y.dtype.itemsize
    band = int(max(1, min(npos, LRN_BAND // per_pos)))
    # window: floor((size-1)/2) channels below, ceil((size-1)/2) above; the squares live in
    # a channel-padded scratch shared by the plan's LRNs, so each band zeroes its border of
    # (size - 1) channels
    before = (size - 1) // 2
    sq_shape = (1, band, c + size - 1) if last else (x3.shape[0], c + size - 1, band)
    sqp_all = ctx.scratch("lrn_squares", sq_shape, y.dtype)
    # the window sums accumulate in y itself (x is read once more at the end, elementwise),
    # unless the arena gave y x's place
    inplace = np.may_share_memory(x, y)
    ss_all = ctx.scratch("lrn_sums", y3[pos(0, band)].shape, y.dtype) if inplace else None
    k = alpha / size
    jobs = []
    for p0 in range(0, npos, band):
        nb = min(band, npos - p0)
        sqp = sqp_all[pos(0, nb)]
        xb, yb = x3[pos(p0, p0 + nb)], y3[pos(p0, p0 + nb)]
        ss = ss_all[pos(0, nb)] if inplace else yb
        border = [v for v in (sqp[chan(0, before)], sqp[chan(before + c, c + size - 1)]) if v.size]
        jobs.append((xb, yb, ss, sqp[chan(before, before + c)], border,
                     [sqp[chan(j, j + c)] for j in range(size)]))

    def run():
        for xb, yb, ss, sq, border, shifted in jobs:
            for v in border:
                v.fill(0)
            np.multiply(xb, xb, out=sq)
            if size > 1:
                np.add(shifted[0], shifted[1], out=ss)
            else:
                np.copyto(ss, shifted[0])
            for s in shifted[2:]:
                np.add(ss, s, out=ss)
            np.multiply(ss, k, out=ss)
            np.add(ss, bias, out=ss)
            np.power(ss, -beta, out=ss)
            np.multiply(xb, ss, out=yb)
    if len(jobs) > 1:
        ctx.tiled_to_fit(node, f"{len(jobs)} bands of {band} positions (squares scratch capped at "
                               f"{LRN_BAND >> 10} KiB)")
    ctx.note(node, f"{'NHWC ' if last else ''}channel window sum of {size} shifted squares"
                   + (f", {len(jobs)} bands of {band} positions" if len(jobs) > 1 else ""))
    return run


#: most bytes of an LRN's channel-padded squares scratch (positions run in bands beyond)
LRN_BAND = 256 << 10


# -- Softmax family -------------------------------------------------------------------------

def _axis(node: Node, rank: int, default: int = -1) -> int:
    ax = int(node.attrs.get("axis", default))
    if not -rank <= ax < rank:
        raise ShapeError(f"{node.op} {node.name!r}: axis {ax} out of range for rank {rank}")
    return ax % rank


@kernel("Softmax")
def softmax(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    ax = _axis(node, x.ndim)
    fast = native_ops.softmax_step(x, y, ax, ctx.threads)
    if fast is not None:
        ctx.note(node, f"native stable softmax over axis {ax}")
        return fast
    red = list(x.shape)
    red[ax] = 1
    m = ctx.workspace(red, y.dtype)

    def run():
        # subtracting the max keeps exp() from overflowing
        np.max(x, axis=ax, keepdims=True, out=m)
        np.subtract(x, m, out=y)
        np.exp(y, out=y)
        np.sum(y, axis=ax, keepdims=True, out=m)
        np.divide(y, m, out=y)
    ctx.note(node, f"stable softmax over axis {ax}")
    return run if x.size else (lambda: None)


@kernel("LogSoftmax")
def log_softmax(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    ax = _axis(node, x.ndim)
    red = list(x.shape)
    red[ax] = 1
    m = ctx.workspace(red, y.dtype)
    e = ctx.workspace(y.shape, y.dtype)

    def run():
        np.max(x, axis=ax, keepdims=True, out=m)
        np.subtract(x, m, out=y)
        np.exp(y, out=e)
        np.sum(e, axis=ax, keepdims=True, out=m)
        np.log(m, out=m)
        np.subtract(y, m, out=y)
    ctx.note(node, f"stable log-softmax over axis {ax}")
    return run if x.size else (lambda: None)


@kernel("Dropout")
def dropout(node: Node, ctx) -> Callable[[], None]:
    """Identity (inference, or a ratio of 0); the mask, if asked for, is all True.
    Training mode with a non-zero ratio is random and not supported."""
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    mask = ctx.value(node.outputs[1]) if _opt_out(node, 1) else None
    rname, tname = _opt(node, 1), _opt(node, 2)
    ratio = ctx.value(rname) if rname else None
    flag = ctx.value(tname) if tname else None

    def training() -> bool:
        on = flag is not None and bool(np.asarray(flag).reshape(-1)[0])
        r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
        if on and r != 0.0:
            raise UnsupportedOpError(f"Dropout {node.name!r}: training mode (random dropping) "
                                     "is not supported")
        return on

    check = None
    if tname and ctx.const(tname) is not None and (not rname or ctx.const(rname) is not None):
        training()                      # both known now: decide once
    elif tname:
        check = training                # fed at run time: decide every run
    ctx.note(node, "identity (inference)")

    def run():
        if check is not None:
            check()
        np.copyto(y, x)
        if mask is not None:
            mask.fill(True)
    if check is None and mask is None:
        return lambda: np.copyto(y, x)
    return run


# -- Resize / Upsample ------------------------------------------------------------------------


def changed_axes(x_shape, y_shape, scale: Sequence[float], roi: Optional[np.ndarray]) -> List[int]:
    """The axes a resize changes: identity axes (scale 1, same size, trivial roi) are skipped,
    as the reference does."""
    r = len(x_shape)
    axes = []
    for a in range(r):
        trivial_roi = roi is None or (math.isclose(roi[a], 0.0) and math.isclose(roi[a + r], 1.0))
        if not (math.isclose(scale[a], 1.0) and y_shape[a] == x_shape[a] and trivial_roi):
            axes.append(a)
    return axes


def nearest_blocks(x_shape, y_shape, axes: Sequence[int], coords: dict, nearest_mode: str,
                   scale: Sequence[float]) -> np.ndarray:
    """Flat source index, in blocks of the unchanged trailing dims after the last changed axis,
    of every output block from the first changed axis on (a nearest resize over ``axes``)."""
    a0, t = axes[0], axes[-1]
    out_mid = tuple(y_shape[a0:t + 1])
    flat = np.zeros(out_mid, np.intp)
    stride = 1
    for a in range(t, a0 - 1, -1):
        shape = [1] * len(out_mid)
        shape[a - a0] = y_shape[a]
        if a in coords:
            ia = _nearest_index(coords[a][0], nearest_mode, scale[a], x_shape[a])
        else:
            ia = np.arange(x_shape[a], dtype=np.intp)
        flat = flat + (ia * stride).reshape(shape)
        stride *= x_shape[a]
    return flat.ravel()


def _nearest_gather(node: Node, ctx, x: np.ndarray, y: np.ndarray, axes: List[int], coords: dict,
                    nearest_mode: str, scale: List[float], ctm: str, why: str = "") -> Callable[[], None]:
    """A nearest resize as one gather of whole blocks of the unchanged trailing dims (a pixel's
    channels in NHWC): one source index per output block, not per value (per-value int64
    indices were 8 bytes for every output float, 39 MB on a 640x640 DB detector). Natively,
    memcpy runs of the blocks' bytes (the int8 kernel's, dtype-blind) unless ``why`` says the
    native Resize declined; else numpy's take."""
    flat = nearest_blocks(x.shape, y.shape, axes, coords, nearest_mode, scale)
    lead, inner = int(np.prod(x.shape[:axes[0]])), int(np.prod(x.shape[axes[-1] + 1:]))
    note = f"nearest ({nearest_mode}, {ctm}) single gather over axes {axes}" + (f" (numpy: {why})" if why else "")
    if y.size == 0:
        ctx.note(node, note)
        return lambda: None
    if not why and x.flags.c_contiguous and y.flags.c_contiguous:
        from ..native import int8_ops
        nat = int8_ops.runs_step(x.reshape(lead, -1).view(np.int8), y.reshape(lead, -1).view(np.int8), flat,
                                 ctx, inner=inner * x.itemsize)
        if nat is not None:
            ctx.note(node, f"{note}; native memcpy runs")
            return nat
    x3 = view_as(x, (lead, x.size // max(lead * inner, 1), inner))
    y3 = view_as(y, (lead, flat.size, inner))
    take = np.take
    ctx.note(node, note)
    return lambda: take(x3, flat, axis=1, out=y3, mode="clip")


def resize_scale(node: Node, ctx, x: np.ndarray, y: np.ndarray) -> Tuple[List[float], Optional[np.ndarray], bool]:
    """(per-axis scale, full roi or None, whether the scales come from the planned shapes) of a
    Resize node, checked against the planned output shape."""
    r = x.ndim
    attrs = node.attrs
    axes = [int(a) % r for a in (attrs.get("axes") or range(r))]
    scales_name, sizes_name = _opt(node, 2), _opt(node, 3)
    sc, sz = _const_or_none(ctx, scales_name), _const_or_none(ctx, sizes_name)
    dynamic = (sc is None and sz is None and
               any(nm and ctx.tensor(nm).shape not in ((0,),) for nm in (scales_name, sizes_name)))
    if dynamic:
        # scales/sizes computed at run time: the planned output shape fixes them
        scale = [y.shape[a] / x.shape[a] for a in range(r)]
    else:
        scale, out = resize_plan(x.shape, attrs, sc, sz)
        if tuple(out) != tuple(y.shape):
            raise ShapeError(f"Resize {node.name!r}: planned output {y.shape} != computed {tuple(out)}")
    roi = None
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        rv = _const_or_none(ctx, _opt(node, 1))
        if rv is not None:
            rv = np.asarray(rv, np.float64).ravel()
            full = np.array([0.0] * r + [1.0] * r)
            na = len(axes)
            if len(rv) != 2 * na:
                raise ShapeError(f"Resize {node.name!r}: roi has {len(rv)} values for {na} axes")
            for i, a in enumerate(axes):
                full[a], full[a + r] = rv[i], rv[i + na]
            roi = full
    return scale, roi, dynamic


def _resize_kernel(node: Node, ctx, x: np.ndarray, y: np.ndarray, scale: List[float],
                   attrs: dict, roi: Optional[np.ndarray]) -> Callable[[], None]:
    r = x.ndim
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest_mode = attrs.get("nearest_mode", "round_prefer_floor")
    antialias = bool(attrs.get("antialias", 0))
    exclude = bool(attrs.get("exclude_outside", 0))
    cubic_a = float(attrs.get("cubic_coeff_a", -0.75))
    extrap = float(attrs.get("extrapolation_value", 0.0))
    if mode not in ("nearest", "linear", "cubic"):
        raise UnsupportedOpError(f"Resize {node.name!r}: mode {mode!r} is not supported")
    if ctm == "tf_crop_and_resize":
        if roi is None:
            raise UnsupportedOpError(f"Resize {node.name!r}: tf_crop_and_resize needs a constant roi")
    axes = changed_axes(x.shape, y.shape, scale, roi)
    if not axes:
        ctx.note(node, "identity resize (copy)")
        return native_ops.copy_step([(y, x)]) or (lambda: np.copyto(y, x))
    coords = {}
    for a in axes:
        coords[a] = _source_coords(ctm, y.shape[a], x.shape[a], scale[a],
                                   None if roi is None else (float(roi[a]), float(roi[a + r])))
    why = resize_native.why_not_native(mode, x, y, axes, coords)
    if not why and mode == "nearest":
        nat = resize_native.nearest_step(ctx, x, y, axes, nearest_blocks(x.shape, y.shape, axes, coords,
                                                                          nearest_mode, scale))
        if nat is not None:
            into = "" if y.flags.c_contiguous else ", written into its slice of the concat"
            ctx.note(node, f"nearest ({nearest_mode}, {ctm}) over axes {axes}: native memcpy runs{into}")
            return nat
        why = "runs too short for memcpy"
    if not y.flags.c_contiguous:
        # placed as a slice of a concat's output (memory/views.py) but not written natively:
        # into scratch, then one copy
        tmp = ctx.scratch("resize_out", y.shape, y.dtype)
        inner = _resize_kernel(node, ctx, x, tmp, scale, attrs, roi)
        copy = native_ops.copy_step([(y, tmp)])
        return native_ops.sequence_step([inner, copy] if copy else []) or (lambda: (inner(), np.copyto(y, tmp)))
    elif not why:
        nat = resize_native.linear_step(ctx, x, y, axes, coords, scale, antialias, exclude)
        if nat is not None:
            ctx.note(node, f"linear ({ctm}) over axes {axes}: native ({resize_native.isa_name()})")
            return nat
        why = "antialiased downscale (more than two taps)"

    if mode == "nearest":
        if ctm != "tf_crop_and_resize":
            return _nearest_gather(node, ctx, x, y, axes, coords, nearest_mode, scale, ctm, why)
        # one gather: flat source index of every output element past the unchanged leading dims
        a0 = axes[0]
        lead = int(np.prod(x.shape[:a0]))
        in_tail, out_tail = x.shape[a0:], y.shape[a0:]
        flat = np.zeros(out_tail, np.intp)
        extra_mask = np.zeros(out_tail, bool)
        stride = 1
        for a in range(r - 1, a0 - 1, -1):
            shape = [1] * len(out_tail)
            shape[a - a0] = y.shape[a]
            if a in coords:
                xo, outside = coords[a]
                ia = _nearest_index(xo, nearest_mode, scale[a], x.shape[a])
                if outside is not None:
                    extra_mask |= outside.reshape(shape)
            else:
                ia = np.arange(x.shape[a], dtype=np.intp)
            flat = flat + (ia * stride).reshape(shape)
            stride *= x.shape[a]
        flat = flat.ravel()
        x2 = view_as(x, (lead, int(np.prod(in_tail))))
        y2 = view_as(y, (lead, flat.size))
        take = np.take
        ctx.note(node, f"nearest ({nearest_mode}, {ctm}) single gather over axes {axes} (numpy: {why})")
        if extra_mask is not None and extra_mask.any():
            m2 = extra_mask.reshape(1, -1)
            return lambda: (take(x2, flat, axis=1, out=y2, mode="clip"), np.copyto(y2, extrap, where=m2))
        return lambda: take(x2, flat, axis=1, out=y2, mode="clip")

    if x.dtype.kind != "f":
        raise UnsupportedOpError(f"Resize {node.name!r}: {mode} mode on {x.dtype} is not supported")
    # separable filter: one pass per changed axis, each a few gathers and multiply-adds
    stages = []
    cur = x
    shape = list(x.shape)
    for k, a in enumerate(axes):
        xo, outside = coords[a]
        idx, w = _taps(xo, mode, scale[a], x.shape[a], antialias, cubic_a, exclude)
        shape[a] = y.shape[a]
        nxt = y if k == len(axes) - 1 else ctx.workspace(tuple(shape), y.dtype)
        tmp = ctx.workspace(tuple(shape), y.dtype)
        bshape = [1] * r
        bshape[a] = y.shape[a]
        # drop taps whose weight is zero everywhere (e.g. cubic at integer positions)
        live = [t for t in range(idx.shape[1]) if np.any(w[:, t] != 0)] or [0]
        taps = [(np.ascontiguousarray(idx[:, t]), w[:, t].astype(y.dtype).reshape(bshape)) for t in live]
        mask = None
        if outside is not None and outside.any():
            mask = outside.reshape(bshape)
        stages.append((cur, nxt, tmp, a, taps, mask))
        cur = nxt
    take, mul, add, copyto = np.take, np.multiply, np.add, np.copyto

    def run():
        for src, dst, tmp, a, taps, mask in stages:
            i0, w0 = taps[0]
            take(src, i0, axis=a, out=dst, mode="clip")
            mul(dst, w0, out=dst)
            for it, wt in taps[1:]:
                take(src, it, axis=a, out=tmp, mode="clip")
                mul(tmp, wt, out=tmp)
                add(dst, tmp, out=dst)
            if mask is not None:
                copyto(dst, extrap, where=mask)
    ntaps = [len(s[4]) for s in stages]
    ctx.note(node, f"{mode} ({ctm}{', antialias' if antialias else ''}) separable over axes {axes}, "
                   f"taps {ntaps} (numpy: {why})")
    return run


def _const_or_none(ctx, name: str) -> Optional[np.ndarray]:
    if not name:
        return None
    v = ctx.const(name)
    if v is not None and v.size == 0:
        return None
    return v


@kernel("Resize")
def resize(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    scale, roi, dynamic = resize_scale(node, ctx, x, y)
    fn = _resize_kernel(node, ctx, x, y, scale, node.attrs, roi)
    if dynamic:
        ctx.notes[node.name] += " (scales taken from the planned shapes)"
    return fn


@kernel("Upsample")
def upsample(node: Node, ctx) -> Callable[[], None]:
    """Upsample (opset 7-9): Resize with asymmetric coordinates; nearest picks as
    onnxruntime does (truncate)."""
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    sname = _opt(node, 1)
    sc = _const_or_none(ctx, sname) if sname else node.attrs.get("scales")
    if sc is None:
        scale = [y.shape[a] / x.shape[a] for a in range(x.ndim)]
    else:
        scale, out = resize_plan(x.shape, {}, np.asarray(sc, np.float64), None)
        if tuple(out) != tuple(y.shape):
            raise ShapeError(f"Upsample {node.name!r}: planned output {y.shape} != computed {tuple(out)}")
    mode = str(node.attrs.get("mode", "nearest"))
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}
    return _resize_kernel(node, ctx, x, y, scale, attrs, None)
