"""Export an edge_infer graph (typically int8, from an .eim) as an ONNX QDQ model.

QDQ form (what onnxruntime's and TensorRT's QDQ optimizers consume): every int8 op becomes

    DequantizeLinear(x_int8) ... -> float op -> QuantizeLinear -> y_int8

with its weights stored as int8 initializers behind a per-channel DequantizeLinear (``axis``
from ``Tensor.quant``) and its bias as int32 behind a DequantizeLinear at scale s_in * s_w[c].
No new decision is taken: scales and zero points are those of ``Tensor.quant``. Pure reshapes
(Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Identity) stay on int8 tensors. The
optimizer's own ops are spelled in standard ONNX: FusedConv -> Conv [+ Add] [+ activation],
FusedGemm -> Gemm + activation, FusedMatMul -> MatMul [+ Add] [+ activation], SiLU -> x * Sigmoid(x);
a channels-last op (``data_layout="NHWC"``, passes/convert_layout.py) runs between Transposes.
Opset 21 (the IR's); ``onnx`` is needed (the ``convert`` extra).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from ..errors import EdgeInferError
from ..ir import Graph, Node, claim_name

OPSET = 21
IR_ONNX_VERSION = 10
INT8_DIRECT = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity")
_IR_ONLY_ATTRS = ("activation", "activation_params", "data_layout", "requant")
_DTYPE_ATTRS = {"Cast": ("to",), "EyeLike": ("dtype",), "RandomNormal": ("dtype",), "RandomUniform": ("dtype",),
                "RandomNormalLike": ("dtype",), "RandomUniformLike": ("dtype",), "Multinomial": ("dtype",),
                "Bernoulli": ("dtype",)}


def implied_bias_quant(g: Graph, node: Node) -> Optional[dict]:
    """The parameters of an int32 bias that carries none (an imported pre-quantized model's):
    scale s_x * s_w[c] in float32, zero point 0, by definition of the int8 conv / gemm."""
    if node.op not in _BIAS_OPS or len(node.inputs) < 3 or not node.inputs[2]:
        return None
    b, x, w = (g.tensors.get(node.inputs[i]) for i in (2, 0, 1))
    if b is None or b.quant is not None or b.dtype != "int32" or x is None or w is None \
            or x.quant is None or w.quant is None:
        return None
    s = (np.float32(x.quant["scale"][0]) * np.asarray(w.quant["scale"], np.float32)).astype(np.float32)
    n = int(np.asarray(b.data).size) if b.is_const else s.size
    s = np.broadcast_to(s.reshape(-1), (n,)) if s.size == 1 else s
    return {"scale": [float(v) for v in s], "zero_point": [0], "axis": 0}


_BIAS_OPS = ("Conv", "FusedConv", "Gemm", "FusedGemm", "FusedMatMul", "ConvTranspose")


class ExportError(EdgeInferError):
    """The graph cannot be written as ONNX."""


class _Exporter:
    def __init__(self, graph: Graph):
        import onnx
        from onnx import helper, numpy_helper
        self.onnx, self.helper, self.nh = onnx, helper, numpy_helper
        self.g = graph
        self.nodes = []
        self.inits: Dict[str, object] = {}
        self.dq_of: Dict[str, str] = {}
        self.dq_src: Dict[str, Tuple[str, str, str]] = {}  # DQ output -> (int tensor, scale, zero point)
        self.names = set(graph.tensors) | {n.name for n in graph.nodes}
        self.counts = {"QuantizeLinear": 0, "DequantizeLinear": 0}
        self.opset = OPSET
        from ..frontends.onnx_common import DTYPE_TO_ONNX
        self.dtype_to_onnx = DTYPE_TO_ONNX

    def unique(self, base: str) -> str:
        return claim_name(base, self.names)

    def init(self, name: str, arr: np.ndarray) -> str:
        if name not in self.inits:
            arr = np.asarray(arr)
            if not arr.flags.c_contiguous:
                arr = arr.copy()                    # (np.ascontiguousarray would make 0-d 1-d)
            self.inits[name] = self.nh.from_array(arr, name)
        return name

    def node(self, op: str, ins: List[str], outs: List[str], name: str = "", **attrs) -> None:
        if op in self.counts:
            self.counts[op] += 1
        self.nodes.append(self.helper.make_node(op, ins, outs, name=name or self.unique(op), **attrs))

    # -- quantization parameters ----------------------------------------------------------------
    def qparams(self, tname: str, int_dtype: str, quant: Optional[dict] = None):
        q = quant or self.g.tensors[tname].quant
        s = np.asarray(q["scale"], np.float32)
        zp = np.asarray(q.get("zero_point", [0]), np.int64)
        axis = q.get("axis")
        if s.size == 1:
            return (self.init(self.unique(tname + "_scale"), s.reshape(())),
                    self.init(self.unique(tname + "_zero_point"), zp.reshape(-1)[:1].reshape(()).astype(int_dtype)),
                    None)
        zp = np.broadcast_to(zp.reshape(-1), s.shape) if zp.size != s.size else zp
        return (self.init(self.unique(tname + "_scale"), s),
                self.init(self.unique(tname + "_zero_point"), zp.astype(int_dtype)), int(axis or 0))

    def float_in(self, name: str, quant: Optional[dict] = None) -> str:
        """The float value of input ``name``: itself, or a DequantizeLinear of an int8/int32 tensor
        (``quant``: parameters the tensor does not carry itself, an implied bias scale)."""
        if not name:
            return name
        t = self.g.tensors[name]
        if t.is_const and t.quant is None and quant is None:
            self.init(name, t.data)
            return name
        if (t.quant is None and quant is None) or t.dtype not in ("int8", "uint8", "int32"):
            return name
        if name in self.dq_of:
            return self.dq_of[name]
        if t.is_const:
            self.init(name, t.data)
        s, z, axis = self.qparams(name, t.dtype, quant)
        out = self.unique(name + "_dq")
        self.node("DequantizeLinear", [name, s, z], [out], name=self.unique(name + "/DequantizeLinear"),
                  **({"axis": axis} if axis is not None else {}))
        self.dq_of[name] = out
        if axis is None:
            self.dq_src[out] = (name, s, z)
        return out

    def nchw_in(self, name: str, perm: List[int], base: str) -> str:
        """``name`` transposed channels-first for a float op. A per-tensor DequantizeLinear's output
        is transposed on its integer side and dequantized after: onnxruntime's extended optimizer
        (1.32) rewrites DQ -> Transpose -> float Conv into a QuantizeLinear whose zero point and
        output type disagree, and then refuses to load the model."""
        src = self.dq_src.get(name)
        if src is None:
            t = self.unique(name + "_nchw")
            self.node("Transpose", [name], [t], name=self.unique(base + "/to_nchw"), perm=perm)
            return t
        q, s, z = src
        tq = self.unique(q + "_nchw")
        self.node("Transpose", [q], [tq], name=self.unique(base + "/to_nchw"), perm=perm)
        t = self.unique(tq + "_dq")
        self.node("DequantizeLinear", [tq, s, z], [t], name=self.unique(tq + "/DequantizeLinear"))
        return t

    def raw_in(self, name: str) -> str:
        if name and self.g.tensors[name].is_const:
            self.init(name, self.g.tensors[name].data)
        return name

    # -- ops ------------------------------------------------------------------------------------
    def attrs(self, node: Node) -> dict:
        out = {}
        for k, v in node.attrs.items():
            if k in _IR_ONLY_ATTRS:
                continue
            if k in _DTYPE_ATTRS.get(node.op, ()) and isinstance(v, str):
                v = self.dtype_to_onnx[v]
            if v is None:
                continue
            out[k] = v
        if node.op == "ConstantOfShape":
            dt = out.pop("dtype", "float32")
            val = out.pop("value", 0)
            out["value"] = self.nh.from_array(np.array([val], dtype=dt), "value")
        return self._drop_defaults(node.op, out)

    def _drop_defaults(self, op: str, attrs: dict) -> dict:
        """Leave out attributes at their ONNX default (the IR spells every one out): a
        smaller model, and onnxruntime's QDQ fusions reject some on their QLinear ops (a
        QLinearAveragePool with ``dilations``)."""
        try:
            schema = self.onnx.defs.get_schema(op, self.opset)
        except Exception:
            return attrs
        out = {}
        for k, v in attrs.items():
            a = schema.attributes.get(k)
            if a is not None and a.default_value is not None and a.default_value.type:
                default = self.helper.get_attribute_value(a.default_value)
                if isinstance(default, bytes):
                    default = default.decode()
                if default == v or (isinstance(v, list) and isinstance(default, list) and list(default) == v):
                    continue
            if k == "dilations" and op in ("AveragePool", "MaxPool", "LpPool") and all(d == 1 for d in v):
                continue                                  # rank-dependent default: all ones
            out[k] = v
        return out

    def activation(self, x: str, y: str, act: str, params, base: str) -> None:
        if not act:
            self.node("Identity", [x], [y], name=self.unique(base + "/Identity"))
        elif act == "Relu":
            self.node("Relu", [x], [y], name=self.unique(base + "/Relu"))
        elif act == "Clip":
            lo = self.init(self.unique(base + "_clip_min"), np.array(params[0], np.float32))
            hi = self.init(self.unique(base + "_clip_max"), np.array(params[1], np.float32))
            self.node("Clip", [x, lo, hi], [y], name=self.unique(base + "/Clip"))
        elif act in ("Sigmoid", "Tanh", "HardSwish"):
            self.node(act, [x], [y], name=self.unique(base + "/" + act))
        elif act == "HardSigmoid":
            self.node(act, [x], [y], name=self.unique(base + "/" + act), alpha=float(params[0]), beta=float(params[1]))
        elif act == "LeakyRelu":
            self.node(act, [x], [y], name=self.unique(base + "/" + act), alpha=float(params[0]))
        elif act == "SiLU":
            s = self.unique(base + "_sigmoid")
            self.node("Sigmoid", [x], [s], name=self.unique(base + "/Sigmoid"))
            self.node("Mul", [x, s], [y], name=self.unique(base + "/Mul"))
        elif act in ("Gelu", "GeluTanh"):
            self.node("Gelu", [x], [y], name=self.unique(base + "/Gelu"),
                      approximate="tanh" if act == "GeluTanh" else "none")
        else:
            raise ExportError(f"{base}: activation {act!r} has no ONNX export")

    def float_op(self, node: Node, ins: List[str], outs: List[str]) -> None:
        """Emit ``node`` computing in float on inputs ``ins`` into ``outs`` (fused ops expanded).
        A channels-last node (``data_layout="NHWC"``) runs between two Transposes."""
        if (node.attrs.get("data_layout") or "NCHW") == "NHWC":
            rank = len(self.g.tensors[node.inputs[0]].shape or ()) or 4
            to_first = [0, rank - 1] + list(range(1, rank - 1))
            to_last = [0] + list(range(2, rank)) + [1]
            act_ins = {0, 3} if node.op == "FusedConv" else {0}
            ins = list(ins)
            for i in act_ins:
                if i < len(ins) and ins[i]:
                    ins[i] = self.nchw_in(ins[i], to_first, node.name)
            mids = [self.unique(o + "_nchw") if o else "" for o in outs]
            self._float_op(node, ins, mids)
            for o, m in zip(outs, mids):
                if o:
                    self.node("Transpose", [m], [o], name=self.unique(node.name + "/to_nhwc"), perm=to_last)
            return
        self._float_op(node, ins, outs)

    def _float_op(self, node: Node, ins: List[str], outs: List[str]) -> None:
        op, attrs = node.op, self.attrs(node)
        act = str(node.attrs.get("activation", "") or "")
        params = node.attrs.get("activation_params", []) or []
        if op in ("FusedConv", "FusedGemm", "FusedMatMul"):
            base = {"FusedConv": "Conv", "FusedGemm": "Gemm", "FusedMatMul": "MatMul"}[op]
            extra = ""
            if op == "FusedConv":
                core, extra = [i for i in ins[:3]], (ins[3] if len(ins) > 3 else "")
                while core and not core[-1]:
                    core.pop()
            elif op == "FusedGemm":
                core = [i for i in ins[:3]]
                while core and not core[-1]:
                    core.pop()
            else:
                core, extra = ins[:2], (ins[2] if len(ins) > 2 else "")
            t = self.unique(node.name + "_" + base.lower())
            self.node(base, core, [t], name=self.unique(node.name + "/" + base), **attrs)
            if extra:
                t2 = self.unique(node.name + "_add")
                self.node("Add", [t, extra], [t2], name=self.unique(node.name + "/Add"))
                t = t2
            self.activation(t, outs[0], act, params, node.name)
            return
        if op == "SiLU":
            self.activation(ins[0], outs[0], "SiLU", [], node.name)
            return
        self.node(op, ins, outs, name=node.name, **attrs)

    def export(self, opset: int = OPSET):
        helper, g = self.helper, self.g
        self.opset = opset
        for node in g.nodes:
            outs_t = [g.tensors[o] for o in node.outputs if o]
            if node.op in ("QuantizeLinear", "DequantizeLinear"):
                ins = [self.raw_in(i) for i in node.inputs]
                attrs = {k: v for k, v in node.attrs.items() if k in ("axis", "saturate", "block_size", "output_dtype")}
                self.node(node.op, ins, list(node.outputs), name=node.name, **attrs)
                continue
            int8_out = any(t.dtype == "int8" and t.quant is not None for t in outs_t)
            if not int8_out:
                ins = [self.float_in(i) if i and g.tensors[i].quant is not None else self.raw_in(i)
                       for i in node.inputs]
                self.float_op(node, ins, list(node.outputs))
                continue
            if node.op in INT8_DIRECT:
                self.node(node.op, [self.raw_in(i) for i in node.inputs], list(node.outputs), name=node.name,
                          **self.attrs(node))
                continue
            ins = [self.float_in(i, implied_bias_quant(g, node) if k == 2 else None)
                   for k, i in enumerate(node.inputs)]
            fouts = [self.unique(o + "_float") if o else "" for o in node.outputs]
            self.float_op(node, ins, fouts)
            for o, fo in zip(node.outputs, fouts):
                if not o:
                    continue
                s, z, axis = self.qparams(o, g.tensors[o].dtype)
                self.node("QuantizeLinear", [fo, s, z], [o], name=self.unique(o + "/QuantizeLinear"),
                          **({"axis": axis} if axis is not None else {}))
        inputs = [self.value_info(n) for n in g.inputs]
        outputs = [self.value_info(n) for n in g.outputs]
        graph = helper.make_graph(self.nodes, g.name, inputs, outputs, list(self.inits.values()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="edge_infer")
        model.ir_version = IR_ONNX_VERSION
        return model

    def value_info(self, name: str):
        t = self.g.tensors[name]
        shape = None if t.shape is None else [d if isinstance(d, int) else str(d) for d in t.shape]
        return self.helper.make_tensor_value_info(name, self.dtype_to_onnx[t.dtype], shape)


def export_qdq(graph: Graph, path: Union[str, os.PathLike, None] = None, opset: int = OPSET,
               check: bool = True):
    """``graph`` as an ONNX QDQ ModelProto (saved to ``path`` when given). Returns (model, counts)."""
    try:
        import onnx
    except ImportError:
        raise ExportError("ONNX export needs the onnx package: pip install onnx") from None
    ex = _Exporter(graph)
    model = ex.export(opset)
    if check:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            raise ExportError(f"exported model fails the ONNX checker: {str(e).splitlines()[0]}") from None
    if path is not None:
        from ..artifact import _atomic_write    # a failed write leaves no partial or temporary file
        data = model.SerializeToString()
        _atomic_write(os.fspath(path), lambda f: f.write(data))
    counts = dict(ex.counts, nodes=len(model.graph.node), initializers=len(model.graph.initializer))
    return model, counts
