"""``specialize``: a graph with concrete input shapes, ready for a backend's prepare.

It lives below the runtime (the runtime, the picker's microbenchmark and every backend's
tests use it) so that nothing under ``backends/`` has to import the runtime."""
from __future__ import annotations

from typing import Dict, Tuple

from ..ir import Graph
from ..ir.shape_inference import infer_shapes


def specialize(graph: Graph, input_shapes: Dict[str, Tuple[int, ...]]) -> Graph:
    """A copy of ``graph`` with concrete input shapes, every shape inferred and
    every computable-ahead value (shape arithmetic) folded into a constant."""
    from .cpu import fold_node
    g = graph.copy()
    for name, shape in input_shapes.items():
        g.tensors[name].shape = tuple(int(d) for d in shape)
    infer_shapes(g, fold=fold_node)
    return g
