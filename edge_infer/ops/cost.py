"""The cost of one node: FLOPs and bytes moved, the numbers the picker's estimates, the
partitioner and ``convert``'s cost report use.

Each op family module (``ops/<family>.py``) registers how many FLOPs its ops cost with
``@flops(*ops)``, next to the op's schema and shape rule. Counting conventions:

* a multiply-add is 2 FLOPs. Conv: 2 * N * M * OH*OW... * (C/group) * k...; ConvTranspose:
  2 * N * C * H*W... * (M/group) * k...; Gemm/MatMul: 2 * M * N * K (per batch); + 1 per
  output element for a bias / C;
* a fused op (FusedConv, FusedGemm, FusedMatMul) is its base op plus 1 per output element for
  a residual or MatMul bias and for the epilogue's activation;
* element-wise ops (activations included), and any op no family registered: 1 per output
  element; data movement (Reshape, Transpose, Concat, Resize, ...): 0; the rest as registered;
* bytes moved: every input the node reads (weights included) plus every output it writes
  (``tensor_nbytes``: constants by their data, other tensors by their concrete shape, 0 while
  a dim is symbolic).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence

import numpy as np

from ..ir.graph import Graph, Node
from .schema import registrar

FlopCount = Callable[[Node, Graph], int]
#: op -> its FLOP count (ops not here: one per output element)
FLOPS: Dict[str, FlopCount] = {}


#: ``@flops(*ops)``: register the FLOP count ``fn(node, graph) -> int`` of ``ops``
flops = registrar(FLOPS)


def numel(graph: Graph, name: str) -> int:
    """Elements of a tensor with a concrete shape, else 0."""
    t = graph.tensors.get(name) if name else None
    if t is None or t.shape is None or not t.is_static:
        return 0
    return int(np.prod(t.shape, dtype=np.int64))


def tensor_nbytes(graph: Graph, name: str) -> int:
    """Bytes of a tensor: a constant's data, else its concrete shape's (0 while a dim is symbolic)."""
    t = graph.tensors.get(name) if name else None
    if t is None:
        return 0
    if t.is_const:
        return int(t.data.nbytes)
    return numel(graph, name) * np.dtype(t.dtype).itemsize


def shape_of(graph: Graph, name: str) -> Optional[Sequence]:
    """The shape of a tensor (a constant's data shape), None when unknown."""
    t = graph.tensors.get(name) if name else None
    return None if t is None else (t.data.shape if t.is_const else t.shape)


def prod(xs) -> int:
    """Product of the dims (0 for None)."""
    return int(np.prod([int(x) for x in xs], dtype=np.int64)) if xs is not None else 0


def free(node: Node, graph: Graph) -> int:
    """Data movement: no arithmetic."""
    return 0


def per_input(node: Node, graph: Graph) -> int:
    """One FLOP per input element (reductions, normalizations over windows, LogSoftmax)."""
    return numel(graph, node.inputs[0])


def node_flops(node: Node, graph: Graph) -> int:
    """FLOPs of one node (shapes must be inferred)."""
    op = node.op
    epi = 0
    if op.startswith("Fused"):
        # the base counts Conv's bias and Gemm's C; the epilogue adds a residual / MatMul bias
        n_out = numel(graph, node.outputs[0] if node.outputs else "")
        extra_at = {"FusedConv": 3, "FusedMatMul": 2}.get(op)
        extra = 1 if extra_at is not None and len(node.inputs) > extra_at and node.inputs[extra_at] else 0
        epi = n_out * (extra + (1 if node.attrs.get("activation") else 0))
        op = op[len("Fused"):]
    fn = FLOPS.get(op)
    if fn is None:
        return numel(graph, node.outputs[0] if node.outputs else "") + epi
    return fn(node, graph) + epi


def node_cost(node: Node, graph: Graph) -> Dict[str, int]:
    """{"flops", "bytes"} of one node of a shape-inferred graph."""
    return {"flops": node_flops(node, graph),
            "bytes": sum(tensor_nbytes(graph, i) for i in node.inputs if i)
            + sum(tensor_nbytes(graph, o) for o in node.outputs if o)}
