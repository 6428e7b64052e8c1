"""What the ONNX converter (``onnx.py``) and its per-op normalizers (``onnx_normalizers.py``)
share: the IR's opset, ONNX element types, op schemas by opset. Kept apart so that the
normalizers need not import the converter that calls them."""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

#: the opset whose op names and attributes the IR uses
IR_OPSET = 21

#: ONNX TensorProto element type -> numpy dtype name (only types the IR has)
ONNX_TO_DTYPE = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                 7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
DTYPE_TO_ONNX = {v: k for k, v in ONNX_TO_DTYPE.items()}

_SCHEMAS: Dict[Tuple[str, int], object] = {}


def contiguous(arr: np.ndarray) -> np.ndarray:
    # not np.ascontiguousarray: it turns 0-d arrays (scalar constants) into 1-d
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def schema(onnx, op: str, opset: int):
    """The schema of ``op`` at ``opset`` (None when the op does not exist there)."""
    key = (op, opset)
    if key not in _SCHEMAS:
        try:
            _SCHEMAS[key] = onnx.defs.get_schema(op, max_inclusive_version=opset, domain="")
        except Exception:  # noqa: BLE001  (SchemaError)
            _SCHEMAS[key] = None
    return _SCHEMAS[key]
