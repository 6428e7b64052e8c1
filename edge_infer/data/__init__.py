"""Bundled fixtures: a small trained CNN on 8x8 digits and its held-out samples.

See edge_infer/data/digits/README.md for what the model is and how it was made. Only numpy is
needed here (no scikit-learn, torch or onnx at run time).
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["DIGITS_DIR", "digits_model_path", "digits_samples_path", "load_digits_samples"]

DIGITS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits")


def _existing(name: str) -> str:
    path = os.path.join(DIGITS_DIR, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"bundled fixture {name!r} is missing at {path}; regenerate it with "
            f"`python edge_infer/data/digits/train_digits_cnn.py`")
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
