"""Prepare-time fusion of int8 lookup-table activations into the int8 conv that feeds them.

In an int8 graph an element-wise activation (HardSwish, HardSigmoid, Sigmoid, SiLU, Tanh,
LeakyRelu, ...: ``ops/int8_tables.LUT_OPS``) is a 256-entry table step of its own, as in
TFLite. Where its input is the only output of an int8 Conv / FusedConv and nothing else reads
that tensor, the CPU plan runs the two as one step, as it already does for fp32: the conv keeps
its requantization to the activation's *input* parameters (its own Relu / Clip clamp and
residual included) and its kernel then maps each stored output through the activation's table
(``lut`` of ``ei_int8_conv_args`` / ``ei_dw_args``; the numpy kernels likewise), writing the
activation's output tensor; the intermediate tensor takes no arena bytes. The table is the one
the separate step would build (``lut_table``, at prepare), so both plans give the same bytes.

A gated activation, ``Mul(x, act(x))`` with act such a table op (x * HardSigmoid(x) is
HardSwish, x * Sigmoid(x) SiLU, as onnxruntime's QDQ quantizer and exporters that know neither
write them), is the same: both steps read only x's byte, so one table (``gated_table``: act's
table, then TFLite MUL's integers) gives the two steps' bytes, and the conv writes the Mul's
output. It fuses where x's only readers are the two steps and the gate's only reader the Mul.

The decision belongs to the CPU backend and is made when a plan is prepared: the saved graph,
its ONNX / TFLite exports and the other backends keep the two nodes. ``ENABLED = False``
prepares plans unfused (the tests compare the two plans bit for bit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...ir import Graph, Node
from ...ops.int8_tables import LUT_OPS, activation_fn, by_bits, gated_table, lut_table
from ...ops.qmath import per_tensor, requant_mode
from .registry import TABLE

#: fuse when plans are prepared (False: every activation stays its own step)
ENABLED = True
#: the attribute of a fused conv node (in the plan's node list only): its ``FusedActivation``
ATTR = "_int8_activation"
#: the ops whose int8 kernel applies a fused table (kernels/int8_conv.py)
CONV_OPS = ("Conv", "FusedConv")


@dataclass(frozen=True)
class FusedActivation:
    """The activation a conv node of the plan applies: ``op`` and ``attrs`` (the activation
    node ``node``'s), ``via`` the tensor between them (the conv requantizes to its parameters);
    a gated one also names the Mul node (``gate``) and the activation's output (``gate_via``)."""
    op: str
    attrs: dict
    node: str
    via: str
    gate: str = ""
    gate_via: str = ""
    gate_requant: str = "fixed"


class _Consts:
    """What the kernel table's ``lookup`` reads of a prepare context: tensors and constants."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def tensor(self, name: str):
        return self.graph.tensors[name]

    def const(self, name: str):
        t = self.graph.tensors.get(name) if name else None
        return t.data if t is not None and t.is_const else None


def fused_activation(node: Node) -> Optional[FusedActivation]:
    """The activation fused into conv ``node`` of a plan, or None."""
    return node.attrs.get(ATTR)


def activation_table(node: Node, ctx) -> Optional[np.ndarray]:
    """The 256-entry int8 table of the activation fused into ``node``, from the intermediate
    tensor's and the output's parameters, indexed by the conv's clamped output's uint8 bit
    pattern (``by_bits``: the order the native kernels and the table step read); None if none."""
    fused = fused_activation(node)
    if fused is None:
        return None
    s_x, zp_x = per_tensor(ctx, fused.via, "activation input")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    fn = activation_fn(fused.op, fused.attrs)
    if fused.gate:
        s_h, zp_h = per_tensor(ctx, fused.gate_via, "gate")
        return by_bits(gated_table(fn, s_x, zp_x, s_h, zp_h, s_y, zp_y, fused.gate_requant))
    return by_bits(lut_table(fn, s_x, zp_x, s_y, zp_y))


def _per_tensor_int8(graph: Graph, name: str) -> bool:
    t = graph.tensors.get(name)
    if t is None or t.is_const or t.dtype != "int8" or not t.quant:
        return False
    return np.asarray(t.quant.get("scale", [])).size == 1 and np.asarray(t.quant.get("zero_point", [0])).size == 1


def _fusable(conv: Node, mid: str, out: str, graph: Graph, consts: _Consts) -> bool:
    """Whether the conv's only output ``mid`` (read by the fused steps alone: the caller checks)
    can go through a table into ``out`` inside the conv's step."""
    if (conv.op not in CONV_OPS or ATTR in conv.attrs or [o for o in conv.outputs if o] != [mid]
            or mid in graph.outputs or out in graph.inputs):
        return False
    if not (_per_tensor_int8(graph, mid) and _per_tensor_int8(graph, out)
            and graph.tensors[mid].shape == graph.tensors[out].shape):
        return False
    try:
        entry = TABLE.lookup(conv, consts)
    except Exception:       # no kernel: the plan's own prepare reports it
        return False
    # the int8 conv kernel declares that it applies a table (a sparse or float one does not)
    return bool(getattr(entry.prepare, "applies_table_activation", False))


def _gated_mul(act: Node, nodes: List[Optional[Node]], readers: Dict[str, List[int]], graph: Graph
               ) -> Optional[int]:
    """The index of the Mul computing ``x * act(x)`` from table activation ``act`` (x its input),
    where the gate act(x) has no other reader and x none but the two; None if there is none."""
    x, h = act.inputs[0], act.outputs[0]
    if len(readers.get(h, ())) != 1 or h in graph.outputs or len(readers.get(x, ())) != 2:
        return None
    k = readers[h][0]
    mul = nodes[k]
    if (mul is None or mul.op != "Mul" or sorted(mul.inputs) != sorted([x, h]) or len(mul.outputs) != 1
            or k not in readers[x] or not _per_tensor_int8(graph, h)):
        return None
    return k


def fuse_int8_activations(graph: Graph, nodes: List[Node]) -> Tuple[List[Node], Dict[str, str]]:
    """``nodes`` (a plan's, in order) with every fusable int8 conv -> table activation pair (and
    conv -> act -> ``Mul(x, act(x))`` triple) as one conv node (a copy writing the activation's,
    or the Mul's, output, ``ATTR`` set), and {activation (and Mul) node name: conv node name} of
    those fused. ``graph`` and its nodes are left as they are."""
    if not ENABLED:
        return list(nodes), {}
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs if o}
    readers: Dict[str, List[int]] = {}
    for k, n in enumerate(nodes):
        for i in n.inputs:
            if i:
                readers.setdefault(i, []).append(k)
    consts = _Consts(graph)
    out: List[Optional[Node]] = list(nodes)
    fused: Dict[str, str] = {}
    for k, act in enumerate(nodes):
        if (out[k] is None or act.op not in LUT_OPS or len(act.inputs) < 1 or not act.inputs[0]
                or len(act.outputs) != 1):
            continue
        mid = act.inputs[0]
        j = producer.get(mid)
        if j is None or out[j] is None:
            continue
        m = _gated_mul(act, out, readers, graph)
        last = m if m is not None else k          # the step the fused conv takes the place of
        dst = out[last].outputs[0]
        if (m is None and len(readers.get(mid, ())) != 1) or not _fusable(out[j], mid, dst, graph, consts):
            continue
        conv = out[j]
        attrs = dict(conv.attrs)
        attrs[ATTR] = FusedActivation(act.op, dict(act.attrs), act.name, mid,
                                      *((out[m].name, act.outputs[0], requant_mode(out[m])) if m is not None else ()))
        # the conv's step takes the last fused step's place: everything between them ran on
        # other tensors (the intermediate ones had no other reader), and the last step's own
        # inputs were all ready at the conv's position
        out[j] = out[k] = None
        out[last] = Node(conv.op, list(conv.inputs), [dst], attrs, conv.name)
        fused[act.name] = conv.name
        if m is not None:
            fused[nodes[m].name] = conv.name
    return [n for n in out if n is not None], fused
