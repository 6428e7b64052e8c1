"""TFLite flatbuffer (.tflite) -> IR graph.

The file is read with the generated schema classes of the ``tflite`` package, after
checking that every vector it declares fits in the file (the flatbuffers reader trusts
offsets; a corrupt file would make it loop for billions of elements or read garbage).
Anything the reader raises on a malformed file becomes one ``ConversionError``.

Mapping (op table in docs/tflite.md):

* TFLite's NHWC layout is kept: convolutions and pools become ``Conv`` / ``MaxPool`` /
  ... with ``data_layout="NHWC"`` (weights OHWI / 1HW(CM) -> the IR's OIHW, group = C for
  depthwise), ``SAME`` padding is ``auto_pad="SAME_UPPER"`` (TFLite pads the extra row
  at the end);
* fused activations: Relu / Relu6 / ReluN1To1 become the epilogue of a ``FusedConv`` /
  ``FusedGemm``, or a ``Relu`` / ``Clip`` after other ops (in int8 a clamp at the output's
  parameters, exactly TFLite's);
* float16 weights (fp16 models: FLOAT16 constant -> DEQUANTIZE) and int8 weights of hybrid
  models become float32 constants;
* int8: tensors carry ``Tensor.quant`` (TFLite's own scheme, docs/quantization.md); weights
  per tensor or per channel (the channel axis follows the weight transposition). uint8
  tensors (old quantized models) become int8 with the zero point shifted by 128, exact;
  uint8 weights whose values minus zero point do not fit int8 make that op run in float
  between DequantizeLinear/QuantizeLinear (as does any int8 op without an int8 kernel:
  SOFTMAX, RESIZE_BILINEAR, PRELU, TRANSPOSE_CONV, ...). uint8 graph inputs and outputs stay
  uint8, converted at the boundary;
* sparse constants (TFLite's sparsity format: traversal order, block map, DENSE /
  SPARSE_CSR dimension metadata) are decoded to dense; DENSIFY is then a constant.

Custom ops and builtins not in the table fail the import with one error naming each.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import ConversionError, EdgeInferError, UnsupportedOpError
from ..ir import Graph, infer_shapes
from ..tflite_format import (ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH, DENSE,
                             INDEX_VECTORS, SAME, SPARSE_CSR, TFL_TYPES, TYPE_NAMES, VALID, _schema,
                             builtin_name)

__all__ = ["load_tflite", "IMPORTED_OPS", "decode_sparse"]

MAGIC = b"TFL3"
#: a tensor larger than this many elements (1 GiB of float32) is refused: a corrupt shape, not
#: an edge model (constants are bounded by their buffers anyway)
MAX_ELEMENTS = 1 << 28


class _Malformed(Exception):
    """The flatbuffer is inconsistent (internal: becomes a ConversionError)."""


# -- reading ----------------------------------------------------------------------------------

class _File:
    """Bound-checked access to the flatbuffer through the generated classes."""

    def __init__(self, buf: bytes):
        self.buf = buf
        self.size = len(buf)

    def count(self, n: int, what: str, elem: int = 4) -> int:
        if not isinstance(n, (int, np.integer)) or n < 0 or n * elem > self.size:
            raise _Malformed(f"{what}: {n} entries do not fit in a {self.size}-byte file")
        return int(n)

    def vec(self, obj, field: str, dtype=np.int32) -> np.ndarray:
        """A numeric vector field as a numpy array (empty when absent)."""
        n = self.count(getattr(obj, field + "Length")(), field, np.dtype(dtype).itemsize)
        if n == 0:
            return np.zeros(0, dtype)
        arr = getattr(obj, field + "AsNumpy")()
        if not isinstance(arr, np.ndarray) or arr.size != n:
            raise _Malformed(f"{field}: unreadable vector")
        return np.array(arr, dtype=dtype)

    def text(self, raw) -> str:
        if raw is None:
            return ""
        return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def _options(op, table: str):
    """The builtin options table of ``op`` as an instance of the generated class ``table``."""
    tab = op.BuiltinOptions()
    if tab is None:
        return None
    cls = getattr(_schema(table), table)
    obj = cls()
    obj.Init(tab.Bytes, tab.Pos)
    return obj


def _opt(obj, field: str, default):
    return default if obj is None else getattr(obj, field)()


def decode_sparse(values: np.ndarray, shape: Sequence[int], traversal_order: Sequence[int],
                  block_map: Sequence[int], dims: Sequence[dict]) -> np.ndarray:
    """Densify a TFLite sparse tensor.

    ``dims[i]`` describes the i-th dimension in traversal order: {"format": DENSE,
    "dense_size": n} or {"format": SPARSE_CSR, "segments": array, "indices": array}. The
    traversal covers the original dims (blocked ones counted in blocks) followed by one
    dim per entry of ``block_map`` (the position inside a block of that original dim).
    ``values`` holds the stored elements in traversal order."""
    shape = [int(d) for d in shape]
    rank, nb = len(shape), len(block_map)
    order = [int(t) for t in traversal_order]
    if sorted(order) != list(range(rank + nb)) or len(dims) != rank + nb:
        raise _Malformed(f"sparsity: traversal order {order} does not cover {rank} dims + {nb} blocks")
    if any(not 0 <= int(b) < rank for b in block_map) or len(set(int(b) for b in block_map)) != nb:
        raise _Malformed(f"sparsity: block map {list(block_map)} is not a set of dims of rank {rank}")
    # expanded dim sizes: original dims (in blocks) then block sizes
    level_of = {d: i for i, d in enumerate(order)}
    block_size = []
    for j in range(nb):
        d = dims[level_of[rank + j]]
        if d["format"] != DENSE or int(d["dense_size"]) <= 0:
            raise _Malformed("sparsity: a block dimension must be dense with a positive size")
        block_size.append(int(d["dense_size"]))
    expanded = list(shape) + block_size
    for j, b in enumerate(block_map):
        if shape[int(b)] % block_size[j]:
            raise _Malformed(f"sparsity: dim {b} of size {shape[int(b)]} is not a multiple of block {block_size[j]}")
        expanded[int(b)] = shape[int(b)] // block_size[j]
    pos = np.zeros(1, np.int64)                       # position of each partial path in its level
    coords: List[np.ndarray] = []
    limit = max(1, int(np.prod(shape, dtype=np.int64)))
    for lvl, d in enumerate(dims):
        size = expanded[order[lvl]]
        if d["format"] == DENSE:
            n = int(d["dense_size"])
            if n != size:
                raise _Malformed(f"sparsity: dense level {lvl} has size {n}, expected {size}")
            if pos.size * n > limit:
                raise _Malformed("sparsity: metadata describes more elements than the tensor has")
            coords = [np.repeat(c, n) for c in coords]
            coords.append(np.tile(np.arange(n, dtype=np.int64), pos.size))
            pos = (np.repeat(pos, n) * n + coords[-1])
        elif d["format"] == SPARSE_CSR:
            seg = np.asarray(d["segments"], np.int64)
            idx = np.asarray(d["indices"], np.int64)
            if seg.size < int(pos.max(initial=-1)) + 2 or seg[0] != 0 or np.any(np.diff(seg) < 0) \
                    or seg[-1] > idx.size:
                raise _Malformed(f"sparsity: CSR segments of level {lvl} are inconsistent")
            if idx.size and (idx.min() < 0 or idx.max() >= size):
                raise _Malformed(f"sparsity: CSR index out of range at level {lvl}")
            starts, ends = seg[pos], seg[pos + 1]
            lens = ends - starts
            total = int(lens.sum())
            if total > limit:
                raise _Malformed("sparsity: metadata describes more elements than the tensor has")
            parent = np.repeat(np.arange(pos.size), lens)
            child = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens) + starts[parent]
            coords = [c[parent] for c in coords]
            coords.append(idx[child])
            pos = child
        else:
            raise _Malformed(f"sparsity: unknown dimension format {d['format']}")
    values = np.asarray(values).reshape(-1)
    if pos.size != values.size or (pos.size and (pos.min() < 0 or pos.max() >= values.size)):
        raise _Malformed(f"sparsity: metadata addresses {pos.size} values, buffer holds {values.size}")
    ex = [None] * (rank + nb)
    for lvl, c in enumerate(coords):
        ex[order[lvl]] = c
    blocks = [int(b) for b in block_map]
    full = []
    for a in range(rank):
        c = ex[a]
        if a in blocks:
            j = blocks.index(a)
            c = c * block_size[j] + ex[rank + j]
        full.append(c)
    out = np.zeros(shape, values.dtype)
    if values.size:
        out[tuple(full)] = values[pos]
    return out


# -- ops ----------------------------------------------------------------------------------------

_UNARY = {"LOGISTIC": "Sigmoid", "RELU": "Relu", "TANH": "Tanh", "HARD_SWISH": "HardSwish",
          "EXP": "Exp", "ABS": "Abs", "NEG": "Neg", "SQRT": "Sqrt", "RSQRT": None, "FLOOR": "Floor",
          "CEIL": "Ceil", "ELU": "Elu", "LOG": "Log", "SIN": "Sin", "COS": "Cos", "ROUND": "Round",
          "SQUARE": None, "GELU": "Gelu", "LEAKY_RELU": "LeakyRelu", "RELU6": "Clip",
          "RELU_N1_TO_1": "Clip", "RELU_0_TO_1": "Clip"}
_BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "MAXIMUM": "Max", "MINIMUM": "Min",
           "POW": "Pow", "SQUARED_DIFFERENCE": None, "PRELU": "PRelu"}
_REDUCE = {"MEAN": "ReduceMean", "SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax", "REDUCE_MIN": "ReduceMin",
           "REDUCE_PROD": "ReduceProd"}
#: IR ops with an int8 kernel (the rest run in float between DequantizeLinear/QuantizeLinear)
INT8_OPS = frozenset({"Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "Add", "Sub", "Mul", "Concat",
                      "Relu", "Clip", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "Elu", "Gelu",
                      "AveragePool", "GlobalAveragePool"})
#: data-movement ops that run on int8 as they are when input and output share parameters
INT8_SAME_PARAMS = frozenset({"MaxPool", "Reshape", "Transpose", "Pad", "Slice", "Split", "Gather",
                              "ReduceMax", "ReduceMin", "GlobalMaxPool", "Identity"})

IMPORTED_OPS = tuple(sorted(
    set(_UNARY) | set(_BINARY) | set(_REDUCE) | {
        "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "CONCATENATION", "RESHAPE",
        "SQUEEZE", "EXPAND_DIMS", "PAD", "PADV2", "MIRROR_PAD", "MAX_POOL_2D", "AVERAGE_POOL_2D",
        "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "SOFTMAX", "LOG_SOFTMAX", "DEQUANTIZE", "QUANTIZE",
        "DENSIFY", "STRIDED_SLICE", "SLICE", "TRANSPOSE", "SPLIT", "SPLIT_V", "PACK", "GATHER", "CAST",
        "BATCH_MATMUL"}))


class _Importer:
    def __init__(self, buf: bytes, input_shapes: Optional[Dict[str, Sequence[int]]] = None):
        self.f = _File(buf)
        self.input_shapes = dict(input_shapes or {})
        self.g = Graph("tflite")
        self.names: Dict[int, str] = {}          # tflite tensor index -> IR tensor name (values)
        self.const_cache: Dict[Tuple[int, str], str] = {}
        self.dequant_cache: Dict[str, str] = {}
        self.declared: Dict[str, int] = {}         # IR name -> tflite index, for the shape check
        self._resize_nearest = False
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
        for k, op, (code, _) in ops:
            self.op_index = k
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
        if quantized and not self.int8_ok(op, ins, out):
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

    def int8_ok(self, op: str, ins: List[str], out: str) -> bool:
        """Whether the IR's int8 kernels compute ``op`` on these int8 tensors as TFLite does."""
        T = self.g.tensors

        def q8(n: str) -> bool:
            return bool(n) and T[n].dtype == "int8" and T[n].quant is not None
        if not ins or not q8(ins[0]):
            return False
        if op in ("Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul"):
            bias = ins[2] if len(ins) > 2 else ""
            return q8(ins[1]) and (not bias or T[bias].dtype == "int32")
        if op in ("Add", "Sub", "Mul", "Concat"):
            return all(q8(i) for i in ins if i)
        if op in INT8_OPS:
            return True
        if op in INT8_SAME_PARAMS or (op == "Resize" and self._resize_nearest):
            qa, qb = T[ins[0]].quant, T[out].quant
            return (np.float32(qa["scale"][0]) == np.float32(qb["scale"][0])
                    and qa["zero_point"][0] == qb["zero_point"][0])
        return False

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

    def op_conv_2d(self, op, ins, outs) -> None:
        self.conv(op, ins, outs, depthwise=False)

    def op_depthwise_conv_2d(self, op, ins, outs) -> None:
        self.conv(op, ins, outs, depthwise=True)

    def conv(self, op, ins, outs, depthwise: bool) -> None:
        name = "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"
        self.need(ins, 2, name)
        o = _options(op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
        x = self.value(ins[0])
        xs = self.shape_of(ins[0])
        w, wq, exact = self.weights(ins[1])
        if w.ndim != 4 or len(xs) != 4:
            raise UnsupportedOpError(f"{name}: only 2-D convolutions on 4-D NHWC tensors are supported")
        c_in = xs[3]
        if depthwise:
            if w.shape[0] != 1:
                raise _Malformed(f"{name}: filter shape {w.shape} is not 1HWC")
            wir = np.ascontiguousarray(w[0].transpose(2, 0, 1)[:, None])     # (C*M, 1, H, W)
            group = c_in
            axis_map = lambda a: 0 if a == 3 else a                           # noqa: E731
        else:
            wir = w.transpose(0, 3, 1, 2)                                     # OHWI -> OIHW
            if w.shape[3] == 0 or c_in % w.shape[3]:
                raise _Malformed(f"{name}: input has {c_in} channels, filter {w.shape}")
            group = c_in // w.shape[3]
            axis_map = lambda a: {0: 0, 1: 2, 2: 3, 3: 1}[a]                 # noqa: E731
        if wir.shape[0] % group:
            raise _Malformed(f"{name}: {wir.shape[0]} output channels for {group} groups")
        wname = self.weight_const(ins[1], wir, wq, axis_map)
        hybrid = self.g.tensors[x].quant is None and wq is not None     # float input, int8 weights
        if hybrid:
            wname = self.float_of(wname)
        b = self.bias(ins[2] if len(ins) > 2 else -1, wq is None or hybrid)
        y = self.output(outs[0])
        attrs = dict(kernel_shape=[int(wir.shape[2]), int(wir.shape[3])],
                     strides=[int(_opt(o, "StrideH", 1)), int(_opt(o, "StrideW", 1))],
                     dilations=[int(_opt(o, "DilationHFactor", 1)), int(_opt(o, "DilationWFactor", 1))],
                     pads=[0, 0, 0, 0], auto_pad=self.padding(_opt(o, "Padding", SAME)), group=int(group),
                     data_layout="NHWC")
        if min(attrs["strides"] + attrs["dilations"]) < 1:
            raise _Malformed(f"{name}: strides and dilations must be positive")
        self.emit("Conv", [x, wname, b], y, int(_opt(o, "FusedActivationFunction", 0)), **attrs)

    def padding(self, p: int) -> str:
        if p == SAME:
            return "SAME_UPPER"
        if p == VALID:
            return "VALID"
        raise _Malformed(f"unknown padding {p}")

    def op_transpose_conv(self, op, ins, outs) -> None:
        self.need(ins, 3, "TRANSPOSE_CONV")
        o = _options(op, "TransposeConvOptions")
        out_shape = self.const_ints(ins[0], "TRANSPOSE_CONV output shape")
        w, wq, _ = self.weights(ins[1])                                      # (O, H, W, I)
        x = self.value(ins[2])
        xs = self.shape_of(ins[2])
        if w.ndim != 4 or len(out_shape) != 4 or len(xs) != 4:
            raise UnsupportedOpError("TRANSPOSE_CONV: only 2-D on 4-D NHWC tensors is supported")
        sh, sw = int(_opt(o, "StrideH", 1)), int(_opt(o, "StrideW", 1))
        if min(sh, sw) < 1:
            raise _Malformed("TRANSPOSE_CONV: strides must be positive")
        kh, kw = w.shape[1], w.shape[2]
        pads, opad = [], []
        for ins_, out_, k, s in ((xs[1], out_shape[1], kh, sh), (xs[2], out_shape[2], kw, sw)):
            full = s * (ins_ - 1) + k
            total = full - out_
            if _opt(o, "Padding", SAME) == VALID and total > 0:
                total = max(0, total)                 # VALID: the output keeps the first out_ rows
                pads.append((0, total))
                opad.append(0)
            elif total >= 0:
                pads.append((total // 2, total - total // 2))
                opad.append(0)
            else:
                pads.append((0, 0))
                opad.append(-total)
        wir = np.ascontiguousarray(w.transpose(3, 0, 1, 2))                   # (I, O, H, W)
        wname = self.weight_const(ins[1], wir, wq, lambda a: 1 if a == 0 else a)
        b = self.bias(ins[3] if len(ins) > 3 else -1, True)
        y = self.output(outs[0])
        xf = self.float_of(x)
        wf = self.float_of(wname)
        xn = self.temp(xf, "_nchw", "float32", None)
        self.node("Transpose", [xf], [xn], perm=[0, 3, 1, 2])
        yn = self.g.unique_name(y + "_nchw")
        self.g.add_tensor(yn, "float32")
        self.node("ConvTranspose", [xn, wf, b], [yn], kernel_shape=[int(kh), int(kw)], strides=[sh, sw],
                  dilations=[1, 1], pads=[pads[0][0], pads[1][0], pads[0][1], pads[1][1]],
                  output_padding=opad, auto_pad="NOTSET", group=1)
        act = int(_opt(o, "FusedActivationFunction", 0))
        if self.g.tensors[y].quant is not None:
            yf = self.temp(y, "_float", "float32", None)
            self._emit_float("Transpose", [yn], yf, act, {"perm": [0, 2, 3, 1]})
            self.quantize(yf, y)
        else:
            self._emit_float("Transpose", [yn], y, act, {"perm": [0, 2, 3, 1]})

    def op_fully_connected(self, op, ins, outs) -> None:
        self.need(ins, 2, "FULLY_CONNECTED")
        o = _options(op, "FullyConnectedOptions")
        if int(_opt(o, "WeightsFormat", 0)) != 0:
            raise UnsupportedOpError("FULLY_CONNECTED: shuffled weights formats are not supported")
        x = self.value(ins[0])
        xs = self.shape_of(ins[0])
        w, wq, _ = self.weights(ins[1])                                      # (O, K)
        if w.ndim != 2 or not xs or w.shape[1] == 0 or int(np.prod(xs)) % w.shape[1]:
            raise _Malformed(f"FULLY_CONNECTED: input {xs} and weights {w.shape} disagree")
        k = int(w.shape[1])
        wname = self.weight_const(ins[1], w, wq, lambda a: a)
        hybrid = self.g.tensors[x].quant is None and wq is not None     # float input, int8 weights
        if hybrid:
            wname = self.float_of(wname)
        b = self.bias(ins[2] if len(ins) > 2 else -1, wq is None or hybrid)
        y = self.output(outs[0])
        ys = self.shape_of(outs[0])
        if len(xs) != 2 or xs[1] != k:
            x2 = self.temp(x, "_2d")
            self.node("Reshape", [x, self.const("fc_shape", np.array([-1, k], np.int64))], [x2], allowzero=0)
            x = x2
        act = int(_opt(o, "FusedActivationFunction", 0))
        if len(ys) == 2:
            self.emit("Gemm", [x, wname, b], y, act, alpha=1.0, beta=1.0, transA=0, transB=1)
        else:
            mid = self.temp(y, "_2d")
            self.emit("Gemm", [x, wname, b], mid, act, alpha=1.0, beta=1.0, transA=0, transB=1)
            self.node("Reshape", [mid, self.const("fc_out_shape", np.array(ys, np.int64))], [y], allowzero=0)

    def op_batch_matmul(self, op, ins, outs) -> None:
        self.need(ins, 2, "BATCH_MATMUL")
        o = _options(op, "BatchMatMulOptions")
        a, b = self.value(ins[0]), self.value(ins[1])
        for flag, idx in (("AdjX", 0), ("AdjY", 1)):
            if _opt(o, flag, False):
                r = len(self.shape_of(ins[idx]))
                src = a if idx == 0 else b
                t = self.temp(src, "_adj")
                self.node("Transpose", [src], [t], perm=list(range(r - 2)) + [r - 1, r - 2])
                a, b = (t, b) if idx == 0 else (a, t)
        self.emit("MatMul", [a, b], self.output(outs[0]))

    def unary(self, name: str, op, ins, outs) -> None:
        self.need(ins, 1, name)
        x = self.value(ins[0])
        y = self.output(outs[0])
        ir = _UNARY[name]
        if name == "RSQRT":
            mid = self.temp(y, "_sqrt", quant=None)
            self.node("Sqrt", [self.float_of(x)], [mid])
            self._finish_float("Reciprocal", [mid], y)
        elif name == "SQUARE":
            self.emit("Mul", [x, x], y)
        elif ir == "Clip":
            lo, hi = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}[name]
            self.emit("Clip", [x, self.const("clip_min", np.float32(lo)), self.const("clip_max", np.float32(hi))], y)
        elif name == "LEAKY_RELU":
            self.emit("LeakyRelu", [x], y, alpha=float(_opt(_options(op, "LeakyReluOptions"), "Alpha", 0.2)))
        elif name == "ELU":
            self.emit("Elu", [x], y, alpha=1.0)
        elif name == "GELU":
            approx = bool(_opt(_options(op, "GeluOptions"), "Approximate", False))
            self.emit("Gelu", [x], y, approximate="tanh" if approx else "none")
        else:
            self.emit(ir, [x], y)

    def _finish_float(self, op: str, fins: List[str], y: str) -> None:
        """``op`` on float inputs writing ``y`` (quantizing when ``y`` is int8)."""
        if self.g.tensors[y].quant is not None:
            f = self.temp(y, "_float", "float32", None)
            self.node(op, fins, [f])
            self.quantize(f, y)
        else:
            self.node(op, fins, [y])

    def binary(self, name: str, op, ins, outs) -> None:
        self.need(ins, 2, name)
        a, b = self.value(ins[0]), self.value(ins[1])
        y = self.output(outs[0])
        table = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions"}.get(name)
        act = int(_opt(_options(op, table), "FusedActivationFunction", 0)) if table else ACT_NONE
        if name == "SQUARED_DIFFERENCE":
            d = self.temp(y, "_diff", "float32", None)
            self.node("Sub", [self.float_of(a), self.float_of(b)], [d])
            self._finish_float("Mul", [d, d], y)
            return
        self.emit(_BINARY[name], [a, b], y, act)

    def reduce(self, name: str, op, ins, outs) -> None:
        self.need(ins, 2, name)
        x = self.value(ins[0])
        xs = self.shape_of(ins[0])
        axes = sorted({a % len(xs) for a in self.const_ints(ins[1], f"{name} axes")}) if xs else []
        keep = bool(_opt(_options(op, "ReducerOptions"), "KeepDims", False))
        if name == "MEAN" and len(xs) == 4 and axes == [1, 2]:
            # a global average pool. The IR's int8 mean is TFLite MEAN's (zp_y + MBQM(sum,
            # s_x / (n s_y))) when the output parameters differ from the input's, and
            # AVERAGE_POOL_2D's rounded division when they are equal, where TFLite's MEAN still
            # requantizes. Then the mean goes to a tensor whose zero point is one step off
            # (the requantizing path) and an exact +-1 table (Clip between the two parameter
            # sets) moves it back: TFLite's result, except that the one extreme value on the
            # far side of the shift saturates one step early.
            y = self.output(outs[0])
            qx, qy = self.g.tensors[x].quant, self.g.tensors[y].quant
            src = x
            if qx is not None and qy is not None and np.float32(qx["scale"][0]) == np.float32(qy["scale"][0]) \
                    and qx["zero_point"][0] == qy["zero_point"][0]:
                zp = int(qy["zero_point"][0])
                shifted = self.temp(y, "_mean", quant=dict(qy, zero_point=[zp + 1 if zp <= 0 else zp - 1]))
                self.node("GlobalAveragePool", [x], [shifted], data_layout="NHWC")
                src, gap = shifted, False
            else:
                gap = True
            target = y if keep else self.temp(y, "_keep")
            if gap:
                self.emit("GlobalAveragePool", [src], target, data_layout="NHWC")
            else:
                self.node("Clip", [src], [target])
            if not keep:
                self.node("Reshape", [target, self.const("mean_shape", np.array([xs[0], xs[3]], np.int64))], [y],
                          allowzero=0)
            return
        y = self.output(outs[0])
        self.emit(_REDUCE[name], [x, self.const(f"{name.lower()}_axes", np.array(axes, np.int64))], y,
                  keepdims=int(keep), noop_with_empty_axes=0)

    def op_concatenation(self, op, ins, outs) -> None:
        o = _options(op, "ConcatenationOptions")
        if not ins:
            raise _Malformed("CONCATENATION without inputs")
        xs = [self.value(i) for i in ins]
        rank = len(self.shape_of(ins[0]))
        axis = int(_opt(o, "Axis", 0))
        if not -rank <= axis < max(rank, 1):
            raise _Malformed(f"CONCATENATION axis {axis} for rank {rank}")
        # the options carry a fused activation, but LiteRT's kernels never apply it: neither do we
        self.emit("Concat", xs, self.output(outs[0]), axis=axis % max(rank, 1))

    def reshape_to(self, x_i: int, y_i: int) -> None:
        x = self.value(x_i)
        y = self.output(y_i)
        shape = self.shape_of(y_i)
        self.emit("Reshape", [x, self.const("shape", np.array(shape, np.int64))], y, allowzero=0)

    def op_reshape(self, op, ins, outs) -> None:
        self.need(ins, 1, "RESHAPE")
        self.reshape_to(ins[0], outs[0])

    op_squeeze = op_reshape
    op_expand_dims = op_reshape

    def op_pad(self, op, ins, outs, mode: str = "constant") -> None:
        self.need(ins, 2, "PAD")
        x = self.value(ins[0])
        pads = self.const_ints(ins[1], "PAD paddings")
        r = len(self.shape_of(ins[0]))
        if len(pads) != 2 * r or min(pads) < 0:
            raise _Malformed(f"PAD: paddings {pads} for rank {r}")
        onnx_pads = pads[0::2] + pads[1::2]
        y = self.output(outs[0])
        t = self.g.tensors[y]
        cv = ""
        if mode == "constant":
            if len(ins) > 2 and ins[2] >= 0:
                cv = self.value(ins[2])
            elif t.quant is not None:
                cv = self.const("pad_value", np.int8(t.quant["zero_point"][0]), dict(t.quant))
        self.emit("Pad", [x, self.const("pads", np.array(onnx_pads, np.int64)), cv], y, mode=mode)

    def op_padv2(self, op, ins, outs) -> None:
        self.op_pad(op, ins, outs)

    def op_mirror_pad(self, op, ins, outs) -> None:
        mode = int(_opt(_options(op, "MirrorPadOptions"), "Mode", 0))
        if mode != 0:
            raise UnsupportedOpError("MIRROR_PAD: SYMMETRIC mode is not supported (REFLECT is)")
        self.op_pad(op, ins[:2], outs, mode="reflect")

    def pool(self, op, ins, outs, ir: str) -> None:
        self.need(ins, 1, ir)
        o = _options(op, "Pool2DOptions")
        x = self.value(ins[0])
        if len(self.shape_of(ins[0])) != 4:
            raise UnsupportedOpError(f"{ir}: only 4-D NHWC input is supported")
        k = [int(_opt(o, "FilterHeight", 1)), int(_opt(o, "FilterWidth", 1))]
        s = [int(_opt(o, "StrideH", 1)), int(_opt(o, "StrideW", 1))]
        if min(k + s) < 1:
            raise _Malformed(f"{ir}: filter and strides must be positive")
        attrs = dict(kernel_shape=k, strides=s, pads=[0, 0, 0, 0], auto_pad=self.padding(_opt(o, "Padding", SAME)),
                     ceil_mode=0, data_layout="NHWC", dilations=[1, 1])
        if ir == "AveragePool":
            attrs["count_include_pad"] = 0
        else:
            attrs["storage_order"] = 0
        self.emit(ir, [x], self.output(outs[0]), int(_opt(o, "FusedActivationFunction", 0)), **attrs)

    def op_max_pool_2d(self, op, ins, outs) -> None:
        self.pool(op, ins, outs, "MaxPool")

    def op_average_pool_2d(self, op, ins, outs) -> None:
        self.pool(op, ins, outs, "AveragePool")

    def resize(self, op, ins, outs, bilinear: bool) -> None:
        self.need(ins, 2, "RESIZE")
        o = _options(op, "ResizeBilinearOptions" if bilinear else "ResizeNearestNeighborOptions")
        x = self.value(ins[0])
        xs = self.shape_of(ins[0])
        size = self.const_ints(ins[1], "RESIZE size")
        if len(xs) != 4 or len(size) != 2 or min(size) < 1:
            raise _Malformed(f"RESIZE: input {xs}, size {size}")
        align = bool(_opt(o, "AlignCorners", False))
        half = bool(_opt(o, "HalfPixelCenters", False))
        if bilinear:
            ctm = "align_corners" if align else ("half_pixel" if half else "asymmetric")
            nearest = "round_prefer_floor"
        else:
            ctm = "align_corners" if align else ("tf_half_pixel_for_nn" if half else "asymmetric")
            nearest = "round_prefer_ceil" if align else "floor"
        self._resize_nearest = not bilinear
        sizes = self.const("sizes", np.array([xs[0], size[0], size[1], xs[3]], np.int64))
        self.emit("Resize", [x, "", "", sizes], self.output(outs[0]), mode="linear" if bilinear else "nearest",
                  coordinate_transformation_mode=ctm, nearest_mode=nearest, cubic_coeff_a=-0.75,
                  exclude_outside=0, extrapolation_value=0.0, antialias=0, keep_aspect_ratio_policy="stretch")

    def op_resize_bilinear(self, op, ins, outs) -> None:
        self.resize(op, ins, outs, True)

    def op_resize_nearest_neighbor(self, op, ins, outs) -> None:
        self.resize(op, ins, outs, False)

    def softmax(self, op, ins, outs, ir: str) -> None:
        self.need(ins, 1, ir)
        x = self.value(ins[0])
        y = self.output(outs[0])
        beta = float(_opt(_options(op, "SoftmaxOptions"), "Beta", 1.0)) if ir == "Softmax" else 1.0
        xf = self.float_of(x)
        if beta != 1.0:
            scaled = self.temp(xf, "_beta", "float32", None)
            self.node("Mul", [xf, self.const("beta", np.float32(beta))], [scaled])
            xf = scaled
        self._softmax_out(ir, xf, y)

    def _softmax_out(self, ir: str, xf: str, y: str) -> None:
        if self.g.tensors[y].quant is not None:
            f = self.temp(y, "_float", "float32", None)
            self.node(ir, [xf], [f], axis=-1)
            self.quantize(f, y)
        else:
            self.node(ir, [xf], [y], axis=-1)

    def op_softmax(self, op, ins, outs) -> None:
        self.softmax(op, ins, outs, "Softmax")

    def op_log_softmax(self, op, ins, outs) -> None:
        self.softmax(op, ins, outs, "LogSoftmax")

    def op_dequantize(self, op, ins, outs) -> None:
        self.need(ins, 1, "DEQUANTIZE")
        if self.is_const(ins[0]):
            # fp16 / int8 weights: dequantized once, here
            w, q, _ = self.weights(ins[0])
            if q is not None:
                w = self.g.tensors[self.float_of(self.const("dequantize", w, q))].data
            self.folded[outs[0]] = self.check_folded(outs[0], np.asarray(w, np.float32))
            return
        x = self.value(ins[0])
        y = self.output(outs[0])
        if self.g.tensors[x].dtype == "float16":
            self.node("Cast", [x], [y], to="float32", saturate=1)
        elif self.g.tensors[x].quant is None:
            raise UnsupportedOpError("DEQUANTIZE of an unquantized tensor")
        else:
            self.dequantize(x, y)

    def op_quantize(self, op, ins, outs) -> None:
        self.need(ins, 1, "QUANTIZE")
        x = self.value(ins[0])
        y = self.output(outs[0])
        if self.g.tensors[y].quant is None:
            raise UnsupportedOpError("QUANTIZE to an unquantized tensor")
        self.quantize(self.float_of(x), y)              # int8 -> int8 requantizes through float

    def op_densify(self, op, ins, outs) -> None:
        self.need(ins, 1, "DENSIFY")
        self.folded[outs[0]] = self.check_folded(outs[0], self.array(ins[0]))

    def check_folded(self, i: int, value: np.ndarray) -> np.ndarray:
        if i in self.names or i in self.folded:
            raise _Malformed(f"tensor {i} is written twice")
        if tuple(value.shape) != self.shape_of(i):
            raise _Malformed(f"tensor {i}: declared shape {self.shape_of(i)}, computed {value.shape}")
        return value

    def op_cast(self, op, ins, outs) -> None:
        self.need(ins, 1, "CAST")
        y = self.output(outs[0])
        self.node("Cast", [self.value(ins[0])], [y], to=self.g.tensors[y].dtype, saturate=1)

    def op_transpose(self, op, ins, outs) -> None:
        self.need(ins, 2, "TRANSPOSE")
        perm = self.const_ints(ins[1], "TRANSPOSE perm")
        r = len(self.shape_of(ins[0]))
        if sorted(p % max(r, 1) for p in perm) != list(range(r)):
            raise _Malformed(f"TRANSPOSE: perm {perm} for rank {r}")
        self.emit("Transpose", [self.value(ins[0])], self.output(outs[0]), perm=[p % r for p in perm])

    def slice_nodes(self, x_i: int, y_i: int, starts, ends, steps) -> None:
        x = self.value(x_i)
        y = self.output(y_i)
        r = len(starts)
        mid = self.temp(y, "_slice")
        self.emit("Slice", [x, self.const("starts", np.array(starts, np.int64)),
                            self.const("ends", np.array(ends, np.int64)),
                            self.const("axes", np.arange(r, dtype=np.int64)),
                            self.const("steps", np.array(steps, np.int64))], mid)
        self.emit("Reshape", [mid, self.const("shape", np.array(self.shape_of(y_i), np.int64))], y, allowzero=0)

    def op_slice(self, op, ins, outs) -> None:
        self.need(ins, 3, "SLICE")
        xs = self.shape_of(ins[0])
        begin = self.const_ints(ins[1], "SLICE begin")
        size = self.const_ints(ins[2], "SLICE size")
        if len(begin) != len(xs) or len(size) != len(xs):
            raise _Malformed("SLICE: begin/size do not match the input rank")
        ends = [d if s == -1 else b + s for b, s, d in zip(begin, size, xs)]
        self.slice_nodes(ins[0], outs[0], begin, ends, [1] * len(xs))

    def op_strided_slice(self, op, ins, outs) -> None:
        self.need(ins, 4, "STRIDED_SLICE")
        o = _options(op, "StridedSliceOptions")
        xs = self.shape_of(ins[0])
        begin = self.const_ints(ins[1], "STRIDED_SLICE begin")
        end = self.const_ints(ins[2], "STRIDED_SLICE end")
        stride = self.const_ints(ins[3], "STRIDED_SLICE strides")
        m = len(begin)
        if len(end) != m or len(stride) != m or 0 in stride:
            raise _Malformed("STRIDED_SLICE: begin, end and strides differ in length (or a stride is 0)")
        bm, em = int(_opt(o, "BeginMask", 0)), int(_opt(o, "EndMask", 0))
        ell, new, shrink = int(_opt(o, "EllipsisMask", 0)), int(_opt(o, "NewAxisMask", 0)), \
            int(_opt(o, "ShrinkAxisMask", 0))
        offset = bool(_opt(o, "Offset", False))
        # expand the spec over the input dims (numpy semantics of TF's strided slice)
        per_dim = []                       # (begin, end, step, shrink) per input dim
        n_real = sum(1 for k in range(m) if not (new >> k) & 1 and not (ell >> k) & 1)
        d = 0
        for k in range(m):
            if (ell >> k) & 1:
                for _ in range(max(0, len(xs) - n_real - d + sum(
                        1 for j in range(k) if not (new >> j) & 1 and not (ell >> j) & 1))):
                    per_dim.append((0, xs[d], 1, False))
                    d += 1
                continue
            if (new >> k) & 1:
                continue                   # new axes only change the final shape (the declared one)
            if d >= len(xs):
                raise _Malformed("STRIDED_SLICE: the spec has more dims than the input")
            n = xs[d]
            b, e, s = begin[k], end[k] + (begin[k] if offset else 0), stride[k]
            if (shrink >> k) & 1:
                b = b + n if b < 0 else b
                if not 0 <= b < n:
                    raise _Malformed(f"STRIDED_SLICE: index {begin[k]} out of range for dim of {n}")
                per_dim.append((b, b + 1, 1, True))
            else:
                sl = slice(None if (bm >> k) & 1 else b, None if (em >> k) & 1 else e, s)
                b2, e2, s2 = sl.indices(n)
                if s2 < 0 and e2 < 0:
                    e2 = -(1 << 62)
                per_dim.append((b2, e2, s2, False))
            d += 1
        while d < len(xs):
            per_dim.append((0, xs[d], 1, False))
            d += 1
        self.slice_nodes(ins[0], outs[0], [p[0] for p in per_dim], [p[1] for p in per_dim],
                         [p[2] for p in per_dim])

    def op_split(self, op, ins, outs) -> None:
        self.need(ins, 2, "SPLIT")
        axis = self.const_ints(ins[0], "SPLIT axis")[0]
        xs = self.shape_of(ins[1])
        n = len(outs)
        axis %= max(len(xs), 1)
        if n < 1 or xs[axis] % n:
            raise _Malformed(f"SPLIT: {xs[axis]} not divisible into {n}")
        self._split(ins[1], outs, axis, [xs[axis] // n] * n)

    def op_split_v(self, op, ins, outs) -> None:
        self.need(ins, 3, "SPLIT_V")
        xs = self.shape_of(ins[0])
        sizes = self.const_ints(ins[1], "SPLIT_V sizes")
        axis = self.const_ints(ins[2], "SPLIT_V axis")[0] % max(len(xs), 1)
        if -1 in sizes:
            sizes[sizes.index(-1)] = xs[axis] - (sum(sizes) + 1)
        if len(sizes) != len(outs) or sum(sizes) != xs[axis] or min(sizes) < 0:
            raise _Malformed(f"SPLIT_V: sizes {sizes} for dim {xs[axis]}")
        self._split(ins[0], outs, axis, sizes)

    def _split(self, x_i: int, outs: List[int], axis: int, sizes: List[int]) -> None:
        x = self.value(x_i)
        ys = [self.output(o) for o in outs]
        ok = all(self.int8_ok("Split", [x], y) for y in ys) if self.g.tensors[x].quant is not None else True
        split = self.const("split", np.array(sizes, np.int64))
        if ok:
            self.node("Split", [x, split], ys, axis=axis)
            return
        fys = [self.temp(y, "_float", "float32", None) for y in ys]
        self.node("Split", [self.float_of(x), split], fys, axis=axis)
        for f, y in zip(fys, ys):
            self.quantize(f, y)

    def op_pack(self, op, ins, outs) -> None:
        o = _options(op, "PackOptions")
        if not ins:
            raise _Malformed("PACK without inputs")
        xs = self.shape_of(ins[0])
        axis = int(_opt(o, "Axis", 0)) % (len(xs) + 1)
        expanded = []
        for i in ins:
            x = self.value(i)
            shape = list(self.shape_of(i))
            shape.insert(axis, 1)
            t = self.temp(x, "_expanded")
            self.node("Reshape", [x, self.const("shape", np.array(shape, np.int64))], [t], allowzero=0)
            expanded.append(t)
        self.emit("Concat", expanded, self.output(outs[0]), axis=axis)

    def op_gather(self, op, ins, outs) -> None:
        self.need(ins, 2, "GATHER")
        o = _options(op, "GatherOptions")
        if int(_opt(o, "BatchDims", 0)):
            raise UnsupportedOpError("GATHER with batch_dims is not supported")
        r = len(self.shape_of(ins[0]))
        self.emit("Gather", [self.value(ins[0]), self.value(ins[1])], self.output(outs[0]),
                  axis=int(_opt(o, "Axis", 0)) % max(r, 1))


# -- checks and entry point ---------------------------------------------------------------------

def _check_shapes(g: Graph, declared: Dict[str, Tuple[int, ...]]) -> None:
    for name, shape in declared.items():
        t = g.tensors.get(name)
        if t is None or t.shape is None:
            continue
        if tuple(t.shape) != tuple(shape) and not (len(shape) == 0 and t.shape == (1,)):
            raise ConversionError(f"TFLite tensor {name!r}: the model declares shape {tuple(shape)}, "
                                  f"its op computes {tuple(t.shape)}")


def load_tflite(path_or_bytes: Union[str, os.PathLike, bytes, bytearray, memoryview],
                input_shapes: Optional[Dict[str, Sequence[int]]] = None) -> Graph:
    """Import a .tflite flatbuffer (a path or its bytes) into an IR graph.

    ``input_shapes`` overrides input shapes by name (the file's shapes are static).
    Raises ConversionError for a file that is not a valid TFLite model and
    UnsupportedOpError (naming each) for custom or unsupported ops."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        buf, where = bytes(path_or_bytes), "TFLite model"
    else:
        where = os.fspath(path_or_bytes)
        if not os.path.isfile(where):
            raise ConversionError(f"{where}: no such file")
        with open(where, "rb") as f:
            buf = f.read()
    if len(buf) < 16 or buf[4:8] != MAGIC:
        raise ConversionError(f"{where}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    root = int.from_bytes(buf[0:4], "little")
    if root < 8 or root + 4 > len(buf):
        raise ConversionError(f"{where}: malformed TFLite flatbuffer (root offset {root} outside the file)")
    imp = _Importer(buf, input_shapes)
    try:
        g = imp.read()
        declared = {n: imp.shape_of(i) for n, i in imp.declared.items()}
        g.prune()
        g.validate()
        infer_shapes(g)
    except _Malformed as e:
        raise ConversionError(f"{where}: malformed TFLite flatbuffer: {e}") from None
    except EdgeInferError as e:
        if isinstance(e, UnsupportedOpError):
            raise
        raise type(e)(f"{where}: {e}") from None
    except RecursionError:
        raise ConversionError(f"{where}: malformed TFLite flatbuffer (nesting too deep)") from None
    except MemoryError:
        raise ConversionError(f"{where}: malformed TFLite flatbuffer (a tensor too large to decode)") from None
    except Exception as e:      # the generated reader on a corrupt buffer: struct.error, IndexError, ...
        raise ConversionError(f"{where}: malformed TFLite flatbuffer ({type(e).__name__}: {e})") from None
    if not input_shapes:
        _check_shapes(g, declared)
    return g
