"""Data-dependent and index kernels: NonZero, NonMaxSuppression, Compress, Unique, GatherND,
ScatterND, ScatterElements, OneHot, CenterCropPad.

The data-dependent ops (``ops.dynamic.DATA_DEPENDENT_OPS``) cannot write into a
buffer planned ahead: their eval closure *returns* its outputs, and the staged executor
(``backends/cpu/staged.py``) plans the rest of the graph for the size they came out with,
feeding them into that plan's arena (from the dynamic pool). Index ops check runtime
indices on every run and raise ``InputError`` naming the node for one out of range.
"""
from __future__ import annotations

import numpy as np

from ....errors import InputError
from ..registry import kernel

_EMPTY_SELECTION = np.zeros((0, 3), np.int64)


def _scalar(arr, default):
    """The one value of an optional scalar input (its default when absent)."""
    return default if arr is None else arr.reshape(-1)[0].item()


def _check_range(node, idx: np.ndarray, dims, what: str = "indices") -> np.ndarray:
    """``idx`` (last axis: one index per dim of ``dims``) with negatives wrapped; out of range
    is an InputError (numpy would wrap or read elsewhere)."""
    dims = np.asarray(dims, np.int64)
    if idx.size and (np.any(idx < -dims) or np.any(idx >= dims)):
        raise InputError(f"{node.op} node {node.name!r}: {what} out of range for dims {dims.tolist()}")
    return np.where(idx < 0, idx + dims, idx)


# -- data-dependent sizes: eval returns the outputs ----------------------------------------------

@kernel("NonZero")
def nonzero(node, ctx):
    x = ctx.value(node.inputs[0])
    src = x.reshape(1) if x.ndim == 0 else x

    def run():
        return (np.array(np.nonzero(src), dtype=np.int64).reshape(src.ndim, -1),)
    return run


@kernel("Compress")
def compress(node, ctx):
    x, cond = ctx.value(node.inputs[0]), ctx.value(node.inputs[1])
    axis = node.attrs.get("axis")
    n = x.size if axis is None else x.shape[axis]
    if cond.shape[0] > n:
        raise InputError(f"Compress node {node.name!r}: condition has {cond.shape[0]} entries "
                         f"for an axis of {n}")
    src = x.reshape(-1) if axis is None else x

    def run():
        return (np.compress(cond.astype(bool, copy=False), src, axis=0 if axis is None else axis),)
    return run


def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """[..., 4] boxes as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2."""
    if center:                                  # (x_center, y_center, width, height)
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], -1)
    a, b, c, d = np.moveaxis(boxes, -1, 0)      # (y1, x1, y2, x2), corners in either order
    return np.stack([np.minimum(a, c), np.minimum(b, d), np.maximum(a, c), np.maximum(b, d)], -1)


#: up to this many candidates (of one batch and class) the IoU matrix is computed at once
MATRIX_NMS_MAX = 512


def _iou_above(a: np.ndarray, area_a: np.ndarray, b: np.ndarray, area_b: np.ndarray, thr) -> np.ndarray:
    """IoU(a, b) > thr for corner boxes broadcast against each other, in the boxes' float32 as
    onnxruntime computes it (no overlap, or an empty box: never suppressed)."""
    lo = np.maximum(a[..., :2], b[..., :2])
    wh = np.maximum(np.minimum(a[..., 2:], b[..., 2:]) - lo, 0)
    inter = wh[..., 0] * wh[..., 1]
    union = area_a + area_b - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / union
    return (iou > thr) & (inter > 0) & (area_a > 0) & (area_b > 0) & (union > 0)


def _greedy_nms(box: np.ndarray, area: np.ndarray, order: np.ndarray, iou_threshold: float,
                max_out: int) -> np.ndarray:
    """Indices kept by greedy suppression over ``order`` (best score first): each kept box
    removes the later ones whose IoU with it exceeds the threshold. Few candidates: the whole
    IoU matrix at once, then one cheap step per candidate; many: one IoU row per kept box
    against the boxes still alive."""
    thr = np.float32(iou_threshold)
    keep = []
    if order.size <= MATRIX_NMS_MAX:
        c, a = box[order], area[order]
        suppress = _iou_above(c[:, None, :], a[:, None], c[None, :, :], a[None, :], thr)
        alive = np.ones(order.size, bool)
        for i in range(order.size):
            if alive[i]:
                keep.append(order[i])
                if len(keep) == max_out:
                    break
                alive &= ~suppress[i]
        return np.asarray(keep, np.int64)
    alive = order
    while alive.size and len(keep) < max_out:
        i, rest = alive[0], alive[1:]
        keep.append(i)
        alive = rest[~_iou_above(box[i], area[i], box[rest], area[rest], thr)]
    return np.asarray(keep, np.int64)


@kernel("NonMaxSuppression")
def non_max_suppression(node, ctx):
    ins = list(node.inputs) + [""] * (5 - len(node.inputs))
    boxes, scores = ctx.value(ins[0]), ctx.value(ins[1])
    max_t, iou_t, score_t = (ctx.value(n) for n in ins[2:5])
    if boxes.ndim != 3 or scores.ndim != 3 or boxes.shape[2] != 4 or boxes.shape[0] != scores.shape[0] \
            or boxes.shape[1] != scores.shape[2]:
        raise InputError(f"NonMaxSuppression node {node.name!r}: boxes {list(boxes.shape)} and scores "
                         f"{list(scores.shape)} do not match ([B, N, 4] and [B, C, N])")
    for k, arr in zip((2, 3, 4), (max_t, iou_t, score_t)):
        if arr is not None and arr.size != 1:
            raise InputError(f"NonMaxSuppression node {node.name!r}: input {k} must hold one value, "
                             f"got shape {list(arr.shape)}")
    center = bool(node.attrs.get("center_point_box", 0))
    nb, nc, _ = scores.shape

    def run():
        max_out = int(_scalar(max_t, 0))
        if max_out <= 0 or boxes.shape[1] == 0:
            return (_EMPTY_SELECTION,)
        iou_thr = float(_scalar(iou_t, 0.0))
        box = _corners(boxes, center).astype(np.float32, copy=False)
        area = (box[..., 2] - box[..., 0]) * (box[..., 3] - box[..., 1])
        parts = []
        for b in range(nb):
            for c in range(nc):
                s = scores[b, c]
                cand = np.flatnonzero(s > _scalar(score_t, 0.0)) if score_t is not None else np.arange(s.size)
                order = cand[np.argsort(-s[cand], kind="stable")]   # ties: the lower index first
                keep = _greedy_nms(box[b], area[b], order, iou_thr, max_out)
                if keep.size:
                    parts.append(np.stack([np.full_like(keep, b), np.full_like(keep, c), keep], 1))
        return (np.concatenate(parts) if parts else _EMPTY_SELECTION,)
    return run


@kernel("Unique")
def unique(node, ctx):
    x = ctx.value(node.inputs[0])
    axis = node.attrs.get("axis")
    axis = None if axis is None else (axis + x.ndim if axis < 0 else axis)
    keep_sorted = bool(node.attrs.get("sorted", 1))
    src = x.reshape(-1) if axis is None else x

    def run():
        y, first, inverse, counts = np.unique(src, return_index=True, return_inverse=True,
                                              return_counts=True, axis=axis)
        inverse = inverse.reshape(-1)
        if not keep_sorted:                 # order of first occurrence, as ONNX's sorted=0
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = np.take(y, order, axis=0 if axis is None else axis)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        return tuple(a.astype(np.int64, copy=False) if k else a
                     for k, a in enumerate((y, first, inverse, counts)))
    return run


# -- index ops with planned outputs ----------------------------------------------------------------

@kernel("GatherND")
def gather_nd(node, ctx):
    x, idx, y = ctx.value(node.inputs[0]), ctx.value(node.inputs[1]), ctx.value(node.outputs[0])
    b = int(node.attrs.get("batch_dims", 0))
    k = idx.shape[-1] if idx.ndim else -1
    if idx.ndim < 1 or b >= idx.ndim or b + k > x.ndim or idx.shape[:b] != x.shape[:b]:
        raise InputError(f"GatherND node {node.name!r}: indices {list(idx.shape)} do not index data "
                         f"{list(x.shape)} with batch_dims {b}")
    nbatch = int(np.prod(x.shape[:b], dtype=np.int64))
    dims = x.shape[b:b + k]
    strides = np.array([int(np.prod(dims[j + 1:], dtype=np.int64)) for j in range(k)], np.int64)
    xv = x.reshape((nbatch, int(np.prod(dims, dtype=np.int64)), -1))
    yv = y.reshape((nbatch, -1, xv.shape[2]))
    rows = np.arange(nbatch)[:, None]

    def linear():
        return (_check_range(node, idx.astype(np.int64, copy=False), dims) @ strides).reshape(nbatch, -1)
    if y.size == 0:
        return lambda: None
    if ctx.const(node.inputs[1]) is not None:
        lin = linear()
        return lambda: np.copyto(yv, xv[rows, lin])
    return lambda: np.copyto(yv, xv[rows, linear()])


_UFUNC_AT = {"add": np.add.at, "mul": np.multiply.at, "max": np.maximum.at, "min": np.minimum.at}


@kernel("ScatterND")
def scatter_nd(node, ctx):
    x, idx, upd = (ctx.value(n) for n in node.inputs)
    y = ctx.value(node.outputs[0])
    k = idx.shape[-1] if idx.ndim else -1
    if idx.ndim < 1 or k > x.ndim or tuple(upd.shape) != tuple(idx.shape[:-1]) + tuple(x.shape[k:]):
        raise InputError(f"ScatterND node {node.name!r}: indices {list(idx.shape)} and updates "
                         f"{list(upd.shape)} do not fit data {list(x.shape)}")
    dims = x.shape[:k]
    strides = np.array([int(np.prod(dims[j + 1:], dtype=np.int64)) for j in range(k)], np.int64)
    yv = y.reshape((int(np.prod(dims, dtype=np.int64)), -1))
    uv = upd.reshape((-1, yv.shape[1]))
    reduction = node.attrs.get("reduction", "none")
    at = _UFUNC_AT.get(reduction)

    def run():
        np.copyto(y, x)
        lin = (_check_range(node, idx.astype(np.int64, copy=False), dims) @ strides).reshape(-1)
        if at is None:
            yv[lin] = uv
        else:
            at(yv, lin, uv)
    return run


@kernel("ScatterElements")
def scatter_elements(node, ctx):
    x, idx, upd = (ctx.value(n) for n in node.inputs)
    y = ctx.value(node.outputs[0])
    axis = node.attrs.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    if idx.shape != upd.shape or idx.ndim != x.ndim or any(
            i > d for a, (i, d) in enumerate(zip(idx.shape, x.shape)) if a != axis):
        raise InputError(f"ScatterElements node {node.name!r}: indices {list(idx.shape)}, updates "
                         f"{list(upd.shape)} and data {list(x.shape)} do not fit")
    grid = list(np.indices(idx.shape, sparse=True))
    at = _UFUNC_AT.get(node.attrs.get("reduction", "none"))

    def run():
        np.copyto(y, x)
        where = list(grid)
        where[axis] = _check_range(node, idx[..., None].astype(np.int64, copy=False), [x.shape[axis]])[..., 0]
        if at is None:
            y[tuple(where)] = upd
        else:
            at(y, tuple(where), upd)
    return run


@kernel("OneHot")
def one_hot(node, ctx):
    idx, values = ctx.value(node.inputs[0]), ctx.value(node.inputs[2])
    y = ctx.value(node.outputs[0])
    if values.size != 2:
        raise InputError(f"OneHot node {node.name!r}: values must hold [off, on], got shape {list(values.shape)}")
    values = values.reshape(2)
    axis = node.attrs.get("axis", -1)
    axis = axis + y.ndim if axis < 0 else axis
    depth = y.shape[axis]
    classes = np.arange(depth).reshape((depth,) + (1,) * (y.ndim - axis - 1))
    hot = np.empty(y.shape, bool)

    def run():
        i = idx.astype(np.int64)                # float indices truncate, as ONNX casts them
        i = np.where(i < 0, i + depth, i)
        np.equal(np.expand_dims(i, axis), classes, out=hot)
        np.copyto(y, values[0])
        np.copyto(y, values[1], where=hot)
    return run


@kernel("CenterCropPad")
def center_crop_pad(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    src, dst = [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for a in range(x.ndim):
        n, m = x.shape[a], y.shape[a]
        if m < n:                          # crop: the centre, the extra row at the end
            src[a] = slice((n - m) // 2, (n - m) // 2 + m)
        elif m > n:                        # pad with zeros: the extra row at the end
            dst[a] = slice((m - n) // 2, (m - n) // 2 + n)
    src_v, dst_v = x[tuple(src)], y[tuple(dst)]
    pads = y.shape != x.shape

    def run():
        if pads:
            y.fill(0)
        np.copyto(dst_v, src_v)
    return run
