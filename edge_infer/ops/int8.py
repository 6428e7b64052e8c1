"""Which nodes an int8 kernel can run, in one place for the quantizer and every backend: the ops
with an int8 form (grouped by how their int8 parameters are chosen) and ``int8_ok(node, graph)``,
the limits of the int8 kernels (the depthwise tap count of the exact float32 sums, the Resize
modes, the constant operands they fold at prepare)."""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..ir import Graph, Node
from .int8_tables import LUT_OPS
from .qmath import EXACT_K
from .resize import BILINEAR_MODES, resize_axes

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


def _gemm_n(node: Node, g: Graph) -> int:
    b = g.tensors[node.inputs[1]]
    shape = b.data.shape if b.is_const else b.shape
    return int(shape[0] if node.attrs.get("transB", 0) else shape[1])


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
    if op in ("Conv", "FusedConv"):
        w = T[node.inputs[1]]
        if not w.is_const or w.data.ndim < 3:
            return False, "weights are not a constant"
        if _opt(node, 2) and not T[_opt(node, 2)].is_const:
            return False, "bias is not a constant"
        if int(np.prod(w.data.shape[2:])) > EXACT_K and int(node.attrs.get("group", 1)) == w.data.shape[0]:
            return False, "depthwise kernel too large"
    if op in ("Gemm", "FusedGemm"):
        c = _opt(node, 2)
        b = T[node.inputs[1]]
        if c and (not T[c].is_const or T[c].data.size not in (1, _gemm_n(node, g))):
            return False, "C is not a per-column constant"
        if b.is_const and b.data.ndim != 2:
            return False, "B is not 2-D"
        if not b.is_const and (float(node.attrs.get("alpha", 1.0)) != 1.0 or float(node.attrs.get("beta", 1.0)) != 1.0):
            return False, "alpha/beta with a computed B"
    if op in ("MatMul", "FusedMatMul"):
        a, b = T[node.inputs[0]], T[node.inputs[1]]
        if a.shape is None or len(a.shape) < 2 or b.shape is None or len(b.shape) < 2:
            return False, "operands of rank < 2"
        bias = _opt(node, 2) if op == "FusedMatMul" else ""
        if bias:
            bt = T[bias]
            n = b.shape[-1]
            if not bt.is_const or bt.data.size not in (1, n) or (bt.data.size == n and bt.data.shape[-1] != n):
                return False, "bias is not a per-column constant"
    if op == "Resize" and node.attrs.get("mode", "nearest") != "nearest":
        x, y = T[node.inputs[0]], T[node.outputs[0]]
        ctm = node.attrs.get("coordinate_transformation_mode", "half_pixel")
        if node.attrs.get("mode") != "linear" or ctm not in BILINEAR_MODES or node.attrs.get("antialias") \
                or not (x.is_static and y.is_static) or resize_axes(x.shape, y.shape) is None:
            return False, (f"Resize {node.attrs.get('mode')} ({ctm}) has no int8 kernel (nearest, and linear "
                           "over two spatial axes)")
    if op == "PRelu" and (len(node.inputs) < 2 or not T[node.inputs[1]].is_const
                          or sum(d != 1 for d in T[node.inputs[1]].data.shape) > 1):
        return False, "PRelu slope is not a constant along one axis"
    if op == "Softmax":
        x = T[node.inputs[0]]
        ax = int(node.attrs.get("axis", -1)) % max(len(x.shape or ()), 1)
        if x.shape is None or any(d != 1 for d in x.shape[ax + 1:]):
            return False, "int8 Softmax runs over the last axis"
    if op == "ConvTranspose":
        w = T[node.inputs[1]]
        if not w.is_const or w.data.ndim != 4 or int(node.attrs.get("group", 1)) != 1 \
                or any(int(d) != 1 for d in (node.attrs.get("dilations") or [1, 1])):
            return False, "int8 ConvTranspose covers 2-D, group 1, dilation 1, constant weights"
        if _opt(node, 2) and not T[_opt(node, 2)].is_const:
            return False, "bias is not a constant"
    if op == "Pad":
        cv = _opt(node, 2)
        if cv and not T[cv].is_const:
            return False, "pad value is not a constant"
    if op == "Clip":
        for i in (1, 2):
            if _opt(node, i) and not T[_opt(node, i)].is_const:
                return False, "clip bounds are not constants"
    if op == "AveragePool" and node.attrs.get("count_include_pad") and node.attrs.get("ceil_mode"):
        return False, "count_include_pad with ceil_mode"
    return True, ""


def int8_ok(node: Node, graph: Graph) -> Optional[str]:
    """None when an int8 kernel can run ``node``, else why not."""
    ok, why = _support(node, graph)
    return None if ok else why
