"""Static cost of a graph: op count, parameters, FLOPs and bytes moved.

``graph_cost`` works on a copy with concrete input shapes (the shapes the converter verified
the graph at, else symbolic dims as 1), with shapes
inferred and shape arithmetic folded (as a runtime plan would), so every tensor
size is known. Each node's FLOPs and bytes moved are its op family's (``ops/cost.py`` has
the conventions); nodes that fold away at plan time (shape arithmetic) are not counted;
parameters are the elements of every constant a node reads.
"""
from __future__ import annotations

from typing import Dict

from ..errors import EdgeInferError
from ..ops.cost import node_cost
from .graph import Graph, concrete_input_shapes
from .shape_inference import infer_node, infer_shapes


def _static_copy(graph: Graph) -> Graph:
    """A copy with concrete input shapes (``concrete_input_shapes``: the converter's verified
    shapes, else symbolic dims as 1), shapes inferred and shape arithmetic folded."""
    from ..backends.cpu import fold_node
    g = graph.copy()
    concrete = concrete_input_shapes(graph)
    for name in g.inputs:
        t = g.tensors[name]
        if t.shape is not None:
            t.shape = concrete[name]
    try:
        infer_shapes(g, fold=fold_node)
    except EdgeInferError:
        # best effort: whatever can be inferred node by node
        for node in g.nodes:
            try:
                infer_node(node, g)
            except EdgeInferError:
                pass
    return g


def graph_cost(graph: Graph) -> Dict[str, int]:
    """{"ops", "parameters", "flops", "bytes_moved"} of ``graph`` (see the module doc)."""
    g = _static_copy(graph)
    original_consts = {k for k, t in graph.tensors.items() if t.is_const}
    flops = moved = 0
    read_consts = set()
    for node in g.nodes:
        for i in node.inputs:
            if i in original_consts:
                read_consts.add(i)
        outs = [o for o in node.outputs if o]
        if outs and all(o not in original_consts and g.tensors[o].is_const for o in outs):
            continue                       # folded at plan time: does not run
        cost = node_cost(node, g)
        flops += cost["flops"]
        moved += cost["bytes"]
    params = sum(int(graph.tensors[c].data.size) for c in read_consts)
    return {"ops": len(graph.nodes), "parameters": int(params), "flops": int(flops),
            "bytes_moved": int(moved)}
