"""int8 element-wise kernels: Add / Sub / Mul (TFLite's integer ADD, SUB, MUL), Relu / Clip
(clamps, requantizing when the output has its own parameters), activations through a
256-entry lookup table, and Concat (requantizing inputs whose parameters differ).

ADD / SUB (``integer_ops/add.h``)::

    v_i    = MBQM((x_i - zp_i) << 20, M_i)           M_i = s_i / (2 max(s_1, s_2))   (SUB: -M_2)
    y      = clamp(zp_y + MBQM(v_1 + v_2, M_y))       M_y = 2 max(s_1, s_2) / (2^20 s_y)

MUL (``integer_ops/mul.h``): ``y = clamp(zp_y + MBQM((x_1 - zp_1)(x_2 - zp_2), s_1 s_2 / s_y))``.

Lookup tables (TFLite ``PopulateLookupTable``): for each of the 256 int8 values v, in float32,
``table[v] = clamp(round(f(s_x (v - zp_x)) * (1 / s_y)) + zp_y)`` (round: half away from zero);
eval is one gather. Unary int8 -> int8 maps that are pure requantization (Relu / Clip with
their own output parameters, a Concat input with other parameters) use a table built from
the exact integer MBQM instead.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ....memory.pages import private_copy
from ..native import int8_ops as native_int8
from ..native import kernels as native_kernels
from ..native.ops import copy_step, sequence_step
from ....ops.qmath import clip_bounds as _clip_bounds, requant_mode
from ....ops.int8_tables import (LEFT_SHIFT, LUT_OPS, _VALUES, activation_fn, add_params, add_tables,  # noqa: F401
                                  by_bits, lut_table, mul_multiplier, requant_table)
from .int8_common import (QMAX, QMIN, Requantizer, int8_kernel, per_tensor, quantize_multiplier,
                          requantize, round_half_away, scratch)


# -- lookup tables -------------------------------------------------------------------------


def gather_step(ctx, x: np.ndarray, y: np.ndarray, table: np.ndarray) -> Callable[[], None]:
    """y = table[x + 128]: the native LUT kernel, else one np.take on the uint8 view of x."""
    tu = by_bits(table)
    step = native_int8.lut_step(x, y, tu, ctx)
    if step is not None:
        return step
    xu = x.view(np.uint8)
    take, copyto = np.take, np.copyto
    if np.shares_memory(x, y):                  # in place: gather into scratch, then copy
        tmp = ctx.workspace(y.shape, np.int8)
        return lambda: (take(tu, xu, out=tmp, mode="clip"), copyto(y, tmp))
    return lambda: take(tu, xu, out=y, mode="clip")


def _check_io(node: Node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if x.dtype != np.int8 or y.dtype != np.int8:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 kernel wants int8 in and out, got "
                                 f"{x.dtype} -> {y.dtype}")
    return x, y


@int8_kernel(*LUT_OPS)
def int8_lut(node: Node, ctx) -> Callable[[], None]:
    x, y = _check_io(node, ctx)
    s_x, zp_x = per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    table = lut_table(activation_fn(node.op, node.attrs), s_x, zp_x, s_y, zp_y)
    step = gather_step(ctx, x, y, table)
    ctx.note(node, f"int8 {node.op}: 256-entry lookup table" + _native_lut_note(step))
    return step


def _native_lut_note(step) -> str:
    return f" native ({native_int8.lut_isa()})" if getattr(step, "native_step", None) is not None else ""


@int8_kernel("Relu", "Clip")
def int8_clamp(node: Node, ctx) -> Callable[[], None]:
    """max(x, 0) / min(max(x, a), b) in int8: a clamp at the output parameters (requantizing
    through an exact table when they differ from the input's)."""
    x, y = _check_io(node, ctx)
    s_x, zp_x = per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    if node.op == "Relu":
        a, b = 0.0, None
    else:
        a, b = _clip_bounds(node, ctx)
    f32 = np.float32
    lo = QMIN if a is None else max(QMIN, min(QMAX, zp_y + int(round_half_away(f32(a) / f32(s_y)))))
    hi = QMAX if b is None else min(QMAX, max(QMIN, zp_y + int(round_half_away(f32(b) / f32(s_y)))))
    if a is not None and b is not None and a > b:
        lo = hi                                  # ONNX: min > max makes every value max
    if f32(s_x) == f32(s_y) and zp_x == zp_y:
        ctx.note(node, f"int8 {node.op}: clamp to [{lo}, {hi}]")
        return lambda: np.clip(x, lo, hi, out=y)
    step = gather_step(ctx, x, y, requant_table(s_x, zp_x, s_y, zp_y, lo, hi))
    ctx.note(node, f"int8 {node.op}: requantize + clamp to [{lo}, {hi}] (exact 256-entry table)"
             + _native_lut_note(step))
    return step


# -- Add / Sub / Mul -----------------------------------------------------------------------------

def _binary_inputs(node: Node, ctx):
    if len(node.inputs) != 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 {node.op} takes two inputs")
    # a constant operand is read at every run: its own copy, never the file map (memory/pages.py)
    a, b = private_copy(ctx.value(node.inputs[0])), private_copy(ctx.value(node.inputs[1]))
    y = ctx.value(node.outputs[0])
    if a.dtype != np.int8 or b.dtype != np.int8 or y.dtype != np.int8:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 kernel wants int8 operands, got "
                                 f"{a.dtype}, {b.dtype} -> {y.dtype}")
    if np.broadcast_shapes(a.shape, b.shape) != y.shape:
        raise ShapeError(f"{node.op} {node.name!r}: {a.shape} and {b.shape} do not broadcast to {y.shape}")
    return a, b, y


@int8_kernel("Add", "Sub")
def int8_add(node: Node, ctx) -> Callable[[], None]:
    a, b, y = _binary_inputs(node, ctx)
    s1, zp1 = per_tensor(ctx, node.inputs[0], "A")
    s2, zp2 = per_tensor(ctx, node.inputs[1], "B")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    (q1, sh1), (q2, sh2), (qy, shy) = add_params(s1, s2, s_y, node.op == "Sub")
    step = native_kernels.int8_add_step(ctx, a, b, y, [(zp1, q1, sh1), (zp2, q2, sh2)], qy, shy, zp_y)
    if step is None and a.shape != b.shape:
        step = native_int8.bcast_step("Add", a, b, y, ctx, tables=add_tables([(zp1, q1, sh1), (zp2, q2, sh2)]),
                                      q=qy, shift=shy, zp_y=zp_y)
    if step is not None:
        ctx.note(node, f"int8 {node.op} native ({native_kernels.isa_name()}; TFLite: each input's "
                       f"(x - zp) << {LEFT_SHIFT} rescaled through a 256-entry table, summed, requantized)")
        return step
    shape = y.shape
    steps = []
    scaled = []
    for arr, name, zp, q, sh in ((a, node.inputs[0], zp1, q1, sh1), (b, node.inputs[1], zp2, q2, sh2)):
        if ctx.const(name) is not None:
            # a constant operand is scaled once, here, at its own (broadcastable) shape
            v = requantize((arr.astype(np.int64) - zp) << LEFT_SHIFT, q, sh)
            scaled.append(v)
            continue
        buf = scratch(ctx, f"add_in{len(scaled)}_i64", shape, np.int64)
        rq = Requantizer(q, sh, shape, ctx)

        def stage(arr=arr, buf=buf, rq=rq, zp=zp):
            np.copyto(buf, arr)                     # broadcasts; reads all of x before y is written
            if zp:
                np.subtract(buf, zp, out=buf)
            np.left_shift(buf, LEFT_SHIFT, out=buf)
            rq(buf)
        steps.append(stage)
        scaled.append(buf)
    acc = scratch(ctx, "acc_i64", shape, np.int64)
    rqy = Requantizer(qy, shy, shape, ctx)
    s0, s1_ = scaled
    add, clip = np.add, np.clip

    def run():
        for st in steps:
            st()
        add(s0, s1_, out=acc)
        rqy(acc)
        if zp_y:
            add(acc, zp_y, out=acc)
        clip(acc, QMIN, QMAX, out=y, casting="unsafe")
    ctx.note(node, f"int8 {node.op} (TFLite: inputs << {LEFT_SHIFT}, rescaled, summed, requantized)")
    return run


@int8_kernel("Mul")
def int8_mul(node: Node, ctx) -> Callable[[], None]:
    a, b, y = _binary_inputs(node, ctx)
    s1, zp1 = per_tensor(ctx, node.inputs[0], "A")
    s2, zp2 = per_tensor(ctx, node.inputs[1], "B")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    q, sh = mul_multiplier(s1, s2, s_y, requant_mode(node))
    step = native_int8.bcast_step("Mul", a, b, y, ctx, zp1=zp1, zp2=zp2, q=q, shift=sh, zp_y=zp_y)
    if step is not None:
        ctx.note(node, f"int8 Mul native{' broadcast' if a.shape != b.shape else ''} (TFLite: (x1 - zp1)(x2 - zp2) "
                       "requantized)")
        return step
    shape = y.shape
    acc = scratch(ctx, "acc_i64", shape, np.int64)
    tmp = scratch(ctx, "add_in1_i64", shape, np.int64)
    rq = Requantizer(q, sh, shape, ctx)
    ca = ctx.const(node.inputs[0])
    cb = ctx.const(node.inputs[1])
    va = (ca.astype(np.int64) - zp1) if ca is not None else None
    vb = (cb.astype(np.int64) - zp2) if cb is not None else None
    copyto, sub, mul, add, clip = np.copyto, np.subtract, np.multiply, np.add, np.clip

    def run():
        if va is None:
            copyto(acc, a)
            if zp1:
                sub(acc, zp1, out=acc)
        else:
            copyto(acc, va)
        if vb is None:
            copyto(tmp, b)
            if zp2:
                sub(tmp, zp2, out=tmp)
            mul(acc, tmp, out=acc)
        else:
            mul(acc, vb, out=acc)
        rq(acc)
        if zp_y:
            add(acc, zp_y, out=acc)
        clip(acc, QMIN, QMAX, out=y, casting="unsafe")
    ctx.note(node, "int8 Mul (TFLite: (x1 - zp1)(x2 - zp2) requantized)")
    return run


# -- Concat ------------------------------------------------------------------------------------

@int8_kernel("Concat")
def int8_concat(node: Node, ctx) -> Callable[[], None]:
    y = ctx.value(node.outputs[0])
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    axis = int(node.attrs.get("axis", 0))
    axis = axis + y.ndim if axis < 0 else axis
    steps, copies, at, requantized = [], [], 0, 0
    for name in node.inputs:
        if not name:
            continue
        v = ctx.value(name)
        if v.dtype != np.int8:
            raise UnsupportedOpError(f"Concat {node.name!r}: input {name!r} is {v.dtype}, not int8")
        s, zp = per_tensor(ctx, name, "input")
        k = v.shape[axis]
        dst = y[(slice(None),) * axis + (slice(at, at + k),)]
        at += k
        if np.float32(s) == np.float32(s_y) and zp == zp_y:
            copies.append((dst, v))
        else:
            requantized += 1
            nat = native_int8.lut_step(v, dst, by_bits(requant_table(s, zp, s_y, zp_y)), ctx)
            if nat is not None:
                steps.append(nat)
                continue
            tu = by_bits(requant_table(s, zp, s_y, zp_y))
            tmp = ctx.workspace(v.shape, np.int8)
            vu = v.view(np.uint8)

            def step(dst=dst, vu=vu, tu=tu, tmp=tmp):
                np.take(tu, vu, out=tmp, mode="clip")
                np.copyto(dst, tmp)
            steps.append(step)
    if at != y.shape[axis]:
        raise ShapeError(f"Concat {node.name!r}: inputs give {at} along axis {axis}, output has {y.shape[axis]}")
    if copies:
        # the plain copies as one step, split across the pool by the same rows of each input
        threads = max(1, int(getattr(ctx, "threads", 1) or 1))
        fast = copy_step(copies, threads)
        if fast is None:
            def fast(copies=copies):
                for d, v in copies:
                    np.copyto(d, v)
        steps.insert(0, fast)

    nat = sequence_step(steps)
    ctx.note(node, f"int8 Concat{' native' if nat is not None else ''} ({requantized} input(s) requantized "
                   "through exact tables)")
    if nat is not None:
        return nat

    def run():
        for st in steps:
            st()
    return run


# -- PRelu ---------------------------------------------------------------------------------------

def prelu_tables(s_x: float, zp_x: int, slope_q: np.ndarray, s_a: float, zp_a: int, s_y: float, zp_y: int
                 ) -> np.ndarray:
    """TFLite int8 PRELU as one exact table per slope value (C, 256; index v + 128):
    v >= zp_x: zp_y + MBQM(v - zp_x, s_x / s_y); else zp_y + MBQM((v - zp_x)(a - zp_a), s_x s_a / s_y)."""
    f32 = np.float32
    q1, sh1 = quantize_multiplier(float(f32(s_x)) / float(f32(s_y)))
    q2, sh2 = quantize_multiplier(float(f32(s_x)) * float(f32(s_a)) / float(f32(s_y)))
    d = (_VALUES - zp_x)[None, :]
    a = np.asarray(slope_q, np.int64).reshape(-1, 1) - zp_a
    pos = requantize(np.broadcast_to(d, (a.shape[0], 256)), q1, sh1)
    neg = requantize(d * a, q2, sh2)
    return np.clip(np.where(d >= 0, pos, neg) + zp_y, QMIN, QMAX).astype(np.int8)


@int8_kernel("PRelu")
def int8_prelu(node: Node, ctx) -> Callable[[], None]:
    """int8 PRelu with a constant slope broadcast along one axis (or a scalar): one table per slope
    value (TFLite's integer PRELU, exactly), run by the LUT kernel per channel."""
    x, y = _check_io(node, ctx)
    s_x, zp_x = per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    slope = ctx.const(node.inputs[1])
    if slope is None or slope.dtype != np.int8:
        raise UnsupportedOpError(f"PRelu {node.name!r}: int8 PRelu needs a constant int8 slope")
    s_a, zp_a = per_tensor(ctx, node.inputs[1], "slope")
    full = [1] * (x.ndim - slope.ndim) + list(slope.shape)
    axes = [k for k, d in enumerate(full) if d != 1]
    if len(axes) > 1 or (axes and x.shape[axes[0]] != full[axes[0]]):
        raise UnsupportedOpError(f"PRelu {node.name!r}: int8 slope must vary along one axis, got {slope.shape}")
    tabs = prelu_tables(s_x, zp_x, slope.reshape(-1), s_a, zp_a, s_y, zp_y)
    tu = np.stack([by_bits(t) for t in tabs])                        # (C, 256) by bit pattern
    axis = axes[0] if axes else None
    inner = int(np.prod(x.shape[axis + 1:])) if axis is not None else x.size
    step = None
    if axis is None:
        step = native_int8.lut_step(x, y, tu, ctx)
    elif axis == x.ndim - 1:
        step = native_int8.lut_step(x, y, tu, ctx, per="col", channels=x.shape[-1])
    elif axis == 1 or int(np.prod(x.shape[:axis])) == 1:
        step = native_int8.lut_step(x, y, tu, ctx, per="row")
    ctx.note(node, f"int8 PRelu: {tu.shape[0]} exact 256-entry table(s)" + _native_lut_note(step))
    if step is not None:
        return step
    c = tu.shape[0]
    outer = x.size // (c * inner)
    idx = (np.arange(c, dtype=np.intp) * 256).reshape(1, c, 1)
    flat = tu.reshape(-1)
    x3, y3 = x.reshape(outer, c, inner), y.reshape(outer, c, inner)
    tmp = ctx.workspace((outer, c, inner), np.intp)

    def run():
        np.add(x3.view(np.uint8), idx, out=tmp)
        np.take(flat, tmp, out=y3)
    return run
