"""Constant folding: evaluate nodes whose inputs are all constant (or whose result
depends only on static shapes, like Shape) once, at convert time."""
from __future__ import annotations

from ..ir import Graph
from ..ir.shape_inference import infer_node, is_foldable

#: don't store folded results larger than this (e.g. Expand/Tile of a scalar to a huge
#: tensor is cheaper to compute at run time than to ship)
MAX_FOLDED_BYTES = 64 << 20


def keeps_quantized(node, graph: Graph) -> bool:
    """A DequantizeLinear of an integer constant (the weights of a pre-quantized model) is
    left for ``quantize/import_qdq.py``, which takes the int8 values as they are: folded, it
    would be a float32 copy four times the size (the leftovers are folded there)."""
    if node.op != "DequantizeLinear":
        return False
    t = graph.tensors.get(node.inputs[0])
    return t is not None and t.is_const and t.dtype in ("int8", "uint8", "int32") and t.quant is None


def fold_constants(graph: Graph) -> int:
    from ..backends.cpu import fold_node
    graph.toposort()
    folded = 0
    keep = []
    for node in graph.nodes:
        infer_node(node, graph)
        outs = [graph.tensors[o] for o in node.outputs if o]
        if is_foldable(node, graph) and not keeps_quantized(node, graph) and all(t.is_static for t in outs) \
                and sum(t.nbytes for t in outs) <= MAX_FOLDED_BYTES:
            fold_node(node, graph)
            folded += 1
            continue
        keep.append(node)
    graph.nodes = keep
    return folded
