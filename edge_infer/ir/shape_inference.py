"""Shape and dtype inference for every supported op.

Each op has a rule ``rule(node, ins) -> [(dtype, shape), ...]`` where ``ins`` are
the input Tensors (None for a missing optional input). A constant input carries
its value in ``.data``, so rules for ops whose output shape depends on a value
(Reshape, Expand, Slice, Resize, ConstantOfShape, ...) read it there.

``infer_shapes`` walks the graph in order and, when given a ``fold`` callback,
lets it evaluate nodes whose inputs are all known values (shape arithmetic), so
shapes computed inside the graph become known too.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import GraphError, ShapeError
from .graph import Graph, Node, Shape, Tensor

Rule = Callable[[Node, List[Optional[Tensor]]], List[Tuple[str, Shape]]]
SHAPE_RULES: Dict[str, Rule] = {}


def rule(*ops: str):
    """Register a shape rule for the given op names."""
    def deco(fn: Rule) -> Rule:
        for op in ops:
            SHAPE_RULES[op] = fn
        return fn
    return deco


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


# -- helpers shared by rules ---------------------------------------------------

def broadcast_shapes(*shapes: Sequence) -> Tuple:
    """Numpy-style broadcasting of shapes that may contain symbolic dims."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        ints = {d for d in dims if isinstance(d, int)}
        syms = [d for d in dims if not isinstance(d, int)]
        big = ints - {1}
        if len(big) > 1:
            raise ShapeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        if big:
            out.append(big.pop())
        elif syms:
            out.append(syms[0])
        else:
            out.append(1)
    return tuple(out)


from . import shape_rules  # noqa: E402,F401  (registers the rules)
