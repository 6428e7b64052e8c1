"""Shape and dtype inference for every supported op.

Each op has a rule ``rule(node, ins) -> [(dtype, shape), ...]`` where ``ins`` are
the input Tensors (None for a missing optional input), defined next to the op's schema in
its family module ``ops/<family>.py`` (the table: ``ops.shapes.SHAPE_RULES``). A constant
input carries its value in ``.data``, so rules for ops whose output shape depends on a value
(Reshape, Expand, Slice, Resize, ConstantOfShape, ...) read it there.

``infer_shapes`` walks the graph in order and, when given a ``fold`` callback,
lets it evaluate nodes whose inputs are all known values (shape arithmetic), so
shapes computed inside the graph become known too.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .. import ops  # noqa: F401  (every op family registers its shape rule in ops.shapes)
from ..errors import GraphError, ShapeError
from ..ops.shapes import SHAPE_RULES
from .graph import Graph, Node, Tensor


def infer_node(node: Node, graph: Graph) -> None:
    """Set dtype and shape of ``node``'s outputs from its inputs."""
    fn = SHAPE_RULES.get(node.op)
    if fn is None:
        raise GraphError(f"no shape rule for op {node.op!r} (node {node.name!r})")
    ins = []
    for i in node.inputs:
        if not i:
            ins.append(None)
            continue
        t = graph.tensors.get(i)
        if t is None:
            raise GraphError(f"node {node.name!r} ({node.op}) reads undefined tensor {i!r}")
        ins.append(t)
    try:
        results = fn(node, ins)
    except (ShapeError, GraphError) as e:
        raise type(e)(f"node {node.name!r} ({node.op}): {e}") from None
    except (ValueError, IndexError, TypeError, KeyError) as e:
        raise ShapeError(f"node {node.name!r} ({node.op}): cannot infer shape: {e}") from None
    for o, (dtype, shape) in zip(node.outputs, results):
        if not o:
            continue
        t = graph.tensors.get(o)
        if t is None:
            t = graph.tensors[o] = Tensor(o)
        t.dtype = dtype
        t.shape = None if shape is None else tuple(int(d) if isinstance(d, (int, np.integer)) else d
                                                 for d in shape)


def is_foldable(node: Node, graph: Graph) -> bool:
    """True when every output of ``node`` can be computed before the graph runs."""
    if node.op in ("Shape", "Size"):
        return graph.tensors[node.inputs[0]].is_static
    ins = [i for i in node.inputs if i]
    return all(graph.tensors[i].is_const for i in ins) and node.op not in NONDETERMINISTIC


NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"})


def infer_shapes(graph: Graph, fold: Optional[Callable[[Node, Graph], None]] = None) -> None:
    """Infer every tensor's shape and dtype, in topological order.

    ``fold(node, graph)`` (optional) is called for each foldable node after its
    shapes are known; it should set ``.data`` on the node's output tensors.
    """
    graph.toposort()
    for node in graph.nodes:
        infer_node(node, graph)
        if fold is not None and is_foldable(node, graph):
            fold(node, graph)
