"""Which requantization an int8 graph's Conv / Gemm / MatMul / Mul nodes use (their ``requant``
attribute, ``ops/qmath.py``): "fp32", a float32 multiplier and one rounding (onnxruntime's and
XNNPACK's; the quantizer's default and what a QDQ import runs, so its outputs match
onnxruntime's), or "fixed", TFLite's reference fixed point with two roundings (a TFLite import's,
bit-exact with TFLite's reference kernels). A node whose multipliers fall outside fp32's range
(2^-32 .. 1) keeps "fixed"."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..ir import Graph, Node
from ..ops.qmath import REQUANT_MODES, REQUANT_OPS, fp32_ok, fp32_scales
from .quantizer import QuantizationError


def _multipliers(g: Graph, node: Node) -> Optional[np.ndarray]:
    """The node's float32 multipliers (s_x * s_w[c]) / s_y, or None when it is not an int8 node
    with per-tensor input and output parameters."""
    names = [node.inputs[0] if node.inputs else "", node.inputs[1] if len(node.inputs) > 1 else "",
             node.outputs[0] if node.outputs else ""]
    qs = []
    for name in names:
        t = g.tensors.get(name) if name else None
        if t is None or t.dtype != "int8" or not t.quant or "scale" not in t.quant:
            return None
        qs.append(np.asarray(t.quant["scale"], np.float32).reshape(-1))
    if qs[0].size != 1 or qs[2].size != 1 or (node.op == "Mul" and qs[1].size != 1):
        return None
    return fp32_scales(qs[0][0], qs[1], qs[2][0])


def check_requant(mode: str) -> None:
    """Refuse a requantization mode that is not one of ``REQUANT_MODES``."""
    if mode not in REQUANT_MODES:
        raise QuantizationError(f"requant={mode!r}: one of {', '.join(REQUANT_MODES)}")


def set_requant(g: Graph, mode: str) -> int:
    """Give every int8 Conv / Gemm / MatMul / Mul node of ``g`` requantization ``mode`` where its
    multipliers allow it (in place); returns how many nodes run "fp32"."""
    check_requant(mode)
    n = 0
    for node in g.nodes:
        if node.op not in REQUANT_OPS:
            continue
        node.attrs.pop("requant", None)
        if mode == "fp32":
            m = _multipliers(g, node)
            if m is not None and fp32_ok(m):
                node.attrs["requant"] = "fp32"
                n += 1
    return n
