"""CUDA launchers, registered in the backend's kernel table (``registry.py``, keyed like the CPU
backend's): data movement (strided copies) and the fp32 element-wise ops here; NN ops in
ops_nn.py, int8 in ops_int8.py.

A launcher is a *prepare* function ``fn(node, ctx) -> [step, ...]``: it reads shapes and
constants, packs weights, computes the launch geometry, uploads what it needs through ``ctx``
(once) and binds each kernel launch to its buffers; a step is a closure that only launches.
Semantics follow the CPU kernels (edge_infer/backends/cpu/kernels): the int8 launchers reuse
their host-side parameter code (multipliers, folded terms, lookup tables) so that the device
computes the same integers, and the fp32 ones the same formulas.

``registry.TABLE`` holds them by (op, dtype): the int8 launchers are taken when the node's
input (or output) is int8, as the CPU backend's dtype dispatch does.
"""
from __future__ import annotations

from typing import Callable, List, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...ops.activations import codes_for, fused_params
from ...ops.elementwise import broadcast_plan
from ...ops.shapes import SHAPE_RULES, channels_last, split_layout
from ...ops.tensor import slice_bounds, slice_params, transpose_perm
from .registry import launcher

BLOCK = 256
#: grid cap of the grid-stride kernels: within every device's x-dimension limit
MAX_BLOCKS = 65535

i32, i64, f32 = np.int32, np.int64, np.float32

#: activation / unary codes (the one table, ops/activations.py) of the ones kernels/common.cuh runs
ACT = codes_for(("", "Relu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "LeakyRelu", "HardSwish", "SiLU", "Gelu",
                 "GeluTanh", "Elu", "Softplus", "Softsign", "Mish", "Exp", "Log", "Abs", "Neg", "Sqrt", "Reciprocal",
                 "Floor", "Ceil", "Erf", "Identity", "Selu", "Celu"))
#: the activations a fused epilogue may carry
EPILOGUE_ACT = {k: v for k, v in ACT.items() if k not in ("Exp", "Log")}
#: binary codes (kernels/elementwise.cu BIN_*)
BIN = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5, "Pow": 6, "PRelu": 7}


def grid_1d(n: int, block: int = BLOCK) -> Tuple[int]:
    """Blocks for a grid-stride kernel over n items: enough to cover n, at most MAX_BLOCKS."""
    return (max(1, min(-(-int(n) // block), MAX_BLOCKS)),)


def gemm_grid(rows: int, cols: int, batches: int = 1) -> Tuple[int, int, int]:
    """Grid of gemm_s8_nt: one block per 64 x 64 output tile, blockIdx.z over batches/groups."""
    gx, gy = -(-int(cols) // 64), -(-int(rows) // 64)
    if gy > 65535 or batches > 65535:
        raise UnsupportedOpError(f"int8 GEMM of {rows} rows x {batches} batches exceeds the grid limits")
    return (max(gx, 1), max(gy, 1), max(int(batches), 1))


def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def _act_params(node: Node) -> Tuple[int, float, float]:
    return fused_params(node, EPILOGUE_ACT)


# -- strided copies (Transpose, Concat, Slice, Expand, Reshape, Identity) ------------------------

def fake(shape, dtype) -> np.ndarray:
    """An array-shaped stand-in with C-order strides and no memory: numpy view operations on
    it give the strides and offset the same view of a real buffer would have."""
    dt = np.dtype(dtype)
    st, acc = [], dt.itemsize
    for d in reversed(tuple(shape)):
        st.append(acc)
        acc *= max(int(d), 1)
    return as_strided(np.zeros(1, dt), tuple(shape), tuple(reversed(st)), writeable=False)


def view_layout(base: np.ndarray, v: np.ndarray) -> Tuple[int, List[int]]:
    """(offset, strides) in elements of view ``v`` of the fake array ``base``."""
    item = base.dtype.itemsize
    off = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return off // item, [s // item for s in v.strides]


def copy_step(ctx, x, x_view: Callable, y, y_view: Callable = None):
    """y_view(y) = x_view(x) (broadcasting) as one copy_nd launch; views are numpy view
    functions (transpose, slicing, broadcast_to, reshape) applied to stand-ins."""
    fx, fy = fake(x.shape, x.dtype), fake(y.shape, y.dtype)
    vy = fy if y_view is None else y_view(fy)
    vx = np.broadcast_to(x_view(fx), vy.shape)
    ox, sx = view_layout(fx, vx)
    oy, sy = view_layout(fy, vy)
    dims = list(vy.shape)
    n = int(np.prod(dims, dtype=np.int64))
    if n == 0:
        return []
    if not dims:
        dims, sx, sy = [1], [0], [0]
    size = np.dtype(x.dtype).itemsize
    kernel = {1: "copy_nd_b1", 4: "copy_nd_b4", 8: "copy_nd_b8"}.get(size)
    if kernel is None or np.dtype(y.dtype).itemsize != size:
        raise UnsupportedOpError(f"copy of {x.dtype} -> {y.dtype} has no CUDA kernel")
    meta = ctx.meta(dims + sx + sy)
    as_dt = {1: np.uint8, 4: np.int32, 8: np.int64}[size]
    xs = ctx.flat(x, ox, as_dt)
    ys = ctx.flat(y, oy, as_dt)
    return [ctx.launch(kernel, grid_1d(n), (BLOCK,), (xs, ys, i64(n), i32(len(dims)), meta))]


@launcher("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
@launcher("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", int8=True)
def reshape(node: Node, ctx):
    steps = []
    if node.op == "Dropout":
        if len(node.outputs) > 1 and node.outputs[1]:             # inference: the mask is all True
            mask = ctx.buf(node.outputs[1])
            steps = copy_step(ctx, ctx.upload(np.ones(1, np.uint8)), lambda v: v.reshape(()), mask)
        flag = _opt(node, 2)
        if flag and (ctx.const(flag) is None or bool(np.asarray(ctx.const(flag)).reshape(-1)[0])):
            raise UnsupportedOpError(f"Dropout {node.name!r}: training mode is not supported on CUDA")
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    ctx.note(node, "copy")
    return steps + copy_step(ctx, x, lambda v: v.reshape(y.shape), y)


@launcher("Transpose")
@launcher("Transpose", int8=True)
def transpose(node: Node, ctx):
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    perm = transpose_perm(node, len(x.shape))
    ctx.note(node, f"strided copy, perm {perm}")
    return copy_step(ctx, x, lambda v: v.transpose(perm), y)


@launcher("Concat")
def concat(node: Node, ctx):
    y = ctx.buf(node.outputs[0])
    axis = int(node.attrs.get("axis", 0)) % len(y.shape)
    steps, at = [], 0
    for name in node.inputs:
        if not name:
            continue
        x = ctx.buf(name)
        k = x.shape[axis]
        sl = (slice(None),) * axis + (slice(at, at + k),)
        steps += copy_step(ctx, x, lambda v: v, y, lambda v, sl=sl: v[sl])
        at += k
    if at != y.shape[axis]:
        raise ShapeError(f"Concat {node.name!r}: inputs give {at} along axis {axis}, output has {y.shape[axis]}")
    ctx.note(node, f"{len(steps)} strided copies")
    return steps


@launcher("Split")
@launcher("Split", int8=True)
def split(node: Node, ctx):
    x = ctx.buf(node.inputs[0])
    axis = int(node.attrs.get("axis", 0)) % len(x.shape)
    # sizes from the shape rule, which also covers outputs left unnamed
    shapes = SHAPE_RULES["Split"](node, [ctx.tensor(n) if n else None for n in node.inputs])
    steps, at = [], 0
    for name, (_, shape) in zip(node.outputs, shapes):
        k = int(shape[axis])
        if name:
            sl = (slice(None),) * axis + (slice(at, at + k),)
            steps += copy_step(ctx, x, lambda v, sl=sl: v[sl], ctx.buf(name))
        at += k
    ctx.note(node, f"{len(steps)} strided copies")
    return steps


@launcher("Slice")
@launcher("Slice", int8=True)
def slice_(node: Node, ctx):
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    ins = [ctx.tensor(n) if n else None for n in node.inputs]
    params = slice_params(node, ins, len(x.shape))
    if params is None:
        raise UnsupportedOpError(f"Slice {node.name!r}: starts/ends/axes/steps must be constant on CUDA")
    idx = [slice(None)] * len(x.shape)
    for k, (s, e, st) in params.items():
        start, stop, _ = slice_bounds(x.shape[k], s, e, st)
        idx[k] = slice(start, stop if stop >= 0 else None, st)
    return copy_step(ctx, x, lambda v: v[tuple(idx)], y)


@launcher("Expand")
@launcher("Expand", int8=True)
def expand(node: Node, ctx):
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    return copy_step(ctx, x, lambda v: v, y)


# -- fp32 element-wise ----------------------------------------------------------------------

UNARY_OPS = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Abs", "Neg", "Sqrt", "Reciprocal", "Floor", "Ceil",
             "Erf", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu", "Softplus", "Softsign",
             "Mish", "SiLU", "Gelu")


def _f32(node: Node, ctx, *names):
    for nm in names:
        if nm and ctx.tensor(nm).dtype != "float32":
            raise UnsupportedOpError(f"{node.op} {node.name!r}: {nm!r} is {ctx.tensor(nm).dtype}; the CUDA "
                                     "fp32 kernels take float32")


@launcher(*UNARY_OPS)
def unary(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    a = node.attrs
    op, p0, p1 = node.op, 0.0, 0.0
    if op == "LeakyRelu":
        p0 = float(a.get("alpha", 0.01))
    elif op == "HardSigmoid":
        p0, p1 = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
    elif op in ("Elu", "Celu"):
        p0 = float(a.get("alpha", 1.0))
    elif op == "Selu":
        p0 = float(a.get("alpha", 1.67326319217681884765625))
        p1 = float(a.get("gamma", 1.05070102214813232421875))
    elif op == "Gelu" and a.get("approximate", "none") == "tanh":
        op = "GeluTanh"
    n = int(np.prod(y.shape, dtype=np.int64))
    return [ctx.launch("unary_f32", grid_1d(n), (BLOCK,), (x, y, i64(n), i32(ACT[op]), f32(p0), f32(p1)))]


def _clip_bound(ctx, node: Node, i: int, default: float) -> float:
    nm = _opt(node, i)
    if not nm:
        return default
    v = ctx.const(nm)
    if v is None:
        raise UnsupportedOpError(f"Clip {node.name!r}: min/max must be constant on CUDA")
    return float(np.asarray(v, np.float64).reshape(-1)[0])


@launcher("Clip")
def clip(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    lo, hi = _clip_bound(ctx, node, 1, -np.inf), _clip_bound(ctx, node, 2, np.inf)
    n = int(np.prod(y.shape, dtype=np.int64))
    # max then min, as the CPU kernel: with min > max every value becomes max
    return [ctx.launch("unary_f32", grid_1d(n), (BLOCK,), (x, y, i64(n), i32(ACT["Clip"]), f32(lo), f32(hi)))]


def broadcast_meta(ctx, a_shape, b_shape, y_shape):
    """(contiguous flag, meta array, rank) of a broadcasting binary kernel: the dims merged as
    ``ops.elementwise.broadcast_plan`` merges them for every backend."""
    if tuple(a_shape) == tuple(y_shape) == tuple(b_shape):
        return i32(1), ctx.meta([0]), i32(max(len(y_shape), 1))
    dims, sa, sb = broadcast_plan(a_shape, b_shape, y_shape)
    return i32(0), ctx.meta(dims + sa + sb), i32(len(dims))


@launcher("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu", "Sum")
def binary(node: Node, ctx):
    names = [n for n in node.inputs if n]
    _f32(node, ctx, *names, node.outputs[0])
    op = {"Sum": "Add"}.get(node.op, node.op)
    y = ctx.buf(node.outputs[0])
    if len(names) == 1:
        return copy_step(ctx, ctx.buf(names[0]), lambda v: v, y)
    if node.op in ("Max", "Min", "Sum") and len(names) > 2:
        # variadic: y = a op b, then y = y op c, ...
        steps, first = [], names[0]
        for k, nm in enumerate(names[1:]):
            src = ctx.buf(first) if k == 0 else y
            steps += _binary_step(ctx, src, ctx.buf(nm), y, BIN[op])
        return steps
    if len(names) != 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: {len(names)} inputs")
    return _binary_step(ctx, ctx.buf(names[0]), ctx.buf(names[1]), y, BIN[op])


def _binary_step(ctx, a, b, y, code: int):
    n = int(np.prod(y.shape, dtype=np.int64))
    if np.broadcast_shapes(tuple(a.shape), tuple(b.shape)) != tuple(y.shape):
        raise ShapeError(f"binary: {a.shape} and {b.shape} do not broadcast to {y.shape}")
    contiguous, meta, rank = broadcast_meta(ctx, a.shape, b.shape, y.shape)
    return [ctx.launch("binary_f32", grid_1d(n), (BLOCK,), (a, b, y, i64(n), i32(code), rank, meta, contiguous))]


@launcher("BatchNormalization")
def batch_norm(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    if node.attrs.get("training_mode", 0):
        raise UnsupportedOpError(f"BatchNormalization {node.name!r}: training mode is not supported on CUDA")
    stats = [ctx.const(nm) for nm in node.inputs[1:5]]
    if any(s is None for s in stats):
        raise UnsupportedOpError(f"BatchNormalization {node.name!r}: statistics must be constant on CUDA")
    eps = float(node.attrs.get("epsilon", 1e-5))
    gamma, beta, mean, var = (np.asarray(s, np.float64).reshape(-1) for s in stats)
    scale64 = gamma / np.sqrt(var + eps)                       # as the CPU kernel folds them
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    last = channels_last(node)
    n, c, sp = split_layout(tuple(x.shape), last)
    inner = int(np.prod(sp, dtype=np.int64))
    total = int(np.prod(y.shape, dtype=np.int64))
    scale = ctx.upload(scale64.astype(np.float32))
    shift = ctx.upload((beta - mean * scale64).astype(np.float32))
    return [ctx.launch("channel_affine_f32", grid_1d(total), (BLOCK,),
                       (x, y, scale, shift, i64(total), i32(c), i64(inner), i32(int(last))))]


@launcher("Softmax", "LogSoftmax")
def softmax(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    shape = tuple(x.shape)
    ax = int(node.attrs.get("axis", -1)) % len(shape)
    outer = int(np.prod(shape[:ax], dtype=np.int64))
    inner = int(np.prod(shape[ax + 1:], dtype=np.int64))
    rows = outer * inner
    if rows == 0 or shape[ax] == 0:
        return []
    # a power-of-two block (the kernel's tree reduction) of 32..256 threads, sized to the row
    block = min(BLOCK, max(32, 1 << (int(shape[ax]) - 1).bit_length()))
    ctx.note(node, f"block of {block} per row ({rows} rows of {shape[ax]})")
    return [ctx.launch("softmax_f32", (min(rows, MAX_BLOCKS),), (block,),
                       (x, y, i64(rows), i64(shape[ax]), i64(inner), i32(int(node.op == "LogSoftmax"))))]


@launcher("LRN")
def lrn(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    size = int(node.attrs["size"])
    last = channels_last(node)
    n, c, sp = split_layout(tuple(x.shape), last)
    inner = int(np.prod(sp, dtype=np.int64))
    total = int(np.prod(y.shape, dtype=np.int64))
    return [ctx.launch("lrn_f32", grid_1d(total), (BLOCK,),
                       (x, y, i64(total), i32(c), i64(inner), i32(int(last)), i32(size),
                        f32(float(node.attrs.get("alpha", 1e-4)) / size), f32(float(node.attrs.get("beta", 0.75))),
                        f32(float(node.attrs.get("bias", 1.0)))))]
