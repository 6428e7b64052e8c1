"""Prepare-time fusion of an int8 graph's input quantization into its first conv (the stem).

An int8 graph starts ``QuantizeLinear`` (float32 -> int8, per tensor), then, for an NCHW model
run channels-last, a ``Transpose`` (0, 2, 3, 1) of the int8 tensor, then the first conv: two
steps and two int8 copies of the image before any arithmetic (MobileNetV3 224: 24 + 9 us of a
~0.9 ms plan, 150 KB + 150 KB of arena). Where that conv runs on the native stem kernel
(few input channels, ``native/src/int8_stem.c``), the CPU plan gives the conv the float tensor
instead: the kernel quantizes each input row as QuantizeLinear does (same rounding, bit for
bit: ``qdq.c``) while it fills its padded line buffers, reading NCHW planes or NHWC rows, and
neither int8 tensor takes arena bytes.

The decision belongs to the CPU backend and is made when a plan is prepared (as
``fuse_int8_activation.py``): the saved graph, its exports and the other backends keep the
three nodes. ``ENABLED = False`` prepares plans unfused (the tests compare the two plans bit
for bit). Should the kernel refuse the conv at prepare after all (a bias past the int32
bound), the conv quantizes and transposes into its own workspace first (``prologue``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ...ir import Graph, Node
from ...ops.conv import conv_geometry
from ...ops.shapes import channels_last

#: fuse when plans are prepared (False: the quantize and the transpose stay steps of their own)
ENABLED = True
#: the attribute of a conv node of the plan that reads a float input (its ``QuantizedInput``)
ATTR = "_quantized_input"
#: the first convs this applies to (kernels/int8_conv.py)
CONV_OPS = ("Conv", "FusedConv")
#: the stem kernel's input channels at most (src/int8_stem.c STEM_MAX_C)
MAX_CHANNELS = 4
NCHW_TO_NHWC = [0, 2, 3, 1]


@dataclass(frozen=True)
class QuantizedInput:
    """The float input a conv node of the plan reads (``node.inputs[0]``) instead of ``via``,
    the int8 NHWC tensor of the graph (its shape and quantization); ``nchw``: the float tensor
    is NCHW (a Transpose folded in); ``scale`` / ``zero_point``: the QuantizeLinear's;
    ``nodes``: the names of the nodes folded in."""
    via: str
    nchw: bool
    scale: float
    zero_point: int
    nodes: Tuple[str, ...]


def quantized_input(node: Node) -> Optional[QuantizedInput]:
    """The float input fused into conv ``node`` of a plan, or None."""
    return node.attrs.get(ATTR)


def _const(graph: Graph, name: str) -> Optional[np.ndarray]:
    t = graph.tensors.get(name) if name else None
    return t.data if t is not None and t.is_const else None


def _quantize_params(q: Node, graph: Graph) -> Optional[Tuple[float, int]]:
    """(scale, zero point) of a per-tensor float32 -> int8 QuantizeLinear, else None."""
    if len(q.inputs) < 3 or len(q.outputs) != 1:
        return None
    x, y = graph.tensors.get(q.inputs[0]), graph.tensors.get(q.outputs[0])
    scale, zp = _const(graph, q.inputs[1]), _const(graph, q.inputs[2])
    if x is None or y is None or x.dtype != "float32" or y.dtype != "int8" or scale is None or zp is None:
        return None
    if np.asarray(scale).size != 1 or np.asarray(zp).size != 1 or np.asarray(zp).dtype != np.int8:
        return None
    s = np.float32(np.asarray(scale).reshape(-1)[0])
    if not np.isfinite(s) or s <= 0 or not np.isfinite(np.float32(1) / s):
        return None
    return float(s), int(np.asarray(zp).reshape(-1)[0])


def _stem_conv(conv: Node, via: str, graph: Graph, zp: int) -> bool:
    """Whether ``conv`` reads ``via`` (int8 NHWC, per tensor with zero point ``zp``) as the
    native stem kernel would run it: 2-D, channels-last, group 1, no residual."""
    if conv.op not in CONV_OPS or not conv.inputs or conv.inputs[0] != via or not channels_last(conv):
        return False
    if conv.op == "FusedConv" and len(conv.inputs) > 3 and conv.inputs[3]:
        return False
    x, w = graph.tensors[via], graph.tensors.get(conv.inputs[1])
    y = graph.tensors.get(conv.outputs[0]) if conv.outputs and conv.outputs[0] else None
    if w is None or not w.is_const or w.dtype != "int8" or y is None or y.dtype != "int8" or not x.is_static:
        return False
    quant = x.quant or {}
    if np.asarray(quant.get("scale", [])).size != 1 or [int(v) for v in np.asarray(quant.get("zero_point", [0])).reshape(-1)] != [zp]:
        return False
    if len(x.shape) != 4 or len(w.shape) != 4 or int(x.shape[3]) > MAX_CHANNELS or not y.is_static:
        return False
    try:
        geo = conv_geometry(conv, x.shape, w.shape, y.shape, True)
    except Exception:       # the plan's own prepare reports a bad conv
        return False
    if geo.group != 1:
        return False
    from .native import kernels as native_kernels      # (imports the kernels, which import this)
    return native_kernels.int8_stem_takes((geo.n, geo.c, *geo.in_sp, geo.m, *geo.out_sp, *geo.kernel, *geo.strides,
                                           *geo.dilations, geo.pads[0], geo.pads[1]))


def fuse_int8_inputs(graph: Graph, nodes: List[Node]) -> Tuple[List[Node], Dict[str, str]]:
    """``nodes`` (a plan's, in order) with every float32 -> int8 QuantizeLinear (and its NCHW ->
    NHWC Transpose) that only feeds a stem conv folded into that conv (a copy reading the float
    tensor, ``ATTR`` set), and {folded node name: conv node name}. ``graph`` and its nodes are
    left as they are."""
    if not ENABLED:
        return list(nodes), {}
    readers: Dict[str, List[int]] = {}
    for k, n in enumerate(nodes):
        for i in n.inputs:
            if i:
                readers.setdefault(i, []).append(k)
    out: List[Optional[Node]] = list(nodes)
    fused: Dict[str, str] = {}

    def only_reader(name: str) -> Optional[int]:
        r = readers.get(name, [])
        return r[0] if len(r) == 1 and name not in graph.outputs else None

    for k, q in enumerate(nodes):
        if q.op != "QuantizeLinear" or out[k] is None:
            continue
        params = _quantize_params(q, graph)
        j = only_reader(q.outputs[0]) if params else None
        if j is None:
            continue
        folded, via, nchw = [k], q.outputs[0], False
        t = nodes[j]
        if t.op == "Transpose":
            if [int(p) for p in t.attrs.get("perm", [])] != NCHW_TO_NHWC or len(t.outputs) != 1:
                continue
            folded.append(j)
            via, nchw = t.outputs[0], True
            j = only_reader(via)
            if j is None:
                continue
        conv = out[j]
        if conv is None or not _stem_conv(conv, via, graph, params[1]):
            continue
        attrs = dict(conv.attrs)
        attrs[ATTR] = QuantizedInput(via, nchw, params[0], params[1], tuple(nodes[i].name for i in folded))
        out[j] = Node(conv.op, [q.inputs[0]] + list(conv.inputs[1:]), list(conv.outputs), attrs, conv.name)
        for i in folded:
            out[i] = None
            fused[nodes[i].name] = conv.name
    return [n for n in out if n is not None], fused


def prologue(node: Node, ctx) -> Tuple[np.ndarray, Callable[[], None]]:
    """(x, run): the int8 NHWC input of conv ``node`` in a workspace and the step filling it
    from the float input (QuantizeLinear's rounding, then the transpose), for a conv that the
    stem kernel did not take at prepare after all."""
    from .native import ops as native_ops
    fin = quantized_input(node)
    xf = ctx.value(node.inputs[0])
    x = ctx.workspace(tuple(ctx.tensor(fin.via).shape), np.int8)
    q8 = ctx.workspace(xf.shape, np.int8) if fin.nchw else x
    quantize = native_ops.qdq_step(xf, q8, fin.scale, fin.zero_point, ctx.threads)   # the QuantizeLinear kernel's
    if quantize is None:
        scale, zp, tmp = np.float32(fin.scale), np.float32(fin.zero_point), ctx.workspace(xf.shape, np.float32)

        def quantize():
            np.divide(xf, scale, out=tmp)
            np.rint(tmp, out=tmp)
            np.add(tmp, zp, out=tmp)
            np.clip(tmp, -128, 127, out=tmp)
            np.copyto(q8, tmp, casting="unsafe")
    src = q8.transpose(0, 2, 3, 1) if fin.nchw else None

    def run():
        quantize()
        if src is not None:
            np.copyto(x, src)
    return x, run
