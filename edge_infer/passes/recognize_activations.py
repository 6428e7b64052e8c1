"""Recognise activations that exporters wrote out as several element-wise ops.

=================================================  =========================================
pattern                                            becomes
=================================================  =========================================
``Clip(x, 0)`` (no max), ``Max(x, 0)``             ``Relu(x)``
``Min(Relu(x), c)``, ``Clip(Relu(x), lo>=0, hi)``  ``Clip(x, 0|lo, c|hi)`` (ReLU6 = Clip 0,6)
``Min(Max(x, lo), hi)``, ``Max(Min(x, hi), lo)``   ``Clip(x, lo, hi)`` (the second when lo <= hi)
``Clip(x*a + b, 0, 1)``, ``Clip(x/d + b, 0, 1)``   ``HardSigmoid(x, alpha=a|1/d, beta=b)``
``Clip(x + b, 0, h) / h`` (or ``* (1/h)``)         ``HardSigmoid(x, alpha=1/h, beta=b/h)``
``x * HardSigmoid(x)`` (alpha 1/6, beta 1/2)       ``HardSwish(x)``
``x * Clip(x + 3, 0, 6) / 6`` (or ``* (1/6)``)     ``HardSwish(x)``
``x * Sigmoid(x)``                                 ``SiLU(x)`` (an IR op of its own)
``0.5 * x * (1 + Erf(x / sqrt 2))``                ``Gelu(x, approximate="none")``
``0.5 * x * (1 + Tanh(sqrt(2/pi) (x + 0.044715 x^3)))``  ``Gelu(x, approximate="tanh")``
=================================================  =========================================

ReLU6 stays a Clip (that is the IR's ReLU6); the fuser gives it the ``Clip`` epilogue
with params [0, 6]. Every intermediate of a pattern must be read only inside the
pattern (not a graph output), and the result must have x's shape (constants are
scalars). Products and sums may come in either operand order. The single ops round
differently from the decomposed chains by about an ulp (relative 1e-7); SiLU,
Relu and Clip rewrites are bit-exact.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from ..ir import Graph, Node
from .rewrite import Rewriter, close, new_const, scalar, static_shape

SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _other(node: Node, name: str) -> Optional[str]:
    """The other operand of a binary node that reads ``name``."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a == name:
        return b
    if b == name:
        return a
    return None


def _var_and_scalar(rw: Rewriter, node: Node) -> Optional[Tuple[str, float, bool]]:
    """(variable operand, scalar constant, constant first) of a binary node."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    sa, sb = scalar(rw.g, a), scalar(rw.g, b)
    if sb is not None and sa is None:
        return a, sb, False
    if sa is not None and sb is None:
        return b, sa, True
    return None


def _clip_bounds(rw: Rewriter, node: Node):
    """(lo, hi) of a Clip with constant scalar bounds (None where absent); None if computed."""
    lo = node.inputs[1] if len(node.inputs) > 1 else ""
    hi = node.inputs[2] if len(node.inputs) > 2 else ""
    vlo, vhi = scalar(rw.g, lo) if lo else None, scalar(rw.g, hi) if hi else None
    if (lo and vlo is None) or (hi and vhi is None):
        return None
    return vlo, vhi


def _same_shape(rw: Rewriter, a: str, b: str) -> bool:
    sa, sb = static_shape(rw.g, a), static_shape(rw.g, b)
    return sa is not None and sa == sb and rw.g.tensors[a].dtype in ("float32", "float64") \
        and rw.g.tensors[a].dtype == rw.g.tensors[b].dtype


def _scale_by(rw: Rewriter, node: Node, value: float) -> Optional[str]:
    """If ``node`` is ``v / value`` or ``v * (1/value)`` return v."""
    vs = _var_and_scalar(rw, node)
    if vs is None:
        return None
    v, c, first = vs
    if node.op == "Div" and not first and close(c, value):
        return v
    if node.op == "Mul" and close(c, 1.0 / value):
        return v
    return None


def _clip_of_add(rw: Rewriter, clip: Node, lo: float):
    """Clip(Add(x, b), lo, h) with private Add: (add node, x, b, h) or None."""
    if clip.op != "Clip":
        return None
    bounds = _clip_bounds(rw, clip)
    if bounds is None or bounds[0] is None or bounds[1] is None or not close(bounds[0], lo, 1e-9):
        return None
    add = rw.producer(clip.inputs[0], "Add")
    if add is None or not rw.private(clip.inputs[0], clip):
        return None
    vs = _var_and_scalar(rw, add)
    if vs is None:
        return None
    return add, vs[0], vs[1], bounds[1]


def _scalar_const(g: Graph, node: Node, var: str) -> str:
    """The constant operand of binary ``node`` (whose other operand is ``var``) as a
    0-d constant of var's dtype, usable as a Clip bound."""
    c = node.inputs[1] if node.inputs[0] == var else node.inputs[0]
    dt = g.tensors[var].dtype
    v = g.tensors[c].data
    if v.ndim == 0 and v.dtype.name == dt:
        return c
    return new_const(g, f"{node.name}_bound", np.asarray(v.reshape(-1)[0], dt))


def _new(rw: Rewriter, op: str, inputs, out: str, name: str, **attrs) -> Node:
    return Node(op, list(inputs), [out], attrs, name)


# -- the rules: each looks at a candidate last node and rewrites if it matches --------------

def _relu_forms(rw: Rewriter, n: Node) -> bool:
    g = rw.g
    if n.op == "Clip":
        if g.tensors[n.inputs[0]].dtype not in ("float32", "float64"):
            return False
        b = _clip_bounds(rw, n)
        if b is not None and b[0] is not None and b[0] == 0.0 and b[1] is None:
            rw.replace([n], [_new(rw, "Relu", [n.inputs[0]], n.outputs[0], n.name)])
            return True
        # Clip(Relu(x), lo >= 0, hi) == Clip(x, lo, hi)
        r = rw.producer(n.inputs[0], "Relu")
        if b is not None and b[0] is not None and b[0] >= 0 and r is not None and rw.private(n.inputs[0], n):
            rw.replace([r, n], [_new(rw, "Clip", [r.inputs[0]] + n.inputs[1:], n.outputs[0], n.name)])
            return True
        return False
    if n.op == "Max":
        vs = _var_and_scalar(rw, n)
        # Max(Min(v, hi), lo) == Clip(v, lo, hi) when lo <= hi
        m = rw.producer(vs[0], "Min") if vs is not None else None
        if m is not None and rw.private(vs[0], n):
            ms = _var_and_scalar(rw, m)
            if ms is not None and vs[1] <= ms[1] and _same_shape(rw, ms[0], n.outputs[0]):
                lo, hi = _scalar_const(g, n, vs[0]), _scalar_const(g, m, ms[0])
                rw.replace([m, n], [_new(rw, "Clip", [ms[0], lo, hi], n.outputs[0], n.name)])
                return True
        if vs is not None and vs[1] == 0.0 and _same_shape(rw, vs[0], n.outputs[0]):
            rw.replace([n], [_new(rw, "Relu", [vs[0]], n.outputs[0], n.name)])
            return True
        return False
    if n.op == "Min":
        vs = _var_and_scalar(rw, n)
        if vs is None:
            return False
        # Min(Max(v, lo), hi) == Clip(v, lo, hi) (both give hi when lo > hi)
        m = rw.producer(vs[0], "Max")
        if m is not None and rw.private(vs[0], n):
            ms = _var_and_scalar(rw, m)
            if ms is not None and _same_shape(rw, ms[0], n.outputs[0]):
                lo, hi = _scalar_const(g, m, ms[0]), _scalar_const(g, n, vs[0])
                rw.replace([m, n], [_new(rw, "Clip", [ms[0], lo, hi], n.outputs[0], n.name)])
                return True
        if vs[1] < 0:
            return False
        r = rw.producer(vs[0], "Relu")
        if r is None or not rw.private(vs[0], n) or not _same_shape(rw, r.inputs[0], n.outputs[0]):
            return False
        x = r.inputs[0]
        dt = g.tensors[x].dtype
        lo = new_const(g, f"{n.name}_min", np.zeros((), dt))
        hi = new_const(g, f"{n.name}_max", np.asarray(vs[1], dt))
        rw.replace([r, n], [_new(rw, "Clip", [x, lo, hi], n.outputs[0], n.name)])
        return True
    return False


def _hard_sigmoid(rw: Rewriter, n: Node) -> bool:
    if n.op == "Clip":
        # Clip(x*a + b, 0, 1), Clip(x/d + b, 0, 1), Clip(x + b, 0, 1)
        m = _clip_of_add(rw, n, 0.0)
        if m is None or not close(m[3], 1.0):
            return False
        add, v, beta, _ = m
        nodes, x, alpha = [add, n], v, 1.0
        p = rw.producer(v, "Mul", "Div")
        if p is not None and rw.private(v, add):
            vs = _var_and_scalar(rw, p)
            if vs is not None and not (p.op == "Div" and vs[2]) and vs[1] != 0:
                x = vs[0]
                alpha = vs[1] if p.op == "Mul" else 1.0 / vs[1]
                nodes.insert(0, p)
        if not _same_shape(rw, x, n.outputs[0]):
            return False
        rw.replace(nodes, [_new(rw, "HardSigmoid", [x], n.outputs[0], n.name, alpha=alpha, beta=beta)])
        return True
    if n.op in ("Div", "Mul"):
        # Clip(x + b, 0, h) / h
        vs = _var_and_scalar(rw, n)
        if vs is None:
            return False
        clip = rw.producer(vs[0], "Clip")
        if clip is None or not rw.private(vs[0], n):
            return False
        m = _clip_of_add(rw, clip, 0.0)
        if m is None:
            return False
        add, x, b, h = m
        if h <= 0 or _scale_by(rw, n, h) is None or not _same_shape(rw, x, n.outputs[0]):
            return False
        rw.replace([add, clip, n], [_new(rw, "HardSigmoid", [x], n.outputs[0], n.name,
                                         alpha=1.0 / h, beta=b / h)])
        return True
    return False


def _hard_swish(rw: Rewriter, n: Node) -> bool:
    if n.op == "Mul" and len(n.inputs) == 2:
        # x * HardSigmoid(x)
        for s in n.inputs:
            hs = rw.producer(s, "HardSigmoid")
            x = _other(n, s)
            if hs is None or x is None or hs.inputs[0] != x or not rw.private(s, n):
                continue
            if close(float(hs.attrs.get("alpha", 0.2)), 1 / 6) and close(float(hs.attrs.get("beta", 0.5)), 0.5) \
                    and _same_shape(rw, x, n.outputs[0]):
                rw.replace([hs, n], [_new(rw, "HardSwish", [x], n.outputs[0], n.name)])
                return True
    if n.op in ("Div", "Mul"):
        # (x * Clip(x + 3, 0, 6)) / 6  or  * (1/6)
        v = _scale_by(rw, n, 6.0)
        if v is None:
            return False
        prod = rw.producer(v, "Mul")
        if prod is None or not rw.private(v, n) or len(prod.inputs) != 2:
            return False
        for r in prod.inputs:
            clip = rw.producer(r, "Clip")
            x = _other(prod, r)
            if clip is None or x is None or not rw.private(r, prod):
                continue
            m = _clip_of_add(rw, clip, 0.0)
            if m is None or m[1] != x or not close(m[2], 3.0) or not close(m[3], 6.0):
                continue
            if not _same_shape(rw, x, n.outputs[0]):
                continue
            rw.replace([m[0], clip, prod, n], [_new(rw, "HardSwish", [x], n.outputs[0], n.name)])
            return True
    return False


def _silu(rw: Rewriter, n: Node) -> bool:
    if n.op != "Mul" or len(n.inputs) != 2:
        return False
    for s in n.inputs:
        sig = rw.producer(s, "Sigmoid")
        x = _other(n, s)
        if sig is None or x is None or sig.inputs[0] != x or not rw.private(s, n):
            continue
        if not _same_shape(rw, x, n.outputs[0]):
            continue
        rw.replace([sig, n], [_new(rw, "SiLU", [x], n.outputs[0], n.name)])
        return True
    return False


def _gelu_tail(rw: Rewriter, act: str, x: str):
    """After ``1 + act``: the product with x and 0.5 in one or two private Muls.
    Returns (nodes, output) or None."""
    g = rw.g
    nodes, have_x, have_half, cur = [], False, False, act
    for _ in range(2):
        m = rw.sole_consumer(cur)
        if m is None or m.op != "Mul":
            return None
        other = _other(m, cur)
        if other is None:
            return None
        if other == x and not have_x:
            have_x = True
        elif not have_half and close(scalar(g, other), 0.5):
            have_half = True
        elif not have_x and not have_half:
            h = rw.producer(other, "Mul")
            if h is None or not rw.private(other, m):
                return None
            vs = _var_and_scalar(rw, h)
            if vs is None or vs[0] != x or not close(vs[1], 0.5):
                return None
            nodes.append(h)
            have_x = have_half = True
        else:
            return None
        nodes.append(m)
        cur = m.outputs[0]
        if have_x and have_half:
            return nodes, cur
    return None


def _one_plus(rw: Rewriter, name: str):
    """The private Add(name, 1) reading ``name``, or None."""
    a = rw.sole_consumer(name)
    if a is None or a.op not in ("Add", "Sum") or len(a.inputs) != 2:
        return None
    vs = _var_and_scalar(rw, a)
    if vs is None or vs[0] != name or not close(vs[1], 1.0):
        return None
    return a


def _gelu_erf(rw: Rewriter, e: Node) -> bool:
    if e.op != "Erf":
        return False
    u = e.inputs[0]
    d = rw.producer(u, "Div", "Mul")
    if d is None or not rw.private(u, e):
        return False
    x = _scale_by(rw, d, SQRT2)
    if x is None:
        return False
    return _finish_gelu(rw, e, x, [d, e], "none")


def _gelu_tanh(rw: Rewriter, th: Node) -> bool:
    if th.op != "Tanh":
        return False
    g = rw.g
    t = th.inputs[0]
    sc = rw.producer(t, "Mul")
    if sc is None or not rw.private(t, th):
        return False
    vs = _var_and_scalar(rw, sc)
    if vs is None or not close(vs[1], SQRT_2_OVER_PI, 1e-5):
        return False
    inner = rw.producer(vs[0], "Add")
    if inner is None or not rw.private(vs[0], sc) or len(inner.inputs) != 2:
        return False
    for p_name in inner.inputs:
        x = _other(inner, p_name)
        p = rw.producer(p_name, "Mul")
        if p is None or x is None or x == p_name or not rw.private(p_name, inner):
            continue
        pv = _var_and_scalar(rw, p)
        if pv is None or not close(pv[1], 0.044715, 1e-5):
            continue
        cube_name = pv[0]
        cube = rw.producer(cube_name, "Pow", "Mul")
        if cube is None or not rw.private(cube_name, p):
            continue
        cube_nodes = [cube]
        if cube.op == "Pow":
            if cube.inputs[0] != x or not close(scalar(g, cube.inputs[1]), 3.0):
                continue
        else:
            sqn = _other(cube, x)
            sq = rw.producer(sqn, "Mul") if sqn is not None else None
            if sq is None or sq.inputs != [x, x] or not rw.private(sqn, cube):
                continue
            cube_nodes.insert(0, sq)
        return _finish_gelu(rw, th, x, cube_nodes + [p, inner, sc, th], "tanh")
    return False


RULES = (_relu_forms, _hard_sigmoid, _hard_swish, _silu, _gelu_erf, _gelu_tanh)


def recognize_activations(graph: Graph) -> int:
    rw = Rewriter(graph)
    for node in list(graph.nodes):
        if not rw.alive(node):
            continue
        for rule in RULES:
            if rule(rw, node):
                break
    return rw.commit()


def _finish_gelu(rw, core, x, head, approximate: str) -> bool:
    """The part both GELU forms share: ``core`` (erf or tanh) is followed by
    1 + ..., then x * 0.5 * ...; replace ``head`` and that tail by one Gelu."""
    one = _one_plus(rw, core.outputs[0])
    if one is None:
        return False
    tail = _gelu_tail(rw, one.outputs[0], x)
    if tail is None:
        return False
    nodes, out = tail
    if not _same_shape(rw, x, out):
        return False
    last = nodes[-1]
    rw.replace(head + [one] + nodes, [_new(rw, "Gelu", [x], out, last.name, approximate=approximate)],
               anchor=last)
    return True
