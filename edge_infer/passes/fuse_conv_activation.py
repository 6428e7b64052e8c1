"""Fuse Conv / Gemm / MatMul (+ MatMul's bias Add) + activation into one node with an epilogue.

IR ops made here (shape rules in ``ops/conv.py`` and ``ops/gemm.py``, CPU kernels in
``backends/cpu/kernels/fused.py``):

* ``FusedConv(X, W, B, Z)``: every Conv attribute + ``activation`` + ``activation_params``;
  Z is the residual (``fuse_residual_add``), "" when none; y = act(conv(x) + b + z);
* ``FusedGemm(A, B, C)``: every Gemm attribute + the activation attributes;
* ``FusedMatMul(A, B, bias)``: the activation attributes; bias broadcasts onto the output.

``activation`` is "" (none), "Relu", "Clip" (params [min, max]; ReLU6 is [0, 6]),
"LeakyRelu" ([alpha]), "Sigmoid", "Tanh", "HardSigmoid" ([alpha, beta]),
"HardSwish", "SiLU", "Gelu" (erf form) or "GeluTanh" (tanh approximation).

A fusion needs the base op's output to be read by the activation alone (and not
be a graph output), and is applied only where ``cost_model.fusion_is_profitable``
says so for the graph's target profile; each decision is recorded in
``graph.metadata["fusion_decisions"]``.
"""
from __future__ import annotations

from typing import List, Optional

from ..ir import Graph, Node
from ..ops.shapes import broadcast_shapes
from .cost_model import decision, fusion_is_profitable, target_profile
from .rewrite import (Rewriter, activation_of, const, is_float, record_decision, static_shape,
                      strip_epilogue)

FUSED = {"Conv": "FusedConv", "Gemm": "FusedGemm", "MatMul": "FusedMatMul",
         "FusedConv": "FusedConv", "FusedGemm": "FusedGemm", "FusedMatMul": "FusedMatMul"}


def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def open_epilogue(node: Node) -> bool:
    """True for a base op (or a fused one whose epilogue has no activation yet)."""
    return node.op in FUSED and not (node.op.startswith("Fused") and node.attrs.get("activation"))


def label(node: Node) -> str:
    """The pattern a (fused) node stands for: Conv, Conv+Add, MatMul+Add, ..."""
    if node.op == "FusedConv":
        return "Conv+Add" if _opt(node, 3) else "Conv"
    if node.op == "FusedMatMul":
        return "MatMul+Add" if _opt(node, 2) else "MatMul"
    if node.op == "FusedGemm":
        return "Gemm"
    return node.op


def act_label(op: str, act) -> str:
    """How an activation node shows in a pattern name (ReLU6 for Clip [0, 6])."""
    if op == "Clip" and act is not None and list(act[1]) == [0.0, 6.0]:
        return "Relu6"
    return op


def make_fused(base: Node, activation: str, params: List[float], output: str,
               residual: Optional[str] = None, bias: Optional[str] = None) -> Node:
    """The fused node replacing ``base`` (+ epilogue), writing ``output``; named as ``base``."""
    op = FUSED[base.op]
    attrs = strip_epilogue(base.attrs)
    attrs["activation"] = activation
    attrs["activation_params"] = [float(p) for p in params]
    if op == "FusedConv":
        inputs = [base.inputs[0], base.inputs[1], _opt(base, 2),
                  residual if residual is not None else _opt(base, 3)]
    elif op == "FusedGemm":
        inputs = [base.inputs[0], base.inputs[1], _opt(base, 2)]
    else:
        inputs = [base.inputs[0], base.inputs[1], bias if bias is not None else _opt(base, 2)]
    return Node(op, inputs, [output], attrs, base.name)


def try_fuse(rw: Rewriter, old: List[Node], fused: Node, pattern: str, anchor: Node, prof: dict) -> bool:
    """Ask the cost model; record the decision; replace ``old`` by ``fused`` when profitable."""
    ok, reason = fusion_is_profitable(fused, rw.g, prof)
    record_decision(rw.g, decision(fused, pattern, ok, reason, rw.g, prof))
    if ok:
        rw.replace(old, [fused], anchor=anchor)
    return ok


def _matmul_bias(rw: Rewriter, add: Node, prof: dict) -> bool:
    """MatMul + Add(constant bias broadcasting onto the product) -> FusedMatMul(A, B, bias)."""
    g = rw.g
    if len(add.inputs) != 2:
        return False
    for s in add.inputs:
        bias = add.inputs[1] if add.inputs[0] == s else add.inputs[0]
        p = rw.producer(s, "MatMul", "FusedMatMul")
        c = const(g, bias)
        if p is None or c is None or not is_float(g, s) or not open_epilogue(p) or _opt(p, 2):
            continue
        out = static_shape(g, s)
        if out is None or static_shape(g, add.outputs[0]) != out or c.ndim > len(out) \
                or g.tensors[bias].dtype != g.tensors[s].dtype:
            continue
        try:
            if tuple(broadcast_shapes(out, c.shape)) != tuple(out):
                continue
        except ValueError:
            continue
        if not rw.private(s, add):
            continue
        fused = make_fused(p, "", [], add.outputs[0], bias=bias)
        return try_fuse(rw, [p, add], fused, "MatMul+Add", add, prof)
    return False


def fuse_conv_activation(graph: Graph) -> int:
    rw = Rewriter(graph)
    prof = target_profile(graph)
    for node in list(graph.nodes):
        if not rw.alive(node):
            continue
        if node.op == "Add":
            _matmul_bias(rw, node, prof)
            continue
        act = activation_of(graph, node)
        if act is None:
            continue
        t = node.inputs[0]
        p = rw.producer(t)
        if p is None or not open_epilogue(p) or not is_float(graph, t):
            continue
        pattern = f"{label(p)}+{act_label(node.op, act)}"
        if not rw.private(t, node):
            users = len(rw.cons.get(t, []))
            why = "it is a graph output" if t in rw.outputs else f"{users} nodes read it"
            record_decision(graph, {"node": p.name, "pattern": pattern, "fused": False,
                                    "reason": f"output {t!r} must stay: {why}"})
            continue
        fused = make_fused(p, act[0], act[1], node.outputs[0])
        try_fuse(rw, [p, node], fused, pattern, node, prof)
    return rw.commit()
