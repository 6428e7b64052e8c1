"""Recognise a LayerNorm that an exporter wrote out element by element::

    m = ReduceMean(x, axes)          axes: the last k axes, keepdims
    d = Sub(x, m)
    v = ReduceMean(Pow(d, 2) | Mul(d, d), axes)
    s = Sqrt(Add(v, eps))
    n = Div(d, s) | Mul(d, Reciprocal(s))
    y = n [* gamma] [+ beta]         gamma, beta: constants over the normalized dims

becomes ``LayerNormalization(x, gamma (ones if absent), beta, axis=rank-k, epsilon=eps)``
(PyTorch's export below opset 17, Keras/TF graphs through tf2onnx). The mean, the
deviation and the variance must be read only inside the pattern; ``d`` by exactly
the square and the division. The single op computes the same two-pass statistics, in
float32 as the chain does (differences are float rounding, ~1e-7 relative).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..ir import Graph, Node
from .rewrite import Rewriter, const, new_const, scalar, static_shape


def _reduce_axes(rw: Rewriter, node: Node, rank: int) -> Optional[Tuple[int, ...]]:
    """The normalized trailing axes of a keepdims ReduceMean (as non-negative ints), else None."""
    if node.op != "ReduceMean" or not int(node.attrs.get("keepdims", 1)):
        return None
    axes = const(rw.g, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    if axes is None or axes.size == 0 or axes.dtype.kind not in "iu":
        return None
    norm = sorted({int(a) % rank for a in axes.reshape(-1)})
    if norm != list(range(rank - len(norm), rank)):
        return None
    return tuple(norm)


def _other(node: Node, name: str) -> Optional[str]:
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    a, b = node.inputs
    return b if a == name else a


def _affine(rw: Rewriter, name: str, op: str, k: int, dtype: str):
    """The private ``op`` (Mul/Add) applying a constant over the last ``k`` axes to
    ``name``: (node, constant squeezed to at most k dims) or None."""
    node = rw.sole_consumer(name)
    if node is None or node.op != op:
        return None
    c_name = _other(node, name)
    c = const(rw.g, c_name) if c_name else None
    if c is None or c.dtype.name != dtype:
        return None
    shape = list(c.shape)
    while shape and shape[0] == 1 and len(shape) > k:
        shape.pop(0)
    if len(shape) > k:
        return None
    return node, c.reshape(shape)


def _variance_chain(rw: Rewriter, d: str, users: List[Node], rank: int, axes):
    """From d's two readers: (square, variance mean, add eps, sqrt, divide-or-mul [, reciprocal], eps)."""
    sq = next((u for u in users if u.op == "Pow" or (u.op == "Mul" and u.inputs == [d, d])), None)
    if sq is None or (sq.op == "Pow" and (sq.inputs[0] != d or scalar(rw.g, sq.inputs[1]) != 2.0)):
        return None
    div = next((u for u in users if u is not sq), None)
    var = rw.sole_consumer(sq.outputs[0])
    if div is None or var is None or _reduce_axes(rw, var, rank) != axes:
        return None
    add = rw.sole_consumer(var.outputs[0])
    if add is None or add.op != "Add":
        return None
    eps = scalar(rw.g, _other(add, var.outputs[0]) or "")
    sqrt = rw.sole_consumer(add.outputs[0])
    if eps is None or eps < 0 or sqrt is None or sqrt.op != "Sqrt":
        return None
    s = sqrt.outputs[0]
    if div.op == "Div" and div.inputs == [d, s] and rw.private(s, div):
        return [sq, var, add, sqrt, div], eps
    recip = rw.sole_consumer(s)
    if div.op == "Mul" and recip is not None and recip.op == "Reciprocal" \
            and rw.private(recip.outputs[0], div) and _other(div, d) == recip.outputs[0]:
        return [sq, var, add, sqrt, recip, div], eps
    return None


def _match(rw: Rewriter, mean: Node) -> bool:
    g = rw.g
    x = mean.inputs[0]
    xs = static_shape(g, x)
    t = g.tensors.get(x)
    if xs is None or t is None or t.dtype not in ("float32", "float64"):
        return False
    rank = len(xs)
    axes = _reduce_axes(rw, mean, rank)
    sub = rw.sole_consumer(mean.outputs[0])
    if axes is None or sub is None or sub.op != "Sub" or sub.inputs != [x, mean.outputs[0]]:
        return False
    d = sub.outputs[0]
    users = list({id(u): u for u in rw.cons.get(d, [])}.values())      # Mul(d, d) reads d twice
    if d in rw.outputs or len(users) != 2 or not all(rw.alive(u) for u in users):
        return False
    chain = _variance_chain(rw, d, users, rank, axes)
    if chain is None:
        return False
    nodes, eps = chain
    nodes = [mean, sub] + nodes
    out = nodes[-1].outputs[0]
    k = len(axes)
    scale = _affine(rw, out, "Mul", k, t.dtype)
    if scale is not None:
        nodes.append(scale[0])
        out = scale[0].outputs[0]
    bias = _affine(rw, out, "Add", k, t.dtype)
    if bias is not None:
        nodes.append(bias[0])
        out = bias[0].outputs[0]
    if static_shape(g, out) != xs:
        return False                       # gamma/beta grew the shape: not a LayerNorm
    norm_shape = tuple(xs[rank - k:])
    name = nodes[-1].name
    gamma = scale[1] if scale is not None else np.ones(norm_shape, t.dtype)
    ins = [x, new_const(g, f"{name}_scale", gamma)]
    if bias is not None:
        ins.append(new_const(g, f"{name}_bias", bias[1]))
    ln = Node("LayerNormalization", ins, [out], {"axis": rank - k, "epsilon": float(eps), "stash_type": 1},
              name)
    rw.replace(nodes, [ln])
    return True


def recognize_layer_norm(graph: Graph) -> int:
    """Replace every decomposed LayerNorm chain by one LayerNormalization; returns the count."""
    if not any(n.op == "ReduceMean" for n in graph.nodes):
        return 0
    rw = Rewriter(graph)
    for node in list(graph.nodes):
        if node.op == "ReduceMean" and rw.alive(node):
            _match(rw, node)
    return rw.commit()
