"""Synthetic detection scenes for the YOLO-style shapes fixture: numpy only, deterministic.

``make_scene(seed)`` draws one 320x320 RGB scene: a procedural textured background (value
noise of several octaves, stripes, checkerboards, gradients, blended and tinted) with 1 to 6
filled shapes of three classes (0 circle, 1 square (rotated), 2 triangle (rotated)), each 16 to
150 pixels across, some filled with a texture of their own, and pixel noise on top. Boxes are
the tight pixel bounds of each drawn shape (x1, y1, x2, y2); shapes never cover each other
(their pixels are disjoint; boxes may overlap, at IoU <= 0.3), so each stays whole.

The training script draws scenes with seeds from 0 up; held-out scenes (``eval_scenes``) use
seeds from ``EVAL_SEED0`` (1,000,000) up, so they were never trained on. The same seed gives
the same scene on every platform (only numpy's PCG64 and float64 arithmetic are used).
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

CLASSES = ("circle", "square", "triangle")
SIZE = 320
EVAL_SEED0 = 1_000_000
MIN_SIDE, MAX_SIDE = 16, 150


def _value_noise(rng: np.random.Generator, h: int, w: int, cells: int) -> np.ndarray:
    """Bilinearly upsampled random grid: smooth noise in [0, 1] with ``cells`` cells across."""
    g = rng.random((cells + 2, cells + 2))
    ys = np.linspace(0, cells, h, endpoint=False)
    xs = np.linspace(0, cells, w, endpoint=False)
    y0, x0 = ys.astype(int), xs.astype(int)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    fy, fx = fy * fy * (3 - 2 * fy), fx * fx * (3 - 2 * fx)       # smoothstep: no grid creases
    a = g[y0][:, x0]
    b = g[y0][:, x0 + 1]
    c = g[y0 + 1][:, x0]
    d = g[y0 + 1][:, x0 + 1]
    return (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy


def texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """One texture [h, w, 3] in [0, 1]."""
    kind = int(rng.integers(0, 4))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    if kind == 0:                                   # fractal value noise
        t = sum(_value_noise(rng, h, w, int(c)) * a for c, a in ((3, 0.5), (9, 0.3), (27, 0.2)))
    elif kind == 1:                                 # stripes at a random angle
        ang = rng.uniform(0, np.pi)
        period = rng.uniform(6, 40)
        t = 0.5 + 0.5 * np.sin((xx * np.cos(ang) + yy * np.sin(ang)) * 2 * np.pi / period)
    elif kind == 2:                                 # checkerboard
        cell = rng.uniform(8, 48)
        t = ((np.floor(xx / cell) + np.floor(yy / cell)) % 2) * 0.8 + 0.1
    else:                                           # linear gradient
        ang = rng.uniform(0, 2 * np.pi)
        t = xx * np.cos(ang) + yy * np.sin(ang)
        t = (t - t.min()) / max(t.max() - t.min(), 1e-9)
    c0, c1 = rng.random(3), rng.random(3)
    return c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]


def _polygon_mask(xx: np.ndarray, yy: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Pixels inside the convex polygon ``pts`` [k, 2] (either winding)."""
    inside_pos = np.ones(xx.shape, bool)
    inside_neg = np.ones(xx.shape, bool)
    for i in range(len(pts)):
        (x0, y0), (x1, y1) = pts[i], pts[(i + 1) % len(pts)]
        cross = (x1 - x0) * (yy - y0) - (y1 - y0) * (xx - x0)
        inside_pos &= cross >= 0
        inside_neg &= cross <= 0
    return inside_pos | inside_neg


def _shape_mask(cls: int, side: float, ang: float) -> np.ndarray:
    """Mask of one shape in its own square canvas of ``ceil(side) + 2`` pixels."""
    n = int(np.ceil(side)) + 2
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float64) + 0.5
    c = n / 2.0
    if cls == 0:
        return (xx - c) ** 2 + (yy - c) ** 2 <= (side / 2) ** 2
    if cls == 1:                                    # square whose rotated bounds fit ``side``
        half = side / 2 / (abs(np.cos(ang)) + abs(np.sin(ang)))
        k = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float64) * half
    else:                                           # equilateral triangle, circumradius side / 2
        a = ang + np.array([0, 2 * np.pi / 3, 4 * np.pi / 3])
        k = np.stack([np.cos(a), np.sin(a)], 1) * side / 2
    rot = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]]) if cls == 1 else np.eye(2)
    return _polygon_mask(xx, yy, k @ rot.T + c)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def make_scene(seed: int, size: int = SIZE) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One scene: image float32 [3, size, size] in [0, 1] (RGB, NCHW without the batch dim),
    boxes float32 [n, 4] (x1, y1, x2, y2 pixels), classes int64 [n]."""
    rng = np.random.default_rng(seed)
    img = texture(rng, size, size)
    if rng.random() < 0.5:                          # blend a second texture in
        img = 0.5 * img + 0.5 * texture(rng, size, size)
    boxes: List[np.ndarray] = []
    classes: List[int] = []
    taken = np.zeros((size, size), bool)
    for _ in range(int(rng.integers(1, 7))):
        for _try in range(20):
            cls = int(rng.integers(0, 3))
            side = float(np.exp(rng.uniform(np.log(MIN_SIDE), np.log(MAX_SIDE))))
            ang = float(rng.uniform(0, 2 * np.pi))
            m = _shape_mask(cls, side, ang)
            n = m.shape[0]
            x0 = int(rng.integers(-n // 4, size - 3 * n // 4))
            y0 = int(rng.integers(-n // 4, size - 3 * n // 4))
            # clip the canvas to the image (shapes may leave it by up to a quarter)
            sx0, sy0 = max(0, -x0), max(0, -y0)
            sx1, sy1 = min(n, size - x0), min(n, size - y0)
            mm = m[sy0:sy1, sx0:sx1]
            if mm.sum() < 0.5 * m.sum() or not mm.any():
                continue
            ys, xs = np.nonzero(mm)
            box = np.array([xs.min() + sx0 + x0, ys.min() + sy0 + y0,
                            xs.max() + sx0 + x0 + 1, ys.max() + sy0 + y0 + 1], np.float64)
            if min(box[2] - box[0], box[3] - box[1]) < 8:
                continue
            if any(_iou(box, b) > 0.3 for b in boxes):
                continue
            occ = taken[y0 + sy0:y0 + sy1, x0 + sx0:x0 + sx1]
            if (occ & mm).any():
                continue
            occ |= mm
            region = img[y0 + sy0:y0 + sy1, x0 + sx0:x0 + sx1]
            h, w = region.shape[:2]
            if rng.random() < 0.3:
                fill = texture(rng, h, w)
            else:
                fill = np.broadcast_to(rng.random(3), (h, w, 3))
            # keep the shape visible: push its colour away from the background under it
            bg_mean = region[mm].mean(axis=0)
            fill_mean = fill[mm].mean(axis=0)
            if np.abs(fill_mean - bg_mean).max() < 0.25:
                fill = np.clip(fill + np.where(bg_mean > 0.5, -0.45, 0.45), 0, 1)
            region[mm] = fill[mm]
            boxes.append(box)
            classes.append(cls)
            break
    img = img + rng.normal(0, rng.uniform(0.0, 0.06), img.shape)
    img = np.clip(img, 0, 1).transpose(2, 0, 1).astype(np.float32)
    b = np.array(boxes, np.float32).reshape(-1, 4)
    return np.ascontiguousarray(img), b, np.array(classes, np.int64)


def eval_scenes(n: int, start: int = 0, size: int = SIZE):
    """``n`` held-out scenes (seeds ``EVAL_SEED0 + start`` up): images float32 [n, 3, size, size],
    and per scene (boxes, classes)."""
    imgs, labels = [], []
    for k in range(n):
        im, b, c = make_scene(EVAL_SEED0 + start + k, size)
        imgs.append(im)
        labels.append((b, c))
    return np.stack(imgs), labels
