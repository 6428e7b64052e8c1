"""Fold multiplication and addition by constants into a neighbouring layer's weights.

After: ``Mul/Div/Add/Sub(y, c)`` (``Mul/Add(c, y)``, ``Sub(c, y)`` too) where y is
the output of a Conv / ConvTranspose / Gemm / MatMul (or a fused one without an
epilogue yet) read by nothing else, and c is a per-output-channel constant (it
broadcasts against y along the channel axis only — axis 1 for convs and Gemm, the
last axis for MatMul — or is a scalar): the scale goes into W (and the bias), the
offset into the bias (created if missing; a MatMul becomes a FusedMatMul with bias).

Before: ``Conv(Mul/Div/Add/Sub(x, c), W)`` where c is per input channel and x already
has the product's shape: x*s goes into W's input-channel slices (exact with any
padding: zero padding times s is still zero); x+t adds W·t to the bias, which is
only right when the conv has no padding (the padded zeros are not shifted), so
offsets fold only into unpadded convs.

Chains: two constant steps in a row merge, ``(x*a)*b -> x*(ab)``, ``(x+a)+b -> x+(a+b)``,
``(x+a)*b -> x*b + ab`` (Sub/Div by a constant count as Add/Mul), so a BatchNorm
that could not fold (turned into Mul+Add) followed by a Caffe-style Scale layer
becomes one Mul and one Add, when every constant broadcasts onto x without growing it.

All arithmetic in float64, cast once; new constant arrays (never in place).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .rewrite import (Rewriter, channel_axis, channels_last, const, fold_affine_into, new_const,
                      per_channel, static_shape)

AFTER = ("Conv", "ConvTranspose", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedMatMul")
ARITH = ("Mul", "Div", "Add", "Sub")


def _split(rw: Rewriter, node: Node):
    """(variable input, constant value, constant is first operand) or None."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    ca, cb = const(rw.g, a), const(rw.g, b)
    if cb is not None and ca is None:
        return a, cb, False
    if ca is not None and cb is None:
        return b, ca, True
    return None


def _affine(op: str, vec: np.ndarray, const_first: bool):
    """(scale, shift) so that op(y, c) == y * scale + shift, or None."""
    if op == "Mul":
        return vec, None
    if op == "Add":
        return None, vec
    if op == "Sub":
        return (None, -vec) if not const_first else (-np.ones_like(vec), vec)
    if op == "Div" and not const_first:
        if np.any(vec == 0):
            return None
        return 1.0 / vec, None
    return None


def _fold_after(rw: Rewriter, node: Node) -> bool:
    g = rw.g
    sp = _split(rw, node)
    if sp is None:
        return False
    y, c, const_first = sp
    p = rw.producer(y, *AFTER)
    if p is None or not rw.private(y, node):
        return False
    info = channel_axis(g, p)
    if info is None:
        return False
    rank, axis, m = info
    out_shape = static_shape(g, node.outputs[0])
    if out_shape is not None and static_shape(g, y) is not None and out_shape != static_shape(g, y):
        return False
    vec = per_channel(c, rank, axis, m)
    if vec is None:
        return False
    aff = _affine(node.op, vec, const_first)
    if aff is None:
        return False
    if not fold_affine_into(g, p, *aff):
        return False
    p.outputs[0] = node.outputs[0]
    rw.replace([node], [], anchor=node)
    return True


def _fold_before(rw: Rewriter, conv: Node) -> bool:
    """Conv reading Mul/Div/Add/Sub(x, per-input-channel constant)."""
    g = rw.g
    xin = conv.inputs[0]
    pre = rw.producer(xin, *ARITH)
    if pre is None or not rw.private(xin, conv):
        return False
    sp = _split(rw, pre)
    if sp is None:
        return False
    x, c, const_first = sp
    w = const(g, conv.inputs[1])
    if w is None or w.dtype.name not in ("float32", "float64") or w.ndim < 3:
        return False
    xs, ps = static_shape(g, x), static_shape(g, xin)
    if xs is None or xs != ps or len(xs) != w.ndim:
        return False
    group = int(conv.attrs.get("group", 1))
    m, cg = int(w.shape[0]), int(w.shape[1])
    if group < 1 or m % group:
        return False
    cin = cg * group
    vec = per_channel(c, w.ndim, w.ndim - 1 if channels_last(conv) else 1, cin)
    if vec is None:
        return False
    aff = _affine(pre.op, vec, const_first)
    if aff is None:
        return False
    s, t = aff
    if t is not None and np.any(t != 0):
        pads = conv.attrs.get("pads") or []
        auto = str(conv.attrs.get("auto_pad", "NOTSET") or "NOTSET")
        if any(int(p) for p in pads) or auto not in ("NOTSET", "VALID"):
            return False              # padded zeros would not be shifted
    else:
        t = None
    bname = conv.inputs[2] if len(conv.inputs) > 2 else ""
    b = const(g, bname) if bname else None
    if bname and b is None:
        return False
    # input channel of W[o, j] is (o // (m // group)) * cg + j
    gidx = (np.arange(m) // (m // group))[:, None] * cg + np.arange(cg)[None, :]   # (m, cg)
    w64 = w.astype(np.float64)
    extra = (1,) * (w.ndim - 2)
    new_w = w64 if s is None else w64 * s[gidx].reshape((m, cg) + extra)
    new_b = None if b is None else b.astype(np.float64).reshape(-1)
    if t is not None:
        add = (w64 * t[gidx].reshape((m, cg) + extra)).reshape(m, -1).sum(axis=1)
        new_b = add if new_b is None else new_b + add
    new_w = new_w.astype(w.dtype)
    if not np.all(np.isfinite(new_w)) or (new_b is not None and not np.all(np.isfinite(new_b))):
        return False
    inputs = list(conv.inputs)
    inputs[0] = x
    inputs[1] = new_const(g, f"{conv.inputs[1]}_folded", new_w)
    if new_b is not None:
        while len(inputs) < 3:
            inputs.append("")
        inputs[2] = new_const(g, f"{bname or conv.name + '.bias'}_folded", new_b.astype(w.dtype))
    conv.inputs = inputs
    rw.cons.setdefault(x, []).append(conv)
    rw.replace([pre], [], anchor=pre)
    return True


def _onto(c: np.ndarray, shape) -> bool:
    """``c`` broadcasts onto ``shape`` without growing it."""
    if c.ndim > len(shape):
        return False
    return all(d == 1 or (isinstance(s, int) and d == s)
               for d, s in zip(c.shape[::-1], tuple(shape)[::-1]))


def _as_affine_step(rw: Rewriter, node: Node):
    """(x, kind, value) for Mul/Div/Add/Sub of a variable by a constant, as ``x * value``
    (kind "mul") or ``x + value`` (kind "add") with a float64 value; None otherwise."""
    sp = _split(rw, node)
    if sp is None:
        return None
    x, c, first = sp
    if c.dtype.kind != "f":
        return None
    c64 = c.astype(np.float64)
    if node.op == "Mul":
        return x, "mul", c64
    if node.op == "Add":
        return x, "add", c64
    if node.op == "Sub" and not first:
        return x, "add", -c64
    if node.op == "Div" and not first and np.all(c64 != 0):
        return x, "mul", 1.0 / c64
    return None


def _merge_chain(rw: Rewriter, node: Node) -> bool:
    """Two constant steps in a row become one (or a canonical Mul-then-Add):
    (x*a)*b -> x*(ab); (x+a)+b -> x+(a+b); (x+a)*b -> x*b + ab. Chains of BN and
    scale layers (Caffe's BatchNorm + Scale) collapse to one Mul and one Add."""
    g = rw.g
    outer = _as_affine_step(rw, node)
    if outer is None:
        return False
    v, kind2, c2 = outer
    p = rw.producer(v, *ARITH)
    if p is None or not rw.private(v, node):
        return False
    inner = _as_affine_step(rw, p)
    if inner is None:
        return False
    x, kind1, c1 = inner
    shape = static_shape(g, x)
    dt = g.tensors[x].dtype
    if shape is None or dt not in ("float32", "float64") or static_shape(g, v) != shape \
            or static_shape(g, node.outputs[0]) != shape or g.tensors[node.outputs[0]].dtype != dt \
            or not (_onto(c1, shape) and _onto(c2, shape)):
        return False
    out = node.outputs[0]
    if kind1 == kind2:
        val = c1 * c2 if kind1 == "mul" else c1 + c2
        if not np.all(np.isfinite(val)):
            return False
        cname = new_const(g, f"{node.name}_merged", val.astype(dt))
        merged = Node("Mul" if kind1 == "mul" else "Add", [x, cname], [out], {}, node.name)
        rw.replace([p, node], [merged], anchor=node)
        return True
    if kind1 == "add" and kind2 == "mul":
        shift = c1 * c2
        if not np.all(np.isfinite(shift)):
            return False
        s_name = new_const(g, f"{node.name}_scale", c2.astype(dt))
        t_name = new_const(g, f"{node.name}_shift", shift.astype(dt))
        mid = g.unique_name(f"{out}_premul")
        g.add_tensor(mid, dt, shape)
        mul = Node("Mul", [x, s_name], [mid], {}, g.unique_node_name(f"{node.name}_mul"))
        add = Node("Add", [mid, t_name], [out], {}, node.name)
        rw.replace([p, node], [mul, add], anchor=node)
        return True
    return False


def fold_scale_bias(graph: Graph) -> int:
    rw = Rewriter(graph)
    for node in list(graph.nodes):
        if not rw.alive(node):
            continue
        if node.op in ARITH and (_fold_after(rw, node) or _merge_chain(rw, node)):
            continue
        if node.op in ("Conv", "FusedConv"):   # a FusedConv's epilogue comes after: unaffected
            _fold_before(rw, node)
    return rw.commit()
