"""CUDA launchers of the fp32 NN ops: Conv / FusedConv (im2col + cuBLAS, or direct), Gemm,
MatMul, pools, Resize / Upsample, QuantizeLinear / DequantizeLinear (the latter two for int8
graphs too). Registered in the kernel table (``registry.py``); conventions as in ops.py."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ...errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...ops.resize import resize_plan
from ...ops.shapes import channels_last, split_layout
from ...ops.conv import conv_geometry, conv_transpose_geometry, window_geometry
from ...ops.resize import nearest_index, source_coords, taps
from .ops import BLOCK, _act_params, _f32, _opt, copy_step, f32, grid_1d, i32, i64
from .registry import launcher


# -- convolution geometry --------------------------------------------------------------------

class ConvGeom:
    """Geometry of a 1-D or 2-D Conv / pool in either layout (1-D runs as 2-D with H = 1)."""

    def __init__(self, node: Node, x_shape, y_shape, kernel: Sequence[int], ceil_mode: bool = False,
                 w_shape=None):
        """A pool's window (``kernel``), or a conv's (``w_shape``: its weights' shape)."""
        nsp = len(x_shape) - 2
        if nsp not in (1, 2):
            raise UnsupportedOpError(f"{node.op} {node.name!r}: {nsp}-D windows are not supported on CUDA "
                                     "(1-D and 2-D are)")
        g = (conv_geometry(node, x_shape, w_shape, y_shape) if w_shape is not None
             else window_geometry(node, x_shape, y_shape, kernel, ceil_mode=ceil_mode))
        if min(g.pads) < 0:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: negative pads are not supported")
        g = g.planar()
        self.last = g.last
        self.n, self.c = g.n, g.c
        self.h, self.w = g.in_sp
        self.oh, self.ow = g.out_sp
        self.kh, self.kw = g.kernel
        self.sh, self.sw = g.strides
        self.dh, self.dw = g.dilations
        self.ph, self.pw, self.ph_end, self.pw_end = g.pads
        self.p = self.oh * self.ow

    def args(self) -> tuple:
        """(n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw) as int32 kernel arguments."""
        return tuple(i32(v) for v in (self.n, self.c, self.h, self.w, self.oh, self.ow, self.kh, self.kw,
                                       self.sh, self.sw, self.ph, self.pw, self.dh, self.dw))


def _conv_setup(node: Node, ctx):
    x_t, w_t, y_t = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    w_shape = tuple(w_t.shape)
    kernel = [int(k) for k in (node.attrs.get("kernel_shape") or w_shape[2:])]
    g = ConvGeom(node, x_t.shape, y_t.shape, kernel, w_shape=w_shape)
    group = int(node.attrs.get("group", 1))
    m, cg = int(w_shape[0]), int(w_shape[1])
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


def conv_transpose_args(node: Node, ctx) -> tuple:
    """The int32 geometry arguments of conv_transpose_f32 / _s8 (n, c, h, w, m, oh, ow, kh, kw, sh,
    sw, ph, pw, dh, dw, group, nhwc), checked against the planned output."""
    x_t, w_t, y_t = (ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0]))
    if len(x_t.shape) != 4 or len(w_t.shape) != 4:
        raise UnsupportedOpError(f"ConvTranspose {node.name!r}: CUDA covers 2-D transposed convs")
    last = channels_last(node)
    n, c, (h, w) = split_layout(x_t.shape, last)
    group = int(node.attrs.get("group", 1))
    cw, mg, kh, kw = (int(d) for d in w_t.shape)
    m = mg * group
    if cw != c or c % group:
        raise ShapeError(f"ConvTranspose {node.name!r}: X {x_t.shape}, W {w_t.shape}, group {group} disagree")
    pads, (oh, ow) = conv_transpose_geometry([h, w], [kh, kw], node.attrs)
    want = (n, oh, ow, m) if last else (n, m, oh, ow)
    if tuple(y_t.shape) != want:
        raise ShapeError(f"ConvTranspose {node.name!r}: planned output {tuple(y_t.shape)} != computed {want}")
    sh, sw = (int(v) for v in (node.attrs.get("strides") or [1, 1]))
    dh, dw = (int(v) for v in (node.attrs.get("dilations") or [1, 1]))
    if min(sh, sw, dh, dw) < 1 or min(pads) < 0:
        raise UnsupportedOpError(f"ConvTranspose {node.name!r}: strides/dilations must be >= 1, pads >= 0 on CUDA")
    return tuple(i32(v) for v in (n, c, h, w, m, oh, ow, kh, kw, sh, sw, pads[0], pads[1], dh, dw, group,
                                   int(last)))


@launcher("ConvTranspose")
def conv_transpose(node: Node, ctx):
    _f32(node, ctx, node.inputs[0], node.outputs[0])
    args = conv_transpose_args(node, ctx)
    w = ctx.const(node.inputs[1])
    bname = _opt(node, 2)
    b = ctx.const(bname) if bname else None
    if w is None or (bname and b is None):
        raise UnsupportedOpError(f"ConvTranspose {node.name!r}: weights and bias must be constant on CUDA")
    m = int(args[4])
    if b is not None and b.size != m:
        raise ShapeError(f"ConvTranspose {node.name!r}: bias has {b.size} values for {m} output channels")
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.outputs[0])
    total = int(np.prod(y.shape, dtype=np.int64))
    if total == 0:
        return []
    bias = ctx.upload(np.asarray(b, np.float32).reshape(-1)) if b is not None else ctx.dummy(np.float32)
    ctx.note(node, f"direct transposed conv {int(args[7])}x{int(args[8])} stride {int(args[9])}, one output "
                   "per thread")
    return [ctx.launch("conv_transpose_f32", grid_1d(total), (BLOCK,),
                       (x, ctx.upload(np.ascontiguousarray(w, np.float32)), bias, y, *args, i32(b is not None)))]


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
        xo, _ = source_coords(ctm, ys[a], xs[a], scale[a], None)
        shape[a] = ys[a]
        dst = y if k == len(axes) - 1 else ctx.scratch(f"resize_{k % 2}", tuple(shape), dt)
        outer = int(np.prod(shape[:a], dtype=np.int64))
        inner = int(np.prod(shape[a + 1:], dtype=np.int64))
        total = outer * ys[a] * inner
        geo = (i64(outer), i32(xs[a]), i32(ys[a]), i64(inner))
        if mode == "nearest":
            idx = nearest_index(xo, attrs.get("nearest_mode", "round_prefer_floor"), scale[a], xs[a])
            steps.append(ctx.launch("gather_axis_b1" if size == 1 else "gather_axis_b4", grid_1d(total), (BLOCK,),
                                    (ctx.flat(cur, 0, np.uint8 if size == 1 else np.int32),
                                     ctx.flat(dst, 0, np.uint8 if size == 1 else np.int32),
                                     ctx.upload(idx.astype(np.int32)), *geo)))
        else:
            idx, w = taps(xo, mode, scale[a], xs[a], bool(attrs.get("antialias", 0)),
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
