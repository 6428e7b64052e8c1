"""What the TFLite exporter's modules share: its error, the op maps, the int8 parameter checks
and the nearest-resize equivalence (export_tflite.py has the exporter)."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .errors import EdgeInferError
from .ops.resize import nearest_index, source_coords
from .tflite_format import ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1


class ExportError(EdgeInferError):
    """The graph cannot be written as a TFLite model."""


_ELEMENTWISE = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV", "Max": "MAXIMUM",
                "Min": "MINIMUM", "Pow": "POW"}


_UNARY = {"Relu": "RELU", "Sigmoid": "LOGISTIC", "Tanh": "TANH", "HardSwish": "HARD_SWISH",
          "Exp": "EXP", "Log": "LOG", "Sqrt": "SQRT", "Abs": "ABS", "Neg": "NEG", "Floor": "FLOOR",
          "Ceil": "CEIL", "Sin": "SIN", "Cos": "COS", "Round": "ROUND", "Elu": "ELU"}


_REDUCE = {"ReduceMean": "MEAN", "ReduceMax": "REDUCE_MAX", "ReduceMin": "REDUCE_MIN",
           "ReduceSum": "SUM", "ReduceProd": "REDUCE_PROD"}


#: activations written as a TFLite fused activation
_FUSABLE = {("Relu", ()): ACT_RELU, ("Clip", (0.0, 6.0)): ACT_RELU6, ("Clip", (-1.0, 1.0)): ACT_RELU_N1_TO_1}


#: the ops export_tflite._Exporter writes itself (EXPORTED_OPS adds export_tflite_vision's)
_BUILTIN_OPS = tuple(sorted(set(_ELEMENTWISE) | set(_UNARY) | set(_REDUCE) | {
    "Conv", "FusedConv", "ConvTranspose", "Gemm", "FusedGemm", "MatMul", "FusedMatMul", "MaxPool",
    "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat", "Reshape", "Flatten", "Squeeze",
    "Unsqueeze", "Transpose", "Pad", "Slice", "Split", "Gather", "Resize", "Softmax", "LogSoftmax",
    "Clip", "LeakyRelu", "PRelu", "Gelu", "SiLU", "HardSigmoid", "Reciprocal", "Identity", "Dropout",
    "Cast", "QuantizeLinear", "DequantizeLinear", "BatchNormalization", "ArgMax"}))


_FIXED_OUT = {"Sigmoid": (1.0 / 256, -128), "Tanh": (1.0 / 128, 0), "Softmax": (1.0 / 256, -128)}



def _q8(t) -> bool:
    return t is not None and t.dtype == "int8" and t.quant is not None



def _same_params(qa: dict, qb: dict) -> bool:
    return (np.float32(qa["scale"][0]) == np.float32(qb["scale"][0])
            and int(qa["zero_point"][0]) == int(qb["zero_point"][0]))



def _tensor_dense(t) -> Optional[np.ndarray]:
    if t.data is None:
        return None
    return np.asarray(t.data)



def _tflite_nearest(out: int, inp: int, align: bool, half: bool) -> np.ndarray:
    """Source index of each output of TFLite's RESIZE_NEAREST_NEIGHBOR along one axis."""
    f = np.float32
    scale = f(inp - 1) / f(out - 1) if align and out > 1 else f(inp) / f(out)
    v = (np.arange(out, dtype=f) + (f(0.5) if half else f(0))) * scale
    idx = np.round(v) if align else np.floor(v)
    return np.clip(idx, 0, inp - 1).astype(np.int64)



def _nearest_as_tflite(attrs: dict, in_sp, out_sp, scales, first_axis: int) -> Optional[Tuple[bool, bool]]:
    """(align_corners, half_pixel_centers) of a TFLite nearest resize that reads the same
    source pixels as ONNX nearest Resize ``attrs`` on these sizes (ONNX's half_pixel +
    round_prefer_floor is asymmetric floor at integer upscales), or None."""
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    mode = attrs.get("nearest_mode", "round_prefer_floor")
    want = []
    for i, (n_in, n_out) in enumerate(zip(in_sp, out_sp)):
        sc = float(scales.reshape(-1)[first_axis + i]) if scales is not None and scales.size == 4 else n_out / n_in
        try:
            xo, outside = source_coords(ctm, n_out, n_in, sc, None)
            want.append(nearest_index(xo, mode, sc, n_in))
        except EdgeInferError:
            return None
    for align, half in ((False, False), (False, True), (True, False)):
        if all(np.array_equal(_tflite_nearest(o, n, align, half), w) for o, n, w in zip(out_sp, in_sp, want)):
            return align, half
    return None



class _Q:
    """A minimal tensor-like holder of weight quantization for ``_Exporter.bias``."""

    def __init__(self, quant):
        self.quant = quant
        self.dtype = "int8" if quant is not None else "float32"
