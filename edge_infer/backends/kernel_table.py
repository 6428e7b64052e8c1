"""One kernel table per backend, keyed by (op, dtype, sparse encoding, layout).

The CPU, OpenCL and CUDA backends each keep their kernels (prepare functions, or launchers)
in a ``KernelTable``; reading a table's ``entries(op)`` tells what runs for a node, and
``lookup(node, ctx)`` picks it: the most specific entry whose key matches the node. The
backends' ``supported_ops`` and ``supports`` read the same table, so the picker and the
partitioner learn "who covers what" from the one place the backend itself dispatches through.

Keys:

* ``dtype``: "any" (every node), "int8" (the node computes on int8 tensors: its first input
  or its output is int8, ``ops.qmath.is_int8_node``), "float" (the node is *not* int8: the
  float kernels of a backend whose int8 kernels are separate entries);
* ``sparse``: True when the node's weight (input 1) is a sparse-encoded constant;
* ``layout``: "any", or the node's ``data_layout`` ("NCHW" when absent).

This module belongs to no backend and imports none: each backend's table is its own
instance, and no backend reads another's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ..errors import UnsupportedOpError
from ..ops.qmath import is_int8_node

DTYPES = ("any", "float", "int8")
LAYOUTS = ("any", "NCHW", "NHWC")


def has_sparse_weight(node, ctx) -> bool:
    """True when the node's input 1 is a sparse-encoded constant."""
    from ..sparse.encodings import SparseArray
    return len(node.inputs) > 1 and bool(node.inputs[1]) and isinstance(ctx.const(node.inputs[1]), SparseArray)


@dataclass(frozen=True)
class KernelEntry:
    """One registered kernel: what it runs for, and its prepare function."""
    op: str
    prepare: Callable
    #: "any", "int8" (the node's first input or its output is int8) or "float" (it is not)
    dtype: str = "any"
    #: True: the node's weight (input 1) is a sparse-encoded constant (``SparseArray``)
    sparse: bool = False
    #: "any", or the node's ``data_layout`` ("NCHW" when absent)
    layout: str = "any"

    @property
    def specificity(self) -> int:
        return 4 * self.sparse + 2 * (self.dtype != "any") + (self.layout != "any")

    def matches(self, node, ctx) -> bool:
        if self.dtype != "any" and is_int8_node(node, ctx) != (self.dtype == "int8"):
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


class KernelTable:
    """A backend's kernels by (op, dtype, sparse, layout).

    ``backend``: the name errors use ("CPU", "OpenCL", "CUDA"). ``plain_integers_generic``:
    int8 tensors without any quantization parameters are ONNX's plain integer arithmetic,
    which the generic ("any") entry computes (the CPU backend; the others leave such nodes
    to it)."""

    def __init__(self, backend: str, plain_integers_generic: bool = False):
        self.backend = backend
        self.plain_integers_generic = plain_integers_generic
        #: op -> its entries, most specific first
        self.by_op: Dict[str, List[KernelEntry]] = {}
        #: called with the op after each registration (the CPU registry keeps KERNELS with it)
        self.on_register: Optional[Callable[[str], None]] = None

    def register(self, op: str, prepare: Callable, dtype: str = "any", sparse: bool = False,
                 layout: str = "any") -> None:
        """Register ``prepare`` as the kernel of ``op`` for (dtype, sparse, layout); a second
        registration of the same key replaces the first."""
        if dtype not in DTYPES or layout not in LAYOUTS:
            raise ValueError(f"kernel of {op}: dtype {dtype!r} / layout {layout!r} unknown")
        entry = KernelEntry(op, prepare, dtype, bool(sparse), layout)
        rest = [e for e in self.by_op.get(op, []) if (e.dtype, e.sparse, e.layout) != (dtype, entry.sparse, layout)]
        self.by_op[op] = sorted(rest + [entry], key=lambda e: -e.specificity)
        if self.on_register is not None:
            self.on_register(op)

    def kernel_for(self, *ops: str, dtype: str = "any", sparse: bool = False, layout: str = "any"):
        """Decorator: register a prepare function for ``ops`` with one key (see ``register``)."""
        def deco(fn):
            for op in ops:
                self.register(op, fn, dtype, sparse, layout)
            return fn
        return deco

    def entries(self, op: str) -> List[KernelEntry]:
        """The kernels registered for ``op``, most specific first."""
        return list(self.by_op.get(op, ()))

    def ops(self) -> List[str]:
        """Every op with at least one entry (what the backend's ``supported_ops`` says)."""
        return sorted(self.by_op)

    def __contains__(self, op: str) -> bool:
        return op in self.by_op

    def _plain_integers(self, node, ctx) -> bool:
        return (self.plain_integers_generic
                and not any(n and ctx.tensor(n).quant for n in list(node.inputs) + list(node.outputs))
                and any(e.dtype == "any" for e in self.by_op.get(node.op, ())))

    def lookup(self, node, ctx, dense: bool = False) -> KernelEntry:
        """The most specific entry of ``node.op`` that matches the node (``dense``: skipping
        sparse entries, for a weight that was densified); UnsupportedOpError when none does."""
        found = self.by_op.get(node.op, ())
        # int8 tensors with no quantization parameters at all are ONNX's plain integer arithmetic
        # (test_add_int8, test_clip_default_int8_*): the generic kernel computes them
        plain = self._plain_integers(node, ctx)
        for e in found:
            if (dense and e.sparse) or (plain and e.dtype == "int8") or not e.matches(node, ctx):
                continue
            return e
        if not found:
            raise UnsupportedOpError(f"{self.backend} backend has no kernel for op {node.op!r} (node {node.name!r})")
        if is_int8_node(node, ctx) and all(e.dtype == "float" for e in found):
            raise UnsupportedOpError(f"{self.backend} backend has no int8 kernel for op {node.op!r} "
                                     f"(node {node.name!r})")
        if all(e.dtype == "int8" for e in found):
            raise UnsupportedOpError(f"{node.op} {node.name!r}: no kernel matches this node (only an int8 kernel exists)")
        kinds = ", ".join(e.describe() for e in found)
        raise UnsupportedOpError(f"{node.op} {node.name!r}: no kernel matches this node ({kinds})")

    def prepare(self, node, ctx):
        """Run the prepare function of the entry ``lookup`` picks for ``node``."""
        return self.lookup(node, ctx).prepare(node, ctx)
