"""MaxPool, AveragePool, the global pools, MaxUnpool: schemas, window checks, shape rules, costs."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Graph, Node
from .conv import AUTO_PAD, LAYOUT, MAX_WINDOW, window_lengths, window_out_dims
from .cost import flops, numel, per_input, prod
from .int8 import int8_limit
from .schema import BOOL, INTS, fail, op, rank
from .shapes import channels_last, fresh, is_int, join_layout, rule, split_layout


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
}


def window_counts(size: int, out: int, k: int, s: int, d: int, lo: int, hi: int) -> np.ndarray:
    """Per output position: how many of the k taps (in padded coordinates) fall in [lo, hi)."""
    pos = np.arange(out)[:, None] * s + np.arange(k)[None, :] * d
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

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
        return [(x.dtype, tuple(fresh(node, i) for i in range(len(x.shape))))]
    kernel = node.attrs.get("kernel_shape")
    n_sp = len(x.shape) - 2
    if not kernel or len(kernel) != n_sp:
        raise ShapeError(f"MaxUnpool needs kernel_shape of {n_sp} dims, got {kernel}")
    strides = node.attrs.get("strides") or [1] * n_sp
    pads = node.attrs.get("pads") or [0] * (2 * n_sp)
    out = [((d - 1) * int(s) + int(k) - int(pads[i]) - int(pads[i + n_sp])) if is_int(d) else fresh(node, 2 + i)
           for i, (d, k, s) in enumerate(zip(x.shape[2:], kernel, strides))]
    return [(x.dtype, (x.shape[0], x.shape[1], *out))]


# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

@flops("MaxPool", "AveragePool", "LpPool")
def _window_flops(node: Node, graph: Graph) -> int:
    """One per window element per output."""
    return numel(graph, node.outputs[0]) * prod(node.attrs.get("kernel_shape") or [])


flops("GlobalAveragePool", "GlobalMaxPool")(per_input)


# -- int8 (``ops/int8.py``: what the int8 kernel of these ops covers) ------------------------------

@int8_limit("AveragePool")
def _average_pool_int8(node: Node, g: Graph):
    if node.attrs.get("count_include_pad") and node.attrs.get("ceil_mode"):
        return "count_include_pad with ceil_mode"
    return None
