"""Post-training int8 quantization of an optimized IR graph: calibrate, plan, rewrite.

The result is an IR graph in the TFLite int8 form (see docs/quantization.md):

* ops keep their names and attributes (Conv / FusedConv, Gemm, MatMul, Add, Concat,
  MaxPool, ...) and compute on ``int8`` tensors whose ``Tensor.quant`` holds
  ``{"scale": [s], "zero_point": [zp], "axis": None}`` (asymmetric, per tensor);
* weights become int8 constants, symmetric per output channel
  (``{"scale": [s_0, ...], "zero_point": [0, ...], "axis": a}``), biases int32 constants at
  scale s_in * s_w[c];
* ``QuantizeLinear`` / ``DequantizeLinear`` nodes (ONNX form: x, scale, zero_point) convert
  at every fp32 <-> int8 boundary: graph inputs and outputs, and around ops that stay fp32
  (no int8 kernel, ``keep_float``, or kept by the accuracy budget).

Activations other than clamps (Relu, Clip) fused into a Conv/Gemm/MatMul epilogue are split
back into their own op first (an int8 graph runs them as lookup tables); the float graph
used as the reference is that split graph (numerically identical to the fused one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..errors import EdgeInferError
from ..ir import Graph, Node, claim_name
from .observers import (Observer, activation_qparams, make_observer, quantize_weights, weight_scales)

from ..ops.int8 import (ANCHOR_OPS, BINARY_OPS, CLAMP_ACTIVATIONS, CLAMP_OPS, CONCAT_OPS,  # noqa: E402,F401
                        DATA_MOVEMENT, FIXED_OUTPUT, INT8_OPS, LUT_OPS, OTHER_INT8_OPS, PASS_THROUGH,
                        SAME_PARAM_OPS, _opt, data_inputs, int8_ok)
from ..ops.gemm import gemm_n  # noqa: E402
#: fused activation -> (op, attrs from params) when split into its own node
SPLIT_ACTIVATIONS = {
    "Sigmoid": ("Sigmoid", lambda p: {}), "Tanh": ("Tanh", lambda p: {}),
    "HardSigmoid": ("HardSigmoid", lambda p: {"alpha": float(p[0]), "beta": float(p[1])}),
    "LeakyRelu": ("LeakyRelu", lambda p: {"alpha": float(p[0])}),
    "HardSwish": ("HardSwish", lambda p: {}), "SiLU": ("SiLU", lambda p: {}),
    "Gelu": ("Gelu", lambda p: {"approximate": "none"}),
    "GeluTanh": ("Gelu", lambda p: {"approximate": "tanh"}),
}


class QuantizationError(EdgeInferError):
    """The graph or the options cannot be quantized as asked."""


# -- preparing the float graph ------------------------------------------------------------------

def split_activations(graph: Graph) -> Graph:
    """A copy of ``graph`` with non-clamp activations of fused epilogues as their own nodes."""
    g = graph.copy()
    nodes = []
    for n in g.nodes:
        nodes.append(n)
        act = str(n.attrs.get("activation", "") or "")
        if n.op not in ("FusedConv", "FusedGemm", "FusedMatMul") or act in CLAMP_ACTIVATIONS:
            continue
        if act not in SPLIT_ACTIVATIONS:
            continue
        op, mk = SPLIT_ACTIVATIONS[act]
        params = n.attrs.get("activation_params", []) or []
        out = n.outputs[0]
        mid = g.unique_name(out + "_preact")
        t = g.tensors[out]
        g.add_tensor(mid, t.dtype, t.shape)
        n.outputs[0] = mid
        n.attrs["activation"] = ""
        n.attrs["activation_params"] = []
        nodes.append(Node(op, [mid], [out], mk(params), g.unique_node_name(f"{n.name}/{op}")))
    g.nodes = nodes
    g.toposort()
    return g


def float_tensors(g: Graph) -> List[str]:
    """Non-constant float32 tensors: graph inputs and node outputs, in execution order."""
    names = [i for i in g.inputs if g.tensors[i].dtype == "float32"]
    for n in g.nodes:
        for o in n.outputs:
            if o and not g.tensors[o].is_const and g.tensors[o].dtype == "float32":
                names.append(o)
    return names


# -- running graphs on batches --------------------------------------------------------------------

def batches(graph: Graph, feeds: List[Dict[str, np.ndarray]], batch_size: int) -> List[Dict[str, np.ndarray]]:
    """Group per-sample feeds into batches when every input's batch dim is symbolic."""
    if not feeds:
        return []
    symbolic = all(graph.tensors[i].shape is not None and len(graph.tensors[i].shape) > 0
                   and not isinstance(graph.tensors[i].shape[0], int) for i in graph.inputs)
    if not symbolic or batch_size <= 1:
        return list(feeds)
    out = []
    for k in range(0, len(feeds), batch_size):
        chunk = feeds[k:k + batch_size]
        out.append({name: np.concatenate([f[name] for f in chunk], axis=0) for name in chunk[0]})
    return out


def run_collect(graph: Graph, feeds: List[Dict[str, np.ndarray]], names: Sequence[str],
                on_batch: Optional[Callable[[Dict[str, np.ndarray]], None]] = None,
                keep: bool = True, batch_size: int = 32, progress=None) -> Dict[str, np.ndarray]:
    """Run ``graph`` with ``names`` as outputs on ``feeds`` (batched); call ``on_batch`` per batch
    and (``keep``) return every name's values concatenated over samples."""
    from ..runtime import Runtime
    g = graph.copy()
    g.outputs = list(dict.fromkeys(list(names)))
    rt = Runtime(g, backend="cpu")
    got: Dict[str, List[np.ndarray]] = {n: [] for n in g.outputs}
    bl = batches(graph, feeds, batch_size)
    for b in (progress(bl) if progress else bl):
        out = rt.run(b)
        if on_batch is not None:
            on_batch(out)
        if keep:
            for k, v in out.items():
                got[k].append(v)
    return {k: np.concatenate(v, axis=0) for k, v in got.items()} if keep else {}


def _batch_size(graph: Graph, budget_bytes: int = 256 << 20) -> int:
    """Samples per calibration batch so that all kept activations fit ``budget_bytes``."""
    per = 0
    for t in graph.tensors.values():
        if t.is_const or t.shape is None:
            continue
        per += int(np.prod([d if isinstance(d, int) else 1 for d in t.shape])) * 4
    return int(max(1, min(32, budget_bytes // max(per, 1))))


def calibrate(g: Graph, feeds: List[Dict[str, np.ndarray]], method: str = "minmax",
              percentile: float = 99.99, show_progress: bool = False) -> Dict[str, Tuple[float, float]]:
    """Observe every float activation of ``g`` over ``feeds``; returns {tensor: (lo, hi)}."""
    from .calibration import progress
    names = float_tensors(g)
    obs: Dict[str, Observer] = {n: make_observer(method, percentile=percentile) for n in names}

    def update(out):
        for k, v in out.items():
            obs[k].update(v)
    bs = _batch_size(g)
    run_collect(g, feeds, names, on_batch=update, keep=False, batch_size=bs,
                progress=(lambda it: progress(it, None, f"calibrating ({method})", show_progress)))
    return {k: o.range() for k, o in obs.items()}


# -- planning -----------------------------------------------------------------------------------------

def int8_support(node: Node, g: Graph) -> Tuple[bool, str]:
    """Whether an int8 kernel can run ``node`` (and why not): ``ops.int8.int8_ok``."""
    why = int8_ok(node, g)
    return why is None, why or ""



@dataclass
class Plan:
    """Which nodes run int8, why the others do not, and every int8 activation's parameters."""
    int8: List[str] = field(default_factory=list)
    float_reasons: Dict[str, str] = field(default_factory=dict)
    params: Dict[str, Tuple[float, int]] = field(default_factory=dict)
    int8_produced: Set[str] = field(default_factory=set)


def make_plan(g: Graph, ranges: Dict[str, Tuple[float, float]], keep_float: Iterable[str] = (),
              only: Optional[Set[str]] = None, forced: Optional[Dict[str, str]] = None) -> Plan:
    """Decide per node (in order) int8 or float32, and the parameters of each int8 tensor.

    Conv/Gemm/MatMul run int8 whenever they can; data-movement, clamp and table ops run int8
    when their input is int8 already (else there is nothing to gain); Add/Mul/Concat when an
    input is. ``only``: int8 for those nodes alone (sensitivity probes). ``forced``: {node:
    reason} kept float32 by the quantizer itself (heterogeneous output concats)."""
    forced = dict(forced or {})
    keep = set(keep_float) | set(forced)
    plan = Plan()
    cons = g.consumers()

    def feeds_int8_anchors(node: Node) -> bool:
        """A data-movement op whose every reader is a Conv/Gemm/MatMul that will run int8: then
        quantizing before it moves 4x fewer bytes (e.g. the input Transpose of an NHWC graph)."""
        if node.op not in DATA_MOVEMENT or only is not None:
            return False
        readers = [c for o in node.outputs if o for c in cons.get(o, [])]
        return bool(readers) and not any(o in g.outputs for o in node.outputs) and all(
            c.op in ANCHOR_OPS and c.name not in keep and int8_support(c, g)[0]
            and c.inputs and c.inputs[0] in node.outputs for c in readers)

    for node in g.nodes:
        ok, why = int8_support(node, g)
        if node.name in keep:
            ok, why = False, forced.get(node.name, "keep_float")
        elif only is not None and node.name not in only:
            ok, why = False, "sensitivity probe (only one layer int8)"
        if ok and node.op not in ANCHOR_OPS:
            din = [node.inputs[i] for i in data_inputs(node, g)]
            int8_in = [d for d in din if d in plan.int8_produced]
            if node.op in BINARY_OPS or node.op in CONCAT_OPS:
                if not int8_in and only is None:
                    ok, why = False, "inputs are float32 (nothing to gain)"
            elif din[0] not in plan.int8_produced and (only is None or node.op in PASS_THROUGH) \
                    and not feeds_int8_anchors(node):
                ok, why = False, "input is float32 (nothing to gain)"
        if not ok:
            plan.float_reasons[node.name] = why
            continue
        plan.int8.append(node.name)
        # parameters of the data inputs that arrive as float32 (a QuantizeLinear will be inserted)
        for i in data_inputs(node, g):
            name = node.inputs[i]
            if name not in plan.params and not g.tensors[name].is_const:
                plan.params[name] = activation_qparams(*ranges.get(name, (0.0, 0.0)))
        outs = [o for o in node.outputs if o]
        for o in outs:
            plan.int8_produced.add(o)
            if node.op in PASS_THROUGH:
                plan.params[o] = plan.params[node.inputs[0]]
            elif node.op in FIXED_OUTPUT:
                plan.params[o] = (float(np.float32(FIXED_OUTPUT[node.op][0])), FIXED_OUTPUT[node.op][1])
            else:
                plan.params[o] = activation_qparams(*ranges.get(o, (0.0, 0.0)))
    return plan


# -- rewriting --------------------------------------------------------------------------------------

def _qdict(scale, zp, axis=None) -> dict:
    return {"scale": [float(np.float32(s)) for s in np.atleast_1d(scale)],
            "zero_point": [int(z) for z in np.atleast_1d(zp)], "axis": axis}


def _quantize_const_per_tensor(arr: np.ndarray) -> Tuple[np.ndarray, float, int]:
    a = np.asarray(arr, np.float64)
    s, zp = activation_qparams(float(a.min()) if a.size else 0.0, float(a.max()) if a.size else 0.0)
    q = np.clip(np.rint(a / s) + zp, -128, 127).astype(np.int8)
    return q, s, zp


class _Builder:
    def __init__(self, g: Graph, plan: Plan):
        self.g, self.plan = g, plan
        self.q = Graph(g.name)
        self.q.metadata = dict(g.metadata)
        self.q.inputs = list(g.inputs)
        self.q.outputs = list(g.outputs)
        self.int8_name: Dict[str, str] = {}      # float tensor -> its int8 tensor in q
        self.float_name: Dict[str, str] = {}     # float tensor -> its float tensor in q
        self.nodes: List[Node] = []
        self.qdq = 0

    def unique(self, base: str) -> str:
        name = base
        k = 1
        while name in self.q.tensors or name in self.g.tensors:
            name = f"{base}_{k}"
            k += 1
        return name

    def add_const(self, base: str, data: np.ndarray, quant=None) -> str:
        name = self.unique(base)
        self.q.add_tensor(name, data.dtype.name, data.shape, data, quant)
        return name

    def copy_tensor(self, name: str) -> str:
        if name and name not in self.q.tensors:
            t = self.g.tensors[name]
            self.q.add_tensor(name, t.dtype, t.shape, t.data, t.quant)
        return name

    def int8_of(self, name: str) -> str:
        """The int8 version of float tensor ``name`` (a QuantizeLinear when it is float here)."""
        if name in self.int8_name:
            return self.int8_name[name]
        s, zp = self.plan.params[name]
        src = self.float_of(name)
        qname = self.unique(name + "_int8")
        t = self.g.tensors[name]
        self.q.add_tensor(qname, "int8", t.shape, None, _qdict(s, zp))
        sc = self.add_const(qname + "_scale", np.array(np.float32(s)))
        z = self.add_const(qname + "_zero_point", np.array(zp, np.int8))
        self.nodes.append(Node("QuantizeLinear", [src, sc, z], [qname],
                               {"axis": 1, "block_size": 0, "output_dtype": 0, "saturate": 1},
                               self.unique_node(f"{name}/quantize")))
        self.qdq += 1
        self.int8_name[name] = qname
        return qname

    def float_of(self, name: str) -> str:
        """The float version of ``name`` (a DequantizeLinear when it is int8 here)."""
        if name in self.float_name:
            return self.float_name[name]
        if name in self.int8_name:
            qname = self.int8_name[name]
            s, zp = self.plan.params[name]
            fname = name if name in self.g.outputs else self.unique(name + "_float")
            t = self.g.tensors[name]
            self.q.add_tensor(fname, "float32", t.shape)
            sc = self.add_const(qname + "_scale", np.array(np.float32(s)))
            z = self.add_const(qname + "_zero_point", np.array(zp, np.int8))
            self.nodes.append(Node("DequantizeLinear", [qname, sc, z], [fname], {"axis": 1, "block_size": 0},
                                   self.unique_node(f"{name}/dequantize")))
            self.qdq += 1
            self.float_name[name] = fname
            return fname
        self.copy_tensor(name)
        self.float_name[name] = name
        return name

    def unique_node(self, base: str) -> str:
        names = getattr(self, "_node_names", None)
        if names is None:
            names = self._node_names = {n.name for n in self.g.nodes}
        return claim_name(base, names)

    # -- per node ------------------------------------------------------------------------------
    def float_node(self, node: Node) -> None:
        ins = [self.float_of(i) if i and not self.g.tensors[i].is_const else self.copy_tensor(i)
               for i in node.inputs]
        for o in node.outputs:
            if o:
                t = self.g.tensors[o]
                self.q.add_tensor(o, t.dtype, t.shape)
                self.float_name[o] = o
        self.nodes.append(Node(node.op, ins, list(node.outputs), dict(node.attrs), node.name))

    def int8_node(self, node: Node) -> None:
        g, T = self.g, self.g.tensors
        ins = list(node.inputs)
        attrs = dict(node.attrs)
        dins = set(data_inputs(node, g))
        for i, name in enumerate(node.inputs):
            if not name:
                continue
            if i in dins and not T[name].is_const:
                ins[i] = self.int8_of(name)
            elif i in dins:                                   # constant operand of Add/Mul/Concat
                qv, s, zp = _quantize_const_per_tensor(T[name].data)
                ins[i] = self.add_const(name + "_int8", qv, _qdict(s, zp))
            else:
                ins[i] = self.copy_tensor(name)
        op = node.op
        if op in ANCHOR_OPS:
            self._weights(node, ins, attrs)
        elif op == "Pad":
            s, zp = self.plan.params[node.inputs[0]]
            cv = _opt(node, 2)
            v = float(np.asarray(T[cv].data).reshape(-1)[0]) if cv else 0.0
            qv = int(np.clip(round(v / s) + zp, -128, 127))
            while len(ins) < 3:
                ins.append("")
            ins[2] = self.add_const(node.name + "_pad_value", np.array(qv, np.int8), _qdict(s, zp))
        outs = []
        for o in node.outputs:
            if not o:
                outs.append(o)
                continue
            s, zp = self.plan.params[o]
            qname = o if o not in g.outputs else self.unique(o + "_int8")
            self.q.add_tensor(qname, "int8", T[o].shape, None, _qdict(s, zp))
            self.int8_name[o] = qname
            outs.append(qname)
        self.nodes.append(Node(op, ins, outs, attrs, node.name))

    def _weights(self, node: Node, ins: List[str], attrs: dict) -> None:
        """Quantize weights (int8 per channel) and bias (int32) of a Conv/Gemm/MatMul in place."""
        T = self.g.tensors
        op = node.op
        s_in = self.plan.params[node.inputs[0]][0]
        wname = node.inputs[1]
        bname = _opt(node, 2) if op != "MatMul" else ""
        b = None if not bname else np.asarray(T[bname].data, np.float64)
        if not T[wname].is_const:                           # activation x activation: per-tensor B
            if b is not None:
                n_out = gemm_n(node, self.g) if op.endswith("Gemm") else int(T[wname].shape[-1])
                s_b = self.plan.params[wname][0]
                bscale = np.full(n_out, np.float32(np.float32(s_in) * np.float32(s_b)), np.float32)
                v = np.broadcast_to(b.reshape(-1), (n_out,)) / bscale.astype(np.float64)
                v = np.sign(v) * np.floor(np.abs(v) + 0.5)
                bq = np.clip(v, -(1 << 31), (1 << 31) - 1).astype(np.int32)
                ins[2] = self.add_const(bname + "_int32", bq, _qdict(bscale, np.zeros(n_out, np.int64), 0))
            return
        w = np.asarray(T[wname].data, np.float64)
        if op in ("Conv", "FusedConv"):
            axis = 0
            n_out = w.shape[0]
        elif op == "ConvTranspose":                  # W (C_in, C_out, kh, kw): per output channel
            axis = 1
            n_out = w.shape[1]
        elif op in ("Gemm", "FusedGemm"):
            alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
            w = w * alpha
            axis = 0 if attrs.get("transB", 0) else 1
            n_out = w.shape[axis]
            if b is not None:
                b = np.broadcast_to(b.reshape(-1) * beta, (n_out,)) if b.size in (1, n_out) else b
            attrs["alpha"], attrs["beta"] = 1.0, 1.0
        else:
            axis = w.ndim - 1
            n_out = w.shape[-1]
            if b is not None:
                b = np.broadcast_to(b.reshape(-1), (n_out,))
        sw = weight_scales(w, axis)
        wq = quantize_weights(w, sw, axis)
        ins[1] = self.add_const(wname + "_int8", wq, _qdict(sw, np.zeros(n_out, np.int64), axis))
        if b is not None:
            bscale = (np.float32(s_in) * sw.astype(np.float32)).astype(np.float32)
            v = b.reshape(-1) / bscale.astype(np.float64)
            v = np.sign(v) * np.floor(np.abs(v) + 0.5)
            bq = np.clip(v, -(1 << 31), (1 << 31) - 1).astype(np.int32)
            ins[2] = self.add_const(bname + "_int32", bq, _qdict(bscale, np.zeros(n_out, np.int64), 0))

    def build(self) -> Graph:
        int8 = set(self.plan.int8)
        for name in self.g.inputs:
            t = self.g.tensors[name]
            self.q.add_tensor(name, t.dtype, t.shape)
            self.float_name[name] = name
        for node in self.g.nodes:
            (self.int8_node if node.name in int8 else self.float_node)(node)
        for o in self.g.outputs:
            if o in self.int8_name and o not in self.float_name:
                self.float_of(o)
        self.q.nodes = self.nodes
        self.q.toposort()
        self.q.prune()
        return self.q


def build_int8_graph(g: Graph, plan: Plan) -> Tuple[Graph, Dict[str, str], int]:
    """The quantized graph of float graph ``g`` under ``plan``; also {float tensor: int8 tensor}
    and the number of QuantizeLinear/DequantizeLinear nodes inserted."""
    b = _Builder(g, plan)
    q = b.build()
    q.validate()
    return q, dict(b.int8_name), b.qdq
