"""The TFLite flatbuffer format as the importer and exporter need it: type and op tables,
and ``ModelWriter``, a small writer of .tflite files over the ``flatbuffers`` builder and the
generated schema functions of the ``tflite`` package (both in the ``convert`` extra).

The writer is schema-level, not graph-level: it writes whatever tensors (dense or sparse,
float or quantized, per tensor or per channel) and builtin or custom operators it is given,
so tests can write files the way other converters write them.

>>> w = ModelWriter()                                             # doctest: +SKIP
>>> x = w.tensor("x", "float32", (1, 4))
>>> y = w.tensor("y", "float32", (1, 4))
>>> w.op("RELU", [x], [y])
>>> data = w.finish([x], [y])                                     # bytes of a .tflite file
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import ConversionError

#: TensorType enum -> numpy dtype name (None: no IR dtype)
TFL_TYPES: Dict[int, Optional[str]] = {
    0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: None, 6: "bool",
    7: "int16", 8: None, 9: "int8", 10: "float64", 11: None, 12: "uint64", 13: None, 14: None,
    15: "uint32", 16: "uint16", 17: None, 18: None}
TYPE_NAMES = {0: "FLOAT32", 1: "FLOAT16", 2: "INT32", 3: "UINT8", 4: "INT64", 5: "STRING", 6: "BOOL",
              7: "INT16", 8: "COMPLEX64", 9: "INT8", 10: "FLOAT64", 11: "COMPLEX128", 12: "UINT64",
              13: "RESOURCE", 14: "VARIANT", 15: "UINT32", 16: "UINT16", 17: "INT4", 18: "BFLOAT16"}
DTYPE_TO_TFL = {v: k for k, v in TFL_TYPES.items() if v is not None}

#: ActivationFunctionType
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = range(6)
#: Padding
SAME, VALID = 0, 1
#: DimensionType (sparsity)
DENSE, SPARSE_CSR = 0, 1
#: SparseIndexVector union members
INDEX_VECTORS = {1: ("Int32Vector", np.int32), 2: ("Uint16Vector", np.uint16), 3: ("Uint8Vector", np.uint8)}

#: builtin op name -> its options table (ops without options are absent)
OPTIONS = {
    "CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "TRANSPOSE_CONV": "TransposeConvOptions", "FULLY_CONNECTED": "FullyConnectedOptions",
    "ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions",
    "CONCATENATION": "ConcatenationOptions", "RESHAPE": "ReshapeOptions", "PAD": "PadOptions",
    "PADV2": "PadV2Options", "MIRROR_PAD": "MirrorPadOptions",
    "MAX_POOL_2D": "Pool2DOptions", "AVERAGE_POOL_2D": "Pool2DOptions", "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "REDUCE_PROD": "ReducerOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions", "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "SOFTMAX": "SoftmaxOptions", "LOG_SOFTMAX": "LogSoftmaxOptions",
    "STRIDED_SLICE": "StridedSliceOptions", "SLICE": "SliceOptions",
    "TRANSPOSE": "TransposeOptions", "LEAKY_RELU": "LeakyReluOptions", "HARD_SWISH": "HardSwishOptions",
    "DEQUANTIZE": "DequantizeOptions", "QUANTIZE": "QuantizeOptions", "DENSIFY": "DensifyOptions",
    "SPLIT": "SplitOptions", "SPLIT_V": "SplitVOptions", "SQUEEZE": "SqueezeOptions",
    "EXPAND_DIMS": "ExpandDimsOptions", "GELU": "GeluOptions", "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions", "CAST": "CastOptions", "GATHER": "GatherOptions",
    "PACK": "PackOptions", "BATCH_MATMUL": "BatchMatMulOptions", "DEPTH_TO_SPACE": "DepthToSpaceOptions",
    "SPACE_TO_DEPTH": "SpaceToDepthOptions", "SQUARED_DIFFERENCE": "SquaredDifferenceOptions",
    "ABS": "AbsOptions", "EXP": "ExpOptions", "NEG": "NegOptions", "POW": "PowOptions",
    "ARG_MAX": "ArgMaxOptions", "ARG_MIN": "ArgMinOptions",
}


def _builtin_codes() -> Dict[str, int]:
    bo = _schema("BuiltinOperator")
    return {k: v for k, v in vars(bo.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


def _options_codes() -> Dict[str, int]:
    bopt = _schema("BuiltinOptions")
    return {k: v for k, v in vars(bopt.BuiltinOptions).items() if not k.startswith("_") and isinstance(v, int)}


_CODES: Dict[str, int] = {}
_NAMES: Dict[int, str] = {}


def builtin_code(name: str) -> int:
    """The BuiltinOperator enum value of op ``name`` (e.g. "CONV_2D" -> 3)."""
    if not _CODES:
        _CODES.update(_builtin_codes())
        _NAMES.update({v: k for k, v in _CODES.items()})
    return _CODES[name]


def builtin_name(code: int) -> Optional[str]:
    """The builtin op name of an enum value, None when this schema does not know it."""
    if not _CODES:
        builtin_code("ADD")
    return _NAMES.get(code)


def camel(field: str) -> str:
    """schema field name -> the generated function suffix: stride_w -> StrideW."""
    return "".join(p[:1].upper() + p[1:] for p in field.split("_"))


def snake(name: str) -> str:
    """Generated accessor -> schema field name: DilationWFactor -> dilation_w_factor."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _schema(module: str):
    """The generated module ``tflite.<module>`` (``tflite/__init__`` star-imports each
    module's class over the module's own name, so ``import tflite.Model as M`` is the class)."""
    import importlib
    try:
        return importlib.import_module(f"tflite.{module}")
    except ImportError:
        raise ConversionError("TFLite import/export needs the TFLite schema package: "
                              "pip install tflite flatbuffers") from None


_options_module = _schema


class ModelWriter:
    """Collects buffers, tensors and operators of one subgraph and writes a .tflite file.

    Indices returned by ``tensor`` are the TFLite tensor indices used in ``op`` and
    ``finish``; -1 stands for an omitted optional input.
    """

    def __init__(self, description: str = "edge_infer"):
        self.description = description
        self.buffers: List[bytes] = [b""]          # buffer 0: the empty sentinel
        self.tensors: List[dict] = []
        self.ops: List[dict] = []
        self.opcodes: Dict[Tuple[str, str], int] = {}
        self.opcode_list: List[Tuple[str, str, int]] = []

    def buffer(self, data: bytes) -> int:
        self.buffers.append(bytes(data))
        return len(self.buffers) - 1

    def tensor(self, name: str, dtype: str, shape: Sequence[int], data: Optional[np.ndarray] = None,
               quant: Optional[dict] = None, sparsity: Optional[dict] = None,
               raw: Optional[bytes] = None) -> int:
        """Add a tensor. ``data``: a constant (written little-endian, C order) or ``raw``
        bytes as they are (sparse values). ``quant``: {"scale": [...], "zero_point": [...],
        "axis": int}. ``sparsity``: {"traversal_order": [...], "block_map": [...],
        "dim_metadata": [{"format": DENSE, "dense_size": n} | {"format": SPARSE_CSR,
        "segments": array, "indices": array}]}."""
        if dtype not in DTYPE_TO_TFL:
            raise ConversionError(f"TFLite has no tensor type for {dtype}")
        buf = 0
        if data is not None:
            arr = np.ascontiguousarray(np.asarray(data, dtype=dtype))
            buf = self.buffer(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
        elif raw is not None:
            buf = self.buffer(raw)
        self.tensors.append({"name": name, "type": DTYPE_TO_TFL[dtype], "shape": [int(d) for d in shape],
                             "buffer": buf, "quant": quant, "sparsity": sparsity})
        return len(self.tensors) - 1

    def opcode(self, name: str, custom: str = "", version: int = 1) -> int:
        key = (name, custom)
        if key not in self.opcodes:
            self.opcodes[key] = len(self.opcode_list)
            self.opcode_list.append((name, custom, version))
        else:
            i = self.opcodes[key]
            n, c, v = self.opcode_list[i]
            self.opcode_list[i] = (n, c, max(v, version))
        return self.opcodes[key]

    def op(self, name: str, inputs: Sequence[int], outputs: Sequence[int], options: Optional[dict] = None,
           custom: str = "", version: int = 1, custom_options: bytes = b"") -> None:
        """Add an operator: a builtin ``name`` ("CONV_2D") with its ``options`` fields
        (schema names: {"padding": SAME, "stride_w": 1, ...}), or ``name="CUSTOM"``,
        ``custom`` the custom code and ``custom_options`` its raw option bytes."""
        if name != "CUSTOM":
            builtin_code(name)              # KeyError for an unknown name: a caller bug
        self.ops.append({"opcode": self.opcode(name, custom, version), "name": name,
                         "inputs": [int(i) for i in inputs], "outputs": [int(o) for o in outputs],
                         "options": dict(options or {}), "custom_options": bytes(custom_options)})

    # -- serialisation --------------------------------------------------------------------------
    def finish(self, inputs: Sequence[int], outputs: Sequence[int], name: str = "main") -> bytes:
        import flatbuffers
        B, DM, M, O, OC, QP, SP, SG, T = (_schema(n) for n in (
            "Buffer", "DimensionMetadata", "Model", "Operator", "OperatorCode", "QuantizationParameters",
            "SparsityParameters", "SubGraph", "Tensor"))

        size = 1024 + sum(len(b) + 16 for b in self.buffers)
        b = flatbuffers.Builder(size)

        def ivec(values, dtype=np.int32):
            return b.CreateNumpyVector(np.asarray(values, dtype=dtype).reshape(-1))

        # buffers (16-byte aligned data, as LiteRT's own writer does)
        buf_offs = []
        for data in self.buffers:
            vec = None
            if data:
                b.StartVector(1, len(data), 16)
                b.head = b.head - len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                vec = b.EndVector()
            B.BufferStart(b)
            if vec is not None:
                B.BufferAddData(b, vec)
            buf_offs.append(B.BufferEnd(b))

        tensor_offs = []
        for t in self.tensors:
            shape = ivec(t["shape"])
            tname = b.CreateString(t["name"])
            q = None
            if t["quant"] is not None:
                qd = t["quant"]
                scale = ivec(qd["scale"], np.float32)
                zp = ivec(qd.get("zero_point", [0] * len(qd["scale"])), np.int64)
                QP.QuantizationParametersStart(b)
                QP.QuantizationParametersAddScale(b, scale)
                QP.QuantizationParametersAddZeroPoint(b, zp)
                QP.QuantizationParametersAddQuantizedDimension(b, int(qd.get("axis") or 0))
                q = QP.QuantizationParametersEnd(b)
            sp = self._sparsity(b, t["sparsity"], DM, SP, ivec) if t["sparsity"] else None
            T.TensorStart(b)
            T.TensorAddShape(b, shape)
            T.TensorAddType(b, t["type"])
            T.TensorAddBuffer(b, t["buffer"])
            T.TensorAddName(b, tname)
            if q is not None:
                T.TensorAddQuantization(b, q)
            if sp is not None:
                T.TensorAddSparsity(b, sp)
            tensor_offs.append(T.TensorEnd(b))

        op_offs = []
        opt_codes = _options_codes()
        for op in self.ops:
            ins, outs = ivec(op["inputs"]), ivec(op["outputs"])
            table = OPTIONS.get(op["name"])
            opt = self._options(b, table, op["options"], ivec) if table else None
            copts = ivec(np.frombuffer(op["custom_options"], np.uint8), np.uint8) if op["custom_options"] else None
            O.OperatorStart(b)
            O.OperatorAddOpcodeIndex(b, op["opcode"])
            O.OperatorAddInputs(b, ins)
            O.OperatorAddOutputs(b, outs)
            if opt is not None:
                O.OperatorAddBuiltinOptionsType(b, opt_codes[table])
                O.OperatorAddBuiltinOptions(b, opt)
            if copts is not None:
                O.OperatorAddCustomOptions(b, copts)
            op_offs.append(O.OperatorEnd(b))

        def table_vec(start, offs):
            start(b, len(offs))
            for o in reversed(offs):
                b.PrependUOffsetTRelative(o)
            return b.EndVector()

        tensors_v = table_vec(SG.SubGraphStartTensorsVector, tensor_offs)
        ops_v = table_vec(SG.SubGraphStartOperatorsVector, op_offs)
        ins_v, outs_v = ivec(inputs), ivec(outputs)
        sg_name = b.CreateString(name)
        SG.SubGraphStart(b)
        SG.SubGraphAddTensors(b, tensors_v)
        SG.SubGraphAddInputs(b, ins_v)
        SG.SubGraphAddOutputs(b, outs_v)
        SG.SubGraphAddOperators(b, ops_v)
        SG.SubGraphAddName(b, sg_name)
        sg = SG.SubGraphEnd(b)

        code_offs = []
        for oname, custom, version in self.opcode_list:
            cc = b.CreateString(custom) if oname == "CUSTOM" else None
            code = builtin_code(oname)
            OC.OperatorCodeStart(b)
            OC.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            OC.OperatorCodeAddBuiltinCode(b, code)
            OC.OperatorCodeAddVersion(b, version)
            if cc is not None:
                OC.OperatorCodeAddCustomCode(b, cc)
            code_offs.append(OC.OperatorCodeEnd(b))
        codes_v = table_vec(M.ModelStartOperatorCodesVector, code_offs)
        sgs_v = table_vec(M.ModelStartSubgraphsVector, [sg])
        bufs_v = table_vec(M.ModelStartBuffersVector, buf_offs)
        desc = b.CreateString(self.description)
        M.ModelStart(b)
        M.ModelAddVersion(b, 3)
        M.ModelAddOperatorCodes(b, codes_v)
        M.ModelAddSubgraphs(b, sgs_v)
        M.ModelAddDescription(b, desc)
        M.ModelAddBuffers(b, bufs_v)
        b.Finish(M.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _options(b, table: str, fields: dict, ivec) -> int:
        mod = _options_module(table)
        vecs = {k: ivec(v) for k, v in fields.items() if isinstance(v, (list, tuple, np.ndarray))}
        getattr(mod, f"{table}Start")(b)
        for k, v in fields.items():
            fn = getattr(mod, f"{table}Add{camel(k)}")
            fn(b, vecs[k] if k in vecs else v)
        return getattr(mod, f"{table}End")(b)

    @staticmethod
    def _sparsity(b, sp: dict, DM, SP, ivec) -> int:
        dims = []
        for d in sp["dim_metadata"]:
            if d["format"] == DENSE:
                DM.DimensionMetadataStart(b)
                DM.DimensionMetadataAddFormat(b, DENSE)
                DM.DimensionMetadataAddDenseSize(b, int(d["dense_size"]))
                dims.append(DM.DimensionMetadataEnd(b))
                continue
            offs = []
            for key in ("segments", "indices"):
                arr = np.asarray(d[key])
                kind = {np.dtype(np.int32): 1, np.dtype(np.uint16): 2, np.dtype(np.uint8): 3}.get(arr.dtype, 1)
                tname, dt = INDEX_VECTORS[kind]
                mod = _options_module(tname)
                vals = ivec(arr, dt)
                getattr(mod, f"{tname}Start")(b)
                getattr(mod, f"{tname}AddValues")(b, vals)
                offs.append((kind, getattr(mod, f"{tname}End")(b)))
            DM.DimensionMetadataStart(b)
            DM.DimensionMetadataAddFormat(b, SPARSE_CSR)
            DM.DimensionMetadataAddArraySegmentsType(b, offs[0][0])
            DM.DimensionMetadataAddArraySegments(b, offs[0][1])
            DM.DimensionMetadataAddArrayIndicesType(b, offs[1][0])
            DM.DimensionMetadataAddArrayIndices(b, offs[1][1])
            dims.append(DM.DimensionMetadataEnd(b))
        order = ivec(sp["traversal_order"])
        bmap = ivec(sp.get("block_map", []))
        SP.SparsityParametersStartDimMetadataVector(b, len(dims))
        for o in reversed(dims):
            b.PrependUOffsetTRelative(o)
        dims_v = b.EndVector()
        SP.SparsityParametersStart(b)
        SP.SparsityParametersAddTraversalOrder(b, order)
        SP.SparsityParametersAddBlockMap(b, bmap)
        SP.SparsityParametersAddDimMetadata(b, dims_v)
        return SP.SparsityParametersEnd(b)
