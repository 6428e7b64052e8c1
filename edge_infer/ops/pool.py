"""MaxPool, AveragePool, the global pools and LRN: schemas and window checks."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node
from .conv import AUTO_PAD, LAYOUT, MAX_WINDOW, window_lengths
from .schema import BOOL, FLOAT, INT, INTS, fail, op, rank


def _check_pool(node: Node, graph: Graph) -> None:
    ks = node.attrs.get("kernel_shape")
    if not ks:
        fail(node, "attribute 'kernel_shape'", "is required")
    r = rank(graph, node.inputs[0])
    if r is not None and len(ks) != r - 2:
        fail(node, "attribute 'kernel_shape'", f"{len(ks)} dims for an input of rank {r}")
    window_lengths(node, len(ks))
    dil = node.attrs.get("dilations") or [1] * len(ks)
    for k, d in zip(ks, dil):
        if (int(k) - 1) * int(d) + 1 > MAX_WINDOW:
            fail(node, "attribute 'dilations'", f"a window of {(int(k) - 1) * int(d) + 1} taps")


_WINDOW = dict(kernel_shape=INTS(1, MAX_WINDOW), strides=INTS(1, MAX_WINDOW), dilations=INTS(1, MAX_WINDOW),
               pads=INTS(0, MAX_WINDOW), auto_pad=AUTO_PAD, ceil_mode=BOOL, data_layout=LAYOUT)

SCHEMAS = {
    "MaxPool": op((1, 1), (1, 2), check=_check_pool, storage_order=BOOL, **_WINDOW),
    "AveragePool": op((1, 1), check=_check_pool, count_include_pad=BOOL, **_WINDOW),
    "GlobalAveragePool": op(data_layout=LAYOUT),
    "GlobalMaxPool": op(data_layout=LAYOUT),
    "MaxUnpool": op((2, 3), kernel_shape=INTS(1, MAX_WINDOW), strides=INTS(1, MAX_WINDOW),
                    pads=INTS(0, MAX_WINDOW)),
    "LRN": op(size=INT(1, MAX_WINDOW), alpha=FLOAT(), beta=FLOAT(), bias=FLOAT()),
}


def window_counts(size: int, out: int, k: int, s: int, d: int, lo: int, hi: int) -> np.ndarray:
    """Per output position: how many of the k taps (in padded coordinates) fall in [lo, hi)."""
    pos = np.arange(out)[:, None] * s + np.arange(k)[None, :] * d
    return ((pos >= lo) & (pos < hi)).sum(axis=1)
