"""Fuse a residual Add (+ the activation after it) into the epilogue of the conv
that produces one of its operands: ``act(conv(x) + b + z)`` as one FusedConv with Z = z.

Matches ``Add(s, z)`` / ``Sum(s, z)`` where s is the output of a Conv (or a FusedConv
with no epilogue yet) read by nothing else, and z is another computed tensor of
exactly s's shape and dtype (no broadcasting: a per-channel constant is a bias,
fold_scale_bias's job). When both operands come from such convs the later one
(in execution order) takes the other as Z, so Z is computed by then. An
activation reading only the Add's output joins the epilogue when the cost model
agrees; otherwise the residual alone is fused and the activation stays.
"""
from __future__ import annotations

from ..ir import Graph
from .cost_model import target_profile
from .fuse_conv_activation import act_label, make_fused, open_epilogue, try_fuse
from .rewrite import Rewriter, activation_of, const, is_float, node_index, static_shape


def fuse_residual_add(graph: Graph) -> int:
    rw = Rewriter(graph)
    prof = target_profile(graph)
    order = node_index(graph)
    for add in list(graph.nodes):
        if add.op not in ("Add", "Sum") or len(add.inputs) != 2 or not rw.alive(add):
            continue
        a, b = add.inputs
        out = add.outputs[0]
        if a == b or not a or not b:
            continue
        shape = static_shape(graph, out)
        cands = []
        for s, z in ((a, b), (b, a)):
            p = rw.producer(s, "Conv", "FusedConv")
            if p is None or not open_epilogue(p) or (p.op == "FusedConv" and p.inputs[3]):
                continue
            if const(graph, z) is not None or not is_float(graph, s):
                continue
            if shape is None or static_shape(graph, s) != shape or static_shape(graph, z) != shape \
                    or graph.tensors[z].dtype != graph.tensors[s].dtype:
                continue
            if not rw.private(s, add):
                continue
            cands.append((order[id(p)], p, s, z))
        if not cands:
            continue
        _, p, s, z = max(cands, key=lambda c: c[0])
        act_node = rw.sole_consumer(out)
        act = activation_of(graph, act_node) if act_node is not None and act_node.inputs[0] == out else None
        attempts = []
        if act is not None:
            attempts.append((act_node, act))
        attempts.append((None, ("", [])))
        for an, (name, params) in attempts:
            final = an.outputs[0] if an is not None else out
            fused = make_fused(p, name, params, final, residual=z)
            pattern = "Conv+Add" + (f"+{act_label(an.op, act)}" if an is not None else "")
            old = [p, add] + ([an] if an is not None else [])
            if try_fuse(rw, old, fused, pattern, an if an is not None else add, prof):
                break
    return rw.commit()
