"""QuantizeLinear / DequantizeLinear: the fp32 <-> int8 boundaries of a quantized graph.

ONNX semantics (inputs x, scale, zero_point; ``axis`` for per-axis parameters):

* QuantizeLinear: ``y = saturate(round_half_even(x / scale) + zero_point)``, computed in
  float32 as onnxruntime does; int8 or uint8 output (the zero point's type);
* DequantizeLinear: ``y = (x - zero_point) * scale`` in float32, for int8 / uint8 / int32 x.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ....errors import UnsupportedOpError
from ....ir import Node
from ..native import ops as native_ops
from ..registry import kernel


def _params(node: Node, ctx, x: np.ndarray):
    sname = node.inputs[1]
    zname = node.inputs[2] if len(node.inputs) > 2 else ""
    scale = ctx.const(sname)
    zp = ctx.const(zname) if zname else None
    if scale is None or (zname and zp is None):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: scale and zero point must be constants")
    scale = np.asarray(scale, np.float32)
    zp = np.zeros(scale.shape, np.int64) if zp is None else np.asarray(zp).astype(np.int64)
    if scale.size > 1:
        axis = int(node.attrs.get("axis", 1))
        axis = axis + x.ndim if axis < 0 else axis
        if scale.ndim != 1 or scale.size != x.shape[axis]:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: {scale.size} scales for axis {axis} of {x.shape}")
        shape = [1] * x.ndim
        shape[axis] = scale.size
        scale = scale.reshape(shape)
        zp = np.broadcast_to(zp.reshape(-1), (scale.size,)).reshape(shape)
    else:
        scale = scale.reshape(())
        zp = zp.reshape(-1)[:1].reshape(())
    return scale, zp


def _kind(scale: np.ndarray) -> str:
    return "per axis" if scale.ndim else "per tensor"


def _native(x: np.ndarray, y: np.ndarray, scale: np.ndarray, zp: np.ndarray, threads: int):
    """The native step for _params' scale / zero point (scalars, or shaped 1 but on the axis)."""
    if scale.ndim == 0:
        return native_ops.qdq_step(x, y, float(scale), int(zp), threads)
    axis = next(i for i, d in enumerate(scale.shape) if d != 1)
    return native_ops.qdq_axis_step(x, y, scale, zp, axis, threads)


@kernel("QuantizeLinear")
def quantize_linear(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if y.dtype not in (np.int8, np.uint8):
        raise UnsupportedOpError(f"QuantizeLinear {node.name!r}: output {y.dtype} (int8/uint8 only)")
    scale, zp = _params(node, ctx, x)
    info = np.iinfo(y.dtype)
    fast = _native(x, y, scale, zp, ctx.threads)
    if fast is not None:
        ctx.note(node, f"native quantize to {y.dtype} ({_kind(scale)})")
        return fast
    tmp = ctx.workspace(y.shape, np.float32)
    zpf = zp.astype(np.float32)
    div, rint, add, clip = np.divide, np.rint, np.add, np.clip

    def run():
        div(x, scale, out=tmp)
        rint(tmp, out=tmp)
        add(tmp, zpf, out=tmp)
        clip(tmp, info.min, info.max, out=tmp)
        np.copyto(y, tmp, casting="unsafe")
    ctx.note(node, f"quantize to {y.dtype} ({'per axis' if scale.ndim else 'per tensor'})")
    return run


@kernel("DequantizeLinear")
def dequantize_linear(node: Node, ctx) -> Callable[[], None]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if x.dtype not in (np.int8, np.uint8, np.int32):
        raise UnsupportedOpError(f"DequantizeLinear {node.name!r}: input {x.dtype} (int8/uint8/int32 only)")
    scale, zp = _params(node, ctx, x)
    if ctx.const(node.inputs[0]) is not None:
        val = ((x.astype(np.int64) - zp).astype(np.float32) * scale).astype(y.dtype)
        return lambda: np.copyto(y, val)
    fast = _native(x, y, scale, zp, ctx.threads)
    if fast is not None:
        ctx.note(node, f"native dequantize {x.dtype} ({_kind(scale)})")
        return fast
    zpf = zp.astype(np.float32)
    copyto, sub, mul = np.copyto, np.subtract, np.multiply

    def run():
        copyto(y, x, casting="unsafe")
        sub(y, zpf, out=y)
        mul(y, scale, out=y)
    ctx.note(node, f"dequantize {x.dtype} ({'per axis' if scale.ndim else 'per tensor'})")
    return run
