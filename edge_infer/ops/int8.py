"""Which nodes an int8 kernel can run, in one place for the quantizer and every backend: the ops
with an int8 form (grouped by how their int8 parameters are chosen) and ``int8_ok(node, graph)``.

``int8_ok`` checks what holds for every op here (float32 activations, no constant data input,
an epilogue the int8 kernels clamp), then the op's own limits, which its family module
registers with ``@int8_limit(*ops)`` next to its schema (the depthwise tap count of the exact
float32 sums in ``conv.py``, the Resize modes in ``resize.py``, the constant operands the
kernels fold at prepare)."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from ..ir.graph import Graph, Node
from .int8_tables import LUT_OPS
from .schema import registrar

Int8Limit = Callable[[Node, Graph], Optional[str]]
#: op -> the limits of its int8 kernel, ``limit(node, graph) -> reason or None`` (its family's)
INT8_LIMITS: Dict[str, Int8Limit] = {}


#: ``@int8_limit(*ops)``: register the int8 kernel's limits of ``ops`` (``int8_ok`` checks them
#: after the common ones)
int8_limit = registrar(INT8_LIMITS)

ANCHOR_OPS = ("Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul", "ConvTranspose")
BINARY_OPS = ("Add", "Sub", "Mul")
SAME_PARAM_OPS = ("MaxPool", "GlobalMaxPool", "AveragePool", "GlobalAveragePool", "Reshape", "Flatten",
                  "Transpose", "Squeeze", "Unsqueeze", "Pad", "Resize", "Identity", "Slice", "Split",
                  "DepthToSpace", "SpaceToDepth", "Expand", "Tile", "Gather")
CLAMP_OPS = ("Relu", "Clip")
CONCAT_OPS = ("Concat",)

#: fixed output parameters (TFLite's int8 spec for LOGISTIC and TANH)
FIXED_OUTPUT = {"Sigmoid": (1.0 / 256.0, -128), "Tanh": (1.0 / 128.0, 0), "Softmax": (1.0 / 256.0, -128)}
#: other ops with an int8 kernel (PRelu: per-channel tables; Softmax: integer exp table)
OTHER_INT8_OPS = ("PRelu", "Softmax")
INT8_OPS = frozenset(ANCHOR_OPS + BINARY_OPS + SAME_PARAM_OPS + CLAMP_OPS + CONCAT_OPS + LUT_OPS + OTHER_INT8_OPS)
#: ops whose int8 output carries its input's parameters (pure data movement / max / mean)
PASS_THROUGH = frozenset(SAME_PARAM_OPS)
#: of those, the ops whose int8 kernel also computes other output parameters (requantizing the
#: mean, as TFLite's MEAN and AVERAGE_POOL_2D do); the others need the same ones in and out
REQUANTIZING = frozenset(("AveragePool", "GlobalAveragePool"))
#: pure data movement (no arithmetic at all)
DATA_MOVEMENT = frozenset(("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity"))
#: epilogue activations an int8 kernel applies as an output clamp
CLAMP_ACTIVATIONS = ("", "Relu", "Clip")


def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def data_inputs(node: Node, g: Graph) -> List[int]:
    """Indices of the inputs of ``node`` that carry activations (int8 in an int8 node)."""
    op = node.op
    const = lambda i: bool(_opt(node, i)) and g.tensors[_opt(node, i)].is_const
    if op in ("Conv",):
        return [0]
    if op == "FusedConv":
        return [0] + ([3] if _opt(node, 3) else [])
    if op in ("Gemm", "FusedGemm", "MatMul", "FusedMatMul"):
        return [0] + ([] if const(1) else [1])
    if op in BINARY_OPS or op in CONCAT_OPS or op == "PRelu":
        return [i for i, n in enumerate(node.inputs) if n]
    return [0]


def _support(node: Node, g: Graph) -> Tuple[bool, str]:
    op = node.op
    if op not in INT8_OPS:
        return False, f"no int8 kernel for {op}"
    T = g.tensors
    for i in data_inputs(node, g):
        name = node.inputs[i]
        if T[name].dtype != "float32":
            return False, f"input {name!r} is {T[name].dtype}, not float32"
        if T[name].is_const and op not in BINARY_OPS + CONCAT_OPS and not (op == "PRelu" and i == 1):
            return False, f"data input {name!r} is a constant"
    for o in node.outputs:
        if o and T[o].dtype != "float32":
            return False, f"output {o!r} is {T[o].dtype}"
    act = str(node.attrs.get("activation", "") or "")
    if op.startswith("Fused") and act not in CLAMP_ACTIVATIONS:
        return False, f"epilogue activation {act} has no int8 form"
    limit = INT8_LIMITS.get(op)
    why = limit(node, g) if limit is not None else None
    if why is not None:
        return False, why
    return True, ""


def int8_ok(node: Node, graph: Graph) -> Optional[str]:
    """None when an int8 kernel can run ``node``, else why not."""
    ok, why = _support(node, graph)
    return None if ok else why
