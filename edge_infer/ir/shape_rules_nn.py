"""Shape rules for neural-network ops: convolutions, pools, normalisation,
Gemm/MatMul, Resize/Upsample, Softmax, Dropout.

Conv (and FusedConv, which delegates here), MaxPool, AveragePool and the global
pools take a ``data_layout`` attribute: "NCHW" (the ONNX layout, the default) or
"NHWC" (channels last, set by passes/convert_layout.py): the input is then
(N, *spatial, C) and so is the output; weights stay OIHW either way.
BatchNormalization, LRN and InstanceNormalization accept it too (their output
has the input's shape in either layout).

Dims may be symbolic (strings). Batch and channel symbols propagate as they
are; a spatial dim computed from a symbolic one becomes a fresh symbol named
after the output (``f"{output}_d{axis}"``) since its value is unknown until the
plan pins input shapes.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ShapeError
from .graph import Node, Tensor
from .padding import resolve_pads
from .shape_inference import broadcast_shapes, rule


def _is_int(d) -> bool:
    return isinstance(d, (int, np.integer))


def _sym(node: Node, axis: int, out: int = 0) -> str:
    return f"{node.outputs[out]}_d{axis}"


def _dtype(t: Optional[Tensor]) -> str:
    return t.dtype if t is not None else "float32"


LAYOUTS = ("NCHW", "NHWC")


def channels_last(node: Node) -> bool:
    """True when ``node`` computes in NHWC (``data_layout="NHWC"``); NCHW is the default."""
    layout = node.attrs.get("data_layout") or "NCHW"
    if layout not in LAYOUTS:
        raise ShapeError(f"data_layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    return layout == "NHWC"


def split_layout(shape: Sequence, last: bool) -> Tuple:
    """(batch, channels, spatial dims) of an activation shape in either layout."""
    if last:
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


def join_layout(n, c, spatial: Sequence, last: bool) -> Tuple:
    """The activation shape of (batch, channels, spatial) in either layout."""
    return (n, *spatial, c) if last else (n, c, *spatial)


def window_attrs(node: Node, nsp: int, kernel: Sequence[int]) -> dict:
    """Sliding-window attributes with ONNX defaults filled in for ``nsp`` spatial dims."""
    a = node.attrs
    return dict(
        kernel=[int(k) for k in kernel],
        strides=[int(s) for s in (a.get("strides") or [1] * nsp)],
        dilations=[int(d) for d in (a.get("dilations") or [1] * nsp)],
        pads=[int(p) for p in (a.get("pads") or [0] * (2 * nsp))],
        auto_pad=str(a.get("auto_pad", "NOTSET") or "NOTSET"),
        ceil_mode=bool(a.get("ceil_mode", 0)),
    )


def window_out_dims(node: Node, spatial: Sequence, kernel: Sequence[int],
                    ceil_allowed: bool = False, first_axis: int = 2) -> List:
    """Output spatial dims of a sliding-window op; symbolic where the input dim is."""
    n = len(spatial)
    w = window_attrs(node, n, kernel)
    if len(w["strides"]) != n or len(w["dilations"]) != n or len(w["pads"]) != 2 * n:
        raise ShapeError(f"strides/dilations/pads do not match {n} spatial dims")
    out = []
    for i, d in enumerate(spatial):
        if not _is_int(d):
            out.append(_sym(node, first_axis + i))
            continue
        _, o = resolve_pads([int(d)], [w["kernel"][i]], [w["strides"][i]], [w["dilations"][i]],
                            [w["pads"][i], w["pads"][i + n]], w["auto_pad"],
                            w["ceil_mode"] and ceil_allowed)
        if o[0] < 1:
            raise ShapeError(f"spatial dim {i} of size {d} is smaller than the window "
                             f"(kernel {w['kernel'][i]}, dilation {w['dilations'][i]})")
        out.append(o[0])
    return out


@rule("Conv")
def _conv(node: Node, ins: List[Optional[Tensor]]):
    x, w = ins[0], ins[1]
    if x.shape is None or w.shape is None:
        return [(_dtype(x), None)]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(f"Conv needs X of rank >= 3 and W of the same rank, got {x.shape} and {w.shape}")
    group = int(node.attrs.get("group", 1))
    last = channels_last(node)
    n, c, insp = split_layout(x.shape, last)
    cg = w.shape[1]
    first = 1 if last else 2
    if _is_int(c) and _is_int(cg) and c != cg * group:
        raise ShapeError(f"input has {c} channels but W expects {cg} x group {group}")
    kernel = node.attrs.get("kernel_shape") or list(w.shape[2:])
    if not all(_is_int(k) for k in kernel):
        sp = tuple(_sym(node, first + i) for i in range(len(kernel)))
        return [(x.dtype, join_layout(n, w.shape[0], sp, last))]
    sp = window_out_dims(node, insp, kernel, first_axis=first)
    return [(x.dtype, join_layout(n, w.shape[0], sp, last))]


def conv_transpose_geometry(in_spatial: Sequence[int], kernel: Sequence[int], attrs: dict
                            ) -> Tuple[List[int], List[int]]:
    """(pads [b..., e...], output spatial size) of a ConvTranspose, per the ONNX spec."""
    n = len(in_spatial)
    strides = [int(s) for s in (attrs.get("strides") or [1] * n)]
    dil = [int(d) for d in (attrs.get("dilations") or [1] * n)]
    opad = [int(p) for p in (attrs.get("output_padding") or [0] * n)]
    pads = [int(p) for p in (attrs.get("pads") or [0] * (2 * n))]
    auto_pad = str(attrs.get("auto_pad", "NOTSET") or "NOTSET")
    out_shape = [int(o) for o in (attrs.get("output_shape") or [])]
    if len(out_shape) == n + 2:       # some exporters write the full N, C, ... shape
        out_shape = out_shape[2:]
    full = [strides[i] * (in_spatial[i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(n)]
    if out_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if not out_shape:
            out_shape = [in_spatial[i] * strides[i] for i in range(n)]
        total = [full[i] - out_shape[i] for i in range(n)]
        if auto_pad == "SAME_UPPER":
            b = [t // 2 for t in total]
        else:   # SAME_LOWER, and NOTSET with output_shape (the spec's "else" branch)
            b = [t - t // 2 for t in total]
        return b + [total[i] - b[i] for i in range(n)], out_shape
    if auto_pad == "VALID":
        pads = [0] * (2 * n)
    return pads, [full[i] - pads[i] - pads[i + n] for i in range(n)]


@rule("ConvTranspose")
def _conv_transpose(node: Node, ins):
    x, w = ins[0], ins[1]
    if x.shape is None or w.shape is None:
        return [(_dtype(x), None)]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(f"ConvTranspose needs X of rank >= 3 and W of the same rank, got {x.shape} and {w.shape}")
    group = int(node.attrs.get("group", 1))
    last = channels_last(node)
    n, c, sp = split_layout(x.shape, last)
    if _is_int(c) and _is_int(w.shape[0]) and c != w.shape[0]:
        raise ShapeError(f"input has {c} channels but W has {w.shape[0]}")
    m = w.shape[1] * group if _is_int(w.shape[1]) else _sym(node, len(x.shape) - 1 if last else 1)
    kernel = node.attrs.get("kernel_shape") or list(w.shape[2:])
    first = 1 if last else 2
    if all(_is_int(d) for d in sp) and all(_is_int(k) for k in kernel):
        _, out = conv_transpose_geometry([int(d) for d in sp], [int(k) for k in kernel], node.attrs)
    else:
        fixed = node.attrs.get("output_shape") or []
        if len(fixed) == len(sp) + 2:
            fixed = fixed[2:]
        out = list(fixed) if fixed else [_sym(node, first + i) for i in range(len(sp))]
        if not fixed:
            # dims that are known can still be computed one at a time
            for i, d in enumerate(sp):
                if _is_int(d) and _is_int(kernel[i]):
                    one = {k: v for k, v in node.attrs.items()}
                    nd = len(sp)
                    for key in ("strides", "dilations", "output_padding"):
                        if node.attrs.get(key):
                            one[key] = [node.attrs[key][i]]
                    if node.attrs.get("pads"):
                        one["pads"] = [node.attrs["pads"][i], node.attrs["pads"][i + nd]]
                    out[i] = conv_transpose_geometry([int(d)], [int(kernel[i])], one)[1][0]
    bad = [o for o in out if _is_int(o) and o < 1]
    if bad:
        raise ShapeError(f"output spatial size {out} is not positive (pads too large?)")
    return [(x.dtype, join_layout(n, m, out, last))]


@rule("MaxPool", "AveragePool")
def _pool(node: Node, ins):
    x = ins[0]
    if x.shape is None:
        res = [(x.dtype, None)]
        return res + [("int64", None)] if node.op == "MaxPool" else res
    kernel = node.attrs.get("kernel_shape")
    if not kernel:
        raise ShapeError(f"{node.op} needs kernel_shape")
    if len(kernel) != len(x.shape) - 2:
        raise ShapeError(f"kernel_shape {kernel} does not match input rank {len(x.shape)}")
    last = channels_last(node)
    n, c, insp = split_layout(x.shape, last)
    sp = window_out_dims(node, insp, kernel, ceil_allowed=True, first_axis=1 if last else 2)
    shape = join_layout(n, c, sp, last)
    if node.op == "MaxPool":
        return [(x.dtype, shape), ("int64", shape)]
    return [(x.dtype, shape)]


@rule("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node: Node, ins):
    x = ins[0]
    if x.shape is None:
        return [(x.dtype, None)]
    last = channels_last(node)
    if last and len(x.shape) < 3:
        raise ShapeError(f"{node.op} in NHWC needs an input of rank >= 3, got {x.shape}")
    n, c, _ = split_layout(x.shape, last)
    return [(x.dtype, join_layout(n, c, (1,) * (len(x.shape) - 2), last))]


@rule("Gemm")
def _gemm(node: Node, ins):
    a, b = ins[0], ins[1]
    if a.shape is None or b.shape is None:
        return [(a.dtype, None)]
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    m, ka = (a.shape[1], a.shape[0]) if node.attrs.get("transA", 0) else a.shape
    kb, n = (b.shape[1], b.shape[0]) if node.attrs.get("transB", 0) else b.shape
    if _is_int(ka) and _is_int(kb) and ka != kb:
        raise ShapeError(f"Gemm inner dims differ: A {a.shape} transA={node.attrs.get('transA', 0)}, "
                         f"B {b.shape} transB={node.attrs.get('transB', 0)}")
    c = ins[2] if len(ins) > 2 else None
    if c is not None and c.shape is not None:
        try:
            full = broadcast_shapes((m, n), c.shape)
        except ShapeError:
            raise ShapeError(f"Gemm: C {c.shape} does not broadcast to ({m}, {n})") from None
        if len(c.shape) > 2 or any(_is_int(f) and _is_int(o) and f != o for f, o in zip(full, (m, n))):
            raise ShapeError(f"Gemm: C {c.shape} does not broadcast to ({m}, {n})")
    return [(a.dtype, (m, n))]


def matmul_shape(a: Sequence, b: Sequence) -> Tuple:
    """numpy.matmul output shape for shapes that may hold symbolic dims."""
    if len(a) == 0 or len(b) == 0:
        raise ShapeError("MatMul inputs must have rank >= 1")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    ka, kb = a2[-1], b2[-2]
    if _is_int(ka) and _is_int(kb) and ka != kb:
        raise ShapeError(f"MatMul inner dims differ: {tuple(a)} @ {tuple(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2]) if (len(a2) > 2 or len(b2) > 2) else ()
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return tuple(out)


@rule("MatMul")
def _matmul(node: Node, ins):
    a, b = ins
    if a.shape is None or b.shape is None:
        return [(a.dtype, None)]
    return [(a.dtype, matmul_shape(a.shape, b.shape))]


@rule("BatchNormalization")
def _batchnorm(node: Node, ins):
    x = ins[0]
    channels_last(node)
    res = [(x.dtype, x.shape)]
    if len(node.outputs) > 1:
        # running mean / var outputs exist only in training mode; shape (C,)
        c = ins[3].shape if ins[3] is not None else None
        res += [(x.dtype, c), (x.dtype, c)]
    return res


@rule("LRN", "InstanceNormalization")
def _same_layout(node: Node, ins):
    channels_last(node)            # rejects an unknown data_layout
    return [(ins[0].dtype, ins[0].shape)]


@rule("Softmax", "LogSoftmax")
def _same(node: Node, ins):
    return [(ins[0].dtype, ins[0].shape)]


@rule("Dropout")
def _dropout(node: Node, ins):
    x = ins[0]
    return [(x.dtype, x.shape), ("bool", x.shape)]


# -- Resize ----------------------------------------------------------------------

def _nonempty(t: Optional[Tensor]) -> bool:
    return t is not None and not (t.shape is not None and len(t.shape) == 1 and t.shape[0] == 0)


def resize_plan(in_shape: Sequence[int], attrs: dict, scales: Optional[np.ndarray],
                sizes: Optional[np.ndarray]) -> Tuple[List[float], List[int]]:
    """Per-axis (scale, output size) of a Resize for a static input shape.

    Follows the ONNX spec (and the reference implementation): with ``sizes``,
    scale = out/in per axis, adjusted by keep_aspect_ratio_policy; with
    ``scales``, out = floor(in * scale).
    """
    r = len(in_shape)
    axes = [int(a) % r for a in (attrs.get("axes") or range(r))]
    scale = [1.0] * r
    out = [int(d) for d in in_shape]
    if sizes is not None:
        sizes = np.asarray(sizes).astype(np.int64).ravel()
        if len(sizes) != len(axes):
            raise ShapeError(f"Resize: sizes has {len(sizes)} entries for {len(axes)} axes")
        for a, s in zip(axes, sizes):
            out[a] = int(s)
            scale[a] = int(s) / in_shape[a]
        policy = attrs.get("keep_aspect_ratio_policy", "stretch") or "stretch"
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            if policy not in ("not_larger", "not_smaller"):
                raise ShapeError(f"Resize: unknown keep_aspect_ratio_policy {policy!r}")
            s = pick(scale[a] for a in axes)
            for a in axes:
                scale[a] = s
                out[a] = int(s * in_shape[a] + 0.5)     # round half up, as the spec says
    elif scales is not None:
        scales = np.asarray(scales, dtype=np.float64).ravel()
        if len(scales) != len(axes):
            raise ShapeError(f"Resize: scales has {len(scales)} entries for {len(axes)} axes")
        for a, s in zip(axes, scales):
            if s <= 0:
                raise ShapeError(f"Resize: scales must be positive, got {scales.tolist()}")
            scale[a] = float(s)
            out[a] = int(math.floor(in_shape[a] * float(s)))
    else:
        raise ShapeError("Resize needs scales or sizes")
    return scale, out


def _resize_shape(node: Node, x: Tensor, scales: Optional[Tensor], sizes: Optional[Tensor]):
    if x.shape is None:
        return [(x.dtype, None)]
    r = len(x.shape)
    sc = scales.data if _nonempty(scales) and scales.is_const else None
    sz = sizes.data if _nonempty(sizes) and sizes.is_const else None
    use_sizes = _nonempty(sizes)
    if (use_sizes and sz is None) or (not use_sizes and sc is None):
        # values known only at run time: rank survives, dims do not
        if not _nonempty(scales) and not use_sizes:
            raise ShapeError("Resize needs scales or sizes")
        return [(x.dtype, tuple(_sym(node, i) for i in range(r)))]
    axes = [int(a) % r for a in (node.attrs.get("axes") or range(r))]
    if all(_is_int(d) for d in x.shape):
        _, out = resize_plan([int(d) for d in x.shape], node.attrs, sc, sz)
        return [(x.dtype, tuple(out))]
    out = list(x.shape)
    vals = np.asarray(sz if use_sizes else sc).ravel()
    policy = node.attrs.get("keep_aspect_ratio_policy", "stretch") or "stretch"
    for a, v in zip(axes, vals):
        if use_sizes and policy == "stretch":
            out[a] = int(v)
        elif not use_sizes and float(v) == 1.0:
            pass                       # scale 1 keeps the (symbolic) dim
        elif _is_int(x.shape[a]) and not use_sizes:
            out[a] = int(math.floor(int(x.shape[a]) * float(v)))
        else:
            out[a] = _sym(node, a)
    return [(x.dtype, tuple(out))]


@rule("Resize")
def _resize(node: Node, ins):
    x = ins[0]
    scales = ins[2] if len(ins) > 2 else None
    sizes = ins[3] if len(ins) > 3 else None
    return _resize_shape(node, x, scales, sizes)


@rule("Upsample")
def _upsample(node: Node, ins):
    x, scales = ins[0], ins[1] if len(ins) > 1 else None
    if scales is None:
        sc = node.attrs.get("scales")   # opset 7 kept scales as an attribute
        if sc is None:
            raise ShapeError("Upsample needs scales")
        scales = Tensor("scales", "float32", (len(sc),), np.asarray(sc, np.float32))
    return _resize_shape(node, x, scales, None)


@rule("MaxUnpool")
def _max_unpool(node: Node, ins):
    """Y's shape: the ``output_shape`` input when constant, else each spatial dim
    (in - 1) * stride + kernel - pads (ONNX's default)."""
    x = ins[0]
    fixed = ins[2] if len(ins) > 2 else None
    if fixed is not None and fixed.data is not None:
        shape = [int(v) for v in np.asarray(fixed.data).reshape(-1)]
        if x.shape is not None and len(shape) != len(x.shape) or any(d < 0 for d in shape):
            raise ShapeError(f"MaxUnpool output_shape {shape} does not fit input rank / is negative")
        return [(x.dtype, tuple(shape))]
    if x.shape is None:
        return [(x.dtype, None)]
    if fixed is not None:            # a computed output_shape: known only when it is (value-dependent)
        return [(x.dtype, tuple(_sym(node, i) for i in range(len(x.shape))))]
    kernel = node.attrs.get("kernel_shape")
    n_sp = len(x.shape) - 2
    if not kernel or len(kernel) != n_sp:
        raise ShapeError(f"MaxUnpool needs kernel_shape of {n_sp} dims, got {kernel}")
    strides = node.attrs.get("strides") or [1] * n_sp
    pads = node.attrs.get("pads") or [0] * (2 * n_sp)
    out = [((d - 1) * int(s) + int(k) - int(pads[i]) - int(pads[i + n_sp])) if _is_int(d) else _sym(node, 2 + i)
           for i, (d, k, s) in enumerate(zip(x.shape[2:], kernel, strides))]
    return [(x.dtype, (x.shape[0], x.shape[1], *out))]
