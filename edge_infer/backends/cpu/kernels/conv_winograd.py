"""Which NHWC fp32 convs run as Winograd F(4x4, 3x3) (native/src/winograd_f32.c), and its weights.

The rule is decided at prepare from the conv's shape: a 3x3 kernel, stride 1, dilation 1, one
group, 2-D, and enough channels and output tiles that the 2.25x fewer multiply-adds pay for the
input / output transforms (measured against the packed-SGEMM conv of conv_f32.c, see
``MIN_CHANNELS`` / ``MIN_TILES``). ``EDGE_INFER_WINOGRAD=0`` turns it off (the tests compare
both paths), ``=1`` takes every eligible conv regardless of size.
"""
from __future__ import annotations

import ctypes
import os
from typing import Tuple

import numpy as np

from .. import native as _native

#: fewest input and output channels: below, the per-tile transforms (36 loads and stores per
#: channel each way) outweigh the GEMM they shorten
MIN_CHANNELS = 16
#: fewest 4x4 output tiles (per image batch): below, each transformed weight (36/9 = 4x the
#: direct conv's bytes) is used by too few tiles and the GEMM waits on memory
MIN_TILES = 16


def mode() -> str:
    """"0" (off), "1" (every eligible conv) or "auto" (the size rule): EDGE_INFER_WINOGRAD."""
    v = os.environ.get("EDGE_INFER_WINOGRAD", "auto").strip().lower()
    return {"0": "0", "off": "0", "never": "0", "1": "1", "on": "1", "always": "1"}.get(v, "auto")


def eligible(nsp: int, kernel, strides, dil, group: int) -> bool:
    """The convs winograd_f32.c computes: 2-D 3x3, stride 1, dilation 1, one group."""
    return (nsp == 2 and tuple(kernel) == (3, 3) and tuple(strides) == (1, 1) and tuple(dil) == (1, 1)
            and group == 1 and _native.lib is not None and hasattr(_native.lib, "ei_winograd_f32"))


def chosen(n: int, c: int, m: int, oh: int, ow: int) -> Tuple[bool, str]:
    """Whether an eligible conv runs as Winograd, and why (for the inspect note)."""
    how = mode()
    if how == "0":
        return False, "EDGE_INFER_WINOGRAD=0"
    if how == "1":
        return True, "EDGE_INFER_WINOGRAD=1"
    tiles = n * -(-oh // 4) * -(-ow // 4)
    if min(c, m) < MIN_CHANNELS:
        return False, f"{min(c, m)} channels < {MIN_CHANNELS}"
    if tiles < MIN_TILES:
        return False, f"{tiles} tiles < {MIN_TILES}"
    return True, f"{c}->{m} channels, {tiles} tiles"


def pack(w: np.ndarray) -> np.ndarray:
    """(M, C, 3, 3) weights -> U = G g G^T per transform point as the SGEMM's packed panels,
    (36, panels, C, 16) float32 (computed in double precision by ei_winograd_f32_pack)."""
    m, c = w.shape[:2]
    wc = np.ascontiguousarray(w, np.float32)
    out = np.empty((36, -(-m // 16), c, 16), np.float32)
    fn = _native.function("ei_winograd_f32_pack", ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32,
                          ctypes.c_void_p)
    fn(wc.ctypes.data, m, c, out.ctypes.data)
    return out
