"""Transpose cancellation, merging and sinking.

* ``Transpose(Transpose(x, p1), p2)`` reads x directly with the composed perm
  ``p1[p2[i]]`` (the inner one is left to dead-code elimination if nothing else
  reads it); a composed identity disappears, its readers read x.
* A Transpose with the identity perm is removed (never merged into the transpose
  above it: were that one read by others too, the merge would copy it); if it writes
  a graph output, the node producing its input writes that output instead (its other
  readers follow; a second such output of the same tensor keeps its Transpose).
* Sinking: a Transpose read only by an element-wise unary op (or a binary op whose
  other operand is a constant with a single element) moves below it:
  ``U(T(x)) -> T(U(x))``; and ``B(T(a, p), T(b, p)) -> T(B(a, b), p)`` when a and b
  have the same shape. Sinking does not change the work done, but brings
  transposes next to each other (where they cancel) and next to the consumers a
  layout pass cares about. A Transpose that other nodes read too stays for them
  while a copy sinks, but only below an op whose readers are all Transposes undoing
  it: the copy cancels with each, so the count of transposes drops. Transposes only
  ever move down, so the pass terminates.
* Regions (when nothing above applies): a Transpose whose output reaches, through
  element-wise ops only (any number of readers, residual Adds inside), nothing but
  Transposes undoing it, goes with all of them; the ops in between compute in the
  untransposed layout. Sinking alone cannot do it: a transpose read by a residual
  Add and by the branch feeding that Add has two readers at every step.
* One sweep keeps its producer/consumer maps current as it sinks (``Rewriter.track``):
  a transpose that just sank below an op composes with a Transpose reading that op in
  the same sweep. (With stale maps the reader could sink into a later residual Add
  first, and the pair no longer met: two transposes were left where none was needed.)
"""
from __future__ import annotations

from typing import List, Optional

from ..ir import Graph, Node
from ..ops.elementwise import LAYOUT_FREE_UNARY
from ..ops.tensor import transpose_perm
from .rewrite import Rewriter, const, ensure_shapes, static_shape

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
                composed = [p1[i] for i in perm] if p1 is not None and len(p1) == len(perm) else None
                # an identity goes as it is (merged into an inner transpose that others
                # read, it would be a second copy of that one)
                if composed is not None and perm != list(range(len(perm))):
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
                        # src is gone: a second identity writing an output from it stays
                        rw.prod[out] = rw.prod.pop(src)
                        rw.dead.add(id(node))
                        rw.rename[src] = out
                        rw.changes += 1
            continue
        # sinking: the transpose feeding this node moves below it
        if node.op in UNARY and node.inputs:
            t_name = node.inputs[0]
            tr = rw.producer(t_name, "Transpose")
            if tr is None or len(node.outputs) != 1:
                continue
            perm = _perm(g, tr)
            if perm is None or not _movable(rw, t_name, node, perm) or any(i and not _single_element(g, i, len(perm)) for i in node.inputs[1:]):
                continue
            _sink(rw, [tr], node, [tr.inputs[0]] + node.inputs[1:], perm)
            continue
        if node.op in BINARY and len(node.inputs) == 2:
            a, b = node.inputs
            ta, tb = rw.producer(a, "Transpose"), rw.producer(b, "Transpose")
            if ta is not None and tb is not None and a != b:
                pa, pb = _perm(g, ta), _perm(g, tb)
                sa, sb = static_shape(g, ta.inputs[0]), static_shape(g, tb.inputs[0])
                if pa is None or pa != pb or sa is None or sa != sb or node.op == "PRelu":
                    continue
                if not (_movable(rw, a, node, pa) and _movable(rw, b, node, pa)):
                    continue
                _sink(rw, [ta, tb], node, [ta.inputs[0], tb.inputs[0]], pa)
                continue
            for k, tr in ((0, ta), (1, tb)):
                other = node.inputs[1 - k]
                if tr is None or node.op == "PRelu":
                    continue
                perm = _perm(g, tr)
                if perm is None or not _single_element(g, other, len(perm)) \
                        or not _movable(rw, node.inputs[k], node, perm):
                    continue
                ins = list(node.inputs)
                ins[k] = tr.inputs[0]
                _sink(rw, [tr], node, ins, perm)
                break
    return rw.commit() or _cancel_region(g)


def _cancel_region(g: Graph) -> int:
    """Remove one Transpose and the Transposes undoing it at the ends of its element-wise
    region (see the module docstring); 1 if it did, else 0."""
    cons, outs = g.consumers(), set(g.outputs)
    for t in g.nodes:
        perm = _perm(g, t) if t.op == "Transpose" else None
        shape = static_shape(g, t.inputs[0]) if perm is not None else None
        found = None if shape is None else _region(g, t.outputs[0], perm, cons, outs)
        if found is None:
            continue
        tensors, exits = found
        for name in tensors - {t.outputs[0]}:
            g.tensors[name].shape = tuple(shape)
        rename = {t.outputs[0]: t.inputs[0]}
        prod = g.producers()
        for u in exits:
            if u.outputs[0] in outs:
                # a graph output keeps its name: the region op writes it, its readers follow
                p = prod[u.inputs[0]]
                p.outputs[p.outputs.index(u.inputs[0])] = u.outputs[0]
                rename[u.inputs[0]] = u.outputs[0]
            else:
                rename[u.outputs[0]] = u.inputs[0]
        gone = {id(t)} | {id(u) for u in exits}
        g.nodes = [n for n in g.nodes if id(n) not in gone]
        for n in g.nodes:
            n.inputs = [rename.get(i, i) for i in n.inputs]
        ensure_shapes(g)
        return 1
    return 0


def _region(g: Graph, start: str, perm: List[int], cons, outs):
    """(tensors of the element-wise region below ``start``, the Transposes undoing ``perm``
    that end it), or None when some path leaves it another way (a graph output, an op that
    is not element-wise, a constant that broadcasts along an axis, a per-axis scale)."""
    tensors, members, exits, pending = {start}, set(), [], {}
    work = [start]
    while work:
        name = work.pop()
        q = g.tensors[name].quant
        if name in outs or (q and q.get("axis") is not None):
            return None
        for r in cons.get(name, []):
            if id(r) in members or any(r is u for u in exits):
                continue
            if r.op == "Transpose":
                # an exit writing a graph output takes over its input's name: one per tensor,
                # and not the region's start (the plain rule handles T(T(x)))
                named = r.outputs[0] in outs and (name == start or any(
                    u.inputs[0] == name and u.outputs[0] in outs for u in exits))
                if not _undoes(_perm(g, r), perm) or named:
                    return None
                exits.append(r)
                continue
            if not (r.op in UNARY or (r.op in BINARY and r.op != "PRelu")) or len(r.outputs) != 1:
                return None
            rest = [i for i in r.inputs if i and i not in tensors]
            if any(const(g, i) is not None and not _single_element(g, i, len(perm)) for i in rest):
                return None
            if any(const(g, i) is None for i in rest):        # another input may join it later
                pending[id(r)] = r
                continue
            members.add(id(r))
            pending.pop(id(r), None)
            tensors.add(r.outputs[0])
            work.append(r.outputs[0])
    if pending or not exits:
        return None
    return tensors, exits


def _movable(rw: Rewriter, name: str, reader: Node, perm: List[int]) -> bool:
    """The Transpose writing ``name`` (perm ``perm``) may sink below ``reader``: reader
    is its only reader, or every reader of reader's output (no graph output) is a
    Transpose that undoes ``perm``, so the copy sunk below reader cancels with each
    (the transpose stays for its other readers; the count of transposes drops)."""
    if rw.private(name, reader):
        return True
    if name in rw.outputs:
        # a transpose writing a graph output stays where it is: the TFLite exporter maps
        # T -> NCHW op -> T patterns around it back to NHWC builtins
        return False
    out = reader.outputs[0] if reader.outputs else ""
    users = rw.cons.get(out, [])
    return (reader.inputs.count(name) == 1 and bool(users) and out not in rw.outputs
            and all(rw.alive(u) and u.op == "Transpose" and _undoes(_perm(rw.g, u), perm) for u in users))


def _undoes(q: Optional[List[int]], p: List[int]) -> bool:
    """T(T(x, p), q) is x."""
    return q is not None and len(q) == len(p) and [p[i] for i in q] == list(range(len(p)))


def _sink(rw: Rewriter, trs: List[Node], op: Node, new_inputs: List[str], perm: List[int]) -> None:
    """op(T(x), ...) -> T(op(x, ...)): op keeps its name and writes a new tensor; a
    transpose (trs[0]'s name, same perm) now writes op's old output. Each of ``trs``
    that op alone read goes; one with other readers stays for them."""
    g = rw.g
    out = op.outputs[0]
    tr = trs[0]
    gone = [t for t in trs if rw.private(t.outputs[0], op)]
    mid = _new_tensor(g, out, tr.inputs[0])
    new_op = Node(op.op, list(new_inputs), [mid], dict(op.attrs), op.name)
    name = tr.name if any(t is tr for t in gone) or not tr.name else f"{tr.name}_sunk"
    new_tr = Node("Transpose", [mid], [out], dict(tr.attrs, perm=list(perm)), name)
    rw.replace(gone + [op], [new_op, new_tr], anchor=op)
    # the transpose below op must be visible to op's readers in this same sweep: one
    # that is a Transpose composes with it before it could sink into a later reader
    rw.track(gone + [op], [new_op, new_tr])
