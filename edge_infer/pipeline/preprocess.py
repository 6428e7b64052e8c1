"""Frame preprocessing driven by a *recipe*: a small JSON-able dict.

A recipe says how to turn a camera frame (``H x W x 3`` uint8, BGR as OpenCV delivers it, or
``H x W`` gray) into the model's input tensor. The same recipe describes the preprocessing used
for calibration, so a model sees the same pixels when it is calibrated and when it runs.

Recipe format (every key optional; defaults shown)::

    {
      "name": "my-model",          # free text
      "input": null,               # model input name; null: the model's only (first) input
      "size": null,                # [H, W] of the model input; null: from the model input shape
      "resize": "stretch",         # "stretch" | "letterbox" | "center_crop" | "none"
      "interpolation": "linear",   # "linear" | "nearest" | "area"
      "pad_value": 114,            # letterbox border, in pixel units (0..255)
      "color": null,               # "rgb" | "bgr" | "gray"; null: "gray" for 1-channel inputs, else "rgb"
      "invert": false,             # x -> 255 - x before scaling (dark ink on light paper -> bright ink)
      "scale": 0.00392156862745098,  # multiply pixels by this (1/255)
      "mean": 0.0,                 # then subtract (scalar or one value per channel, in "color" order)
      "std": 1.0,                  # then divide   (scalar or one value per channel)
      "layout": null,              # "NCHW" | "NHWC"; null: from the model input shape
      "dtype": "float32",          # "float32" | "float16" | "uint8" (uint8 skips scale/mean/std)
      "batch": true                # add the leading batch axis of size 1
    }

i.e. ``x = ((resize(color(frame)) [inverted]) * scale - mean) / std`` laid out as ``layout``.

Recipes are given as a dict, inline JSON, a path to a ``.json`` file holding one, or the name of
a file in the top-level ``calibration/`` folder (``calibration/NAME.json``: ``imagenet``,
``imagenet_caffe_bgr``, ``yolo``, ``digits``, ``unit_range``, ``symmetric_range``; the int8
calibration, ``edge_infer.quantize``, reads the same files). A file may hold the recipe at
top level or under a ``"preprocess"`` key (so a calibration-set description can carry it).

``preprocess`` also returns how input-tensor pixel coordinates map back to the frame, which the
box and mask postprocessing uses to draw on the original frame (``to_frame_coords``).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import EdgeInferError
from ._cv import optional_cv2

__all__ = ["DEFAULTS", "RecipeError", "load_recipe", "validate_recipe", "recipe_for_input",
           "Preprocessor", "preprocess", "resize_image", "to_frame_coords", "recipe_dir"]


class RecipeError(EdgeInferError, ValueError):
    """A preprocessing recipe is malformed or does not fit the model."""


DEFAULTS: Dict[str, Any] = {
    "name": None, "input": None, "size": None, "resize": "stretch", "interpolation": "linear",
    "pad_value": 114, "color": None, "invert": False, "scale": 1.0 / 255.0, "mean": 0.0, "std": 1.0,
    "layout": None, "dtype": "float32", "batch": True,
}
_CHOICES = {
    "resize": ("stretch", "letterbox", "center_crop", "none"),
    "interpolation": ("linear", "nearest", "area"),
    "color": (None, "rgb", "bgr", "gray"),
    "layout": (None, "NCHW", "NHWC"),
    "dtype": ("float32", "float16", "uint8"),
}
#: keys a recipe file may carry that preprocessing ignores (calibration-set descriptions)
_IGNORED = {"description", "format", "calibration", "samples", "source", "files", "count", "seed",
            "preprocess", "version", "labels"}


def recipe_dir() -> str:
    """The top-level ``calibration/`` folder (installed as ``edge_infer._calibration``, or the
    source checkout's), where the bundled recipes live (``imagenet``, ``yolo``, ``digits``...)."""
    try:
        from .. import _calibration  # type: ignore[attr-defined]
        return os.path.dirname(_calibration.__file__)
    except ImportError:
        return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "calibration")


def validate_recipe(recipe: Dict[str, Any]) -> Dict[str, Any]:
    """A complete recipe (defaults filled in); RecipeError naming the first bad key."""
    if not isinstance(recipe, dict):
        raise RecipeError(f"a preprocessing recipe is a dict, got {type(recipe).__name__}")
    if isinstance(recipe.get("preprocess"), dict):      # a calibration description carrying one
        outer = {k: v for k, v in recipe.items() if k in ("name", "input")}
        recipe = {**outer, **recipe["preprocess"]}
    unknown = sorted(k for k in recipe if k not in DEFAULTS and k not in _IGNORED)
    if unknown:
        raise RecipeError(f"unknown recipe key(s) {unknown}; known: {sorted(DEFAULTS)}")
    r = {**DEFAULTS, **{k: v for k, v in recipe.items() if k in DEFAULTS}}
    for key, allowed in _CHOICES.items():
        v = r[key]
        if isinstance(v, str) and key in ("layout",):
            v = r[key] = v.upper()
        elif isinstance(v, str):
            v = r[key] = v.lower()
        if v not in allowed:
            raise RecipeError(f"recipe {key!r} is {v!r}; choose one of {[a for a in allowed if a]}")
    if r["size"] is not None:
        size = r["size"]
        if isinstance(size, int):
            size = [size, size]
        if (not isinstance(size, (list, tuple)) or len(size) != 2
                or not all(isinstance(d, int) and d > 0 for d in size)):
            raise RecipeError(f"recipe 'size' wants [H, W] positive ints, got {r['size']!r}")
        r["size"] = [int(size[0]), int(size[1])]
    for key in ("mean", "std"):
        v = np.asarray(r[key], dtype=np.float64)
        if v.ndim > 1 or (v.ndim == 1 and len(v) not in (1, 3)):
            raise RecipeError(f"recipe {key!r} wants a number or one per channel, got {r[key]!r}")
        if key == "std" and np.any(v == 0):
            raise RecipeError("recipe 'std' must be non-zero")
    if not isinstance(r["scale"], (int, float)):
        raise RecipeError(f"recipe 'scale' wants a number, got {r['scale']!r}")
    return r


def load_recipe(spec: Union[str, os.PathLike, Dict[str, Any], None]) -> Dict[str, Any]:
    """A validated recipe from a dict, inline JSON, a JSON file path, or a name in ``calibration/``."""
    if spec is None:
        return dict(DEFAULTS)
    if isinstance(spec, dict):
        return validate_recipe(spec)
    spec = os.fspath(spec)
    if spec.lstrip().startswith("{"):          # inline JSON (command line)
        try:
            return validate_recipe(json.loads(spec))
        except ValueError as e:
            if isinstance(e, RecipeError):
                raise
            raise RecipeError(f"inline recipe is not valid JSON: {e}") from None
    path = spec
    if not os.path.isfile(path):
        path = os.path.join(recipe_dir(), spec if spec.endswith(".json") else spec + ".json")
    if not os.path.isfile(path):
        raise RecipeError(f"preprocessing recipe not found: {spec} (a .json file, or a name in {recipe_dir()})")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise RecipeError(f"recipe {path}: {e}") from None
    return validate_recipe(data)


def recipe_for_input(shape: Sequence, recipe: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Fill the model-dependent keys (size, layout, color) of ``recipe`` from an input shape
    such as ``(1, 3, 224, 224)`` or ``('N', 224, 224, 3)``."""
    r = validate_recipe(dict(recipe or {}))
    shape = tuple(shape or ())
    if len(shape) != 4:
        if r["size"] is None or r["layout"] is None:
            raise RecipeError(f"model input shape {shape} is not an image batch (N,C,H,W or N,H,W,C); "
                              f"give the recipe's 'size' and 'layout'")
        return r
    layout = r["layout"]
    if layout is None:
        if shape[1] in (1, 3) and shape[3] not in (1, 3):
            layout = "NCHW"
        elif shape[3] in (1, 3) and shape[1] not in (1, 3):
            layout = "NHWC"
        else:
            layout = "NCHW"
    r["layout"] = layout
    c, h, w = (shape[1], shape[2], shape[3]) if layout == "NCHW" else (shape[3], shape[1], shape[2])
    if r["size"] is None:
        if not (isinstance(h, int) and isinstance(w, int)):
            raise RecipeError(f"model input has symbolic spatial dims {shape}; give the recipe's 'size'")
        r["size"] = [h, w]
    elif isinstance(h, int) and isinstance(w, int) and r["size"] != [h, w]:
        raise RecipeError(f"recipe size {r['size']} does not fit the model input {shape} ({layout}); "
                          f"drop 'size' from the recipe to take the model's")
    if r["color"] is None:
        r["color"] = "gray" if c == 1 else "rgb"
    if isinstance(c, int) and (c == 1) != (r["color"] == "gray"):
        raise RecipeError(f"recipe color {r['color']!r} does not fit a {c}-channel model input {shape}")
    return r


# -- image operations ------------------------------------------------------------

def _np_resize(img: np.ndarray, h: int, w: int, interpolation: str) -> np.ndarray:
    ih, iw = img.shape[:2]
    if (ih, iw) == (h, w):
        return img
    if interpolation == "area" and ih % h == 0 and iw % w == 0:
        fy, fx = ih // h, iw // w
        blocks = img.reshape((h, fy, w, fx) + img.shape[2:]).astype(np.float32)
        out = blocks.mean(axis=(1, 3))
        return np.clip(np.rint(out), 0, 255).astype(img.dtype) if img.dtype == np.uint8 else out.astype(img.dtype)
    if interpolation == "nearest":
        ys = np.minimum((np.arange(h) * (ih / h)).astype(np.int64), ih - 1)
        xs = np.minimum((np.arange(w) * (iw / w)).astype(np.int64), iw - 1)
        return img[ys][:, xs]
    # bilinear, half-pixel centres (as OpenCV's INTER_LINEAR)
    y = np.clip((np.arange(h) + 0.5) * (ih / h) - 0.5, 0, ih - 1)
    x = np.clip((np.arange(w) + 0.5) * (iw / w) - 0.5, 0, iw - 1)
    y0 = np.floor(y).astype(np.int64)
    x0 = np.floor(x).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, ih - 1), np.minimum(x0 + 1, iw - 1)
    wy, wx = (y - y0).astype(np.float32), (x - x0).astype(np.float32)
    f = img.astype(np.float32)
    extra = (None,) * (img.ndim - 2)
    wy = wy[(slice(None), None) + extra]
    wx = wx[(None, slice(None)) + extra]
    top = f[y0][:, x0] * (1 - wx) + f[y0][:, x1] * wx
    bot = f[y1][:, x0] * (1 - wx) + f[y1][:, x1] * wx
    out = top * (1 - wy) + bot * wy
    if img.dtype == np.uint8:
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return out.astype(img.dtype)


def resize_image(img: np.ndarray, size: Tuple[int, int], interpolation: str = "linear") -> np.ndarray:
    """Resize ``img`` (H x W [x C]) to ``size`` = (H, W); OpenCV when installed, else numpy."""
    h, w = int(size[0]), int(size[1])
    if img.shape[:2] == (h, w):
        return img
    cv2 = optional_cv2()
    if cv2 is not None:
        flag = {"linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST, "area": cv2.INTER_AREA}[interpolation]
        out = cv2.resize(img, (w, h), interpolation=flag)
        if img.ndim == 3 and out.ndim == 2:
            out = out[:, :, None]
        return out
    return _np_resize(img, h, w, interpolation)


def _to_color(img: np.ndarray, color: str) -> np.ndarray:
    if img.ndim == 2:
        img = img[:, :, None]
    c = img.shape[2]
    cv2 = optional_cv2()
    if cv2 is not None and c in (3, 4) and img.dtype == np.uint8:
        if color == "gray":
            return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY if c == 3 else cv2.COLOR_BGRA2GRAY)[:, :, None]
        if color == "rgb":
            return cv2.cvtColor(img, cv2.COLOR_BGR2RGB if c == 3 else cv2.COLOR_BGRA2RGB)
    if color == "gray":
        if c == 1:
            return img
        bgr = img[:, :, :3].astype(np.float32)
        gray = bgr[:, :, 0] * 0.114 + bgr[:, :, 1] * 0.587 + bgr[:, :, 2] * 0.299
        if img.dtype == np.uint8:
            gray = np.clip(np.rint(gray), 0, 255).astype(np.uint8)
        return gray[:, :, None]
    if c == 1:
        img = np.repeat(img, 3, axis=2)
    elif c == 4:
        img = img[:, :, :3]
    return img[:, :, ::-1] if color == "rgb" else img


def to_frame_coords(boxes: np.ndarray, meta: Dict[str, Any], clip: bool = True) -> np.ndarray:
    """Map ``[..., 4]`` boxes (x1, y1, x2, y2) in input-tensor pixels back to frame pixels."""
    b = np.array(boxes, dtype=np.float32, copy=True).reshape(-1, 4)
    sy, sx = meta["scale"]
    oy, ox = meta["offset"]
    b[:, [0, 2]] = (b[:, [0, 2]] - ox) / sx
    b[:, [1, 3]] = (b[:, [1, 3]] - oy) / sy
    if clip:
        fh, fw = meta["frame_size"]
        b[:, [0, 2]] = np.clip(b[:, [0, 2]], 0, fw)
        b[:, [1, 3]] = np.clip(b[:, [1, 3]], 0, fh)
    return b.reshape(np.shape(boxes))


def preprocess(frame: np.ndarray, recipe: Dict[str, Any]) -> Tuple[np.ndarray, Dict[str, Any]]:
    """Apply a *complete* recipe (see ``recipe_for_input``) to one frame.

    Returns ``(tensor, meta)``; ``meta`` has ``frame_size`` (h, w), ``input_size`` (H, W),
    ``scale`` (sy, sx) and ``offset`` (oy, ox): input pixel = frame pixel * scale + offset.
    """
    r = recipe
    if r["size"] is None or r["layout"] is None or r["color"] is None:
        raise RecipeError("recipe is incomplete (size/layout/color); build it with recipe_for_input")
    img = np.asarray(frame)
    if img.ndim not in (2, 3):
        raise RecipeError(f"a frame is H x W or H x W x C, got shape {img.shape}")
    fh, fw = img.shape[:2]
    H, W = r["size"]
    if img.ndim == 2:
        img = img[:, :, None]
    mode, interp = r["resize"], r["interpolation"]
    if mode == "stretch":
        img = resize_image(img, (H, W), interp)
        scale, offset = (H / fh, W / fw), (0.0, 0.0)
    elif mode == "letterbox":
        s = min(H / fh, W / fw)
        nh, nw = max(1, int(round(fh * s))), max(1, int(round(fw * s)))
        top, left = (H - nh) // 2, (W - nw) // 2
        canvas = np.full((H, W, img.shape[2]), r["pad_value"], dtype=img.dtype)
        canvas[top:top + nh, left:left + nw] = resize_image(img, (nh, nw), interp)
        img = canvas
        scale, offset = (nh / fh, nw / fw), (float(top), float(left))
    elif mode == "center_crop":
        s = max(H / fh, W / fw)
        ch, cw = min(fh, max(1, int(round(H / s)))), min(fw, max(1, int(round(W / s))))
        y0, x0 = (fh - ch) // 2, (fw - cw) // 2
        img = resize_image(img[y0:y0 + ch, x0:x0 + cw], (H, W), interp)
        scale = (H / ch, W / cw)
        offset = (-y0 * scale[0], -x0 * scale[1])
    else:  # none
        if (fh, fw) != (H, W):
            raise RecipeError(f"recipe resize 'none' but the frame is {fh}x{fw}, the model wants {H}x{W}")
        scale, offset = (1.0, 1.0), (0.0, 0.0)
    if img.ndim == 2:
        img = img[:, :, None]
    img = _to_color(img, r["color"])       # after resizing: on the small image
    if r["dtype"] == "uint8":
        x = img.astype(np.uint8)
        if r["invert"]:
            x = 255 - x
    else:
        x = img.astype(np.float32)
        if r["invert"]:
            x = 255.0 - x
        x *= np.float32(r["scale"])
        mean = np.asarray(r["mean"], np.float32)
        std = np.asarray(r["std"], np.float32)
        if mean.any():
            x -= mean
        if np.any(std != 1):
            x /= std
        if r["dtype"] == "float16":
            x = x.astype(np.float16)
    if r["layout"] == "NCHW":
        x = x.transpose(2, 0, 1)
    x = np.ascontiguousarray(x)
    if r["batch"]:
        x = x[None]
    meta = {"frame_size": (fh, fw), "input_size": (H, W), "scale": scale, "offset": offset}
    return x, meta


class Preprocessor:
    """A recipe bound to a model input: ``pre(frame) -> (tensor, meta)``."""

    def __init__(self, recipe=None, input_shape: Optional[Sequence] = None):
        r = load_recipe(recipe)
        self.recipe = recipe_for_input(input_shape, r) if input_shape is not None else validate_recipe(r)
        if self.recipe["size"] is None or self.recipe["layout"] is None:
            raise RecipeError("give the model input shape or the recipe's 'size' and 'layout'")
        if self.recipe["color"] is None:
            self.recipe["color"] = "rgb"

    @classmethod
    def for_model(cls, model, recipe=None) -> "Preprocessor":
        """For a Runtime (or anything with ``inputs``): the input named by the recipe, or the first."""
        r = load_recipe(recipe)
        infos = list(model.inputs)
        info = next((i for i in infos if i.name == r.get("input")), None) if r.get("input") else infos[0]
        if info is None:
            raise RecipeError(f"recipe input {r['input']!r} is not a model input ({[i.name for i in infos]})")
        pre = cls(r, info.shape)
        pre.recipe["input"] = info.name
        return pre

    def __call__(self, frame: np.ndarray) -> Tuple[np.ndarray, Dict[str, Any]]:
        return preprocess(frame, self.recipe)
