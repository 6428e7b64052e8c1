"""Dead-code elimination: drop nodes and tensors no graph output depends on."""
from __future__ import annotations

from ..ir import Graph


def eliminate_dead_code(graph: Graph) -> int:
    before_nodes, before_tensors = len(graph.nodes), len(graph.tensors)
    graph.prune()
    return (before_nodes - len(graph.nodes)) + (before_tensors - len(graph.tensors) > 0)
