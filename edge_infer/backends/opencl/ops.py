"""OpenCL float32 kernels (element-wise, GEMM, conv, pools, normalization, softmax), registered
in the backend's kernel table (``registry.py``) as the generic entries; the int8 kernels of the
same ops are the table's int8 entries (ops_int8.py), data movement and reductions ops_tensor.py.

An op's prepare function ``fn(node, pc)`` (pc: executable.PrepareContext) reads shapes and
constants, uploads packed weights and binds kernel launches with ``pc.launch``; it raises
``UnsupportedOpError`` for any form it does not cover, which ``OpenCLBackend.supports``
turns into False (a dry prepare), so an uncovered node runs elsewhere instead of wrongly.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from ...errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...ops.activations import codes_for, fused_params
from ...ops.elementwise import broadcast_plan
from ...ops.conv import conv_geometry as checked_conv_geometry
from ...ops.conv import window_geometry
from ...ops.shapes import channels_last, split_layout
from .registry import kernel_for

#: activation name -> code (the one table, ops/activations.py) of the activations kernels/common.cl runs
ACT = codes_for(("", "Relu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "LeakyRelu", "HardSwish", "SiLU", "Gelu",
                 "GeluTanh", "Abs", "Neg", "Sqrt", "Exp", "Log", "Reciprocal", "Floor", "Ceil", "Elu", "Softplus",
                 "Softsign", "Erf", "Identity", "Selu"))
UNARY = [k for k in ACT if k and k not in ("GeluTanh", "Identity")]    # Identity: a view (ops_tensor.py)
#: the activations a fused epilogue may carry
EPILOGUE_ACT = {k: v for k, v in ACT.items() if k != "Identity"}
BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5, "Pow": 6, "PRelu": 7}
#: element-wise kernels that read x[i] before writing y[i]: safe to run in place
INPLACE = frozenset(set(UNARY) | set(BINARY) | {"Sum", "Identity"})
MAXD = 6


def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def need_f32(pc, node: Node, names) -> None:
    for nm in names:
        if nm and pc.dtype(nm) != "float32":
            raise UnsupportedOpError(f"{node.op} {node.name!r}: {nm!r} is {pc.dtype(nm)}, OpenCL float kernels "
                                     "take float32")


def strides_of(shape: Sequence[int]) -> List[int]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= int(d)
    return st[::-1]


def broadcast_meta(a_shape, b_shape, y_shape) -> List[int]:
    """[ndim, dims, a strides, b strides] (0 = broadcast), adjacent dims merged; [0] when both
    operands already have y's shape."""
    if tuple(a_shape) == tuple(y_shape) and tuple(b_shape) == tuple(y_shape):
        return [0]
    md, ma, mb = broadcast_plan(a_shape, b_shape, y_shape)
    if len(md) > MAXD:
        raise UnsupportedOpError(f"broadcast over {len(md)} dims (at most {MAXD})")
    return [len(md)] + md + ma + mb


def activation(node: Node) -> Tuple[int, float, float]:
    """(code, p0, p1) of a fused node's ``activation`` attribute."""
    return fused_params(node, EPILOGUE_ACT)


def unary_params(node: Node, pc) -> Tuple[int, float, float]:
    """(code, p0, p1) of a unary activation node (constant Clip bounds)."""
    a = node.attrs
    o = node.op
    if o == "Clip":
        lo = pc.const(_opt(node, 1)) if _opt(node, 1) else None
        hi = pc.const(_opt(node, 2)) if _opt(node, 2) else None
        if (_opt(node, 1) and lo is None) or (_opt(node, 2) and hi is None):
            raise UnsupportedOpError(f"Clip {node.name!r}: min/max must be constants")
        lo = -np.inf if lo is None else float(np.asarray(lo).reshape(-1)[0])
        hi = np.inf if hi is None else float(np.asarray(hi).reshape(-1)[0])
        return ACT["Clip"], float(np.float32(lo)), float(np.float32(hi))
    if o == "LeakyRelu":
        return ACT[o], float(a.get("alpha", 0.01)), 0.0
    if o == "HardSigmoid":
        return ACT[o], float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
    if o == "Elu":
        return ACT[o], float(a.get("alpha", 1.0)), 0.0
    if o == "Selu":
        return ACT[o], float(a.get("alpha", 1.67326319217681884765625)), float(a.get("gamma", 1.05070102214813232421875))
    if o == "Gelu":
        return (ACT["GeluTanh"] if a.get("approximate", "none") == "tanh" else ACT["Gelu"]), 0.0, 0.0
    if o in ACT:
        return ACT[o], 0.0, 0.0
    raise UnsupportedOpError(f"{o}: not a unary activation")


def round_up(n: int, m: int) -> int:
    return (int(n) + m - 1) // m * m


def find_fusions(graph, nodes) -> dict:
    """Element-wise binary -> single-consumer activation pairs run as one kernel:
    {activation node name: node, ("producer", binary name): activation node}."""
    consumers: Dict[str, List[Node]] = {}
    for n in nodes:
        for i in n.inputs:
            if i:
                consumers.setdefault(i, []).append(n)
    outs = set(graph.outputs)
    fused = {}
    for n in nodes:
        if n.op not in ("Add", "Sub", "Mul", "Div") or len(n.inputs) != 2 or len(n.outputs) != 1:
            continue
        y = n.outputs[0]
        users = consumers.get(y, [])
        if y in outs or len(users) != 1:
            continue
        act = users[0]
        if act.op not in ("Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSwish", "HardSigmoid"):
            continue
        if act.inputs[0] != y or any(graph.tensors[nm].dtype != "float32" for nm in list(n.inputs) + [y, act.outputs[0]]):
            continue
        if act.op == "Clip" and any(nm and graph.tensors[nm].data is None for nm in act.inputs[1:]):
            continue
        fused[act.name] = act
        fused[("producer", n.name)] = act
    return fused


def launch1d(pc, node, prog, kname, n, args):
    pc.launch(node, prog, kname, (max(int(n), 1),), args)


# -- element-wise ------------------------------------------------------------------------------

@kernel_for(*UNARY)
def unary(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_f32(pc, node, [x, y])
    if pc.shape(x) != pc.shape(y):
        raise ShapeError(f"{node.op} {node.name!r}: {pc.shape(x)} -> {pc.shape(y)}")
    code, p0, p1 = unary_params(node, pc)
    n = int(np.prod(pc.shape(y)))
    xb, xo = pc.ref(x)
    yb, yo = pc.ref(y)
    launch1d(pc, node, "elementwise", "unary", n, [xb, xo, yb, yo, n, code, p0, p1])
    pc.note(node, f"unary {node.op}")


@kernel_for(*BINARY, "Sum")
def binary(node: Node, pc) -> None:
    ins = [i for i in node.inputs if i]
    if len(ins) != 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: {len(ins)} operands (OpenCL takes 2)")
    a, b = ins
    y = node.outputs[0]
    need_f32(pc, node, [a, b, y])
    ys = pc.shape(y)
    if np.broadcast_shapes(pc.shape(a), pc.shape(b)) != ys:
        raise ShapeError(f"{node.op} {node.name!r}: {pc.shape(a)} and {pc.shape(b)} do not give {ys}")
    meta = broadcast_meta(pc.shape(a), pc.shape(b), ys)
    act_node = pc.fused.get(("producer", node.name))
    code, p0, p1, yname = 0, 0.0, 0.0, y
    if act_node is not None:
        code, p0, p1 = unary_params(act_node, pc)
        yname = act_node.outputs[0]
    n = int(np.prod(ys))
    ab, ao = pc.ref(a)
    bb, bo = pc.ref(b)
    yb, yo = pc.ref(yname)
    opcode = BINARY.get(node.op, 0)
    launch1d(pc, node, "elementwise", "binary", n, [ab, ao, bb, bo, yb, yo, n, pc.meta(meta), opcode, code, p0, p1])
    pc.note(node, f"{node.op} ({'broadcast' if meta[0] else 'same shape'})"
            + (f" + fused {act_node.op}" if act_node is not None else ""))


@kernel_for("BatchNormalization")
def batch_norm(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_f32(pc, node, [x, y])
    if node.attrs.get("training_mode", 0) or len(node.outputs) > 1 and any(node.outputs[1:]):
        raise UnsupportedOpError(f"BatchNormalization {node.name!r}: training mode")
    stats = [pc.const(nm) for nm in node.inputs[1:5]]
    if any(s is None for s in stats):
        raise UnsupportedOpError(f"BatchNormalization {node.name!r}: statistics must be constants")
    eps = float(node.attrs.get("epsilon", 1e-5))
    gamma, beta, mean, var = (s.astype(np.float64).reshape(-1) for s in stats)
    scale64 = gamma / np.sqrt(var + eps)
    scale = scale64.astype(np.float32)
    shift = (beta - mean * scale64).astype(np.float32)
    xs = pc.shape(x)
    last = channels_last(node)
    c = xs[-1] if last else xs[1]
    inner = 1 if last else int(np.prod(xs[2:]))
    n = int(np.prod(xs))
    xb, xo = pc.ref(x)
    yb, yo = pc.ref(y)
    launch1d(pc, node, "elementwise", "channel_affine", n,
             [xb, xo, yb, yo, n, pc.upload(scale), pc.upload(shift), c, inner, 0, 0.0, 0.0])
    pc.note(node, "per-channel scale/shift (folded statistics)")


# -- GEMM --------------------------------------------------------------------------------------

def gemm_launch(node, pc, M, N, K, nb1, nb2, A, B, C, alpha=1.0, bias=None, beta=1.0, Z=None, act=(0, 0.0, 0.0)):
    """A, B, C, Z: (buffer, off, rs, cs, s1, s2); bias: (buffer, off, rs, cs, s2)."""
    flags = (1 if bias is not None else 0) | (2 if Z is not None else 0)
    bias = bias or (None, 0, 0, 0, 0)
    Z = Z or (None, 0, 0, 0, 0, 0)
    args = [*A, *B, *C, M, N, K, nb2, float(alpha), *bias, float(beta), *Z, *act, flags]
    if gemm_variant(pc) == "cpu":
        # rows of 8 per work item, columns across work items (kernels/gemm.cl gemm_f32_cpu)
        pc.launch(node, "gemm", "gemm_f32_cpu", (N, (M + 7) // 8, nb1 * nb2), args)
        return
    # work groups of 8 x 8 items, each a 32 x 32 block of C from local-memory tiles
    pc.launch(node, "gemm", "gemm_f32", (round_up(N, 32) // 4, round_up(M, 32) // 4, nb1 * nb2), args, (8, 8, 1))


def gemm_variant(pc) -> str:
    """'tiled' (local-memory tiles: GPUs) or 'cpu' (CPU OpenCL drivers); option
    ``gemm="tiled"|"cpu"`` or $EDGE_INFER_OPENCL_GEMM overrides."""
    import os
    want = pc.options.get("gemm") or os.environ.get("EDGE_INFER_OPENCL_GEMM", "")
    if want in ("tiled", "cpu"):
        return want
    if pc.device is None:
        return "tiled"
    import pyopencl as cl
    return "cpu" if pc.device.type & cl.device_type.CPU else "tiled"


def _matrix(pc, name, shape2, trans):
    """(buffer, off, rs, cs) of a 2-D operand, optionally transposed (a strided view)."""
    buf, off = pc.ref(name)
    r, c = shape2
    return (buf, off, 1, c) if trans else (buf, off, c, 1)


@kernel_for("Gemm", "FusedGemm")
def gemm(node: Node, pc) -> None:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    cname = _opt(node, 2)
    need_f32(pc, node, [a, b, y, cname])
    sa, sb, sy = pc.shape(a), pc.shape(b), pc.shape(y)
    if len(sa) != 2 or len(sb) != 2:
        raise UnsupportedOpError(f"Gemm {node.name!r}: operands must be 2-D")
    ta, tb = bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0))
    M, K = (sa[1], sa[0]) if ta else sa
    N = sb[0] if tb else sb[1]
    if sy != (M, N):
        raise ShapeError(f"Gemm {node.name!r}: output {sy} != {(M, N)}")
    alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
    A = (*_matrix(pc, a, sa, ta), 0, 0)
    bc = pc.const(b)
    if bc is not None:
        # pack B once as (K, N) with alpha folded in, as the CPU kernel does
        bp = None
        if not pc.dry:                     # supports() checks only: no packing of big weights
            bp = bc.T if tb else bc
            bp = pc.upload(np.ascontiguousarray(bp * np.float32(alpha) if alpha != 1.0 else bp, np.float32),
                           key=("gemm_b", b, tb, alpha))
        B, alpha = (bp, 0, N, 1, 0, 0), 1.0
    else:
        B = (*_matrix(pc, b, sb, tb), 0, 0)
    yb, yo = pc.ref(y)
    bias = None
    if cname and beta != 0.0:
        cs = pc.shape(cname)
        if len(cs) > 2 or np.broadcast_shapes(cs, (M, N)) != (M, N):
            raise ShapeError(f"Gemm {node.name!r}: C {cs} does not broadcast to {(M, N)}")
        full = (1,) * (2 - len(cs)) + tuple(cs)
        cb, co = pc.ref(cname)
        bias = (cb, co, full[1] if full[0] > 1 else 0, 1 if full[1] > 1 else 0, 0)
    act = activation(node) if node.op == "FusedGemm" else (0, 0.0, 0.0)
    gemm_launch(node, pc, M, N, K, 1, 1, A, B, (yb, yo, N, 1, 0, 0), alpha, bias, beta, act=act)
    pc.note(node, f"{gemm_variant(pc)} GEMM {M}x{K} @ {K}x{N}" + (" + C" if bias else "") + (f" + {node.attrs.get('activation')}" if act[0] else ""))


def matmul_batches(node: Node, sa, sb, sy) -> Tuple[int, int, int]:
    """(matrices in y, in A, in B) of a MatMul. The batch dims flatten into one GEMM batch
    when each operand has all of y's batch dims or is a single matrix (broadcast to all);
    partial broadcasts (2x1 @ 1x3 batches) are refused."""
    batch = tuple(sy[:-2])
    counts = []
    for s in (sa, sb):
        full = (1,) * (len(batch) - len(s) + 2) + tuple(s[:-2])
        n = int(np.prod(full))
        if n > 1 and full != batch:
            raise UnsupportedOpError(f"{node.op} {node.name!r}: batch broadcast {sa} @ {sb}")
        counts.append(n)
    return int(np.prod(batch)), counts[0], counts[1]


@kernel_for("MatMul", "FusedMatMul")
def matmul(node: Node, pc) -> None:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    bias_name = _opt(node, 2) if node.op == "FusedMatMul" else ""
    need_f32(pc, node, [a, b, y, bias_name])
    sa, sb, sy = pc.shape(a), pc.shape(b), pc.shape(y)
    if len(sa) < 2 or len(sb) < 2:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: 1-D operands are not supported")
    M, K = sa[-2:]
    N = sb[-1]
    nbat, pa, pb = matmul_batches(node, sa, sb, sy)
    abuf, ao = pc.ref(a)
    bbuf, bo = pc.ref(b)
    yb, yo = pc.ref(y)
    if pb == 1 and pa == nbat:              # (..., M, K) @ (K, N): one GEMM over flattened rows
        Mt, nb2 = M * nbat, 1
        A = (abuf, ao, K, 1, 0, 0)
        B = (bbuf, bo, N, 1, 0, 0)
        C = (yb, yo, N, 1, 0, 0)
    else:
        Mt, nb2 = M, nbat
        A = (abuf, ao, K, 1, 0, M * K if pa > 1 else 0)
        B = (bbuf, bo, N, 1, 0, K * N if pb > 1 else 0)
        C = (yb, yo, N, 1, 0, M * N)
    bias = None
    if bias_name:
        bs = pc.shape(bias_name)
        if int(np.prod(bs)) != N or (bs and bs[-1] != N):
            raise UnsupportedOpError(f"FusedMatMul {node.name!r}: bias {bs} is not per output column")
        bbf, bfo = pc.ref(bias_name)
        bias = (bbf, bfo, 0, 1, 0)
    act = activation(node) if node.op == "FusedMatMul" else (0, 0.0, 0.0)
    gemm_launch(node, pc, Mt, N, K, 1, nb2, A, B, C, 1.0, bias, act=act)
    pc.note(node, f"{gemm_variant(pc)} GEMM {sa} @ {sb}")


# -- convolution -------------------------------------------------------------------------------

def conv_geometry(node: Node, pc):
    """Checked 1-D/2-D conv geometry: dict with N, C, H, W, M, OH, OW, KH, KW, strides, pads,
    dilations, group, cg, mg, last."""
    x, wn, y = node.inputs[0], node.inputs[1], node.outputs[0]
    xs, ws, ys = pc.shape(x), pc.shape(wn), pc.shape(y)
    nsp = len(xs) - 2
    if nsp not in (1, 2):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: {nsp}-D convolution (OpenCL: 1-D and 2-D)")
    g = checked_conv_geometry(node, xs, ws, ys)
    if min(g.pads) < 0:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: negative pads")
    g = g.planar()
    return dict(N=g.n, C=g.c, H=g.in_sp[0], W=g.in_sp[1], M=g.m, OH=g.out_sp[0], OW=g.out_sp[1], KH=g.kernel[0],
                KW=g.kernel[1], SH=g.strides[0], SW=g.strides[1], PH=g.pads[0], PW=g.pads[1], PHE=g.pads[2],
                PWE=g.pads[3], DH=g.dilations[0], DW=g.dilations[1], G=g.group, CG=g.cg, MG=g.mg, last=g.last)


def geo_list(g) -> List[int]:
    return [g["N"], g["C"], g["H"], g["W"], g["M"], g["OH"], g["OW"], g["KH"], g["KW"], g["SH"], g["SW"],
            g["PH"], g["PW"], g["DH"], g["DW"], g["G"], g["CG"], g["MG"], int(g["last"])]


def conv_algorithm(g, option: str = "auto") -> str:
    """'pointwise' (the input is the column matrix), 'direct' or 'im2col'."""
    point = g["KH"] == g["KW"] == 1 and g["SH"] == g["SW"] == 1 and not (g["PH"] or g["PW"] or g["PHE"] or g["PWE"])
    if option == "direct":
        return "direct"
    if point:
        return "pointwise"
    if option in ("gemm", "im2col"):
        return "im2col"
    if g["CG"] == 1 or g["CG"] * g["KH"] * g["KW"] < 16:
        return "direct"
    return "im2col"


def gemm_operands(g, xref, yref, wbuf, cols):
    """(M, N, K, nb1, nb2, A, B, C) of a pointwise or im2col conv as strided GEMM views.
    ``cols``: None (pointwise: x is the column matrix) or the column scratch; ``wbuf``: weights
    packed (G, MG, K) for NCHW, (G, K, MG) for NHWC."""
    N_, G, CG, MG, M = g["N"], g["G"], g["CG"], g["MG"], g["M"]
    P = g["OH"] * g["OW"]
    xb, xo = xref
    yb, yo = yref
    if cols is None:
        K = CG
        if g["last"]:   # rows: N*P positions of x (N*P, C); per group a column block
            A = (xb, xo, g["C"], 1, 0, CG)
            B = (wbuf, 0, MG, 1, 0, K * MG)
            C = (yb, yo, M, 1, 0, MG)
            return N_ * P, MG, K, 1, G, A, B, C
        A = (wbuf, 0, K, 1, 0, MG * K)
        B = (xb, xo, P, 1, g["C"] * P, CG * P)
        C = (yb, yo, P, 1, M * P, MG * P)
        return MG, P, K, N_, G, A, B, C
    K = CG * g["KH"] * g["KW"]
    if g["last"]:
        A = (cols, 0, K, 1, G * P * K, P * K)
        B = (wbuf, 0, MG, 1, 0, K * MG)
        C = (yb, yo, M, 1, P * M, MG)
        return P, MG, K, N_, G, A, B, C
    A = (wbuf, 0, K, 1, 0, MG * K)
    B = (cols, 0, P, 1, G * K * P, K * P)
    C = (yb, yo, P, 1, M * P, MG * P)
    return MG, P, K, N_, G, A, B, C


def pack_conv_weights(w: np.ndarray, g, algo: str) -> np.ndarray:
    """OIHW weights as the GEMM reads them: NCHW (G, MG, CG*KH*KW) (rows = OIHW order),
    NHWC (G, K, MG) with k = (kh, kw, ci) matching the NHWC column matrix."""
    G, MG, CG = g["G"], g["MG"], g["CG"]
    w4 = w.reshape(G, MG, CG, g["KH"] * g["KW"])
    if not g["last"]:
        return np.ascontiguousarray(w4.reshape(G, MG, -1))
    return np.ascontiguousarray(w4.transpose(0, 3, 2, 1).reshape(G, -1, MG))


@kernel_for("Conv", "FusedConv")
def conv(node: Node, pc) -> None:
    x, wn, y = node.inputs[0], node.inputs[1], node.outputs[0]
    bname = _opt(node, 2)
    zname = _opt(node, 3) if node.op == "FusedConv" else ""
    need_f32(pc, node, [x, wn, y, bname, zname])
    g = conv_geometry(node, pc)
    w = pc.const(wn)
    if w is None:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: weights must be constant")
    if zname and pc.shape(zname) != pc.shape(y):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: residual {pc.shape(zname)} is not y's shape")
    if bname and int(np.prod(pc.shape(bname))) != g["M"]:
        raise ShapeError(f"{node.op} {node.name!r}: bias is not per output channel")
    act = activation(node) if node.op == "FusedConv" else (0, 0.0, 0.0)
    algo = conv_algorithm(g, pc.options.get("conv_algorithm", "auto"))
    xref, yref = pc.ref(x), pc.ref(y)
    bias = pc.upload(np.asarray(pc.const(bname), np.float32).reshape(-1), key=("bias", bname)) \
        if bname and pc.const(bname) is not None \
        else (pc.ref(bname)[0] if bname else None)
    if bname and pc.const(bname) is None:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: bias must be constant")
    zref = pc.ref(zname) if zname else (None, 0)
    kdesc = f"{g['KH']}x{g['KW']}"
    tail = (" + residual" if zname else "") + (f" + {node.attrs.get('activation')}" if act[0] else "")
    lay = "NHWC" if g["last"] else "NCHW"
    if algo == "direct":
        total = int(np.prod(pc.shape(y)))
        flags = (1 if bias is not None else 0) | (2 if zname else 0)
        launch1d(pc, node, "conv", "conv_direct_f32", total,
                 [*xref, pc.upload(np.asarray(w, np.float32), key=("conv_w", wn)), bias, *zref, *yref, pc.meta(geo_list(g)), total,
                  *act, flags])
        groups = f", {g['G']} groups" if g["G"] > 1 else ""
        pc.note(node, f"{lay} direct conv {kdesc}{' depthwise' if g['CG'] == 1 and g['G'] > 1 else groups}{tail}")
        return
    wp = None if pc.dry else pc.upload(pack_conv_weights(np.asarray(w, np.float32), g, algo),
                                       key=("conv_packed", wn, g["last"], g["G"]))
    cols = None
    if algo == "im2col":
        P = g["OH"] * g["OW"]
        K = g["CG"] * g["KH"] * g["KW"]
        n_cols = g["N"] * g["G"] * P * K
        cols = pc.scratch("cols_f32", n_cols * 4)
        launch1d(pc, node, "conv", "im2col_f32", n_cols, [*xref, cols, 0, pc.meta(geo_list(g))])
    M, N, K, nb1, nb2, A, B, C = gemm_operands(g, xref, yref, wp, cols)
    if bias is not None:
        bias_v = (bias, 0, 0, 1, g["MG"]) if g["last"] else (bias, 0, 1, 0, g["MG"])
    else:
        bias_v = None
    Z = (zref[0], zref[1], C[2], C[3], C[4], C[5]) if zname else None
    gemm_launch(node, pc, M, N, K, nb1, nb2, A, B, C, 1.0, bias_v, 1.0, Z, act)
    groups = f" ({g['G']} groups)" if g["G"] > 1 else ""
    kind = "pointwise 1x1" if algo == "pointwise" else f"im2col {kdesc} +"
    pc.note(node, f"{lay} {kind} {gemm_variant(pc)} GEMM"
                  f"{groups}{tail}")


# -- pools ---------------------------------------------------------------------------------------

def pool_geometry(node: Node, pc):
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = pc.shape(x), pc.shape(y)
    nsp = len(xs) - 2
    if nsp not in (1, 2):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: {nsp}-D pool (OpenCL: 1-D and 2-D)")
    ks = [int(k) for k in (node.attrs.get("kernel_shape") or [])]
    if len(ks) != nsp:
        raise ShapeError(f"{node.op} {node.name!r}: kernel_shape {ks}")
    g = window_geometry(node, xs, ys, ks, ceil_mode=True).planar()
    return [g.n, g.c, *g.in_sp, *g.out_sp, *g.kernel, *g.strides, g.pads[0], g.pads[1], *g.dilations,
            int(g.last), g.pads[2], g.pads[3]]


@kernel_for("MaxPool")
def max_pool(node: Node, pc) -> None:
    if len(node.outputs) > 1 and node.outputs[1]:
        raise UnsupportedOpError(f"MaxPool {node.name!r}: the Indices output is not supported")
    x, y = node.inputs[0], node.outputs[0]
    dt = pc.dtype(x)
    if dt not in ("float32", "int8") or pc.dtype(y) != dt:
        raise UnsupportedOpError(f"MaxPool {node.name!r}: dtype {dt}")
    geo = pool_geometry(node, pc)
    total = int(np.prod(pc.shape(y)))
    launch1d(pc, node, "pool", "maxpool_i8" if dt == "int8" else "maxpool_f32", total,
             [*pc.ref(x), *pc.ref(y), pc.meta(geo), total])
    pc.note(node, f"{'NHWC ' if geo[14] else ''}max pool {geo[6]}x{geo[7]} ({dt})")


@kernel_for("AveragePool")
def average_pool(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_f32(pc, node, [x, y])
    geo = pool_geometry(node, pc)
    total = int(np.prod(pc.shape(y)))
    inc = int(bool(node.attrs.get("count_include_pad", 0)))
    launch1d(pc, node, "pool", "avgpool_f32", total, [*pc.ref(x), *pc.ref(y), pc.meta(geo), total, inc])
    pc.note(node, f"{'NHWC ' if geo[14] else ''}average pool {geo[6]}x{geo[7]}")


@kernel_for("GlobalAveragePool", "GlobalMaxPool")
def global_pool(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_f32(pc, node, [x, y])
    last = channels_last(node)
    n, c, sp = split_layout(pc.shape(x), last)
    p = int(np.prod(sp))
    launch1d(pc, node, "pool", "global_pool_f32", n * c,
             [*pc.ref(x), *pc.ref(y), c, p, int(last), int(node.op == "GlobalMaxPool")])
    pc.note(node, f"{'NHWC ' if last else ''}{'max' if node.op == 'GlobalMaxPool' else 'mean'} over {p} positions")


# -- normalisation, softmax ------------------------------------------------------------------------

@kernel_for("LRN")
def lrn(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_f32(pc, node, [x, y])
    xs = pc.shape(x)
    size = int(node.attrs["size"])
    alpha = float(node.attrs.get("alpha", 1e-4))
    beta = float(node.attrs.get("beta", 0.75))
    bias = float(node.attrs.get("bias", 1.0))
    last = channels_last(node)
    c = xs[-1] if last else xs[1]
    inner = 1 if last else int(np.prod(xs[2:]))
    n = int(np.prod(xs))
    launch1d(pc, node, "nn", "lrn_f32", n, [*pc.ref(x), *pc.ref(y), n, c, inner, size, (size - 1) // 2,
                                            float(np.float32(alpha / size)), bias, beta])
    pc.note(node, f"{'NHWC ' if last else ''}LRN over {size} channels")


@kernel_for("Softmax", "LogSoftmax")
def softmax(node: Node, pc) -> None:
    x, y = node.inputs[0], node.outputs[0]
    need_f32(pc, node, [x, y])
    xs = pc.shape(x)
    ax = int(node.attrs.get("axis", -1))
    if not -len(xs) <= ax < len(xs):
        raise ShapeError(f"{node.op} {node.name!r}: axis {ax}")
    ax %= len(xs)
    L = xs[ax]
    inner = int(np.prod(xs[ax + 1:]))
    rows = int(np.prod(xs)) // max(L, 1)
    launch1d(pc, node, "nn", "softmax_f32", rows, [*pc.ref(x), *pc.ref(y), L, inner, rows, int(node.op == "LogSoftmax")])
    pc.note(node, f"{node.op} over axis {ax} ({L} values)")
