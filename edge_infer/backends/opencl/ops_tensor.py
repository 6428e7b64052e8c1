"""OpenCL data-movement ops (Transpose, Concat, views, Slice, Split, Expand, Resize, Pad) and the
reductions, registered in the backend's kernel table (``registry.py``)."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, UnsupportedOpError
from ...ir import Node
from .ops import MAXD, _opt, launch1d, need_f32, strides_of
from .registry import kernel_for


# -- data movement ---------------------------------------------------------------------------------

def copy_launch(node, pc, src: str, dst: str, shape, src_strides, dst_strides, src_off=0, dst_off=0) -> None:
    """Strided N-D copy of ``shape`` elements from tensor src to tensor dst."""
    item = np.dtype(pc.dtype(src)).itemsize
    if item not in (1, 2, 4, 8) or np.dtype(pc.dtype(dst)).itemsize != item:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: element size {item}")
    # drop size-1 dims, merge dims contiguous in both
    dims = [(int(d), int(s), int(t)) for d, s, t in zip(shape, src_strides, dst_strides) if int(d) != 1]
    merged = []
    for d, s, t in dims:
        if merged and merged[-1][1] == s * d and merged[-1][2] == t * d:
            merged[-1] = (merged[-1][0] * d, s, t)
        else:
            merged.append((d, s, t))
    if len(merged) > MAXD:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: copy over {len(merged)} dims (at most {MAXD})")
    n = int(np.prod(shape))
    if n == 0:
        return
    meta = [len(merged)] + [m[0] for m in merged] + [m[1] for m in merged] + [m[2] for m in merged]
    sb, so = pc.ref(src)
    db, do = pc.ref(dst)
    launch1d(pc, node, "tensor", f"copy_nd_{item}", n, [sb, so + src_off, db, do + dst_off, n, pc.meta(meta)])


@kernel_for("Transpose")
def transpose(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    xs = pc.shape(x)
    perm = [int(p) for p in (node.attrs.get("perm") or list(range(len(xs)))[::-1])]
    st = strides_of(xs)
    ys = tuple(xs[p] for p in perm)
    if ys != pc.shape(y):
        raise ShapeError(f"Transpose {node.name!r}: {ys} != {pc.shape(y)}")
    copy_launch(node, pc, x, y, ys, [st[p] for p in perm], strides_of(ys))
    pc.note(node, f"strided copy, perm {perm}")


@kernel_for("Concat")
def concat(node: Node, pc) -> None:
    y = node.outputs[0]
    ys = pc.shape(y)
    axis = int(node.attrs.get("axis", 0)) % len(ys)
    yst = strides_of(ys)
    at = 0
    for name in node.inputs:
        if not name:
            continue
        if pc.dtype(name) != pc.dtype(y):
            raise UnsupportedOpError(f"Concat {node.name!r}: mixed dtypes")
        s = pc.shape(name)
        copy_launch(node, pc, name, y, s, strides_of(s), yst, dst_off=at * yst[axis])
        at += s[axis]
    if at != ys[axis]:
        raise ShapeError(f"Concat {node.name!r}: inputs give {at} along axis {axis}, output {ys[axis]}")
    pc.note(node, f"{len([i for i in node.inputs if i])} strided copies along axis {axis}")


@kernel_for(*sorted(["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"]))
def view(node: Node, pc) -> None:
    """A view whose input could not be aliased (a constant): one copy."""
    x, y = node.inputs[0], node.outputs[0]
    if node.op == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
        raise UnsupportedOpError(f"Dropout {node.name!r}: mask output")
    if int(np.prod(pc.shape(x))) != int(np.prod(pc.shape(y))) or pc.dtype(x) != pc.dtype(y):
        raise ShapeError(f"{node.op} {node.name!r}: {pc.shape(x)} -> {pc.shape(y)}")
    n = int(np.prod(pc.shape(y)))
    copy_launch(node, pc, x, y, (n,), (1,), (1,))
    pc.note(node, "copy")


@kernel_for("Slice")
def slice_(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    xs = pc.shape(x)
    vals = [pc.const(_opt(node, i)) if _opt(node, i) else None for i in range(1, 5)]
    if vals[0] is None or vals[1] is None or any(_opt(node, i) and vals[i - 1] is None for i in range(1, 5)):
        raise UnsupportedOpError(f"Slice {node.name!r}: starts/ends/axes/steps must be constants")
    starts, ends = [int(v) for v in vals[0].reshape(-1)], [int(v) for v in vals[1].reshape(-1)]
    axes = [int(a) % len(xs) for a in vals[2].reshape(-1)] if vals[2] is not None else list(range(len(starts)))
    steps = [int(s) for s in vals[3].reshape(-1)] if vals[3] is not None else [1] * len(starts)
    st = strides_of(xs)
    shape, sst, off = list(xs), list(st), 0
    for s, e, a, k in zip(starts, ends, axes, steps):
        r = range(xs[a])[slice(s, e, k)]
        shape[a] = len(r)
        sst[a] = st[a] * k
        off += (r.start if len(r) else 0) * st[a]
    if tuple(shape) != pc.shape(y):
        raise ShapeError(f"Slice {node.name!r}: {shape} != {pc.shape(y)}")
    copy_launch(node, pc, x, y, shape, sst, strides_of(shape), src_off=off)
    pc.note(node, "strided copy")


@kernel_for("Split")
def split(node: Node, pc) -> None:
    x = node.inputs[0]
    xs = pc.shape(x)
    axis = int(node.attrs.get("axis", 0)) % len(xs)
    st = strides_of(xs)
    at = 0
    for o in node.outputs:
        if not o:
            continue
        s = pc.shape(o)
        copy_launch(node, pc, x, o, s, st, strides_of(s), src_off=at * st[axis])
        at += s[axis]
    if at != xs[axis]:
        raise ShapeError(f"Split {node.name!r}: outputs cover {at} of {xs[axis]}")
    pc.note(node, f"{len(node.outputs)} strided copies")


@kernel_for("Expand")
def expand(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = pc.shape(x), pc.shape(y)
    full = (1,) * (len(ys) - len(xs)) + tuple(xs)
    st = strides_of(full)
    copy_launch(node, pc, x, y, ys, [0 if full[i] == 1 and ys[i] != 1 else st[i] for i in range(len(ys))],
                strides_of(ys))
    pc.note(node, "broadcasting copy")


@kernel_for("Resize", "Upsample")
def resize(node: Node, pc) -> None:
    from ...ops.resize import nearest_index, source_coords, taps   # the host-side index/weight math is shared
    from ...ops.resize import resize_plan
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = pc.shape(x), pc.shape(y)
    r = len(xs)
    if node.op == "Upsample":
        mode = {"bilinear": "linear", "trilinear": "linear"}.get(str(node.attrs.get("mode", "nearest")),
                                                                str(node.attrs.get("mode", "nearest")))
        attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}
    else:
        attrs = node.attrs
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    if ctm == "tf_crop_and_resize" or bool(attrs.get("antialias", 0)) and mode != "nearest":
        raise UnsupportedOpError(f"Resize {node.name!r}: {ctm}{' antialias' if attrs.get('antialias') else ''}")
    if mode not in ("nearest", "linear", "cubic"):
        raise UnsupportedOpError(f"Resize {node.name!r}: mode {mode}")
    scale = [ys[a] / xs[a] for a in range(r)]
    if node.op == "Resize":
        sc = pc.const(_opt(node, 2)) if _opt(node, 2) else None
        sz = pc.const(_opt(node, 3)) if _opt(node, 3) else None
        if sc is not None and sc.size == 0:
            sc = None
        if sz is not None and sz.size == 0:
            sz = None
        if sc is not None or sz is not None:
            scale, _ = resize_plan(xs, attrs, sc, sz)
    elif _opt(node, 1) and pc.const(_opt(node, 1)) is not None:
        scale = [float(s) for s in pc.const(_opt(node, 1)).reshape(-1)]
    dt = pc.dtype(x)
    axes = [a for a in range(r) if not (abs(scale[a] - 1.0) < 1e-12 and ys[a] == xs[a])]
    item = np.dtype(dt).itemsize
    if not axes:
        copy_launch(node, pc, x, y, ys, strides_of(xs), strides_of(ys))
        pc.note(node, "identity resize (copy)")
        return
    if mode == "nearest":
        if item not in (1, 4):
            raise UnsupportedOpError(f"Resize {node.name!r}: dtype {dt}")
        a0 = axes[0]
        lead = int(np.prod(xs[:a0]))
        flat = np.zeros(ys[a0:], np.int64)
        stride = 1
        for a in range(r - 1, a0 - 1, -1):
            shape = [1] * (r - a0)
            shape[a - a0] = ys[a]
            if a in axes:
                xo, _ = source_coords(ctm, ys[a], xs[a], scale[a], None)
                ia = nearest_index(xo, attrs.get("nearest_mode", "round_prefer_floor"), scale[a], xs[a])
            else:
                ia = np.arange(xs[a])
            flat = flat + (ia * stride).reshape(shape)
            stride *= xs[a]
        out_row, in_row = int(flat.size), int(np.prod(xs[a0:]))
        n = lead * out_row
        launch1d(pc, node, "tensor", f"gather_rows_{item}", n,
                 [*pc.ref(x), *pc.ref(y), n, pc.upload(flat.reshape(-1).astype(np.int32)), out_row, in_row])
        pc.note(node, f"nearest resize: one gather over axes {axes}")
        return
    need_f32(pc, node, [x, y])
    cur, cur_shape = pc.ref(x), list(xs)
    for k, a in enumerate(axes):
        xo, _ = source_coords(ctm, ys[a], xs[a], scale[a], None)
        idx, w = taps(xo, mode, scale[a], xs[a], False, float(attrs.get("cubic_coeff_a", -0.75)),
                              bool(attrs.get("exclude_outside", 0)))
        nxt_shape = list(cur_shape)
        nxt_shape[a] = ys[a]
        if k == len(axes) - 1:
            dst = pc.ref(y)
        else:
            dst = (pc.scratch(f"resize_{node.name}_{k}", int(np.prod(nxt_shape)) * 4), 0)
        inner = int(np.prod(cur_shape[a + 1:]))
        n = int(np.prod(nxt_shape))
        T = idx.shape[1]
        launch1d(pc, node, "nn", "resize_axis_f32", n,
                 [*cur, *dst, n, pc.upload(idx.astype(np.int32)), pc.upload(w.astype(np.float32)),
                  pc.upload(np.zeros(ys[a], np.int8)), T, xs[a], ys[a], inner, 0.0])
        cur, cur_shape = dst, nxt_shape
    pc.note(node, f"{mode} resize ({ctm}), separable over axes {axes}")


@kernel_for("Pad")
def pad(node: Node, pc) -> None:
    from ...ops.tensor import pad_amounts
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = pc.shape(x), pc.shape(y)
    if node.attrs.get("mode", "constant") != "constant":
        raise UnsupportedOpError(f"Pad {node.name!r}: mode {node.attrs.get('mode')} (OpenCL: constant)")
    if np.dtype(pc.dtype(x)).itemsize != 4:
        raise UnsupportedOpError(f"Pad {node.name!r}: dtype {pc.dtype(x)}")
    amounts = pad_amounts(node, [pc.tensor(n) if n else None for n in node.inputs], len(xs))
    if amounts is None or any(b < 0 or e < 0 for b, e in amounts):
        raise UnsupportedOpError(f"Pad {node.name!r}: pads must be constant and non-negative")
    cname = _opt(node, 2)
    value = np.zeros((), pc.dtype(y))
    if cname:
        v = pc.const(cname)
        if v is None:
            raise UnsupportedOpError(f"Pad {node.name!r}: the pad value must be constant")
        value = np.asarray(v, pc.dtype(y)).reshape(())
    if len(xs) > MAXD:
        raise UnsupportedOpError(f"Pad {node.name!r}: rank {len(xs)}")
    n = int(np.prod(ys))
    meta = [len(xs)] + list(ys) + list(xs) + [b for b, _ in amounts]
    launch1d(pc, node, "tensor", "pad_const_4", n, [*pc.ref(x), *pc.ref(y), n, pc.meta(meta),
                                                   np.uint32(value.view(np.uint32))])
    pc.note(node, "constant pad")


@kernel_for("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")
def reduce(node: Node, pc) -> None:
    from ...ops.reduce import reduce_axes
    x, y = node.inputs[0], node.outputs[0]
    need_f32(pc, node, [x, y])
    xs = pc.shape(x)
    axes = reduce_axes(node, [pc.tensor(n) if n else None for n in node.inputs], len(xs))
    if axes is None:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: axes must be constant")
    axes = sorted(axes)
    if not axes:
        copy_launch(node, pc, x, y, xs, strides_of(xs), strides_of(xs))
        return
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: axes {axes} are not one contiguous block")
    L = int(np.prod([xs[a] for a in axes]))
    if L == 0:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: empty reduction")
    inner = int(np.prod(xs[axes[-1] + 1:]))
    total = int(np.prod(xs)) // L
    code = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3}[node.op]
    launch1d(pc, node, "nn", "reduce_f32", total, [*pc.ref(x), *pc.ref(y), L, inner, total, code])
    pc.note(node, f"{node.op} over axes {axes} ({L} values)")
