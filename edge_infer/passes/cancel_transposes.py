"""Transpose cancellation, merging and sinking.

* ``Transpose(Transpose(x, p1), p2)`` reads x directly with the composed perm
  ``p1[p2[i]]`` (the inner one is left to dead-code elimination if nothing else
  reads it); a composed identity disappears, its readers read x.
* A Transpose with the identity perm is removed; if it writes a graph output, the
  node producing its input writes that output instead (its other readers follow).
* Sinking: a Transpose read only by an element-wise unary op (or a binary op whose
  other operand is a constant with a single element) moves below it:
  ``U(T(x)) -> T(U(x))``; and ``B(T(a, p), T(b, p)) -> T(B(a, b), p)`` when a and b
  have the same shape. Sinking does not change the work done, but brings
  transposes next to each other (where they cancel) and next to the consumers a
  layout pass cares about. Transposes only ever move down, so the pass terminates.
"""
from __future__ import annotations

from typing import List, Optional

from ..ir import Graph, Node
from ..ops.elementwise import LAYOUT_FREE_UNARY
from ..ops.tensor import transpose_perm
from .rewrite import Rewriter, const, static_shape

UNARY = LAYOUT_FREE_UNARY
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Equal", "Less",
                    "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "PRelu"})


def _perm(graph: Graph, node: Node) -> Optional[List[int]]:
    shape = static_shape(graph, node.inputs[0])
    rank = len(node.attrs["perm"]) if node.attrs.get("perm") else (len(shape) if shape is not None else None)
    if rank is None:
        return None
    try:
        return transpose_perm(node, rank)
    except ValueError:
        return None


def _single_element(graph: Graph, name: str, rank: int) -> bool:
    """A constant whose broadcasting is unaffected by permuting the other operand."""
    c = const(graph, name)
    return c is not None and c.size == 1 and c.ndim <= rank


def _new_tensor(graph: Graph, like: str, from_shape: str) -> str:
    name = graph.unique_name(f"{like.split('_presink')[0]}_presink")
    t = graph.tensors[like]
    graph.add_tensor(name, t.dtype, static_shape(graph, from_shape))
    return name


def cancel_transposes(graph: Graph) -> int:
    rw = Rewriter(graph)
    g = graph
    for node in list(g.nodes):
        if not rw.alive(node):
            continue
        if node.op == "Transpose":
            perm = _perm(g, node)
            if perm is None:
                continue
            src = node.inputs[0]
            inner = rw.producer(src, "Transpose")
            if inner is not None:
                p1 = _perm(g, inner)
                if p1 is not None and len(p1) == len(perm):
                    composed = [p1[i] for i in perm]
                    rw.reconnect(node, 0, inner.inputs[0])
                    node.attrs = dict(node.attrs, perm=composed)
                    rw.changes += 1
                    perm, src = composed, inner.inputs[0]
            if perm == list(range(len(perm))):
                out = node.outputs[0]
                if out not in rw.outputs:
                    rw.remove_as_alias(node, out, src)
                else:
                    # a graph output keeps its name: the producer of src writes it directly
                    # (and src's other readers read it under that name)
                    p = rw.producer(src)
                    if p is not None and src not in g.inputs and src not in rw.outputs:
                        p.outputs[p.outputs.index(src)] = out
                        rw.dead.add(id(node))
                        rw.rename[src] = out
                        rw.changes += 1
            continue
        # sinking: the transpose feeding this node moves below it
        if node.op in UNARY and node.inputs:
            t_name = node.inputs[0]
            tr = rw.producer(t_name, "Transpose")
            if tr is None or not rw.private(t_name, node) or len(node.outputs) != 1:
                continue
            perm = _perm(g, tr)
            if perm is None or any(i and not _single_element(g, i, len(perm)) for i in node.inputs[1:]):
                continue
            _sink(rw, tr, node, [tr.inputs[0]] + node.inputs[1:], perm)
            continue
        if node.op in BINARY and len(node.inputs) == 2:
            a, b = node.inputs
            ta, tb = rw.producer(a, "Transpose"), rw.producer(b, "Transpose")
            if ta is not None and tb is not None and a != b:
                pa, pb = _perm(g, ta), _perm(g, tb)
                sa, sb = static_shape(g, ta.inputs[0]), static_shape(g, tb.inputs[0])
                if pa is None or pa != pb or sa is None or sa != sb or node.op == "PRelu":
                    continue
                if not (rw.private(a, node) and rw.private(b, node)):
                    continue
                _sink(rw, ta, node, [ta.inputs[0], tb.inputs[0]], pa, drop=[tb])
                continue
            for k, tr in ((0, ta), (1, tb)):
                other = node.inputs[1 - k]
                if tr is None or node.op == "PRelu":
                    continue
                perm = _perm(g, tr)
                if perm is None or not _single_element(g, other, len(perm)) \
                        or not rw.private(node.inputs[k], node):
                    continue
                ins = list(node.inputs)
                ins[k] = tr.inputs[0]
                _sink(rw, tr, node, ins, perm)
                break
    return rw.commit()


def _sink(rw: Rewriter, tr: Node, op: Node, new_inputs: List[str], perm: List[int],
          drop: List[Node] = ()) -> None:
    """op(T(x), ...) -> T(op(x, ...)): op keeps its name and writes a new tensor; the
    transpose (same name, same perm) now writes op's old output."""
    g = rw.g
    out = op.outputs[0]
    mid = _new_tensor(g, out, tr.inputs[0])
    new_op = Node(op.op, list(new_inputs), [mid], dict(op.attrs), op.name)
    new_tr = Node("Transpose", [mid], [out], dict(tr.attrs, perm=list(perm)), tr.name)
    rw.replace([tr, op] + list(drop), [new_op, new_tr], anchor=op)
