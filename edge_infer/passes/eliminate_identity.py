"""Remove Identity and inference-mode Dropout: consumers read the input directly."""
from __future__ import annotations

from ..ir import Graph


def _is_noop(node, used) -> bool:
    if node.op == "Identity":
        return True
    # Dropout in inference is the identity unless its mask output is used.
    return node.op == "Dropout" and (len(node.outputs) < 2 or node.outputs[1] not in used)


def eliminate_identity(graph: Graph) -> int:
    rename = {}
    keep = []
    used = {i for n in graph.nodes for i in n.inputs if i} | set(graph.outputs)
    for node in graph.nodes:
        # A graph output must keep its name, so a no-op writing one stays.
        if _is_noop(node, used) and node.outputs[0] not in graph.outputs:
            src = node.inputs[0]
            rename[node.outputs[0]] = rename.get(src, src)
            continue
        keep.append(node)
    if not rename:
        return 0
    for node in keep:
        node.inputs = [rename.get(i, i) for i in node.inputs]
    graph.nodes = keep
    return len(rename)
