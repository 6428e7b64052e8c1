"""Normalization: BatchNormalization, InstanceNormalization, LRN: schemas, shape rules, costs."""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .cost import flops, numel, per_input
from .conv import MAX_WINDOW
from .schema import BOOL, FLOAT, INT, fail, known, op, shape
from .shapes import channels_last, rule


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
    "LRN": op(size=INT(1, MAX_WINDOW), alpha=FLOAT(), beta=FLOAT(), bias=FLOAT()),
}


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

@rule("BatchNormalization")
def _batchnorm(node: Node, ins):
    x = ins[0]
    channels_last(node)
    res = [(x.dtype, x.shape)]
    if len(node.outputs) > 1:
        # running mean / var outputs exist only in training mode; shape (C,)
        c = ins[3].shape if ins[3] is not None else None
        res += [(x.dtype, c), (x.dtype, c)]
    return res


@rule("LRN", "InstanceNormalization")
def _same_layout(node: Node, ins):
    channels_last(node)            # rejects an unknown data_layout
    return [(ins[0].dtype, ins[0].shape)]


# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

@flops("BatchNormalization")
def _batchnorm_flops(node: Node, graph: Graph) -> int:
    return 2 * numel(graph, node.outputs[0])      # scale and shift


flops("InstanceNormalization", "LRN")(per_input)
