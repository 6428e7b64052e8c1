"""Fused kernels: a base op (Conv, Gemm, MatMul) + an epilogue applied in place on its
output, and the SiLU activation.

The fused kernel prepares the base op's own kernel (``KERNELS["Conv"]`` etc.) on a
copy of the node stripped to the base op, so it gets exactly the base algorithm
(and its bias handling); then the epilogue runs on the output buffer, in this order:

1. bias — FusedMatMul only (Conv and Gemm add theirs inside the base kernel);
2. residual: ``np.add(y, z, out=y)``;
3. activation: ``apply_activation(y, name, params, scratch)``, in place.

Every epilogue step is an in-place ufunc on ``y``; activations that must see x again
after overwriting it get their scratch from ``ctx.workspace`` at prepare time
(``activation_scratch``), so a run allocates nothing. Each activation computes the
same values as its stand-alone kernel in ``elementwise.py`` (the same ufunc sequence,
except that Relu/Clip/HardSigmoid clamp with one ``np.clip`` pass), so fusing
changes no values.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Callable, List, Optional, Sequence

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ..native import kernels as native_kernels
from ..native import ops as native_ops
from ..registry import KERNELS, kernel
from . import conv_native
from .elementwise import make_erf, native_unary, negative, quiet

EPILOGUE_ATTRS = ("activation", "activation_params")

#: activation name -> scratch buffers the size of y its in-place epilogue needs
#: (passes/cost_model.py EPILOGUE_TEMPS prices the same numbers)
ACTIVATIONS = {"": 0, "Relu": 0, "Clip": 0, "Sigmoid": 0, "Tanh": 0, "HardSigmoid": 0,
               "LeakyRelu": 1, "HardSwish": 1, "SiLU": 1, "GeluTanh": 1, "Gelu": 4}

_INV_SQRT2 = 1 / math.sqrt(2)
_ZERO = {c: np.zeros((), c) for c in "efd"}
_ONE = {c: np.ones((), c) for c in "efd"}
_INF = {c: np.array(np.inf, c) for c in "efd"}
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def activation_scratch(ctx, y: np.ndarray, name: str):
    """What ``apply_activation`` needs besides ``y`` for ``name``, made once at prepare:
    a buffer like ``y``, the erf evaluator (with its own workspaces) for Gelu, or None."""
    if name not in ACTIVATIONS:
        raise UnsupportedOpError(f"fused epilogue: unknown activation {name!r}")
    if name == "Gelu":
        return make_erf(ctx, y.shape, y.dtype)
    if ACTIVATIONS[name]:
        return ctx.workspace(y.shape, y.dtype)
    return None


def _sigmoid_into(src: np.ndarray, dst: np.ndarray) -> None:
    # the Sigmoid kernel's sequence: 1 / (1 + exp(-x))
    negative(src, out=dst)
    np.exp(dst, out=dst)
    np.add(dst, 1, out=dst)
    np.reciprocal(dst, out=dst)


def apply_activation(y: np.ndarray, name: str, params: Sequence[float] = (), scratch=None) -> None:
    """``y = act(y)`` in place. ``scratch``: from ``activation_scratch`` (None where unneeded).

    ``params``: Clip [min, max], LeakyRelu [alpha], HardSigmoid [alpha, beta]."""
    if not name:
        return
    # Relu and Clip use numpy's clip ufunc: one vectorised pass, where maximum/minimum
    # against a scalar are scalar loops (about 4x slower on numpy 2.x). Same values as
    # max-then-min, NaN included (clip keeps the sign of -0.0 where maximum gives +0.0).
    if name == "Relu":
        np.clip(y, _ZERO[y.dtype.char], _INF[y.dtype.char], out=y)
    elif name == "Clip":
        np.clip(y, params[0], params[1], out=y)
    elif name == "Sigmoid":
        _sigmoid_into(y, y)
    elif name == "Tanh":
        np.tanh(y, out=y)
    elif name == "HardSigmoid":
        np.multiply(y, params[0], out=y)
        np.add(y, params[1], out=y)
        np.clip(y, _ZERO[y.dtype.char], _ONE[y.dtype.char], out=y)
    elif name == "LeakyRelu":
        alpha = params[0]
        np.multiply(y, alpha, out=scratch)
        (np.maximum if alpha <= 1 else np.minimum)(y, scratch, out=y)
    elif name == "HardSwish":
        t = scratch
        np.multiply(y, 1 / 6, out=t)
        np.add(t, 0.5, out=t)
        np.clip(t, _ZERO[y.dtype.char], _ONE[y.dtype.char], out=t)
        np.multiply(t, y, out=y)
    elif name == "SiLU":
        _sigmoid_into(y, scratch)
        np.multiply(y, scratch, out=y)
    elif name == "Gelu":
        p = scratch(y, _INV_SQRT2)               # erf(y / sqrt 2) in the compute dtype
        np.add(p, 1.0, out=p)
        np.multiply(p, y, out=p)
        np.multiply(p, 0.5, out=p)
        np.copyto(y, p, casting="same_kind")
    elif name == "GeluTanh":
        t = scratch
        np.multiply(y, y, out=t)
        np.multiply(t, 0.044715, out=t)
        np.add(t, 1, out=t)
        np.multiply(t, y, out=t)
        np.multiply(t, _SQRT_2_OVER_PI, out=t)
        np.tanh(t, out=t)
        np.add(t, 1, out=t)
        np.multiply(t, y, out=y)
        np.multiply(y, 0.5, out=y)
    else:
        raise UnsupportedOpError(f"fused epilogue: unknown activation {name!r}")


#: activations whose passes may overflow (exp): run with numpy's warnings off, as their kernels
_NOISY = frozenset({"Sigmoid", "SiLU", "Gelu", "GeluTanh"})


def activation_step(y: np.ndarray, name: str, params: Sequence[float] = (), scratch=None
                    ) -> Optional[Callable[[], None]]:
    """The eval step applying ``name`` to ``y`` in place (None for no activation): a bare
    ufunc call for the one-pass activations, else ``apply_activation`` bound to its buffers."""
    if not name:
        return None
    if name == "Relu":
        return partial(np.clip, y, _ZERO[y.dtype.char], _INF[y.dtype.char], out=y)
    if name == "Clip":
        return partial(np.clip, y, params[0], params[1], out=y)
    if name == "Tanh":
        return partial(np.tanh, y, out=y)
    step = partial(apply_activation, y, name, list(params), scratch)
    return quiet(step) if name in _NOISY else step


def _base(node: Node, op: str, n_inputs: int) -> Node:
    attrs = {k: v for k, v in node.attrs.items() if k not in EPILOGUE_ATTRS}
    return Node(op, list(node.inputs[:n_inputs]), [node.outputs[0]], attrs, node.name)


def _addend(ctx, node: Node, name: str, y: np.ndarray, what: str, given=None) -> Optional[np.ndarray]:
    """An array added onto y (residual or bias): constants cast to y's dtype once; ``given``:
    the array to read instead of ``name``'s buffer."""
    if not name:
        return None
    v = ctx.value(name) if given is None else given
    if ctx.const(name) is not None and v.dtype != y.dtype:
        v = v.astype(y.dtype)
    if v.ndim > y.ndim or np.broadcast_shapes(y.shape, v.shape) != y.shape:
        raise ShapeError(f"{node.op} {node.name!r}: {what} {v.shape} does not broadcast onto {y.shape}")
    return v


def _fused(node: Node, ctx, base_op: str, n_base: int, addends: List[tuple], given=None) -> Callable[[], None]:
    """The base op's kernel, then the epilogue on y. ``addends``: (name, what) pairs;
    ``given``: {name: array} read instead of those names' buffers."""
    given = given or {}
    y = ctx.value(node.outputs[0])
    base = KERNELS[base_op](_base(node, base_op, n_base), ctx)
    name = str(node.attrs.get("activation", "") or "")
    params = [float(p) for p in node.attrs.get("activation_params", []) or []]
    if name == "Clip" and len(params) != 2 or name in ("LeakyRelu",) and len(params) != 1 \
            or name == "HardSigmoid" and len(params) != 2:
        raise ShapeError(f"{node.op} {node.name!r}: activation {name} has params {params}")
    if y.dtype.kind == "f":
        params = [y.dtype.type(p) for p in params]
    scratch = activation_scratch(ctx, y, name)
    adds = [a for a in (_addend(ctx, node, nm, y, what, given.get(nm)) for nm, what in addends) if a is not None]
    desc = [what for (nm, what) in addends if nm] + ([name] if name else [])
    if desc:
        ctx.notes[node.name] = ctx.notes.get(node.name, base_op) + " + in-place epilogue: " + ", ".join(desc)
    epi = native_ops.epilogue_steps(y, [np.ascontiguousarray(a) for a in adds], name, params, ctx.threads)
    if epi is not None:
        steps = [base] + epi
        fast = native_ops.sequence_step(steps)      # a native base (depthwise, int8): one native step
        if fast is not None:
            return fast
    else:
        steps = [base] + [partial(np.add, y, a, out=y) for a in adds]
        act = activation_step(y, name, params, scratch)
        if act is not None:
            steps.append(act)
    if len(steps) == 1:
        return base
    if len(steps) == 2:
        first, second = steps

        def run2():
            first()
            second()
        return run2
    if len(steps) == 3:
        first, second, third = steps

        def run3():
            first()
            second()
            third()
        return run3

    def run():
        for step in steps:
            step()
    return run


@kernel("FusedConv")
def fused_conv(node: Node, ctx) -> Callable[[], None]:
    """y = act(conv(x, w) + b + z). The arena may have planned y over z (the native conv reads
    each z element before writing it: conv_native.residual_in_place); a kernel that cannot
    take that works on a copy of z made at the start of each run."""
    z = node.inputs[3] if len(node.inputs) > 3 else ""
    y = ctx.value(node.outputs[0])
    over_z = bool(z) and np.shares_memory(ctx.value(z), y)
    step = None if over_z else native_kernels.fp32_depthwise(node, ctx)  # depthwise, epilogue fused
    if step is None:
        step = conv_native.conv_step(node, ctx)         # the native SGEMM conv, epilogue fused, or None
    if step is not None:
        return step
    if not over_z:
        return _fused(node, ctx, "Conv", 3, [(z, "residual")])
    zv = ctx.value(z)
    copy = ctx.scratch("residual_copy", zv.shape, zv.dtype)
    conv_then_epilogue = _fused(node, ctx, "Conv", 3, [(z, "residual")], {z: copy})
    copyto = np.copyto

    def run():
        copyto(copy, zv)
        conv_then_epilogue()
    return run


@kernel("FusedGemm")
def fused_gemm(node: Node, ctx) -> Callable[[], None]:
    """y = act(alpha A'B' + beta C)."""
    step = conv_native.gemm_step(node, ctx)
    if step is not None:
        return step
    return _fused(node, ctx, "Gemm", 3, [])


@kernel("FusedMatMul")
def fused_matmul(node: Node, ctx) -> Callable[[], None]:
    """y = act(A @ B + bias)."""
    step = conv_native.gemm_step(node, ctx)
    if step is not None:
        return step
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    return _fused(node, ctx, "MatMul", 2, [(bias, "bias")])


@kernel("SiLU")
def silu(node: Node, ctx) -> Callable[[], None]:
    """y = x * sigmoid(x), as the Sigmoid and Mul kernels would compute it."""
    fast = native_unary(node, ctx)
    if fast is not None:
        return fast
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    s = ctx.workspace(y.shape, y.dtype)

    def run():
        _sigmoid_into(x, s)
        np.multiply(x, s, out=y)
    return quiet(run)
