"""The CPU kernel registry: one table keyed by (op, dtype, sparse encoding, layout).

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

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ...errors import UnsupportedOpError
from ...ops.qmath import is_int8_node  # noqa: F401  (re-exported)

DTYPES = ("any", "int8")
LAYOUTS = ("any", "NCHW", "NHWC")


@dataclass(frozen=True)
class KernelEntry:
    """One registered kernel: what it runs for, and its prepare function."""
    op: str
    prepare: Callable
    #: "any", or "int8": the node's first input (or its output) is int8
    dtype: str = "any"
    #: True: the node's weight (input 1) is a sparse-encoded constant (``SparseArray``)
    sparse: bool = False
    #: "any", or the node's ``data_layout`` ("NCHW" when absent)
    layout: str = "any"

    @property
    def specificity(self) -> int:
        return 4 * self.sparse + 2 * (self.dtype != "any") + (self.layout != "any")

    def matches(self, node, ctx) -> bool:
        if self.dtype == "int8" and not is_int8_node(node, ctx):
            return False
        if self.sparse and not has_sparse_weight(node, ctx):
            return False
        if self.layout != "any" and (node.attrs.get("data_layout") or "NCHW") != self.layout:
            return False
        return True

    def describe(self) -> str:
        key = ", ".join(f"{k}={v}" for k, v in (("dtype", self.dtype), ("sparse", self.sparse),
                                                  ("layout", self.layout)) if v not in ("any", False))
        return f"{self.op}[{key or 'generic'}] -> {self.prepare.__module__}.{self.prepare.__name__}"


#: op -> its entries, most specific first
ENTRIES: Dict[str, List[KernelEntry]] = {}
#: op -> prepare(node, ctx) through ``lookup`` (one per op with a registered kernel)
KERNELS: Dict[str, Callable] = {}


def has_sparse_weight(node, ctx) -> bool:
    """True when the node's input 1 is a sparse-encoded constant."""
    from ...sparse.encodings import SparseArray
    return len(node.inputs) > 1 and bool(node.inputs[1]) and isinstance(ctx.const(node.inputs[1]), SparseArray)


def _dispatch(op: str) -> Callable:
    def prepare(node, ctx):
        return lookup(node, ctx).prepare(node, ctx)
    prepare.__name__ = f"{op}_prepare"
    prepare.__doc__ = f"{op}: the most specific registered kernel matching the node (``lookup``)."
    return prepare


def register(op: str, prepare: Callable, dtype: str = "any", sparse: bool = False, layout: str = "any") -> None:
    """Register ``prepare`` as the kernel of ``op`` for (dtype, sparse, layout); a second
    registration of the same key replaces the first."""
    if dtype not in DTYPES or layout not in LAYOUTS:
        raise ValueError(f"kernel of {op}: dtype {dtype!r} / layout {layout!r} unknown")
    entry = KernelEntry(op, prepare, dtype, bool(sparse), layout)
    rest = [e for e in ENTRIES.get(op, []) if (e.dtype, e.sparse, e.layout) != (dtype, entry.sparse, layout)]
    ENTRIES[op] = sorted(rest + [entry], key=lambda e: -e.specificity)
    fn = KERNELS.get(op)
    if fn is None or not hasattr(fn, "int8_dispatch"):
        fn = KERNELS[op] = _dispatch(op)
    fn.int8_dispatch = any(e.dtype == "int8" for e in ENTRIES[op])
    fn.sparse_dispatch = any(e.sparse for e in ENTRIES[op])


def kernel_for(*ops: str, dtype: str = "any", sparse: bool = False, layout: str = "any"):
    """Register a prepare function for ``ops`` with a key (see ``register``)."""
    def deco(fn):
        for op in ops:
            register(op, fn, dtype, sparse, layout)
        return fn
    return deco


def kernel(*ops: str):
    """Register the generic CPU prepare function (any dtype, dense, any layout) of ``ops``."""
    return kernel_for(*ops)


def entries(op: str) -> List[KernelEntry]:
    """The kernels registered for ``op``, most specific first."""
    return list(ENTRIES.get(op, ()))


def _plain_integers(node, ctx) -> bool:
    return not any(n and ctx.tensor(n).quant for n in list(node.inputs) + list(node.outputs))


def lookup(node, ctx, dense: bool = False) -> KernelEntry:
    """The most specific entry of ``node.op`` that matches the node (``dense``: skipping
    sparse entries, for a weight that was densified)."""
    found: Optional[KernelEntry] = None
    # int8 tensors with no quantization parameters at all are ONNX's plain integer arithmetic
    # (test_add_int8, test_clip_default_int8_*): the generic kernel computes them
    plain = _plain_integers(node, ctx) and any(e.dtype == "any" for e in ENTRIES.get(node.op, ()))
    for e in ENTRIES.get(node.op, ()):
        if (dense and e.sparse) or (plain and e.dtype == "int8") or not e.matches(node, ctx):
            continue
        found = e
        break
    if found is None:
        if ENTRIES.get(node.op):
            kinds = ", ".join(e.describe() for e in ENTRIES[node.op])
            raise UnsupportedOpError(f"{node.op} {node.name!r}: no kernel matches this node "
                                     f"(only an int8 kernel exists)" if all(e.dtype == "int8" for e in ENTRIES[node.op])
                                     else f"{node.op} {node.name!r}: no kernel matches this node ({kinds})")
        raise UnsupportedOpError(f"CPU backend has no kernel for op {node.op!r} (node {node.name!r})")
    return found
