"""What the ONNX converter (``onnx.py``) and its per-op normalizers (``onnx_normalizers.py``)
share: the IR's opset, ONNX element types, op schemas by opset, and ``Converter``, what a
normalizer may use of the converter. Kept apart so that the normalizers need not import the
converter that calls them."""
from __future__ import annotations

from typing import Any, Dict, Optional, Protocol, Sequence, Tuple

import numpy as np

from ..ir.graph import Graph, Node

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


class Converter(Protocol):
    """The converter as its normalizers see it (``onnx._Converter`` implements it)."""
    onnx: Any
    model: Any
    graph: Graph
    opset: int
    label: str
    node_name: str
    types: Dict[str, Tuple[int, Optional[tuple]]]

    def rank(self, name: str) -> Optional[int]: ...

    def static_shape(self, name: str) -> Optional[Tuple[int, ...]]: ...

    def elem_dtype(self, name: str, default: str = "float32") -> str: ...

    def const(self, name: str) -> Optional[np.ndarray]: ...

    def new_name(self, base: str) -> str: ...

    def add_const(self, base: str, value, dtype: Optional[str] = None) -> str: ...

    def emit(self, op: str, inputs: Sequence[str], outputs: Sequence[str],
             attrs: Dict[str, object], src_schema=None, final: bool = False) -> Node: ...

    def _tensor_array(self, t, what: str) -> np.ndarray: ...

    def _sparse_array(self, sp, what: str) -> np.ndarray: ...
