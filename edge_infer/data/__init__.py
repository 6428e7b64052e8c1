"""Bundled fixtures: a small trained CNN on 8x8 digits and its held-out samples; a small
trained YOLO-style detector of shapes and a DB-style text detector, and the generators of
their (synthetic) scenes.

See the README.md in edge_infer/data/digits/, yolo_shapes/ and db_text/ for what the models
are and how they were made. Only numpy is needed here (no scikit-learn, torch or onnx
at run time).
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["DIGITS_DIR", "digits_model_path", "digits_samples_path", "load_digits_samples",
           "YOLO_SHAPES_DIR", "yolo_shapes_model_path", "yolo_shapes_scenes",
           "DB_TEXT_DIR", "db_text_model_path", "db_text_scenes"]

DIGITS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits")
YOLO_SHAPES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "yolo_shapes")
DB_TEXT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "db_text")


def _existing(name: str, folder: str = DIGITS_DIR, script: str = "digits/train_digits_cnn.py") -> str:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"bundled fixture {name!r} is missing at {path}; regenerate it with "
            f"`python edge_infer/data/{script}`")
    return path


def digits_model_path() -> str:
    """Path of the bundled ONNX model: input `input` float32 [N,1,8,8] (pixels / 16),
    output `logits` float32 [N,10]."""
    return _existing("digits_cnn.onnx")


def digits_samples_path() -> str:
    """Path of the bundled held-out samples (.npz with `x` and `y`)."""
    return _existing("samples.npz")


def load_digits_samples() -> tuple[np.ndarray, np.ndarray]:
    """The held-out split the model never trained on.

    Returns (x, y): x float32 [n,1,8,8] already scaled to [0,1], y int64 [n] labels 0..9
    (n = 450, all ten classes). Fresh arrays each call, safe to modify.
    """
    with np.load(digits_samples_path(), allow_pickle=False) as data:
        x = np.ascontiguousarray(data["x"], dtype=np.float32)
        y = np.ascontiguousarray(data["y"], dtype=np.int64)
    return x, y


def yolo_shapes_model_path() -> str:
    """Path of the bundled YOLO-style detector: input `images` float32 [N,3,320,320] (RGB in
    [0,1]), output `output0` float32 [N,7,2100] (cx, cy, w, h in pixels, then the probabilities
    of circle, square, triangle), as the YOLOv8 exporters write it."""
    return _existing("yolo_shapes.onnx", YOLO_SHAPES_DIR, "yolo_shapes/train_yolo_shapes.py")


def yolo_shapes_scenes(n: int, start: int = 0):
    """``n`` held-out scenes the detector never trained on (seeds from 1,000,000 + ``start``),
    drawn deterministically with numpy: (images float32 [n,3,320,320], [(boxes xyxy [k,4],
    classes [k]) per scene])."""
    from .yolo_shapes.scenes import eval_scenes
    return eval_scenes(n, start)


def db_text_model_path() -> str:
    """Path of the bundled DB-style text detector: input `x` float32 [N,3,H,W] (RGB in [0,1],
    H and W multiples of 32), output `maps` float32 [N,1,H,W] (the probability of the shrunk
    text regions, as DB's inference graph gives it)."""
    return _existing("db_text.onnx", DB_TEXT_DIR, "db_text/train_db_text.py")


def db_text_scenes(n: int, start: int = 0, size: int = 320):
    """``n`` held-out text scenes the detector never trained on (seeds from 1,000,000 +
    ``start``), drawn deterministically with numpy: (images float32 [n,3,size,size], text maps
    float32 [n,1,size,size]: 1 inside each line's shrunk box, DB's target)."""
    from .db_text.scenes import eval_scenes
    return eval_scenes(n, start, size)
