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

The package: ``reader.py`` (bound-checked flatbuffer access, sparse decoding), ``tables.py``
(builtin -> IR op tables), ``importer.py`` (tensors, quantization, dispatch), ``ops_nn.py`` and
``ops_tensor.py`` (the op converters, methods of the importer).
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence, Tuple, Union

from ...errors import ConversionError, EdgeInferError, UnsupportedOpError
from ...ir import Graph
from ...ir.shape_inference import infer_shapes
from .importer import _Importer
from .reader import MAGIC, _Malformed, decode_sparse
from .tables import IMPORTED_OPS

__all__ = ["load_tflite", "IMPORTED_OPS", "decode_sparse"]


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
