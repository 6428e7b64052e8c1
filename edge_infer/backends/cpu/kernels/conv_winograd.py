"""Which NHWC fp32 convs run as Winograd F(4x4, 3x3) or F(2x2, 3x3) (native/src/winograd_f32.c),
and their weights.

The rule is decided at prepare from the conv's shape: a 3x3 kernel, stride 1, dilation 1, one
group, 2-D, and enough channels and output tiles that the 4x (F(4x4)) or 2.25x (F(2x2)) fewer
multiply-adds pay for the input / output transforms (measured against the packed-SGEMM conv of
conv_f32.c: the thresholds below). Outputs of few 4x4 tiles (``F2_MAX_TILES``) take F(2x2, 3x3):
each transformed weight then serves 4x the tiles, and it grows the weights 16/9 instead of 36/9.
``EDGE_INFER_WINOGRAD=0`` turns it off (the tests compare both paths), ``=1`` takes every
eligible conv regardless of size.
"""
from __future__ import annotations

import ctypes
import os
from typing import Tuple

import numpy as np

from .. import native as _native
from ..native.kernels import aligned

# The rule below was measured on single convs (1 thread, AVX-512, loaded 2-core machine, each
# pair interleaved; Winograd time / SGEMM time): 0.45-0.65 from 8->8 channels on 40x40 up to
# 512->512 on 10x10 (ResNet-50's 64@56, 128@28, 256@14: 0.58, 0.49, 0.54; YOLOv8n's 16@80,
# 32@40, 64@20, 80@40: 0.64, 0.63, 0.50, 0.46); slower at 4->4 and 6->6 channels (1.42, 1.51),
# a single tile (4x4 outputs: 1.09-2.37), outputs that fill tiles poorly (128@6x6: 1.15, but
# 128@10x10: 0.61) and
# few tiles of many weights (512@7x7, 4 tiles of 36x the 1 MB weights each: 1.04).

#: under this many 4x4 output tiles (of the whole batch), F(2x2, 3x3) instead of F(4x4, 3x3).
#: Measured on single convs (kernel level, 1 / 2 threads, loaded 2-core machine, min of 40,
#: interleaved; SGEMM, F(4x4), F(2x2) in us): 14x14 256->256 (16 tiles) 1294 / 687 / 754 and
#: 789 / 498 / 503; 7x7 512->512 (4) 1412 / 1524 / 1123 and 741 / 813 / 660; 10x10 256->256 (9)
#: 581 / 458 / 385; 10x10 128->128 (9) level; 20x20 128->128 (25) 663 / 301 / 396 and 28x28
#: 128->128 (49) 1310 / 571 / 863: F(4x4) from 25 tiles up (AVX2 alike: 14x14 256->256 2378 /
#: 1514 / 1332 and 1425 / 992 / 988, 7x7 512->512 3401 / 3991 / 2915). ... and at least this many C x M
#: weights: with few, F(4x4)'s 4x fewer multiply-adds win (8x8 32->32: 10 / 5 / 7 us)
F2_MAX_TILES, F2_MIN_CM = 20, 128 * 128
#: fewest input and output channels: below, the per-tile transforms (36 loads and stores per
#: channel each way) outweigh the GEMM they shorten
MIN_CHANNELS = 8
#: fewest 4x4 output tiles (of the whole batch)
MIN_TILES = 4
#: least fraction of the tiles' 16 outputs inside the output (6x6: 0.56, 10x10: 0.69, 7x7: 0.77)
MIN_FILL = 0.6
#: under this many tiles, fewer than this many C*M weights: each transformed weight is 4x
#: (F(2x2): 1.8x) the direct conv's bytes and a few tiles do not pay for reading them (4x4
#: 256->256, F(2x2)'s 4 tiles: 163 us against the SGEMM's 135)
FEW_TILES, FEW_TILES_MAX_CM = 8, 256 * 256
#: what a plan's Winograd convs may add to its memory, as a fraction of the plan's fp32 weight
#: bytes: their transformed weights (each 3x its own weights more than the SGEMM's packing)
#: plus what their scratch (a band of transformed input, up to 4 MB, and a transform-domain
#: block per thread) adds where no free arena bytes of its step hold it: one growth shared by
#: every conv that needs it (the arena's, where it reserves the scratch; else the one scratch
#: buffer's). The convs that save the most multiply-adds per extra byte go first, until the
#: allowance is spent (``allowed``). Measured on YOLOv8n-640 (loaded
#: 2-core machine): every eligible conv added 21.7 MB of weights; the weights alone under 1.0x
#: (12.4 MB) plus 5.3 MB of scratch took a runtime-only process from 0.47x to 0.60x
#: onnxruntime's peak RSS; counting the scratch too (as the arena's growth where it reserves
#: it, conv_native.winograd_choice): 0.5x: 0.50x RSS, 0.95x / 0.88x onnxruntime's latency at 1 / 2
#: threads; 0.25x (then the 4 MB floor below): 0.47x, 0.98x / 0.97x, 10 of its 27 eligible convs.
WEIGHT_GROWTH = 0.25
#: ... but a plan may always add this many bytes (a small model's weights are no memory concern),
#: and never more than MAX_GROWTH_BYTES (VGG-19's 3x3 weights alone would add 240 MB)
MIN_GROWTH_BYTES, MAX_GROWTH_BYTES = 4 << 20, 64 << 20


def mode() -> str:
    """"0" (off), "1" (every eligible conv) or "auto" (the size rule): EDGE_INFER_WINOGRAD."""
    v = os.environ.get("EDGE_INFER_WINOGRAD", "auto").strip().lower()
    return {"0": "0", "off": "0", "never": "0", "1": "1", "on": "1", "always": "1"}.get(v, "auto")


def eligible(nsp: int, kernel, strides, dil, group: int) -> bool:
    """The convs winograd_f32.c computes: 2-D 3x3, stride 1, dilation 1, one group."""
    return (nsp == 2 and tuple(kernel) == (3, 3) and tuple(strides) == (1, 1) and tuple(dil) == (1, 1)
            and group == 1 and _native.lib is not None and hasattr(_native.lib, "ei_winograd_f32"))


def tile(n: int, c: int, m: int, oh: int, ow: int) -> int:
    """The output tile side of an eligible conv's Winograd form: 4 (F(4x4, 3x3)) or, for
    fewer than F2_MAX_TILES 4x4 tiles of at least F2_MIN_CM weights, 2 (F(2x2, 3x3))."""
    return 2 if n * -(-oh // 4) * -(-ow // 4) < F2_MAX_TILES and c * m >= F2_MIN_CM else 4


def points(r: int) -> int:
    """Transform points of F(r x r, 3x3): 36 or 16 (GEMMs; transformed weights per C x M)."""
    return (r + 2) * (r + 2)


def chosen(n: int, c: int, m: int, oh: int, ow: int) -> Tuple[bool, str]:
    """Whether an eligible conv runs as Winograd (in the form ``tile`` picks), and why (for the
    inspect note)."""
    how = mode()
    if min(n, c, m, oh, ow) < 1:
        return False, "an empty dimension"
    if how == "0":
        return False, "EDGE_INFER_WINOGRAD=0"
    if how == "1":
        return True, "EDGE_INFER_WINOGRAD=1"
    r = tile(n, c, m, oh, ow)
    tiles = n * -(-oh // r) * -(-ow // r)
    fill = n * oh * ow / (float(r * r) * tiles) if tiles else 0.0
    if min(c, m) < MIN_CHANNELS:
        return False, f"{min(c, m)} channels < {MIN_CHANNELS}"
    if tiles < MIN_TILES:
        return False, f"{tiles} tiles < {MIN_TILES}"
    if fill < MIN_FILL:
        return False, f"{oh}x{ow} fills {fill:.0%} of its {r}x{r} tiles"
    if tiles < FEW_TILES and c * m >= FEW_TILES_MAX_CM:
        return False, f"{tiles} tiles for {c}x{m} channels"
    return True, f"{c}->{m} channels, {tiles} tiles"


def allowed(graph, candidates) -> set:
    """Names of the convs that may run as Winograd within the allowance (WEIGHT_GROWTH):
    ``candidates`` are (name, output pixels, C*M, bytes its scratch would add: 0 where free
    arena bytes hold it, output tile side r) of the plan's eligible convs. Each costs its
    weights' growth ((r + 2)^2 - 9 points x C x M floats) plus what it grows that one shared
    scratch growth by, and saves time in proportion to the multiply-adds it saves (pixels x
    C x M x (9 - (r + 2)^2 / r^2)); the convs that save the most per byte go first (one that
    grows the scratch judged with every conv that would then fit in it), each cost counted
    against what the convs already taken have grown, until the allowance is spent."""
    if mode() != "auto":
        return {c[0] for c in candidates}
    weights = sum(t.data.nbytes for t in graph.tensors.values()
                  if t.is_const and getattr(t.data, "dtype", None) == np.float32)
    left, ok, shared = min(max(WEIGHT_GROWTH * weights, MIN_GROWTH_BYTES), MAX_GROWTH_BYTES), set(), 0
    todo = list(candidates)
    def grown(c):
        """Bytes its transformed weights add: (points - 9) x C x M floats."""
        return (points(c[4]) - 9) * c[2] * 4

    def saves(c):
        """Multiply-adds saved: pixels x C x M x (9 - points / r^2)."""
        return c[1] * c[2] * (9.0 - points(c[4]) / float(c[4] * c[4]))
    while todo:
        # the weights' growth, and the shared scratch's
        cost = [grown(c) + max(0, c[3] - shared) for c in todo]

        def worth(i):
            """Multiply-adds saved per byte; a conv that grows the shared scratch is judged with
            the convs that would ride on that growth (it pays for all of them)."""
            outside = todo[i][3]
            group = [j for j, c in enumerate(todo) if shared < c[3] <= outside] if outside > shared else [i]
            saved = sum(saves(todo[j]) for j in group)
            return saved / (outside - shared + sum(grown(todo[j]) for j in group)) if outside > shared \
                else saves(todo[i]) / cost[i]
        best = max(range(len(todo)), key=lambda i: (worth(i), todo[i][1]))
        name, _, _, outside, _ = todo.pop(best)
        if cost[best] <= left:
            ok.add(name)
            left -= cost[best]
            shared = max(shared, outside)
    return ok


def entry(r: int) -> str:
    """The native entry of F(r x r, 3x3) (with its _scratch, _plan and _pack functions)."""
    return "ei_winograd2_f32" if r == 2 else "ei_winograd_f32"


def pack(w: np.ndarray, r: int = 4) -> np.ndarray:
    """(M, C, 3, 3) weights -> U = G g G^T per transform point as the SGEMM's packed panels,
    (points(r), panels, C, 16) float32 (computed in double precision by the native _pack)."""
    m, c = w.shape[:2]
    wc = np.ascontiguousarray(w, np.float32)
    shape = (points(r), -(-m // 16), c, 16)        # on a cache line, as pack_panels' (conv_native.py)
    out = aligned(int(np.prod(shape)) * 4).view(np.float32).reshape(shape)
    fn = _native.function(entry(r) + "_pack", ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32,
                          ctypes.c_void_p)
    fn(wc.ctypes.data, m, c, out.ctypes.data)
    return out
