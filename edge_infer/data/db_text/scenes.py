"""Synthetic text scenes for the DB-style text detector fixture: numpy only, deterministic.

``make_scene(seed)`` draws one RGB scene: a procedural textured background (the shapes
fixture's textures: value noise, stripes, checkerboards, gradients, blended) with 1 to 8 lines
of "text" and up to 3 non-text scribbles. Text is set in a procedural alphabet (48 glyphs of 1
to 3 pen strokes each, drawn once from a fixed seed), in words of 1 to 8 glyphs, 7 to 40 pixels
high, horizontal or rotated by up to 20 degrees, dark on light or light on dark, anti-aliased.
No font files: nothing to license, and the same seed gives the same scene everywhere.

The label is DB's probability-map target: each text line's box (the ink bounds in the line's
own frame, a rotated rectangle) shrunk by DB's offset ``D = A (1 - r^2) / L`` (``r`` = 0.4,
``A`` and ``L`` the box's area and perimeter), as the DB paper and PaddleOCR make it. The
training script draws scenes with seeds from 0 up; held-out scenes (``eval_scenes``) use seeds
from ``EVAL_SEED0`` (1,000,000) up.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from ..yolo_shapes.scenes import texture

SIZE = 320
EVAL_SEED0 = 1_000_000
SHRINK = 0.4
MIN_HEIGHT, MAX_HEIGHT = 7, 40
MAX_ANGLE = np.deg2rad(20.0)
ALPHABET_SEED = 2026
_GRID_X = np.array([0.0, 0.5, 1.0])
_GRID_Y = np.array([0.0, 0.25, 0.5, 0.75, 1.0])


def _make_alphabet(n: int = 48) -> List[np.ndarray]:
    """``n`` glyphs, each segments [k, 2, 2] ((x, y) pairs) in a unit cell (x right, y down)."""
    rng = np.random.default_rng(ALPHABET_SEED)
    glyphs = []
    for _ in range(n):
        top = 0.0 if rng.random() < 0.5 else 0.4          # capital-like or lower-case-like
        segs: List[np.ndarray] = []
        for _s in range(int(rng.integers(1, 4))):
            if rng.random() < 0.35:                          # an arc of an ellipse in the cell
                a0 = rng.uniform(0, 2 * np.pi)
                sweep = rng.uniform(np.pi / 2, 2 * np.pi)
                t = a0 + np.linspace(0, sweep, 9)
                cy = (top + 1.0) / 2
                pts = np.stack([0.5 + 0.5 * np.cos(t), cy + (1.0 - top) / 2 * np.sin(t)], 1)
            else:                                            # a polyline through grid points
                k = int(rng.integers(2, 4))
                pts = np.stack([rng.choice(_GRID_X, k), rng.choice(_GRID_Y[_GRID_Y >= top], k)], 1)
            segs.extend(np.stack([pts[:-1], pts[1:]], 1))
        seg = np.array(segs)
        # every glyph spans its height: stretch the strokes to [top, 1] vertically
        lo, hi = seg[..., 1].min(), seg[..., 1].max()
        if hi - lo > 1e-6:
            seg[..., 1] = top + (seg[..., 1] - lo) / (hi - lo) * (1.0 - top)
        glyphs.append(seg)
    return glyphs


ALPHABET = _make_alphabet()


def _segment_distance(p: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Distance of points ``p`` [n, 2] to the nearest of the segments ``seg`` [m, 2, 2]."""
    a, b = seg[None, :, 0], seg[None, :, 1]
    ab = b - a
    t = np.clip(np.sum((p[:, None] - a) * ab, -1) / np.maximum(np.sum(ab * ab, -1), 1e-12), 0, 1)
    d = p[:, None] - (a + t[..., None] * ab)
    return np.sqrt(np.min(np.sum(d * d, -1), 1))


def _text_line(rng: np.random.Generator, height: float) -> Tuple[List[np.ndarray], float, float]:
    """One line's strokes in its own frame (pixels; x along the line, y down from the cap line):
    (segments [m, 2, 2] of each glyph, line length, stroke width)."""
    cw = height * rng.uniform(0.45, 0.8)
    advance = cw * rng.uniform(1.15, 1.45)
    width = max(1.2, height * rng.uniform(0.08, 0.17))
    segs, x = [], 0.0
    for w in range(int(rng.integers(1, 5))):
        if w:
            x += advance * rng.uniform(0.6, 1.2)             # word gap
        for _c in range(int(rng.integers(1, 9))):
            g = ALPHABET[int(rng.integers(len(ALPHABET)))] * np.array([cw, height])
            segs.append(g + np.array([x, 0.0]))
            x += advance
    return segs, x - advance + cw, width


def _frame(xx: np.ndarray, yy: np.ndarray, cx: float, cy: float, ang: float) -> np.ndarray:
    """Image pixel centres -> a line's frame centred at (cx, cy), rotated by ``ang``."""
    c, s = np.cos(ang), np.sin(ang)
    dx, dy = xx - cx, yy - cy
    return np.stack([dx * c + dy * s, -dx * s + dy * c], -1)


def _scribble(rng: np.random.Generator, size: int) -> Tuple[List[np.ndarray], float]:
    """A non-text stroke: a smooth curve across part of the image (segments, width)."""
    p0 = rng.uniform(0, size, 2)
    ang = rng.uniform(0, 2 * np.pi)
    turn = rng.uniform(-0.15, 0.15)
    step = rng.uniform(4, 10)
    pts = [p0]
    for _ in range(int(rng.integers(8, 30))):
        ang += turn + rng.normal(0, 0.1)
        pts.append(pts[-1] + step * np.array([np.cos(ang), np.sin(ang)]))
    pts = np.array(pts)
    return [np.stack([pts[:-1], pts[1:]], 1)], float(rng.uniform(1.5, 6))


def _paint(img: np.ndarray, rng: np.random.Generator, alpha: np.ndarray, y0: int, x0: int) -> None:
    """Blend a colour (or texture) contrasting with the background into ``img`` under ``alpha``."""
    h, w = alpha.shape
    region = img[y0:y0 + h, x0:x0 + w]
    bg = region.reshape(-1, 3).mean(0)
    fill = texture(rng, h, w) * 0.35 + rng.random(3) * 0.65 if rng.random() < 0.15 else np.broadcast_to(rng.random(3), (h, w, 3))
    if abs(float(fill.mean() - bg.mean())) < 0.35:          # keep the ink legible
        fill = np.clip(fill + np.where(bg.mean() > 0.5, -0.55, 0.55), 0, 1)
    region[:] = region * (1 - alpha[..., None]) + fill * alpha[..., None]


def make_scene(seed: int, size: int = SIZE) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One scene: image float32 [3, size, size] in [0, 1] (RGB), text map float32 [size, size]
    (1 inside the shrunk text regions), quads float32 [n, 4, 2] (each line's ink box corners,
    (x, y) pixels, from the line's top-left clockwise)."""
    rng = np.random.default_rng(seed)
    img = texture(rng, size, size)
    if rng.random() < 0.5:
        img = 0.5 * img + 0.5 * texture(rng, size, size)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    label = np.zeros((size, size), np.float32)
    taken = np.zeros((size, size), bool)
    quads: List[np.ndarray] = []
    for _ in range(int(rng.integers(0, 4))):
        seg, width = _scribble(rng, size)
        _draw(img, rng, seg, width, xx, yy, None)
    for _ in range(int(rng.integers(1, 9))):
        for _try in range(20):
            height = float(np.exp(rng.uniform(np.log(MIN_HEIGHT), np.log(MAX_HEIGHT))))
            seg, length, width = _text_line(rng, height)
            ang = 0.0 if rng.random() < 0.6 else float(rng.uniform(-MAX_ANGLE, MAX_ANGLE))
            # the ink box in the line frame, centred: the strokes reach width / 2 past their ends
            bw, bh = length + width, height + width
            corners = np.array([[-bw, -bh], [bw, -bh], [bw, bh], [-bw, bh]]) / 2
            c, s = np.cos(ang), np.sin(ang)
            rot = np.array([[c, -s], [s, c]])
            half = np.abs(corners @ rot.T).max(0)
            if half[0] * 2 + 2 > size or half[1] * 2 + 2 > size:
                continue
            cx = rng.uniform(half[0] + 1, size - half[0] - 1)
            cy = rng.uniform(half[1] + 1, size - half[1] - 1)
            quad = corners @ rot.T + [cx, cy]
            x0, y0 = int(max(0, np.floor(quad[:, 0].min()))), int(max(0, np.floor(quad[:, 1].min())))
            x1, y1 = int(min(size, np.ceil(quad[:, 0].max()))), int(min(size, np.ceil(quad[:, 1].max())))
            uv = _frame(xx[y0:y1, x0:x1], yy[y0:y1, x0:x1], cx, cy, ang)
            margin = 0.5 * bh + 2                              # lines keep apart by half a line
            box = (np.abs(uv[..., 0]) <= bw / 2 + margin) & (np.abs(uv[..., 1]) <= bh / 2 + margin)
            if (taken[y0:y1, x0:x1] & box).any():
                continue
            taken[y0:y1, x0:x1] |= (np.abs(uv[..., 0]) <= bw / 2) & (np.abs(uv[..., 1]) <= bh / 2)
            # strokes drawn in the line frame: shift them so that the ink box is centred
            seg = [g - np.array([length / 2, height / 2]) for g in seg]
            _draw(img, rng, seg, width, xx, yy, (cx, cy, ang, (y0, y1, x0, x1)))
            off = bw * bh * (1 - SHRINK ** 2) / (2 * (bw + bh))
            label[y0:y1, x0:x1] = np.maximum(label[y0:y1, x0:x1], (
                (np.abs(uv[..., 0]) <= bw / 2 - off) & (np.abs(uv[..., 1]) <= bh / 2 - off)))
            quads.append(quad)
            break
    img = img + rng.normal(0, rng.uniform(0.0, 0.05), img.shape)
    img = np.clip(img, 0, 1).transpose(2, 0, 1).astype(np.float32)
    return np.ascontiguousarray(img), label, np.array(quads, np.float32).reshape(-1, 4, 2)


def _draw(img: np.ndarray, rng: np.random.Generator, groups: List[np.ndarray], width: float,
          xx: np.ndarray, yy: np.ndarray, frame) -> None:
    """Anti-aliased strokes (groups of segments [m, 2, 2], e.g. one per glyph) of ``width``
    pixels: in image pixels (``frame`` None) or in a line frame (cx, cy, angle, (y0, y1, x0, x1)
    bounds)."""
    if frame is None:
        allp = np.concatenate(groups).reshape(-1, 2)
        wh = np.array([img.shape[1], img.shape[0]])                 # (x, y) bounds
        lo = np.clip(np.floor(allp.min(0) - width).astype(int), 0, wh)
        hi = np.clip(np.ceil(allp.max(0) + width).astype(int), 0, wh)
        x0, y0, x1, y1 = lo[0], lo[1], hi[0], hi[1]
        if x1 <= x0 or y1 <= y0:
            return
        p = np.stack([xx[y0:y1, x0:x1], yy[y0:y1, x0:x1]], -1)
    else:
        cx, cy, ang, (y0, y1, x0, x1) = frame
        p = _frame(xx[y0:y1, x0:x1], yy[y0:y1, x0:x1], cx, cy, ang)
    shape = p.shape[:2]
    p = p.reshape(-1, 2)
    d = np.full(len(p), np.inf)
    for seg in groups:          # only the pixels near each glyph: a few segments each
        lo, hi = seg.reshape(-1, 2).min(0) - width, seg.reshape(-1, 2).max(0) + width
        near = np.nonzero(np.all((p >= lo) & (p <= hi), 1))[0]
        if len(near):
            d[near] = np.minimum(d[near], _segment_distance(p[near], seg))
    d = d.reshape(shape)
    alpha = np.clip(width / 2 - d + 0.5, 0, 1)
    if alpha.any():
        _paint(img, rng, alpha, y0, x0)


def eval_scenes(n: int, start: int = 0, size: int = SIZE) -> Tuple[np.ndarray, np.ndarray]:
    """``n`` held-out scenes (seeds ``EVAL_SEED0 + start`` up): images float32 [n, 3, size, size]
    and text maps float32 [n, 1, size, size]."""
    imgs, maps = [], []
    for k in range(n):
        im, m, _ = make_scene(EVAL_SEED0 + start + k, size)
        imgs.append(im)
        maps.append(m[None])
    return np.stack(imgs), np.stack(maps)
