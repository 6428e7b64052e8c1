"""The CPU kernel registry: the CPU backend's ``KernelTable`` (``backends/kernel_table.py``),
keyed by (op, dtype, sparse encoding, layout).

A kernel is a *prepare* function, run once when a plan is built::

    @kernel("Relu")
    def relu(node: Node, ctx: PrepareContext) -> Callable[[], None]:
        x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
        return lambda: np.maximum(x, 0, out=y)

``prepare`` reads shapes and constants, packs weights and asks ``ctx`` for
scratch buffers; the closure it returns is the *eval* step: compute only,
writing into the preallocated output arrays, every run.

``@kernel(*ops)`` registers the generic entry of an op (any dtype, dense weights, any
layout). More specific entries name what they are for: ``@kernel_for("Conv", dtype="int8")``
(the node computes on int8 tensors), ``sparse=True`` (its weight, input 1, is a sparse-encoded
constant), ``layout="NHWC"``. ``lookup(node, ctx)`` returns the most specific entry that
matches the node; reading ``entries(op)`` tells what can run for it, whatever the import
order. ``KERNELS[op]`` is the op's prepare through ``lookup`` (what the executor, the fused
kernels and the frontends use).
"""
from __future__ import annotations

from typing import Callable, Dict, List

from ...ops.qmath import is_int8_node  # noqa: F401  (re-exported)
from ..kernel_table import DTYPES, LAYOUTS, KernelEntry, KernelTable, has_sparse_weight  # noqa: F401

#: the CPU backend's kernels (integer tensors without quantization run the generic kernels)
TABLE = KernelTable("CPU", plain_integers_generic=True)
#: op -> its entries, most specific first (the table's own dict)
ENTRIES: Dict[str, List[KernelEntry]] = TABLE.by_op
#: op -> prepare(node, ctx) through ``lookup`` (one per op with a registered kernel)
KERNELS: Dict[str, Callable] = {}


def _dispatch(op: str) -> Callable:
    def prepare(node, ctx):
        return TABLE.lookup(node, ctx).prepare(node, ctx)
    prepare.__name__ = f"{op}_prepare"
    prepare.__doc__ = f"{op}: the most specific registered kernel matching the node (``lookup``)."
    return prepare


def _registered(op: str) -> None:
    fn = KERNELS.get(op)
    if fn is None:
        fn = KERNELS[op] = _dispatch(op)
    fn.int8_dispatch = any(e.dtype == "int8" for e in ENTRIES[op])
    fn.sparse_dispatch = any(e.sparse for e in ENTRIES[op])


TABLE.on_register = _registered
register = TABLE.register
kernel_for = TABLE.kernel_for
entries = TABLE.entries
lookup = TABLE.lookup


def kernel(*ops: str):
    """Register the generic CPU prepare function (any dtype, dense, any layout) of ``ops``."""
    return kernel_for(*ops)
