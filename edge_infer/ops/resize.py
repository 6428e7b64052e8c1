"""Resize and Upsample: modes and positive finite scales."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.graph import Graph, Node, Tensor
from .cost import flops, free
from .int8 import int8_limit
from .schema import BOOL, FLOAT, FLOATS, INTS, STR, const, fail, op
from .shapes import fresh, is_int, rule


def _check_resize(node: Node, graph: Graph) -> None:
    k = 2 if node.op == "Resize" else 1
    scales = const(graph, node.inputs[k]) if len(node.inputs) > k else None
    if scales is None:
        scales = node.attrs.get("scales")
    if scales is not None:
        s = np.asarray(scales, np.float64)
        if s.size and not (np.all(np.isfinite(s)) and np.all(s > 0)):
            fail(node, f"input {k} (scales)", "scales must be positive and finite")
    sizes = const(graph, node.inputs[3]) if node.op == "Resize" and len(node.inputs) > 3 else None
    if sizes is not None and np.any(np.asarray(sizes) < 0):
        fail(node, "input 3 (sizes)", "sizes must be non-negative")


_MODE = STR("nearest", "linear", "cubic", "bilinear")
SCHEMAS = {
    "Resize": op((1, 4), check=_check_resize, mode=_MODE,
                 coordinate_transformation_mode=STR("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                                    "align_corners", "asymmetric", "tf_crop_and_resize"),
                 nearest_mode=STR("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"),
                 cubic_coeff_a=FLOAT(), exclude_outside=BOOL, extrapolation_value=FLOAT(), antialias=BOOL,
                 axes=INTS(), keep_aspect_ratio_policy=STR("stretch", "not_larger", "not_smaller"),
                 data_layout=STR("NCHW", "NHWC")),
    "Upsample": op((1, 2), check=_check_resize, mode=_MODE, scales=FLOATS()),
}


# -- coordinate math shared by every backend's Resize ----------------------------------------

def source_coords(ctm: str, out_len: int, in_len: int, scale: float,
                   roi: Optional[Tuple[float, float]]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Input coordinate of every output index along one axis (ONNX
    coordinate_transformation_mode), and the out-of-range mask for
    tf_crop_and_resize (else None).

    Computed in float32 as onnxruntime does, so that coordinates which land
    exactly on a rounding tie (nearest mode) resolve the same way it does.
    """
    f = np.float32
    o = np.arange(out_len, dtype=f)
    s = f(scale)
    half = f(0.5)
    if ctm == "half_pixel":
        xo = (o + half) / s - half
    elif ctm == "pytorch_half_pixel":
        # the spec (and onnxruntime) map a length-1 output to 0
        xo = (o + half) / s - half if out_len > 1 else np.zeros(out_len, f)
    elif ctm == "align_corners":
        xo = o * f(in_len - 1) / f(out_len - 1) if out_len > 1 else np.zeros(out_len, f)
    elif ctm == "asymmetric":
        xo = o / s
    elif ctm == "tf_half_pixel_for_nn":          # opset 11-12 only, kept for old TF exports
        xo = (o + half) / s
    elif ctm == "half_pixel_symmetric":
        adjustment = f(out_len) / (s * f(in_len))
        offset = f(in_len) / f(2) * (f(1) - adjustment)
        xo = offset + (o + half) / s - half
    elif ctm == "tf_crop_and_resize":
        start, end = f(roi[0]), f(roi[1])
        if out_len > 1:
            xo = start * f(in_len - 1) + o * (end - start) * f(in_len - 1) / f(out_len - 1)
        else:
            xo = np.full(out_len, half * (start + end) * f(in_len - 1), f)
        return xo.astype(np.float64), (xo < 0) | (xo > in_len - 1)
    else:
        raise UnsupportedOpError(f"Resize: coordinate_transformation_mode {ctm!r} is not supported")
    return xo.astype(np.float64), None


def nearest_index(xo: np.ndarray, mode: str, scale: float, in_len: int) -> np.ndarray:
    if mode == "round_prefer_floor":
        idx = np.where(xo - np.floor(xo) <= 0.5, np.floor(xo), np.ceil(xo))
    elif mode == "round_prefer_ceil":
        idx = np.where(xo - np.floor(xo) < 0.5, np.floor(xo), np.ceil(xo))
    elif mode == "floor":
        idx = np.floor(xo)
    elif mode == "ceil":
        idx = np.ceil(xo)
    elif mode == "simple":
        # Upsample / Resize-10 (as onnxruntime): truncate, or ceil when downsampling
        idx = np.ceil(xo) if scale < 1 else np.trunc(xo)
    else:
        raise UnsupportedOpError(f"Resize: nearest_mode {mode!r} is not supported")
    return np.clip(idx, 0, in_len - 1).astype(np.intp)


def cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic convolution kernel at distances ``t``."""
    t = np.abs(t)
    t2, t3 = t * t, t * t * t
    return np.where(t <= 1, (a + 2) * t3 - (a + 3) * t2 + 1,
                    np.where(t < 2, a * t3 - 5 * a * t2 + 8 * a * t - 4 * a, 0.0))


def taps(xo: np.ndarray, mode: str, scale: float, in_len: int, antialias: bool,
          cubic_a: float, exclude_outside: bool) -> Tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (out_len, taps), of a linear/cubic filter along one axis.

    The tap window is anchored at the input pixel at or left of the coordinate
    (ratio in (0, 1], as the ONNX reference); antialiasing widens the filter by
    1/scale when downsampling. Indices are clamped to the edge (edge padding).
    """
    s = min(scale, 1.0) if antialias else 1.0
    left = np.floor(xo)
    left = np.where(xo == left, left - 1, left)
    ratio = xo - left                                   # in (0, 1]
    if mode == "linear":
        start = int(math.floor(-1 / s) + 1)
    else:
        start = int(math.floor(-2 / s) + 1)
    offs = np.arange(start, 2 - start)        # 2 (linear) or 4 (cubic) taps, more with antialias
    dist = (offs[None, :] - ratio[:, None]) * s
    if mode == "linear":
        w = np.clip(1 - np.abs(dist), 0, 1)
    else:
        w = cubic(dist, cubic_a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    idx = left[:, None].astype(np.int64) + offs[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
        tot = w.sum(axis=1, keepdims=True)
        w = w / np.where(tot == 0, 1.0, tot)
    return np.clip(idx, 0, in_len - 1).astype(np.intp), w


#: ONNX coordinate_transformation_mode -> (align_corners, half_pixel_centers) of TFLite's kernel
BILINEAR_MODES = {"half_pixel": (False, True), "pytorch_half_pixel": (False, True),
                  "align_corners": (True, False), "asymmetric": (False, False)}


def resize_axes(x_shape, y_shape):
    """(nhwc, (H axis, W axis)) of a 4-D resize that changes only two spatial axes, else None."""
    if len(x_shape) != 4:
        return None
    changed = {a for a in range(4) if x_shape[a] != y_shape[a]}
    if changed <= {2, 3}:
        return False, (2, 3)
    if changed <= {1, 2}:
        return True, (1, 2)
    return None


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

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
        return [(x.dtype, tuple(fresh(node, i) for i in range(r)))]
    axes = [int(a) % r for a in (node.attrs.get("axes") or range(r))]
    if all(is_int(d) for d in x.shape):
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
        elif is_int(x.shape[a]) and not use_sizes:
            out[a] = int(math.floor(int(x.shape[a]) * float(v)))
        else:
            out[a] = fresh(node, a)
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


# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

flops("Resize", "Upsample")(free)


# -- int8 (``ops/int8.py``: what the int8 kernel of these ops covers) ------------------------------

@int8_limit("Resize")
def _resize_int8(node: Node, g: Graph):
    if node.attrs.get("mode", "nearest") == "nearest":
        return None
    x, y = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
    ctm = node.attrs.get("coordinate_transformation_mode", "half_pixel")
    if node.attrs.get("mode") != "linear" or ctm not in BILINEAR_MODES or node.attrs.get("antialias") \
            or not (x.is_static and y.is_static) or resize_axes(x.shape, y.shape) is None:
        return (f"Resize {node.attrs.get('mode')} ({ctm}) has no int8 kernel (nearest, and linear "
                "over two spatial axes)")
    return None
