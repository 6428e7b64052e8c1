"""Normalization: BatchNormalization, InstanceNormalization (LRN lives with the pools)."""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .schema import BOOL, FLOAT, fail, known, op, shape


def _check_channels(node: Node, graph: Graph) -> None:
    xs = shape(graph, node.inputs[0])
    if xs is None or len(xs) < 2 or not known(xs[1]):
        return
    for k in range(1, len(node.inputs)):
        ps = shape(graph, node.inputs[k])
        if ps is not None and (len(ps) != 1 or (known(ps[0]) and ps[0] != xs[1])):
            fail(node, f"input {k}", f"shape {list(ps)}; expected [{xs[1]}] (the channels)")


SCHEMAS = {
    "BatchNormalization": op((5, 5), (1, 3), check=_check_channels, epsilon=FLOAT(0), momentum=FLOAT(),
                             training_mode=BOOL),
    "InstanceNormalization": op((3, 3), check=_check_channels, epsilon=FLOAT(0)),
}
