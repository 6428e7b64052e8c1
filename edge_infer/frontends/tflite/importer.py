"""The importer: TFLite tensors -> IR tensors, quantization, the op table (the op
converters are in ``ops_nn.py`` and ``ops_tensor.py``)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import UnsupportedOpError
from ...ir import Graph, Node
from ...ops.int8 import ANCHOR_OPS, BINARY_OPS, CONCAT_OPS, INT8_LIMITS, INT8_OPS, PASS_THROUGH, REQUANTIZING
from ...tflite_format import (ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH, DENSE,
                              INDEX_VECTORS, TFL_TYPES, TYPE_NAMES, _schema, builtin_name)
from .ops_custom import CustomOps
from .ops_nn import NnOps
from .ops_tensor import TensorOps
from .reader import MAX_ELEMENTS, _File, _Malformed, decode_sparse
from .tables import _BINARY, _REDUCE, _UNARY, IMPORTED_OPS


class _Importer(NnOps, TensorOps, CustomOps):
    """One import: the file, the IR graph being built, the TFLite tensor -> IR name maps."""

    def __init__(self, buf: bytes, input_shapes: Optional[Dict[str, Sequence[int]]] = None):
        self.f = _File(buf)
        self.input_shapes = dict(input_shapes or {})
        self.g = Graph("tflite")
        self.names: Dict[int, str] = {}          # tflite tensor index -> IR tensor name (values)
        self.const_cache: Dict[Tuple[int, str], str] = {}
        self.dequant_cache: Dict[str, str] = {}
        self.declared: Dict[str, int] = {}         # IR name -> tflite index, for the shape check
        #: MaxPoolingWithArgmax2D index tensor -> (IR int64 indices, the pool's NCHW input)
        self.argmax_of: Dict[int, Tuple[str, str]] = {}
        #: tflite tensors computed at import (DEQUANTIZE / DENSIFY of constants), TFLite dtype
        self.folded: Dict[int, np.ndarray] = {}

    # -- file structure --------------------------------------------------------------------
    def read(self) -> Graph:
        f = self.f
        model = _schema("Model").Model.GetRootAs(f.buf, 0)
        self.model = model
        n_sub = f.count(model.SubgraphsLength(), "subgraphs")
        if n_sub < 1:
            raise _Malformed("the model has no subgraph")
        self.n_buffers = f.count(model.BuffersLength(), "buffers")
        codes = []
        for i in range(f.count(model.OperatorCodesLength(), "operator codes")):
            oc = model.OperatorCodes(i)
            code = max(int(oc.DeprecatedBuiltinCode()), int(oc.BuiltinCode()))
            custom = f.text(oc.CustomCode())
            codes.append((code, custom))
        sg = model.Subgraphs(0)
        self.sg = sg
        self.n_tensors = f.count(sg.TensorsLength(), "tensors")
        self.tensors = [sg.Tensors(i) for i in range(self.n_tensors)]
        ops = []
        for i in range(f.count(sg.OperatorsLength(), "operators")):
            op = sg.Operators(i)
            idx = int(op.OpcodeIndex())
            if not 0 <= idx < len(codes):
                raise _Malformed(f"operator {i} has opcode index {idx} of {len(codes)}")
            ops.append((i, op, codes[idx]))
        # every op must be known before any is converted: one error lists them all
        bad: Dict[str, int] = {}
        for _, _, (code, custom) in ops:
            name = builtin_name(code)
            if (name == "CUSTOM" or custom) and custom in self.CUSTOM_CONVERTERS:
                continue
            if name == "CUSTOM" or custom:
                key = f"custom op {custom!r}"
            elif name is None:
                key = f"builtin op code {code}"
            elif name not in IMPORTED_OPS:
                key = name
            else:
                continue
            bad[key] = bad.get(key, 0) + 1
        if bad:
            listed = ", ".join(f"{k} (x{v})" for k, v in sorted(bad.items()))
            raise UnsupportedOpError(f"TFLite model has ops edge_infer cannot import: {listed}")
        self.model_name = f.text(sg.Name()) or "tflite"
        self.g.name = self.model_name
        self.g.metadata["source_format"] = "tflite"
        self.g.metadata["preferred_layout"] = "NHWC"
        for i in self.index_list(sg, "Inputs"):
            self.graph_input(i)
        for k, op, (code, custom) in ops:
            self.op_index = k
            if custom in self.CUSTOM_CONVERTERS:
                getattr(self, self.CUSTOM_CONVERTERS[custom])(op, self.index_list(op, "Inputs"),
                                                              self.index_list(op, "Outputs"))
            else:
                self.convert_op(builtin_name(code), op)
        for i in self.index_list(sg, "Outputs"):
            self.graph_output(i)
        return self.g

    def index_list(self, obj, field: str) -> List[int]:
        out = [int(i) for i in self.f.vec(obj, field)]
        for i in out:
            if not -1 <= i < self.n_tensors:
                raise _Malformed(f"tensor index {i} out of range (model has {self.n_tensors} tensors)")
        return out

    # -- tensors -------------------------------------------------------------------------
    def tinfo(self, i: int):
        if not 0 <= i < self.n_tensors:
            raise _Malformed(f"tensor index {i} out of range (model has {self.n_tensors} tensors)")
        t = self.tensors[i]
        shape = tuple(int(d) for d in self.f.vec(t, "Shape"))
        if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.float64)) > MAX_ELEMENTS:
            raise _Malformed(f"tensor {i} has an invalid shape {shape}")
        ttype = int(t.Type())
        return t, shape, ttype

    def tname(self, i: int) -> str:
        t = self.tensors[i]
        base = self.f.text(t.Name()) or f"tensor_{i}"
        return self.g.unique_name(base)

    def quant(self, i: int):
        """(scale float32 array, zero point int64 array, axis) or None."""
        q = self.tensors[i].Quantization()
        if q is None:
            return None
        s = self.f.vec(q, "Scale", np.float32)
        z = self.f.vec(q, "ZeroPoint", np.int64)
        if s.size == 0:
            return None
        if z.size == 0:
            z = np.zeros(s.size, np.int64)
        if z.size not in (1, s.size):
            raise _Malformed(f"tensor {i}: {s.size} scales but {z.size} zero points")
        if not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise _Malformed(f"tensor {i}: quantization scales must be positive and finite")
        return s, np.broadcast_to(z, s.shape).copy(), int(q.QuantizedDimension())

    def is_const(self, i: int) -> bool:
        if i in self.folded:
            return True
        b = int(self.tensors[i].Buffer())
        if b == 0 or i in self.names:
            return False
        if not 0 <= b < self.n_buffers:
            raise _Malformed(f"tensor {i} refers to buffer {b} of {self.n_buffers}")
        buf = self.model.Buffers(b)
        return buf.DataLength() > 0 or int(buf.Offset()) > 1

    def raw_data(self, i: int) -> bytes:
        b = int(self.tensors[i].Buffer())
        if not 0 <= b < self.n_buffers:
            raise _Malformed(f"tensor {i} refers to buffer {b} of {self.n_buffers}")
        buf = self.model.Buffers(b)
        off, size = int(buf.Offset()), int(buf.Size())
        if off > 1:
            if off + size > self.f.size:
                raise _Malformed(f"buffer {b} lies outside the file")
            return self.f.buf[off:off + size]
        n = self.f.count(buf.DataLength(), "buffer data", 1)
        return buf.DataAsNumpy().tobytes() if n else b""

    def array(self, i: int) -> np.ndarray:
        """The stored value of constant tensor ``i`` in its TFLite dtype (sparse decoded)."""
        if i in self.folded:
            return self.folded[i]
        t, shape, ttype = self.tinfo(i)
        dtype = TFL_TYPES.get(ttype)
        if dtype is None:
            raise UnsupportedOpError(f"tensor {self.f.text(t.Name())!r}: type {TYPE_NAMES.get(ttype, ttype)} "
                                     "is not supported")
        raw = self.raw_data(i)
        item = np.dtype(dtype).itemsize
        sp = t.Sparsity()
        if sp is not None:
            if len(raw) % item:
                raise _Malformed(f"tensor {i}: sparse values are not whole {dtype} elements")
            values = np.frombuffer(raw, np.dtype(dtype).newbyteorder("<")).astype(dtype)
            dense = int(np.prod(shape, dtype=np.float64))
            if dense > max(1 << 24, 256 * self.f.size):
                # a real sparse tensor is at most a few dozen times its stored values
                raise _Malformed(f"sparse tensor {i}: dense shape {shape} is implausibly large for the file")
            return decode_sparse(values, shape, self.f.vec(sp, "TraversalOrder"), self.f.vec(sp, "BlockMap"),
                                 self.dim_metadata(sp))
        n = int(np.prod(shape, dtype=np.int64))
        if len(raw) != n * item:
            raise _Malformed(f"tensor {self.f.text(t.Name())!r}: buffer holds {len(raw)} bytes, "
                             f"shape {shape} of {dtype} needs {n * item}")
        return np.frombuffer(raw, np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)

    def dim_metadata(self, sp) -> List[dict]:
        out = []
        for k in range(self.f.count(sp.DimMetadataLength(), "dim metadata")):
            d = sp.DimMetadata(k)
            fmt = int(d.Format())
            if fmt == DENSE:
                out.append({"format": DENSE, "dense_size": int(d.DenseSize())})
                continue
            entry = {"format": fmt}
            for key, typ, get in (("segments", d.ArraySegmentsType(), d.ArraySegments),
                                  ("indices", d.ArrayIndicesType(), d.ArrayIndices)):
                if int(typ) not in INDEX_VECTORS:
                    raise _Malformed(f"sparsity: unknown index vector type {typ}")
                cls_name, dt = INDEX_VECTORS[int(typ)]
                tab = get()
                if tab is None:
                    raise _Malformed("sparsity: CSR dimension without its arrays")
                obj = getattr(_schema(cls_name), cls_name)()
                obj.Init(tab.Bytes, tab.Pos)
                entry[key] = self.f.vec(obj, "Values", dt)
            out.append(entry)
        return out

    def qdict(self, q, axis_map=None) -> dict:
        s, z, axis = q
        if s.size == 1:
            return {"scale": [float(s[0])], "zero_point": [int(z[0])], "axis": None}
        return {"scale": [float(v) for v in s], "zero_point": [int(v) for v in z],
                "axis": int(axis if axis_map is None else axis_map(axis))}

    def ir_dtype(self, i: int) -> str:
        _, _, ttype = self.tinfo(i)
        dt = TFL_TYPES.get(ttype)
        if dt == "uint8" and self.quant(i) is not None:
            return "int8"                          # the int8 scheme, zero point - 128
        if dt is None or dt in ("int16", "uint16", "uint32", "uint64", "float16", "float64"):
            t = self.tensors[i]
            raise UnsupportedOpError(f"tensor {self.f.text(t.Name())!r}: {TYPE_NAMES.get(ttype, ttype)} "
                                     "activations are not supported")
        return dt

    def act_quant(self, i: int) -> Optional[dict]:
        """``Tensor.quant`` of an activation tensor (int8 or shifted uint8; None for float)."""
        _, _, ttype = self.tinfo(i)
        q = self.quant(i)
        if q is None or TFL_TYPES.get(ttype) not in ("int8", "uint8"):
            return None
        s, z, axis = q
        if TFL_TYPES[ttype] == "uint8":
            z = z - 128
        if s.size != 1:
            raise UnsupportedOpError(f"tensor {self.f.text(self.tensors[i].Name())!r}: per-channel "
                                     "activation quantization is not supported")
        if not -128 <= int(z[0]) <= 127:
            raise _Malformed(f"tensor {i}: zero point {int(z[0])} out of int8 range")
        return self.qdict((s, z, axis))

    def const_value(self, i: int, float_ok: bool = True) -> Tuple[np.ndarray, Optional[dict]]:
        """(value, quant) of constant ``i`` in IR form: uint8 shifted to int8, float16 widened."""
        arr = self.array(i)
        q = self.quant(i)
        if arr.dtype == np.float16:
            return arr.astype(np.float32), None
        if arr.dtype == np.uint8 and q is not None:
            s, z, axis = q
            return (arr.astype(np.int16) - 128).astype(np.int8), self.qdict((s, z - 128, axis))
        if arr.dtype in (np.int8, np.int32, np.int64) and q is not None and arr.dtype != np.int64:
            return arr, self.qdict(q)
        return arr, None

    def value(self, i: int) -> str:
        """IR name of tensor ``i`` as an op input: a defined value, or a constant."""
        if i < 0:
            return ""
        if i in self.names:
            return self.names[i]
        self.tinfo(i)
        if not self.is_const(i):
            raise _Malformed(f"operator {self.op_index} reads tensor {i} before anything writes it")
        key = (i, "plain")
        if key not in self.const_cache:
            arr, q = self.const_value(i)
            name = self.tname(i)
            self.g.add_tensor(name, arr.dtype.name, arr.shape, arr, q)
            self.const_cache[key] = name
        return self.const_cache[key]

    def const(self, name: str, value, quant: Optional[dict] = None) -> str:
        arr = np.asarray(value)
        n = self.g.unique_name(name)
        self.g.add_tensor(n, arr.dtype.name, arr.shape, arr, quant)
        return n

    def output(self, i: int) -> str:
        """IR name for tensor ``i`` written by the current op (dtype and quant set)."""
        if i in self.names:
            raise _Malformed(f"tensor {i} is written twice")
        self.tinfo(i)
        name = self.tname(i)
        self.g.add_tensor(name, self.ir_dtype(i), None, None, self.act_quant(i))
        self.names[i] = name
        self.declared[name] = i
        return name

    def temp(self, like: str, suffix: str, dtype: Optional[str] = None, quant="same") -> str:
        t = self.g.tensors[like]
        n = self.g.unique_name(like + suffix)
        self.g.add_tensor(n, dtype or t.dtype, None, None,
                          (None if t.quant is None else dict(t.quant)) if quant == "same" else quant)
        return n

    def graph_input(self, i: int) -> None:
        t, shape, ttype = self.tinfo(i)
        name = self.tname(i)
        dt = TFL_TYPES.get(ttype)
        shape = tuple(self.input_shapes.get(name, shape))
        if dt == "uint8" and self.quant(i) is not None:
            # uint8 stays the user's type; the graph works in int8 (zero point - 128)
            self.g.add_input(name, "uint8", shape)
            s, z, _ = self.quant(i)
            f = self.g.unique_name(name + "_float")
            self.g.add_tensor(f, "float32")
            self.node("DequantizeLinear", [name, self.const(name + "_scale", np.float32(s[0])),
                                           self.const(name + "_zp", np.uint8(z[0]))], [f], axis=1, block_size=0)
            q = self.g.unique_name(name + "_int8")
            self.g.add_tensor(q, "int8", None, None, self.act_quant(i))
            self.quantize(f, q)
            self.names[i] = q
            return
        self.g.add_input(name, self.ir_dtype(i), shape)
        self.g.tensors[name].quant = self.act_quant(i)
        self.names[i] = name

    def graph_output(self, i: int) -> None:
        if i in self.argmax_of:
            raise UnsupportedOpError("MaxPoolingWithArgmax2D indices as a graph output are not supported "
                                     "(XNNPACK's uint32-in-float32 window positions)")
        name = self.value(i)
        _, _, ttype = self.tinfo(i)
        if TFL_TYPES.get(ttype) == "uint8" and self.quant(i) is not None and name not in self.g.inputs:
            s, z, _ = self.quant(i)
            f = self.temp(name, "_float", "float32", None)
            self.dequantize(name, f)
            out = self.g.unique_name(self.f.text(self.tensors[i].Name()) + "_uint8")
            self.g.add_tensor(out, "uint8", None, None, None)
            self.node("QuantizeLinear", [f, self.const(out + "_scale", np.float32(s[0])),
                                         self.const(out + "_zp", np.uint8(z[0]))], [out],
                      axis=1, block_size=0, output_dtype=0, saturate=1)
            name = out
        if name in self.g.outputs:
            return
        self.g.outputs.append(name)

    # -- emission ----------------------------------------------------------------------------
    def node(self, op: str, ins: List[str], outs: List[str], **attrs) -> None:
        self.g.add_node(op, ins, outs, name=self.g.unique_node_name(f"{op}"), **attrs)

    def quantize(self, x: str, y: str) -> None:
        q = self.g.tensors[y].quant
        self.node("QuantizeLinear", [x, self.const(y + "_scale", np.float32(q["scale"][0])),
                                     self.const(y + "_zp", np.int8(q["zero_point"][0]))], [y],
                  axis=1, block_size=0, output_dtype=0, saturate=1)

    def dequantize(self, x: str, y: str) -> None:
        q = self.g.tensors[x].quant
        s = np.asarray(q["scale"], np.float32)
        z = np.asarray(q["zero_point"], np.int64)
        dt = self.g.tensors[x].dtype
        if s.size == 1:
            s, z = s.reshape(()), z.reshape(())
        self.node("DequantizeLinear", [x, self.const(x + "_scale", s), self.const(x + "_zp", z.astype(dt))], [y],
                  axis=int(q.get("axis") or 0) if s.ndim else 1, block_size=0)

    def float_of(self, name: str) -> str:
        """The float value of IR tensor ``name`` (itself when float)."""
        t = self.g.tensors[name]
        if t.quant is None or t.dtype not in ("int8", "int32"):
            return name
        if name in self.dequant_cache:
            return self.dequant_cache[name]
        if t.is_const:
            s = np.asarray(t.quant["scale"], np.float32)
            z = np.asarray(t.quant["zero_point"], np.float32)
            axis = t.quant.get("axis")
            if s.size > 1:
                shp = [1] * t.data.ndim
                shp[int(axis)] = s.size
                s, z = s.reshape(shp), z.reshape(shp)
            out = self.const(name + "_float", ((t.data.astype(np.float32) - z) * s).astype(np.float32))
        else:
            out = self.temp(name, "_float", "float32", None)
            self.dequantize(name, out)
        self.dequant_cache[name] = out
        return out

    def emit(self, op: str, ins: List[str], out: str, act: int = ACT_NONE, **attrs) -> None:
        """Emit ``op`` writing ``out`` (the op's only output), with TFLite fused activation
        ``act`` applied after it, in int8 where the IR has an int8 kernel for the op, else in
        float between DequantizeLinear and QuantizeLinear."""
        y = self.g.tensors[out]
        quantized = y.quant is not None and y.dtype == "int8"
        if quantized and not self.int8_ok(op, ins, out, attrs):
            fins = [self.float_of(i) if i else "" for i in ins]
            fout = self.temp(out, "_float", "float32", None)
            self._emit_float(op, fins, fout, act, attrs)
            self.quantize(fout, out)
            return
        self._emit_float(op, ins, out, act, attrs)

    def _emit_float(self, op, ins, out, act, attrs) -> None:
        if act == ACT_NONE:
            self.node(op, ins, [out], **attrs)
            return
        clamp = {ACT_RELU: ("Relu", []), ACT_RELU6: ("Clip", [0.0, 6.0]),
                 ACT_RELU_N1_TO_1: ("Clip", [-1.0, 1.0])}.get(act)
        fused = {"Conv": "FusedConv", "Gemm": "FusedGemm", "FusedConv": "FusedConv"}.get(op)
        if clamp is not None and fused is not None:
            ins = list(ins) + [""] * (3 - len(ins)) if op != "FusedConv" else list(ins)
            self.node(fused, ins, [out], **attrs, activation=clamp[0], activation_params=clamp[1])
            return
        mid = self.temp(out, "_preact")
        self.node(op, ins, [mid], **attrs)
        self.activation(mid, out, act)

    def activation(self, x: str, y: str, act: int) -> None:
        if act == ACT_RELU:
            self.node("Relu", [x], [y])
        elif act in (ACT_RELU6, ACT_RELU_N1_TO_1):
            lo, hi = (0.0, 6.0) if act == ACT_RELU6 else (-1.0, 1.0)
            self.node("Clip", [x, self.const("clip_min", np.float32(lo)), self.const("clip_max", np.float32(hi))], [y])
        elif act == ACT_TANH:
            self.node("Tanh", [x], [y])
        else:
            raise UnsupportedOpError(f"fused activation {act} (SIGN_BIT) is not supported")

    def int8_ok(self, op: str, ins: List[str], out: str, attrs: Optional[dict] = None) -> bool:
        """Whether the IR's int8 kernels compute ``op`` on these int8 tensors as TFLite does: an
        op with an int8 form and within its kernel's limits (``ops/int8.py``, as the quantizer
        and the QDQ importer ask), on int8 tensors with parameters (weights int8, bias int32);
        an op whose int8 output carries its input's parameters (``PASS_THROUGH``) and whose
        kernel does not requantize (``REQUANTIZING``) only where the file gives both the same ones."""
        T = self.g.tensors

        def q8(n: str) -> bool:
            return bool(n) and T[n].dtype == "int8" and T[n].quant is not None
        if op not in INT8_OPS or not ins or not q8(ins[0]):
            return False
        if op in ANCHOR_OPS:
            bias = ins[2] if len(ins) > 2 else ""
            if not q8(ins[1]) or (bias and T[bias].dtype != "int32"):
                return False
        elif op in BINARY_OPS + CONCAT_OPS and not all(q8(i) for i in ins if i):
            return False
        limit = INT8_LIMITS.get(op)
        if limit is not None and limit(Node(op, list(ins), [out], dict(attrs or {}), out), self.g) is not None:
            return False
        if op in PASS_THROUGH and op not in REQUANTIZING:
            qa, qb = T[ins[0]].quant, T[out].quant
            return (np.float32(qa["scale"][0]) == np.float32(qb["scale"][0])
                    and qa["zero_point"][0] == qb["zero_point"][0])
        return True

    # -- the op table ------------------------------------------------------------------------
    def convert_op(self, name: str, op) -> None:
        ins = self.index_list(op, "Inputs")
        outs = self.index_list(op, "Outputs")
        if not outs:
            raise _Malformed(f"operator {self.op_index} ({name}) has no output")
        fn = getattr(self, "op_" + name.lower(), None)
        if name in _UNARY:
            self.unary(name, op, ins, outs)
        elif name in _BINARY:
            self.binary(name, op, ins, outs)
        elif name in _REDUCE:
            self.reduce(name, op, ins, outs)
        elif fn is not None:
            fn(op, ins, outs)
        else:                                          # listed in IMPORTED_OPS but unmapped: a bug
            raise UnsupportedOpError(f"TFLite op {name} is not supported")

    def need(self, ins: List[int], n: int, name: str) -> None:
        if len(ins) < n or any(i < 0 for i in ins[:n]):
            raise _Malformed(f"operator {self.op_index} ({name}) needs {n} inputs, has {ins}")

    def const_ints(self, i: int, what: str) -> List[int]:
        if i < 0 or not self.is_const(i):
            raise UnsupportedOpError(f"operator {self.op_index}: {what} must be a constant")
        return [int(v) for v in self.array(i).reshape(-1)]

    def shape_of(self, i: int) -> Tuple[int, ...]:
        return self.tinfo(i)[1]

    def weights(self, i: int) -> Tuple[np.ndarray, Optional[dict], bool]:
        """(weights in IR dtype, quant, exact) of a constant weight tensor: float16 and
        int8 weights of a float op become float32; uint8 weights become symmetric int8
        when every value minus its zero point fits (exact), else float32."""
        if i < 0 or not self.is_const(i):
            raise UnsupportedOpError(f"operator {self.op_index}: weights must be a constant")
        arr = self.array(i)
        q = self.quant(i)
        if arr.dtype == np.float16:
            return arr.astype(np.float32), None, True
        if arr.dtype in (np.int8, np.uint8) and q is not None:
            s, z, axis = q
            shp = [1] * arr.ndim
            if s.size > 1:
                if not 0 <= axis < arr.ndim or arr.shape[axis] != s.size:
                    raise _Malformed(f"tensor {i}: {s.size} scales along axis {axis} of shape {arr.shape}")
                shp[axis] = s.size
            centered = arr.astype(np.int32) - z.reshape(shp)
            if centered.min(initial=0) >= -128 and centered.max(initial=0) <= 127:
                return centered.astype(np.int8), {"scale": [float(v) for v in s], "zero_point": [0] * s.size,
                                                  "axis": axis if s.size > 1 else None}, True
            return (centered * s.reshape(shp)).astype(np.float32), None, False
        return arr, None, True

    def bias(self, i: int, w_float: bool) -> str:
        if i < 0:
            return ""
        arr, q = self.const_value(i) if self.is_const(i) else (None, None)
        if arr is None:
            return self.value(i)
        if q is not None and w_float:
            s = np.asarray(q["scale"], np.float32)
            return self.const(self.tname(i), (arr.astype(np.float32) * s).astype(np.float32))
        if q is not None and q.get("axis") is not None:
            q = dict(q, axis=0)
        return self.const(self.tname(i), arr, q)

    def weight_const(self, name_i: int, w: np.ndarray, q: Optional[dict], axis_map) -> str:
        if q is not None and q.get("axis") is not None:
            q = dict(q, axis=int(axis_map(q["axis"])))
        return self.const(self.tname(name_i), np.ascontiguousarray(w), q)
