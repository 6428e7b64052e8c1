"""Pre-quantized ONNX (QDQ form) -> the int8 IR form that ``quantizer.py`` produces.

A QDQ model (onnxruntime's ``quantize_static(quant_format=QDQ)``, PyTorch QAT exports,
TensorRT's QAT flow; QOperator models arrive here too, expanded by the ONNX frontend)
spells every int8 op as float math between DequantizeLinear and QuantizeLinear:

    x_q -> DequantizeLinear -> Conv(float) -> QuantizeLinear -> y_q,   W_q -> DequantizeLinear -> (W)

``import_qdq`` runs on the optimized graph (after the layout pass, which moves Q/DQ like any
element-wise op, and with the weights' DequantizeLinear left unfolded by ``fold_constants``)
and rewrites it, in one walk in execution order, into int8 ops on int8 tensors carrying
``Tensor.quant`` with the file's own scales and zero points:

* a QuantizeLinear output becomes an int8 activation (uint8 ones: zero point - 128, values
  - 128, exact); a QuantizeLinear of a DequantizeLinear with the same parameters is the
  int8 tensor itself;
* an op whose data inputs are DequantizeLinear outputs and whose output is read only by
  QuantizeLinear nodes of one per-tensor parameter set (possibly through a Relu/Clip, which
  becomes the int8 clamp) runs int8 when it has an int8 kernel: weights are the file's int8
  values (uint8 weights centred on their zero point when that fits int8), per tensor or per
  output channel, biases the file's int32 values (re-rounded only when the file's bias scale
  is not s_x * s_w);
* data movement (Transpose, Reshape, MaxPool, ...) whose input is int8 runs on the int8
  tensor with its parameters (the DequantizeLinear moves after it);
* everything else stays float between the DequantizeLinear and QuantizeLinear nodes of the
  file, each with the reason recorded (no int8 kernel, per-axis or 16-bit activations, a
  requantization multiplier s_x s_w / s_y outside what the kernels' fixed point represents,
  Gemm alpha != 1 ...); leftover DequantizeLinear of constants become float constants.

Arithmetic: the imported Conv / Gemm / MatMul / Mul nodes requantize as onnxruntime does, a
float32 multiplier (s_x * s_w) / s_y and one rounding (``requant="fp32"``, ``requant_mode.py``), so
the convs' outputs match onnxruntime's; the other int8 ops (Add, pools, tables) follow TFLite's
integer kernels, within a step of onnxruntime's float math (docs/quantization.md).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..ir import Graph, Node, claim_name
from ..ir.shape_inference import infer_shapes
from .requant_mode import set_requant
from .quantizer import ANCHOR_OPS, BINARY_OPS, CLAMP_OPS, INT8_OPS, PASS_THROUGH, data_inputs, int8_support

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
#: ops that only move or select values: int8 in, int8 out with the input's parameters
MOVE_OPS = PASS_THROUGH - {"AveragePool", "GlobalAveragePool"}
#: ops that take a weight (input 1) and a bias (input 2) quantized per output channel
_BIAS_INPUT = {"Conv": 2, "FusedConv": 2, "Gemm": 2, "FusedGemm": 2, "FusedMatMul": 2, "ConvTranspose": 2}


class QParams:
    """Per-tensor or per-axis parameters of one Q/DQ node, in the int8 scheme."""

    def __init__(self, scale: np.ndarray, zp: np.ndarray, axis: Optional[int], dtype: str):
        self.scale, self.zp, self.axis, self.dtype = scale, zp, axis, dtype

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    @property
    def shift(self) -> int:
        """What the int8 form subtracts from the stored values (128 for uint8)."""
        return 128 if self.dtype == "uint8" else 0

    def s(self) -> float:
        return float(self.scale.reshape(-1)[0])

    def zp8(self) -> int:
        return int(self.zp.reshape(-1)[0]) - self.shift

    def same(self, other: "QParams") -> bool:
        return (other is not None and self.per_tensor and other.per_tensor and
                np.float32(self.s()) == np.float32(other.s()) and self.zp8() == other.zp8())


def _short(values) -> List[float]:
    """float32 scales as the shortest decimals that read back as the same float32 (every reader
    casts a scale to float32 first): ~11 characters of JSON per scale instead of ~20, which for
    per-channel weights and biases is most of the graph text a QDQ import adds."""
    return [float(repr(np.float32(v)).replace("np.float32(", "").rstrip(")")) for v in np.atleast_1d(values)]


def _qdict(scale, zp, axis=None) -> dict:
    return {"scale": _short(scale), "zero_point": [int(z) for z in np.atleast_1d(zp)], "axis": axis}


def is_prequantized(graph: Graph) -> bool:
    """True for an ONNX graph in QDQ form: Q/DQ nodes whose integer side carries no ``quant``
    (our own int8 graphs and TFLite imports carry it on every int8 tensor)."""
    if graph.metadata.get("source_format") != "onnx":
        return False
    for n in graph.nodes:
        if n.op in QDQ_OPS:
            side = n.outputs[0] if n.op == "QuantizeLinear" else n.inputs[0]
            t = graph.tensors.get(side)
            if t is not None and t.quant is None:
                return True
    return False


def _representable(m: float) -> bool:
    """Whether ``quantize_multiplier`` represents multiplier ``m`` (2^-32 <= m < 2^30)."""
    if not (m > 0 and math.isfinite(m)):
        return False
    e = math.frexp(m)[1]
    return -31 <= e <= 30


class _Importer:
    def __init__(self, g: Graph):
        self.g = g
        self.T = g.tensors
        self.cons = g.consumers()
        self.out: List[Node] = []
        self.rename: Dict[str, str] = {}
        self.int8_of: Dict[str, Tuple[str, QParams]] = {}    # float tensor -> (int8 tensor, params)
        self.act: Dict[str, QParams] = {}                    # int8/uint8 activation -> its params
        self.requant_of: Dict[str, QParams] = {}             # DQ output -> params, int8 made on demand
        self.const_dq: Dict[str, Node] = {}                  # DQ output of a constant -> the DQ node
        self.reasons: Dict[str, str] = {}
        self.int8_nodes: List[str] = []
        self.absorbed: set = set()                             # Relu/Clip fused into an int8 anchor
        self.view = self._const_view()
        self.names = {n.name for n in g.nodes}

    # -- helpers ---------------------------------------------------------------------------
    def _const_view(self) -> Graph:
        """A copy of the graph in which DequantizeLinear outputs of constants are float
        constants, so that ``int8_support`` sees weights as the quantizer would."""
        v = self.g.copy()
        for n in self.g.nodes:
            if n.op == "DequantizeLinear" and self.T[n.inputs[0]].is_const:
                p = self.params(n)
                if p is not None:
                    v.tensors[n.outputs[0]].data = self.dequantized(n.inputs[0], p)
        return v

    def node_name(self, base: str) -> str:
        return claim_name(base, self.names)

    def name(self, x: str) -> str:
        while x in self.rename:
            x = self.rename[x]
        return x

    def const(self, base: str, data: np.ndarray, quant=None) -> str:
        name = self.g.unique_name(base)
        self.g.add_tensor(name, data.dtype.name, data.shape, data, quant)
        return name

    def params(self, n: Node) -> Optional[QParams]:
        """The constant parameters of Q/DQ node ``n`` (None when computed or unusual)."""
        s = self.T[n.inputs[1]].data
        zname = n.inputs[2] if len(n.inputs) > 2 else ""
        z = self.T[zname].data if zname else None
        if s is None or (zname and z is None):
            return None
        side = n.outputs[0] if n.op == "QuantizeLinear" else n.inputs[0]
        dtype = z.dtype.name if z is not None else self.T[side].dtype    # (the side may be int8 by now)
        scale = np.asarray(s, np.float32).reshape(-1)
        zp = np.zeros(scale.size, np.int64) if z is None else np.asarray(z).astype(np.int64).reshape(-1)
        if zp.size == 1 and scale.size > 1:
            zp = np.full(scale.size, int(zp[0]), np.int64)
        if int(n.attrs.get("block_size", 0) or 0):
            return None
        axis = int(n.attrs.get("axis", 1)) if scale.size > 1 else None
        return QParams(scale, zp, axis, dtype)

    def dequantized(self, name: str, p: QParams) -> np.ndarray:
        q = np.asarray(self.T[name].data)
        shape = [1] * q.ndim
        if not p.per_tensor:
            shape[p.axis % q.ndim] = -1
        return ((q.astype(np.int64) - p.zp.reshape(shape)).astype(np.float32)
                * p.scale.reshape(shape)).astype(np.float32)

    def emit(self, node: Node) -> None:
        node.inputs = [self.name(i) if i else i for i in node.inputs]
        self.out.append(node)

    def add_int8(self, base: str, like: str, p: QParams) -> str:
        name = self.g.unique_name(base)
        self.g.add_tensor(name, "int8", self.T[like].shape, None, _qdict(p.s(), p.zp8()))
        self.act[name] = QParams(np.array([p.s()], np.float32), np.array([p.zp8()]), None, "int8")
        return name

    def dq_node(self, t8: str, f: str, p: QParams, base: str) -> None:
        """``f`` = DequantizeLinear(``t8``): kept for float readers (pruned when there are none)."""
        sc = self.const(t8 + "_scale", np.array(np.float32(p.s())))
        zp = self.const(t8 + "_zero_point", np.array(p.zp8(), np.int8))
        self.out.append(Node("DequantizeLinear", [t8, sc, zp], [f], {"axis": 1, "block_size": 0},
                             self.node_name(base + "/dequantize")))

    def int8_input(self, f: str) -> Optional[Tuple[str, QParams]]:
        """The int8 tensor holding DequantizeLinear output ``f`` (made by a QuantizeLinear of ``f``
        when its source is not usable as is, e.g. a uint8 graph input), else None."""
        if f in self.int8_of:
            return self.int8_of[f]
        p = self.requant_of.get(f)
        if p is None:
            return None
        t8 = self.add_int8(f + "_int8", f, p)
        sc = self.const(t8 + "_scale", np.array(np.float32(p.s())))
        zp = self.const(t8 + "_zero_point", np.array(p.zp8(), np.int8))
        self.out.append(Node("QuantizeLinear", [f, sc, zp], [t8], {"axis": 1, "block_size": 0,
                                                                     "output_dtype": 0, "saturate": 1},
                             self.node_name(f + "/quantize")))
        self.int8_of[f] = (t8, p)
        return self.int8_of[f]

    def const_int8(self, f: str, what: str) -> Tuple[Optional[str], Optional[QParams], str]:
        """(int8 constant, params, why not) for DequantizeLinear-of-constant output ``f``."""
        dq = self.const_dq.get(f)
        if dq is None:
            return None, None, f"{what} is not a DequantizeLinear of a constant"
        p = self.params(dq)
        if p is None:
            return None, None, f"{what}: parameters are not constants"
        q = np.asarray(self.T[dq.inputs[0]].data)
        if q.dtype == np.int32:
            return None, p, f"{what} is int32"
        if q.dtype not in (np.int8, np.uint8):
            return None, None, f"{what} is {q.dtype} (int8/uint8 only)"
        shape = [1] * q.ndim
        if not p.per_tensor:
            shape[p.axis % q.ndim] = -1
        centred = q.astype(np.int32) - p.zp.reshape(shape)
        zero = np.zeros(p.scale.size, np.int64)
        if centred.size and (centred.min() < -128 or centred.max() > 127):
            return None, None, f"{what}: values minus zero point do not fit int8"
        axis = None if p.per_tensor else p.axis % q.ndim
        p8 = QParams(p.scale, zero, axis, "int8")
        quant = {"scale": _short(p.scale), "zero_point": [0], "axis": axis}
        if q.dtype == np.int8 and not np.any(p.zp) and self.T[dq.inputs[0]].quant in (None, quant):
            return self._tag_const(dq.inputs[0], p, axis), p8, ""       # the file's array, no copy
        return self.const(dq.inputs[0] + "_int8", centred.astype(np.int8), quant), p8, ""

    def _tag_const(self, name: str, p: QParams, axis) -> str:
        """Give int8 constant ``name`` (zero points 0) its quant: the same array, no copy. One
        zero point stands for all channels (the kernels and exporters broadcast it): 3 bytes
        of graph text per channel fewer."""
        t = self.T[name]
        if t.quant is None:
            t.quant = {"scale": _short(p.scale), "zero_point": [0], "axis": axis}
        return name

    def const_operand(self, f: str) -> Optional[Tuple[str, QParams]]:
        """An int8 per-tensor constant for a DequantizeLinear-of-constant operand (Add, Mul, ...)."""
        dq = self.const_dq.get(f)
        p = self.params(dq) if dq is not None else None
        if p is None or not p.per_tensor or p.dtype not in ("int8", "uint8"):
            return None
        q = np.asarray(self.T[dq.inputs[0]].data).astype(np.int32) - p.shift
        name = self.const(dq.inputs[0] + "_int8", q.astype(np.int8), _qdict(p.s(), p.zp8()))
        return name, QParams(p.scale, p.zp - p.shift, None, "int8")

    # -- the walk ----------------------------------------------------------------------------
    def run(self) -> None:
        for node in self.g.nodes:
            if node.op == "QuantizeLinear":
                self.quantize(node)
            elif node.op == "DequantizeLinear":
                self.dequantize(node)
            else:
                self.op(node)

    def quantize(self, node: Node) -> None:
        p = self.params(node)
        x, t = self.name(node.inputs[0]), node.outputs[0]
        if p is None or not p.per_tensor or p.dtype not in ("int8", "uint8"):
            self.emit(node)
            return
        src = self.int8_of.get(x)
        if src is not None and src[1].same(p) and t not in self.g.outputs:
            self.rename[t] = src[0]                     # Q(DQ(t8)) with t8's parameters: t8 itself
            self.act[src[0]] = p
            return
        if t in self.g.outputs:
            self.emit(node)
            return
        if p.dtype == "uint8":
            zp = self.const(t + "_zero_point", np.array(p.zp8(), np.int8))
            node.inputs = [node.inputs[0], node.inputs[1], zp]
        self.T[t].dtype = "int8"
        self.T[t].quant = _qdict(p.s(), p.zp8())
        self.act[t] = p
        self.emit(node)

    def dequantize(self, node: Node) -> None:
        x, f = self.name(node.inputs[0]), node.outputs[0]
        p = self.params(node)
        if self.T[x].is_const:
            self.const_dq[f] = node
            self.emit(node)
            return
        if p is not None and p.per_tensor and p.dtype in ("int8", "uint8"):
            src = self.act.get(x)
            if src is not None and src.same(p) and self.T[x].dtype == "int8":
                self.int8_of[f] = (x, p)
                self.dq_node(x, f, p, node.name)
                return
            self.requant_of[f] = p
        self.emit(node)

    def output_params(self, y: str) -> Tuple[Optional[QParams], Optional[Node], str]:
        """(params, clamp node) when ``y`` is read only by QuantizeLinear nodes of one per-tensor
        int8/uint8 parameter set, directly or through one Relu/Clip."""
        if y in self.g.outputs:
            return None, None, "the output is a graph output"
        readers = self.cons.get(y, [])
        clamp = None
        if len(readers) == 1 and readers[0].op in CLAMP_OPS and readers[0].outputs[0] not in self.g.outputs:
            clamp = readers[0]
            if any(i and not self.T[i].is_const for i in clamp.inputs[1:]):
                return None, None, "clip bounds are not constants"
            readers = self.cons.get(clamp.outputs[0], [])
        if not readers or any(r.op != "QuantizeLinear" for r in readers):
            return None, None, "the output is not quantized (read by float ops)"
        ps = [self.params(r) for r in readers]
        p = ps[0]
        if p is None or not p.per_tensor:
            return None, None, "output quantization is per axis or not constant"
        if p.dtype not in ("int8", "uint8"):
            return None, None, f"output quantized to {p.dtype} (the int8 kernels take int8/uint8)"
        if not all(p.same(o) for o in ps[1:]):
            return None, None, "the output is quantized with several parameter sets"
        return p, clamp, ""

    def op(self, node: Node) -> None:
        if node.op == "Sum" and len([i for i in node.inputs if i]) == 2:
            node.op = "Add"                            # old exporters' residual Sum: the same op
        x = self.name(node.inputs[0]) if node.inputs else ""
        if x in self.act and node.op in MOVE_OPS and self.T[x].dtype == "int8" and \
                not (self.act[x].shift and any(o in self.g.outputs for o in node.outputs)):
            self.move_int(node, x)                     # QOperator: MaxPool, Flatten ... on the integers
            return
        for k, i in enumerate(node.inputs):
            if i and self.name(i) in self.act and self.act[self.name(i)].shift:
                node.inputs[k] = self.restore_uint8(self.name(i))
        why = self.try_int8(node)
        if why:
            touches = any(i in self.int8_of or i in self.requant_of or i in self.const_dq for i in node.inputs)
            if touches:
                self.reasons[node.name] = why
            self.emit(node)

    def move_int(self, node: Node, x: str) -> None:
        """Data movement applied to an integer activation directly: its output carries the
        input's parameters (a uint8 one: the same shift to int8)."""
        p = self.act[x]
        if node.op == "Pad":
            ins = list(node.inputs)
            cv = ins[2] if len(ins) > 2 else ""
            if cv and p.shift:
                v = np.asarray(self.T[cv].data).astype(np.int32) - p.shift
                ins[2] = self.const(cv + "_int8", v.astype(np.int8), _qdict(p.s(), p.zp8()))
                node.inputs = ins
        for o in node.outputs:
            if o:
                self.T[o].dtype = "int8"
                self.T[o].quant = _qdict(p.s(), p.zp8())
                self.act[o] = p
        self.int8_nodes.append(node.name)
        self.emit(node)

    def restore_uint8(self, t8: str) -> str:
        """The uint8 values of shifted activation ``t8`` for an op that reads integers as they
        are (DequantizeLinear -> QuantizeLinear to the file's uint8 parameters: exact)."""
        p = self.act[t8]
        f = self.g.unique_name(t8 + "_float")
        self.g.add_tensor(f, "float32", self.T[t8].shape)
        self.dq_node(t8, f, p, t8)
        u8 = self.g.unique_name(t8 + "_uint8")
        self.g.add_tensor(u8, "uint8", self.T[t8].shape)
        sc = self.const(u8 + "_scale", np.array(np.float32(p.s())))
        zp = self.const(u8 + "_zero_point", np.array(p.zp8() + 128, np.uint8))
        self.out.append(Node("QuantizeLinear", [f, sc, zp], [u8], {"axis": 1, "block_size": 0, "output_dtype": 0,
                                                                    "saturate": 1}, self.node_name(t8 + "/uint8")))
        return u8

    def try_int8(self, node: Node) -> str:
        """Emit ``node`` as an int8 op and return "", or return why it stays float."""
        op = node.op
        if node.name in self.absorbed:
            return ""
        if op not in INT8_OPS:
            return f"no int8 kernel for {op}"
        dins = data_inputs(node, self.view)
        if op in MOVE_OPS:
            return self.move(node, dins)
        ok, why = int8_support(node, self.view)
        if not ok:
            return why
        p_out, clamp, why = self.output_params(node.outputs[0]) if len(node.outputs) == 1 else \
            (None, None, "several outputs")
        if p_out is None:
            return why
        ins = list(node.inputs)
        p_in: List[QParams] = []
        for i in dins:
            f = node.inputs[i]
            got = self.int8_input(self.name(f)) if not self.view.tensors[f].is_const else self.const_operand(f)
            if got is None:
                return f"input {f!r} is not a per-tensor int8/uint8 DequantizeLinear output"
            ins[i] = got[0]
            p_in.append(got[1])
        attrs = dict(node.attrs)
        if op in ANCHOR_OPS:
            why = self.weights(node, ins, attrs, p_in[0], p_out)
            if why:
                return why
        elif op in BINARY_OPS and op != "Mul":
            twice = 2 * max(a.s() for a in p_in)             # TFLite ADD: inputs << 20, rescaled to 2 max(s)
            ms = [a.s() / twice for a in p_in] + [twice / (2 ** 20 * p_out.s())]
            if not all(_representable(m) for m in ms):
                return (f"requantization multipliers {[f'{m:.3g}' for m in ms]} are outside what the int8 "
                        "kernels' fixed point represents")
        elif op == "Mul" and not _representable(p_in[0].s() * p_in[-1].s() / p_out.s()):
            return (f"requantization multiplier {p_in[0].s() * p_in[-1].s() / p_out.s():.3g} is outside what "
                    "the int8 kernels' fixed point represents")
        elif op == "Pad":
            why = self.pad_value(node, ins, p_in[0])
            if why:
                return why
        if op == "Softmax" and (np.float32(p_out.s()) != np.float32(1 / 256) or p_out.zp8() != -128):
            return "int8 Softmax writes (1/256, -128); the file quantizes its output otherwise"
        y = node.outputs[0]
        y8 = self.add_int8(y + "_int8", y, p_out)
        self.int8_nodes.append(node.name)
        if clamp is not None and op in ("Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul") \
                and not str(attrs.get("activation", "") or ""):
            op, attrs = self.fuse_clamp(node, clamp, ins, attrs)
            self.absorbed.add(clamp.name)
            self.int8_of[clamp.outputs[0]] = (y8, p_out)
            self.int8_nodes.append(clamp.name)
        elif clamp is not None and self.clamp_is_noop(clamp, p_out):
            self.absorbed.add(clamp.name)             # e.g. Add -> Relu -> Q with zero point -128
            self.int8_of[clamp.outputs[0]] = (y8, p_out)
        self.out.append(Node(op, ins, [y8], attrs, node.name))
        self.int8_of[y] = (y8, p_out)
        self.dq_node(y8, y, p_out, node.name)
        return ""

    def clamp_is_noop(self, clamp: Node, p: QParams) -> bool:
        """Whether Relu/Clip ``clamp`` changes nothing on int8 values at parameters ``p`` (its bounds
        at or beyond the ends of the int8 range: onnxruntime picks such output ranges on purpose)."""
        lo_real, hi_real = p.s() * (-128 - p.zp8()), p.s() * (127 - p.zp8())
        if clamp.op == "Relu":
            return lo_real >= 0.0
        names = list(clamp.inputs[1:3]) + ["", ""]
        lo, hi = (float(np.asarray(self.T[n].data).reshape(-1)[0]) if n else None for n in names[:2])
        return (lo is None or lo <= lo_real) and (hi is None or hi >= hi_real)

    def fuse_clamp(self, node: Node, clamp: Node, ins: List[str], attrs: dict):
        """The anchor with the Relu/Clip as its int8 output clamp (FusedConv/FusedGemm/FusedMatMul)."""
        op = {"Conv": "FusedConv", "Gemm": "FusedGemm", "MatMul": "FusedMatMul"}.get(node.op, node.op)
        if clamp.op == "Relu":
            act, params = "Relu", []
        else:
            lo = self.T[clamp.inputs[1]].data if len(clamp.inputs) > 1 and clamp.inputs[1] else None
            hi = self.T[clamp.inputs[2]].data if len(clamp.inputs) > 2 and clamp.inputs[2] else None
            act = "Clip"
            params = [float(-np.inf if lo is None else np.asarray(lo).reshape(-1)[0]),
                      float(np.inf if hi is None else np.asarray(hi).reshape(-1)[0])]
        if node.op == "MatMul":
            ins.append("")                             # FusedMatMul: A, B, bias
        elif node.op in ("Conv", "Gemm"):
            while len(ins) < 3:
                ins.append("")
        attrs = dict(attrs, activation=act, activation_params=params)
        return op, attrs

    def move(self, node: Node, dins: List[int]) -> str:
        """Data movement on an int8 input: the same op on the int8 tensor, its parameters kept."""
        f = node.inputs[0]
        got = self.int8_input(self.name(f)) if f and not self.T[f].is_const else None
        if got is None:
            return "input is not an int8 DequantizeLinear output"
        ok, why = int8_support(node, self.view)
        if not ok:
            return why
        t8, p = got
        ins = list(node.inputs)
        ins[0] = t8
        if node.op == "Pad":
            why = self.pad_value(node, ins, p)
            if why:
                return why
        outs = []
        for o in node.outputs:
            if not o:
                outs.append(o)
                continue
            o8 = self.add_int8(o + "_int8", o, p)
            outs.append(o8)
            self.int8_of[o] = (o8, p)
        self.out.append(Node(node.op, ins, outs, dict(node.attrs), node.name))
        for o, o8 in zip(node.outputs, outs):
            if o:
                self.dq_node(o8, o, p, node.name)
        self.int8_nodes.append(node.name)
        return ""

    def pad_value(self, node: Node, ins: List[str], p: QParams) -> str:
        cv = node.inputs[2] if len(node.inputs) > 2 else ""
        v = 0.0
        if cv:
            data = self.view.tensors[cv].data
            if data is None:
                return "pad value is not a constant"
            v = float(np.asarray(data, np.float64).reshape(-1)[0])
        qv = int(np.clip(round(v / p.s()) + p.zp8(), -128, 127))
        while len(ins) < 3:
            ins.append("")
        ins[2] = self.const(node.name + "_pad_value", np.array(qv, np.int8), _qdict(p.s(), p.zp8()))
        return ""

    def weights(self, node: Node, ins: List[str], attrs: dict, p_x: QParams, p_y: QParams) -> str:
        """The file's int8 weights and int32 bias into ``ins``; "" or why not."""
        op = node.op
        wname = node.inputs[1]
        if not self.view.tensors[wname].is_const:              # activation x activation MatMul
            got = self.int8_input(self.name(wname))
            if got is None:
                return f"B {wname!r} is not an int8 DequantizeLinear output"
            ins[1] = got[0]
            s_w = np.array([got[1].s()], np.float64)
            n_out = None
        else:
            w8, p_w, why = self.const_int8(wname, "weights")
            if w8 is None:
                return why
            wt = self.T[w8]
            if op in ("Conv", "FusedConv"):
                axis = 0
            elif op == "ConvTranspose":
                axis = 1
            elif op in ("Gemm", "FusedGemm"):
                if float(attrs.get("alpha", 1.0)) != 1.0 or float(attrs.get("beta", 1.0)) != 1.0:
                    return "Gemm alpha/beta != 1 (the int8 Gemm takes them folded into the weights)"
                if attrs.get("transA", 0):
                    return "Gemm transA"
                axis = 0 if attrs.get("transB", 0) else 1
            else:
                axis = wt.data.ndim - 1
            if not p_w.per_tensor and p_w.axis != axis:
                return f"weight scales along axis {p_w.axis}, the output channels are axis {axis}"
            n_out = wt.data.shape[axis]
            ins[1] = w8
            s_w = np.broadcast_to(p_w.scale.astype(np.float64), (n_out,))
        ms = float(np.float32(p_x.s())) * s_w / float(np.float32(p_y.s()))
        bad = [m for m in ms if not _representable(float(m))]
        if bad:
            return (f"requantization multiplier s_x*s_w/s_y = {bad[0]:.3g} is outside what the int8 kernels' "
                    "fixed point represents (2^-32 .. 2^30)")
        bi = _BIAS_INPUT.get(op)
        if bi is not None and len(node.inputs) > bi and node.inputs[bi]:
            why = self.bias(node.inputs[bi], ins, bi, p_x, s_w, float(np.max(ms)))
            if why:
                return why
        return ""

    def bias(self, bname: str, ins: List[str], bi: int, p_x: QParams, s_w: np.ndarray, m_max: float) -> str:
        """The bias as int32 at s_x * s_w: the file's values when its bias scale is that (to a
        relative 1e-5, as onnxruntime's quantizer writes it); else re-rounded, when that moves an
        output by at most 1/100 of a step (half a bias step times the multiplier s_x s_w / s_y).
        It carries no ``quant``: that scale is implied (the kernels never read it; the exporters
        compute it, ``export_onnx.implied_bias_quant``), which saves a JSON scale per channel:
        ~15 bytes of graph text each, what keeps the artifact under its QDQ source."""
        want = (np.float32(p_x.s()) * s_w.astype(np.float32)).astype(np.float32)
        dq = self.const_dq.get(bname)
        if dq is not None and self.T[dq.inputs[0]].data.dtype == np.int32:
            p = self.params(dq)
            if p is None or np.any(p.zp):
                return "bias parameters are not constants with zero point 0"
            q = np.asarray(self.T[dq.inputs[0]].data).reshape(-1)
            have = np.broadcast_to(p.scale, q.shape)
            # onnxruntime's fused QLinearConv/QGemm take the int32 bias as it is at s_x * s_w; its
            # quantizer writes the bias scale computed another way (float64), a few ulps apart
            if q.size == want.size and np.allclose(have, want, rtol=1e-5, atol=0):
                ins[bi] = dq.inputs[0]                 # no quant: its scale is s_x * s_w by definition
                return ""
            real = q.astype(np.float64) * have.astype(np.float64)
        else:
            data = self.view.tensors[bname].data
            if data is None:
                return "bias is not a constant"
            real = np.asarray(data, np.float64).reshape(-1)
        if 0.5 * m_max > 0.01:
            return (f"bias scale differs from s_x*s_w; re-rounding the bias would move outputs by up to "
                    f"{0.5 * m_max:.3g} steps")
        real = np.broadcast_to(real, want.shape)
        v = real / want.astype(np.float64)
        v = np.sign(v) * np.floor(np.abs(v) + 0.5)
        bq = np.clip(v, -(1 << 31), (1 << 31) - 1).astype(np.int32)
        ins[bi] = self.const(bname + "_int32", bq)
        return ""

    # -- finishing ----------------------------------------------------------------------------
    def finish(self) -> Graph:
        g = self.g
        g.nodes = self.out
        g.prune()
        # DequantizeLinear of constants still read by float ops: float32 constants (as fold_constants)
        keep = []
        for n in g.nodes:
            if n.op == "DequantizeLinear" and g.tensors[n.inputs[0]].is_const and n.outputs[0] not in g.outputs:
                p = self.params(n)
                if p is not None:
                    t = g.tensors[n.outputs[0]]
                    t.data = self.dequantized(n.inputs[0], p)
                    t.dtype, t.shape = "float32", t.data.shape
                    continue
            keep.append(n)
        g.nodes = keep
        g.prune()
        infer_shapes(g)
        g.validate()
        return g


def import_qdq(graph: Graph) -> Tuple[Graph, dict]:
    """The int8 IR form of QDQ graph ``graph`` (optimized; not changed). Returns (graph, report):
    ``int8_nodes``, ``float_nodes`` {node: why it stays float}, node and Q/DQ counts."""
    g = graph.copy()
    infer_shapes(g)
    imp = _Importer(g)
    imp.run()
    q = imp.finish()
    n_fp32 = set_requant(q, "fp32")
    n_qdq = sum(n.op in QDQ_OPS for n in q.nodes)
    float_nodes = {k: v for k, v in imp.reasons.items() if any(n.name == k for n in q.nodes)}
    report = {"source": "pre-quantized ONNX (QDQ / QOperator): the file's scales and zero points",
              "int8_nodes": len(imp.int8_nodes), "float_nodes": float_nodes,
              "qdq_nodes_in": sum(n.op in QDQ_OPS for n in graph.nodes), "qdq_nodes_out": n_qdq,
              "nodes": len(q.nodes), "requant_fp32_nodes": n_fp32,
              "weight_bytes": int(sum(t.data.nbytes for t in q.tensors.values() if t.is_const))}
    q.metadata["quantization"] = {"scheme": "int8 (TFLite) with the source's own parameters (QDQ import)",
                                  "float_nodes": sorted(float_nodes), "requant": "fp32",
                                  "requant_fp32_nodes": n_fp32}
    return q, report


def format_import_summary(report: dict) -> str:
    """The CLI's lines about a pre-quantized model's import (``import_qdq``'s report)."""
    lines = [f"  pre-quantized model: {report['int8_nodes']} int8 node(s) with the file's own scales; "
             f"QuantizeLinear/DequantizeLinear {report['qdq_nodes_in']} -> {report['qdq_nodes_out']}; "
             f"weights {report['weight_bytes']:,} B"]
    for name, why in report.get("float_nodes", {}).items():
        lines.append(f"    float32: {name}: {why}")
    return "\n".join(lines)
