"""CUDA launchers by op name (the GPU counterpart of the CPU backend's KERNELS).

A launcher is a *prepare* function ``fn(node, ctx) -> [step, ...]``: it reads shapes and
constants, packs weights, computes the launch geometry, uploads what it needs through ``ctx``
(once) and binds each kernel launch to its buffers; a step is a closure that only launches.
Semantics follow the CPU kernels (edge_infer/backends/cpu/kernels): the int8 launchers reuse
their host-side parameter code (multipliers, folded terms, lookup tables) so that the device
computes the same integers, and the fp32 ones the same formulas.

``LAUNCHERS`` maps op -> launcher; ``INT8_LAUNCHERS`` those taken when the node's input (or
output) is int8, as the CPU backend's dtype dispatch does.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...ir.padding import resolve_pads
from ...ir.shape_rules_nn import channels_last, join_layout, resize_plan, split_layout, window_attrs
from ...ir.shape_rules_tensor import slice_bounds, slice_params, transpose_perm
from ..cpu.kernels.nn import _nearest_index, _source_coords, _taps

LAUNCHERS: Dict[str, Callable] = {}
INT8_LAUNCHERS: Dict[str, Callable] = {}

BLOCK = 256
#: grid cap of the grid-stride kernels: within every device's x-dimension limit
MAX_BLOCKS = 65535

i32, i64, f32 = np.int32, np.int64, np.float32

#: activation / unary codes (kernels/common.cuh ACT_*)
ACT = {"": 0, "Relu": 1, "Clip": 2, "Sigmoid": 3, "Tanh": 4, "HardSigmoid": 5, "LeakyRelu": 6,
       "HardSwish": 7, "SiLU": 8, "Gelu": 9, "GeluTanh": 10, "Elu": 11, "Softplus": 12, "Softsign": 13,
       "Mish": 14, "Exp": 15, "Log": 16, "Abs": 17, "Neg": 18, "Sqrt": 19, "Reciprocal": 20, "Floor": 21,
       "Ceil": 22, "Erf": 23, "Identity": 24, "Selu": 25, "Celu": 26}
#: binary codes (kernels/elementwise.cu BIN_*)
BIN = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5, "Pow": 6, "PRelu": 7}


def launcher(*ops: str, int8: bool = False):
    def deco(fn):
        for op in ops:
            (INT8_LAUNCHERS if int8 else LAUNCHERS)[op] = fn
        return fn
    return deco


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
    name = str(node.attrs.get("activation", "") or "")
    params = [float(p) for p in node.attrs.get("activation_params", []) or []]
    if name not in ACT or name in ("Exp", "Log"):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: fused activation {name!r} is not supported on CUDA")
    need = {"Clip": 2, "LeakyRelu": 1, "HardSigmoid": 2}.get(name, 0)
    if len(params) < need:
        raise ShapeError(f"{node.op} {node.name!r}: activation {name} has params {params}")
    p = params + [0.0, 0.0]
    return ACT[name], p[0], p[1]


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
    """(contiguous flag, meta array) of a broadcasting binary kernel."""
    if tuple(a_shape) == tuple(y_shape) == tuple(b_shape):
        return i32(1), ctx.meta([0])
    rank = max(len(y_shape), 1)
    dims = [1] * (rank - len(y_shape)) + list(y_shape)

    def strides(shape):
        shape = [1] * (rank - len(shape)) + list(shape)
        st, acc = [0] * rank, 1
        for d in range(rank - 1, -1, -1):
            st[d] = 0 if shape[d] == 1 and dims[d] != 1 else acc
            acc *= shape[d]
        return st
    return i32(0), ctx.meta(dims + strides(a_shape) + strides(b_shape))


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
    contiguous, meta = broadcast_meta(ctx, a.shape, b.shape, y.shape)
    return [ctx.launch("binary_f32", grid_1d(n), (BLOCK,),
                       (a, b, y, i64(n), i32(code), i32(max(len(y.shape), 1)), meta, contiguous))]


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


# -- convolution geometry --------------------------------------------------------------------

class ConvGeom:
    """Geometry of a 1-D or 2-D Conv / pool in either layout (1-D runs as 2-D with H = 1)."""

    def __init__(self, node: Node, x_shape, y_shape, kernel: Sequence[int], ceil_mode: bool = False):
        self.last = channels_last(node)
        nsp = len(x_shape) - 2
        if nsp not in (1, 2):
            raise UnsupportedOpError(f"{node.op} {node.name!r}: {nsp}-D windows are not supported on CUDA "
                                     "(1-D and 2-D are)")
        n, c, insp = split_layout(tuple(x_shape), self.last)
        wa = window_attrs(node, nsp, kernel)
        pads, osp = resolve_pads(list(insp), list(kernel), wa["strides"], wa["dilations"], wa["pads"],
                                 wa["auto_pad"], wa["ceil_mode"] if ceil_mode else False)
        if min(pads) < 0:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: negative pads are not supported")
        if tuple(y_shape[:1]) != (n,) or tuple(split_layout(tuple(y_shape), self.last)[2]) != tuple(osp):
            raise ShapeError(f"{node.op} {node.name!r}: planned output {tuple(y_shape)} does not match the "
                             f"window geometry (spatial {tuple(osp)})")
        one = lambda v, d: [d] + list(v) if nsp == 1 else list(v)
        self.n, self.c = int(n), int(c)
        self.h, self.w = one(insp, 1)
        self.oh, self.ow = one(osp, 1)
        self.kh, self.kw = one(kernel, 1)
        self.sh, self.sw = one(wa["strides"], 1)
        self.dh, self.dw = one(wa["dilations"], 1)
        self.ph, self.pw = one(pads[:nsp], 0)
        self.ph_end, self.pw_end = one(pads[nsp:], 0)
        self.p = self.oh * self.ow

    def args(self) -> tuple:
        """(n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw) as int32 kernel arguments."""
        return tuple(i32(v) for v in (self.n, self.c, self.h, self.w, self.oh, self.ow, self.kh, self.kw,
                                       self.sh, self.sw, self.ph, self.pw, self.dh, self.dw))


def _conv_setup(node: Node, ctx):
    x_t, w_t, y_t = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    w_shape = tuple(w_t.shape)
    kernel = [int(k) for k in (node.attrs.get("kernel_shape") or w_shape[2:])]
    if list(w_shape[2:]) != kernel:
        raise ShapeError(f"Conv {node.name!r}: kernel_shape {kernel} != weight shape {w_shape}")
    g = ConvGeom(node, x_t.shape, y_t.shape, kernel)
    group = int(node.attrs.get("group", 1))
    m, cg = int(w_shape[0]), int(w_shape[1])
    if g.c != cg * group or m % group:
        raise ShapeError(f"Conv {node.name!r}: X {x_t.shape}, W {w_shape}, group {group} disagree")
    if split_layout(tuple(y_t.shape), g.last)[1] != m:
        raise ShapeError(f"Conv {node.name!r}: output channels {y_t.shape} != {m}")
    return g, group, m, cg


@launcher("Conv", "FusedConv")
def conv(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    g, group, m, cg = _conv_setup(node, ctx)
    w_host = ctx.const(node.inputs[1])
    if w_host is None:
        raise UnsupportedOpError(f"Conv {node.name!r}: weights must be constant on CUDA")
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    bname = _opt(node, 2)
    zname = _opt(node, 3) if node.op == "FusedConv" else ""
    act, p0, p1 = _act_params(node) if node.op == "FusedConv" else (0, 0.0, 0.0)
    bias = ctx.upload(np.asarray(ctx.const(bname), np.float32).reshape(-1)) if bname else None
    if bname and ctx.const(bname) is None:
        raise UnsupportedOpError(f"Conv {node.name!r}: bias must be constant on CUDA")
    if bias is not None and bias.shape[0] != m:
        raise ShapeError(f"Conv {node.name!r}: bias has {bias.shape[0]} values for {m} output channels")
    z = ctx.buf(zname) if zname else None
    if z is not None and tuple(z.shape) != tuple(y.shape):
        raise UnsupportedOpError(f"FusedConv {node.name!r}: residual {z.shape} must have the output's shape")
    total = int(np.prod(y.shape, dtype=np.int64))
    if total == 0:
        return []
    k = cg * g.kh * g.kw
    has_b, has_r = i32(bias is not None), i32(z is not None)
    bias_a = bias if bias is not None else ctx.dummy(np.float32)
    z_a = z if z is not None else ctx.dummy(np.float32)
    epi = ("" if not (bname or zname or act) else " + epilogue")
    if group > 1:
        wt = ctx.upload(np.ascontiguousarray(w_host, np.float32))
        ctx.note(node, f"direct conv {g.kh}x{g.kw} ({'depthwise' if cg == 1 else f'{group} groups'}), fused epilogue")
        return [ctx.launch("conv_direct_f32", grid_1d(total), (BLOCK,),
                           (x, wt, bias_a, z_a, y, i32(g.n), i32(g.c), i32(g.h), i32(g.w), i32(m), i32(g.oh),
                            i32(g.ow), i32(g.kh), i32(g.kw), i32(g.sh), i32(g.sw), i32(g.ph), i32(g.pw), i32(g.dh),
                            i32(g.dw), i32(group), i32(int(g.last)), has_b, has_r, i32(act), f32(p0), f32(p1)))]
    w2 = np.ascontiguousarray(np.asarray(w_host, np.float32).reshape(m, k))
    pointwise = (k == g.c and g.sh == g.sw == 1 and not (g.ph or g.pw or g.ph_end or g.pw_end))
    steps = []
    if g.last:
        # rows (n, p) x k columns: y (N*P, M) = cols (N*P, K) @ W^T (K, M); 1x1: x is cols
        wt = ctx.upload(np.ascontiguousarray(w2.T))
        if pointwise:
            cols = ctx.reshape(x, (g.n * g.p, k))
        else:
            cols = ctx.scratch("cols_f32", (g.n * g.p, k), np.float32)
            steps.append(_im2col(ctx, x, cols, g, k, cs=(g.p * k, 1, k)))
        steps.append(ctx.matmul(cols, wt, ctx.reshape(y, (g.n * g.p, m))))
    else:
        # per image: y (M, P) = W (M, K) @ cols (K, P); batched over N by broadcasting
        wd = ctx.upload(w2)
        if pointwise:
            cols = ctx.reshape(x, (g.n, k, g.p))
        else:
            cols = ctx.scratch("cols_f32", (g.n, k, g.p), np.float32)
            steps.append(_im2col(ctx, x, cols, g, k, cs=(k * g.p, g.p, 1)))
        steps.append(ctx.matmul(wd, cols, ctx.reshape(y, (g.n, m, g.p))))
    if bias is not None or z is not None or act:
        steps.append(ctx.launch("epilogue_f32", grid_1d(total), (BLOCK,),
                                (y, bias_a, z_a, i64(total), i32(m), i64(g.p), i32(int(g.last)), has_b, has_r,
                                 i32(act), f32(p0), f32(p1))))
    ctx.note(node, f"{'pointwise' if pointwise else 'im2col'} {g.kh}x{g.kw} + cuBLAS GEMM{epi}"
             + (" (NHWC)" if g.last else ""))
    return steps


def _im2col(ctx, x, cols, g: ConvGeom, k: int, cs):
    total = g.n * k * g.p
    return ctx.launch("im2col_f32", grid_1d(total), (BLOCK,),
                      (x, cols, *g.args(), i32(int(g.last)), i64(cs[0]), i64(cs[1]), i64(cs[2])))


# -- Gemm / MatMul (fp32, cuBLAS) ----------------------------------------------------------------

@launcher("Gemm", "FusedGemm")
def gemm(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    a, b, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError(f"Gemm {node.name!r}: 2-D A and B expected, got {a.shape}, {b.shape}")
    alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
    ta, tb = bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0))
    bh = ctx.const(node.inputs[1])
    if bh is None:
        raise UnsupportedOpError(f"Gemm {node.name!r}: B must be constant on CUDA")
    b2 = np.asarray(bh, np.float32)
    b2 = np.ascontiguousarray((b2.T if tb else b2) * np.float32(alpha) if alpha != 1.0 else (b2.T if tb else b2))
    if ta:
        at = ctx.scratch("gemm_at", (a.shape[1], a.shape[0]), np.float32)
        steps = copy_step(ctx, a, lambda v: v.T, at)
        a2 = at
    else:
        steps, a2 = [], a
    steps.append(ctx.matmul(a2, ctx.upload(b2), y))
    m, n = y.shape
    cname = _opt(node, 2)
    act, p0, p1 = _act_params(node) if node.op == "FusedGemm" else (0, 0.0, 0.0)
    z = None
    if cname and beta != 0.0:
        ch = ctx.const(cname)
        if ch is None:
            raise UnsupportedOpError(f"Gemm {node.name!r}: C must be constant on CUDA")
        full = np.broadcast_to(np.asarray(ch, np.float32) * np.float32(beta) if beta != 1.0
                               else np.asarray(ch, np.float32), (m, n))
        z = ctx.upload(np.ascontiguousarray(full, np.float32))
    if z is not None or act:
        total = m * n
        steps.append(ctx.launch("epilogue_f32", grid_1d(total), (BLOCK,),
                                (y, ctx.dummy(np.float32), z if z is not None else ctx.dummy(np.float32),
                                 i64(total), i32(n), i64(1), i32(1), i32(0), i32(z is not None), i32(act),
                                 f32(p0), f32(p1))))
    ctx.note(node, f"cuBLAS GEMM {tuple(a2.shape)} @ {tuple(b2.shape)}" + (" + C" if z is not None else ""))
    return steps


@launcher("MatMul", "FusedMatMul")
def matmul(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    a, b, y = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.outputs[0])
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise UnsupportedOpError(f"MatMul {node.name!r}: 1-D operands are not supported on CUDA")
    steps = [ctx.matmul(a, b, y)]
    act, p0, p1 = _act_params(node) if node.op == "FusedMatMul" else (0, 0.0, 0.0)
    bname = _opt(node, 2) if node.op == "FusedMatMul" else ""
    bias = None
    if bname:
        bh = ctx.const(bname)
        if bh is None or np.asarray(bh).size != y.shape[-1]:
            raise UnsupportedOpError(f"FusedMatMul {node.name!r}: bias must be a constant vector over N")
        bias = ctx.upload(np.asarray(bh, np.float32).reshape(-1))
    if bias is not None or act:
        total = int(np.prod(y.shape, dtype=np.int64))
        steps.append(ctx.launch("epilogue_f32", grid_1d(total), (BLOCK,),
                                (y, bias if bias is not None else ctx.dummy(np.float32), ctx.dummy(np.float32),
                                 i64(total), i32(y.shape[-1]), i64(1), i32(1), i32(bias is not None), i32(0),
                                 i32(act), f32(p0), f32(p1))))
    ctx.note(node, f"cuBLAS matmul {tuple(a.shape)} @ {tuple(b.shape)}")
    return steps


# -- pools ---------------------------------------------------------------------------------------

def _pool_geom(node: Node, ctx) -> ConvGeom:
    x_t, y_t = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    ks = [int(k) for k in (node.attrs.get("kernel_shape") or [])]
    if len(ks) != len(x_t.shape) - 2:
        raise ShapeError(f"{node.op} {node.name!r}: kernel_shape {ks} for input {x_t.shape}")
    return ConvGeom(node, x_t.shape, y_t.shape, ks, ceil_mode=True)


@launcher("MaxPool")
@launcher("MaxPool", int8=True)
def max_pool(node: Node, ctx):
    if len(node.outputs) > 1 and node.outputs[1]:
        raise UnsupportedOpError(f"MaxPool {node.name!r}: the Indices output is not supported on CUDA")
    dt = ctx.tensor(node.inputs[0]).dtype
    if dt not in ("float32", "int8"):
        raise UnsupportedOpError(f"MaxPool {node.name!r}: {dt} is not supported on CUDA")
    g = _pool_geom(node, ctx)
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    total = g.n * g.c * g.p
    kernel = "maxpool_f32" if dt == "float32" else "maxpool_s8"
    ctx.note(node, f"max pool {g.kh}x{g.kw}, one output per thread")
    return [ctx.launch(kernel, grid_1d(total), (BLOCK,), (x, y, *g.args(), i32(int(g.last))))] if total else []


@launcher("AveragePool")
def average_pool(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    g = _pool_geom(node, ctx)
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    total = g.n * g.c * g.p
    inc = i32(int(bool(node.attrs.get("count_include_pad", 0))))
    return [ctx.launch("avgpool_f32", grid_1d(total), (BLOCK,),
                       (x, y, *g.args(), i32(int(g.last)), inc, i32(g.ph_end), i32(g.pw_end)))] if total else []


@launcher("GlobalAveragePool", "GlobalMaxPool")
@launcher("GlobalMaxPool", int8=True)
def global_pool(node: Node, ctx):
    dt = ctx.tensor(node.inputs[0]).dtype
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    last = channels_last(node)
    n, c, sp = split_layout(tuple(x.shape), last)
    p = int(np.prod(sp, dtype=np.int64))
    if dt == "int8" and node.op == "GlobalMaxPool":
        # a max pool whose window is the whole image
        shape2 = sp if len(sp) == 2 else (1, p)
        args = tuple(i32(v) for v in (n, c, shape2[0], shape2[1], 1, 1, shape2[0], shape2[1], 1, 1, 0, 0, 1, 1))
        return [ctx.launch("maxpool_s8", grid_1d(n * c), (BLOCK,), (x, y, *args, i32(int(last))))]
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    return [ctx.launch("global_pool_f32", grid_1d(n * c), (BLOCK,),
                       (x, y, i32(n), i32(c), i64(p), i32(int(last)), i32(int(node.op == "GlobalMaxPool"))))]


# -- Resize --------------------------------------------------------------------------------------

@launcher("Resize", "Upsample")
@launcher("Resize", "Upsample", int8=True)
def resize(node: Node, ctx):
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    xs, ys = tuple(x.shape), tuple(y.shape)
    r = len(xs)
    if node.op == "Upsample":
        mode = str(node.attrs.get("mode", "nearest"))
        attrs = {"mode": {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode),
                 "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}
        scale = [ys[a] / xs[a] for a in range(r)]
        sc = ctx.const(_opt(node, 1)) if _opt(node, 1) else node.attrs.get("scales")
        if sc is not None:
            scale = [float(v) for v in np.asarray(sc, np.float64).reshape(-1)]
    else:
        attrs = node.attrs
        sc = ctx.const(_opt(node, 2)) if _opt(node, 2) else None
        sz = ctx.const(_opt(node, 3)) if _opt(node, 3) else None
        sc = None if sc is None or sc.size == 0 else sc
        sz = None if sz is None or sz.size == 0 else sz
        if sc is None and sz is None:
            scale = [ys[a] / xs[a] for a in range(r)]
        else:
            scale, out = resize_plan(xs, attrs, sc, sz)
            if tuple(out) != ys:
                raise ShapeError(f"Resize {node.name!r}: planned output {ys} != computed {tuple(out)}")
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    if ctm == "tf_crop_and_resize" or attrs.get("antialias", 0) and mode == "nearest":
        raise UnsupportedOpError(f"Resize {node.name!r}: {ctm} is not supported on CUDA")
    dt = ctx.tensor(node.inputs[0]).dtype
    if mode != "nearest" and dt != "float32":
        raise UnsupportedOpError(f"Resize {node.name!r}: {mode} on {dt} is not supported on CUDA")
    size = np.dtype(dt).itemsize
    if mode == "nearest" and size not in (1, 4):
        raise UnsupportedOpError(f"Resize {node.name!r}: {dt} is not supported on CUDA")
    axes = [a for a in range(r) if not (math.isclose(scale[a], 1.0) and ys[a] == xs[a])]
    if not axes:
        return copy_step(ctx, x, lambda v: v, y)
    steps, cur, shape = [], x, list(xs)
    for k, a in enumerate(axes):
        xo, _ = _source_coords(ctm, ys[a], xs[a], scale[a], None)
        shape[a] = ys[a]
        dst = y if k == len(axes) - 1 else ctx.scratch(f"resize_{k % 2}", tuple(shape), dt)
        outer = int(np.prod(shape[:a], dtype=np.int64))
        inner = int(np.prod(shape[a + 1:], dtype=np.int64))
        total = outer * ys[a] * inner
        geo = (i64(outer), i32(xs[a]), i32(ys[a]), i64(inner))
        if mode == "nearest":
            idx = _nearest_index(xo, attrs.get("nearest_mode", "round_prefer_floor"), scale[a], xs[a])
            steps.append(ctx.launch("gather_axis_b1" if size == 1 else "gather_axis_b4", grid_1d(total), (BLOCK,),
                                    (ctx.flat(cur, 0, np.uint8 if size == 1 else np.int32),
                                     ctx.flat(dst, 0, np.uint8 if size == 1 else np.int32),
                                     ctx.upload(idx.astype(np.int32)), *geo)))
        else:
            idx, w = _taps(xo, mode, scale[a], xs[a], bool(attrs.get("antialias", 0)),
                           float(attrs.get("cubic_coeff_a", -0.75)), bool(attrs.get("exclude_outside", 0)))
            steps.append(ctx.launch("resize_axis_f32", grid_1d(total), (BLOCK,),
                                    (cur, dst, ctx.upload(np.ascontiguousarray(idx, np.int32)),
                                     ctx.upload(np.ascontiguousarray(w, np.float32)), i32(idx.shape[1]), *geo)))
        cur = dst
    ctx.note(node, f"{mode} ({ctm}) separable over axes {axes}")
    return steps


# -- QuantizeLinear / DequantizeLinear -------------------------------------------------------------

def _qdq_params(node: Node, ctx, shape):
    scale = ctx.const(node.inputs[1])
    zname = _opt(node, 2)
    zp = ctx.const(zname) if zname else None
    if scale is None or (zname and zp is None):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: scale and zero point must be constants")
    scale = np.asarray(scale, np.float32).reshape(-1)
    zp = np.zeros(scale.size, np.float32) if zp is None else np.asarray(zp).astype(np.float32).reshape(-1)
    if scale.size > 1:
        axis = int(node.attrs.get("axis", 1)) % len(shape)
        if scale.size != shape[axis]:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: {scale.size} scales for axis {axis} of {shape}")
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        zp = np.broadcast_to(zp, (scale.size,)).copy()
    else:
        inner, zp = 1, zp[:1]
    return ctx.upload(scale), ctx.upload(np.ascontiguousarray(zp)), inner, scale.size


@launcher("QuantizeLinear")
@launcher("QuantizeLinear", int8=True)
def quantize_linear(node: Node, ctx):
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    ydt = ctx.tensor(node.outputs[0]).dtype
    if ydt not in ("int8", "uint8") or ctx.tensor(node.inputs[0]).dtype != "float32":
        raise UnsupportedOpError(f"QuantizeLinear {node.name!r}: float32 -> int8/uint8 only on CUDA")
    scale, zp, inner, alen = _qdq_params(node, ctx, tuple(x.shape))
    n = int(np.prod(y.shape, dtype=np.int64))
    return [ctx.launch("quantize_f32", grid_1d(n), (BLOCK,),
                       (x, ctx.flat(y, 0, np.uint8), scale, zp, i64(n), i64(inner), i32(alen),
                        i32(int(ydt == "uint8"))))]


@launcher("DequantizeLinear")
@launcher("DequantizeLinear", int8=True)
def dequantize_linear(node: Node, ctx):
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    xdt = ctx.tensor(node.inputs[0]).dtype
    kind = {"int8": 0, "uint8": 1, "int32": 2}.get(xdt)
    if kind is None:
        raise UnsupportedOpError(f"DequantizeLinear {node.name!r}: input {xdt} is not supported on CUDA")
    scale, zp, inner, alen = _qdq_params(node, ctx, tuple(x.shape))
    n = int(np.prod(y.shape, dtype=np.int64))
    return [ctx.launch("dequantize_f32", grid_1d(n), (BLOCK,),
                       (ctx.flat(x, 0, np.uint8), y, scale, zp, i64(n), i64(inner), i32(alen), i32(kind)))]


from . import ops_int8  # noqa: E402,F401  (registers the int8 launchers)
