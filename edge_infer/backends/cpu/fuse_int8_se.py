"""Prepare-time fusion of an int8 squeeze-excite block into one native step.

MobileNetV3-style blocks gate their channels by ``x * act(conv2(relu(conv1(mean(x)))))``: in an
int8 plan four steps (GlobalAveragePool, two 1x1 convs on one pixel, the second with its
HardSigmoid / Sigmoid table fused by ``fuse_int8_activation``, and the broadcast Mul), each a
few microseconds at most, most of it fixed cost: a one-pixel conv goes through the GEMM's
packed panels and tile dispatch for M = 1. Where the plan's nodes hold the four back to back,
each intermediate tensor read only by the next and none a graph output, and all four got
native steps, this module puts one step in their place (``ei_se_s8``, native/src/se.c): it runs
the mean and the Mul steps' own kernels on their own argument structs, and the two GEMVs on
weights packed here for them, with the convs' own folded bias, multipliers, clamp and table
(read back from the conv steps' argument structs), so the bytes are those of the four steps.
At 2+ threads, where x is large enough and the GEMVs small enough beside it (``SPLIT_VALUES``,
``SPLIT_WEIGHTS_PER_VALUE``), the step sums x and gates it in row shares, one a thread, where the
depthwise conv before it wrote them (int32 partial sums added, then divided as the pool does).

The decision belongs to the CPU backend and is made after the plan's steps are prepared: the
saved graph, its exports and the other backends keep the four nodes, the arena keeps their
(one-pixel) tensors, which the fused step writes as the four steps would. ``ENABLED = False``
keeps them apart (the tests compare both plans bit for bit).
"""
from __future__ import annotations

import ctypes
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ...ir import Graph, Node
from . import native

#: fuse when plans are prepared (False: the four steps stay)
ENABLED = True
#: the attribute of the fused node (in the plan's node list only): the fused nodes' names
ATTR = "_int8_squeeze_excite"
#: the largest GEMV input / output count (src/se.c SE_MAX_K)
MAX_K = 4096
#: the fused step's gated Mul runs on the calling thread below this many values: the mean just
#: read x into this core's caches, and a worker's half came from the other core's (MobileNetV3's
#: 14x14x240 gates: 12.1 us at 2 threads split, 10.6 on one; 56x56x16 about even; best of 40,
#: loaded machine). The unfused Mul keeps its own split (src/int8_ops.c).
MUL_PAR_VALUES = 1 << 17
#: at 2+ threads, x of at least ``SPLIT_VALUES`` values is summed and gated in row shares, one a
#: thread, where the depthwise conv before the block wrote them (src/se.c), unless the two GEMVs
#: (on the caller between the two jobs) have over ``SPLIT_WEIGHTS_PER_VALUE`` bytes of weights
#: per value of x. Measured at 2 threads (per-step minimums, interleaved plans, loaded 2-core
#: machine), caller alone -> row shares: MobileNetV3-small 56x56x16 10.9 -> 7.3 us, 14x14x240
#: 10.4 -> 8.0, 14x14x144 6.4 -> 5.6, 14x14x120 5.3 -> 5.0, 14x14x96 (19K values) 4.3 -> 4.2,
#: 7x7x288 (14K) 4.7 -> 4.9-5.7; its 7x7x576 blocks (28K values, 166 KB of GEMV weights, ~5 us of
#: the block's ~10.5) 10.5 -> 10.9-12.0 (with their gate and Mul in column shares, the second GEMV
#: split with them, 10.8-11.2); DB-640's 20x20x480 (192K values, 115 KB) 43 -> 30, its 80x80 and
#: 40x40 blocks 42-80 -> 32-57 (the Mul had split by itself there, after the caller's mean)
SPLIT_VALUES = 1 << 14
SPLIT_WEIGHTS_PER_VALUE = 2
#: the int8 conv steps whose ``Int8ConvArgs`` a GEMV takes over (the GEMM; the stem kernel, which
#: serves convs on <= 4 input channels: a narrow block's second conv)
CONV_FNS = ("ei_int8_conv", "ei_int8_stem")

_P, _I = ctypes.c_void_p, ctypes.c_int32


class GemvArgs(ctypes.Structure):
    """``ei_se_gemv`` of src/se.c."""
    _fields_ = ([(f, _P) for f in ("x", "y", "wp", "corr", "bias", "mult", "shift", "lut", "consts")]
                + [(f, _I) for f in ("m", "k", "zp_y", "lo", "hi", "left")])


class SeArgs(ctypes.Structure):
    """``ei_se_s8_args`` of src/se.c."""
    _fields_ = [("pool_fn", _P), ("pool", _P), ("mul_fn", _P), ("mul", _P), ("g1", GemvArgs), ("g2", GemvArgs),
                ("sums", _P), ("rows", ctypes.c_int64), ("cols", ctypes.c_int64), ("threads", _I), ("parts", _I)]


def _symbol(name: str) -> Optional[int]:
    fn = getattr(native.lib, name, None) if native.lib is not None else None
    return None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value


def _args_of(step, *fn_names: str):
    """The argument struct of native ``step`` when it calls one of ``fn_names``, else None."""
    ns, keep = getattr(step, "native_step", None), getattr(step, "native_keep", None)
    if ns is None or keep is None or ns[0] is None or ns[0] not in [_symbol(f) for f in fn_names]:
        return None
    return keep[1]


def _ints(addr: int, n: int) -> np.ndarray:
    return np.array((ctypes.c_int32 * n).from_address(addr), np.int64)


def pack_gemv(w: np.ndarray) -> np.ndarray:
    """(m, k) int8 weights as src/se.c reads them: blocks of 16 outputs x 4 inputs,
    wp[ob, kq, l, j] = w[16 ob + l, 4 kq + j], zero padded."""
    m, k = w.shape
    mp, kp = -(-m // 16) * 16, -(-k // 4) * 4
    full = np.zeros((mp, kp), np.int8)
    full[:m, :k] = w
    return np.ascontiguousarray(full.reshape(mp // 16, 16, kp // 4, 4).transpose(0, 2, 1, 3))


def _gemv(conv_args, w: np.ndarray, keep: list) -> Optional[GemvArgs]:
    """The GEMV of a one-pixel int8 conv step (its ``Int8ConvArgs``) with weights ``w`` (m, k)."""
    a = conv_args
    m, k = int(a.m), int(a.c)
    if (a.n, a.h, a.w, a.oh, a.ow, a.kh, a.kw) != (1,) * 7 or a.z or w.shape != (m, k) or not 1 <= m <= MAX_K \
            or not 1 <= k <= MAX_K or not (a.bias and a.mult and a.shift):
        return None
    bias = _ints(a.bias, m)
    corr = bias - 128 * w.astype(np.int64).sum(axis=1)
    if k * (1 << 14) + int(np.abs(bias).max()) >= 1 << 31 or int(np.abs(corr).max()) + k * 255 * 128 >= 1 << 31:
        return None                 # the int32 sums of se.c (the conv step checked the first too)
    arrays = [pack_gemv(w), corr.astype(np.int32), bias.astype(np.int32), _ints(a.mult, m).astype(np.int32),
              _ints(a.shift, m).astype(np.int32)]
    lut = np.array((ctypes.c_int8 * 256).from_address(a.lut), np.int8) if a.lut else None
    if lut is not None:
        arrays.append(lut)
    keep += arrays
    ptr = [v.ctypes.data for v in arrays]
    return GemvArgs(a.x, a.y, *ptr[:5], ptr[5] if lut is not None else None, None, m, k, a.zp_y, a.lo, a.hi, 0)


def _row_shares(pool_step, pa, ma, threads: int, weight_bytes: int) -> Optional[Tuple[int, int, int]]:
    """(parts, rows, cols) when the fused step sums and gates x in row shares, one a thread
    (src/se.c): x NHWC of batch 1 with at least ``SPLIT_VALUES`` values, GEMVs of at most
    ``SPLIT_WEIGHTS_PER_VALUE`` bytes of weights per value of x, the Mul a gate over x's pixels
    (shape (1, 1, H W, C)); else None."""
    x = pool_step.native_keep[2][0] if len(pool_step.native_keep[2]) else None
    if threads < 2 or not isinstance(x, np.ndarray) or x.ndim != 4 or not pa.nhwc or pa.n != 1:
        return None
    rows, cols = int(x.shape[1]), int(x.shape[2])
    if x.size < SPLIT_VALUES or weight_bytes > SPLIT_WEIGHTS_PER_VALUE * x.size or rows < 2 \
            or tuple(ma.shape) != (1, 1, rows * cols, int(pa.c)):
        return None
    return min(threads, rows), rows, cols


def _readers(nodes: List[Node]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for n in nodes:
        for i in n.inputs:
            if i:
                out[i] = out.get(i, 0) + 1
    return out


def _fuse_at(graph: Graph, nodes: List[Node], steps: List[Callable[[], None]], k: int,
             readers: Dict[str, int]) -> Optional[Callable[[], None]]:
    """The fused step of nodes k .. k + 3 when they are a squeeze-excite block, else None."""
    pool, c1, c2, mul = nodes[k:k + 4]
    if (pool.op, mul.op) != ("GlobalAveragePool", "Mul") or c1.op not in ("Conv", "FusedConv") \
            or c2.op not in ("Conv", "FusedConv"):
        return None
    chain = [(pool, c1), (c1, c2), (c2, mul)]
    for a, b in chain:
        out = [o for o in a.outputs if o]
        if len(out) != 1 or out[0] not in b.inputs[:2] or readers.get(out[0], 0) != 1 or out[0] in graph.outputs:
            return None
    if pool.inputs[0] not in mul.inputs:
        return None
    pa, a1, a2, ma = (_args_of(steps[k], "ei_global_pool_s8"), _args_of(steps[k + 1], *CONV_FNS),
                      _args_of(steps[k + 2], *CONV_FNS), _args_of(steps[k + 3], "ei_int8_bcast"))
    if pa is None or a1 is None or a2 is None or ma is None:
        return None
    # the steps' own buffers say the same chain: mean -> conv1 -> conv2 -> the Mul's gate
    if pa.op not in (1, 2) or pa.n != 1 or ma.op != 1 or a1.x != pa.y or a2.x != a1.y or a1.c != pa.c \
            or a2.c != a1.m or a2.m != pa.c or {ma.a, ma.b} != {pa.x, a2.y}:
        return None
    keep: list = []
    gemvs = []
    for node, a in ((c1, a1), (c2, a2)):
        w = graph.tensors[node.inputs[1]].data if node.inputs[1] in graph.tensors else None
        if w is None or w.dtype != np.int8 or w.size != a.m * a.c:
            return None
        g = _gemv(a, np.asarray(w).reshape(a.m, a.c), keep)
        if g is None:
            return None
        gemvs.append(g)
    pool_fn, pool_args = steps[k].native_step
    mul_fn, mul_args = steps[k + 3].native_step
    threads = max(1, int(ma.threads))
    args = SeArgs(pool_fn, pool_args, mul_fn, mul_args, *gemvs, None, 0, 0, threads, 1)
    shares = _row_shares(steps[k], pa, ma, threads, int(a1.m * a1.c + a2.m * a2.c))
    if shares is not None:
        sums = np.zeros((shares[0], int(pa.c)), np.int32)
        keep.append(sums)
        args.sums, args.parts, args.rows, args.cols = sums.ctypes.data, *shares
    elif int(np.prod(list(ma.shape))) < MUL_PAR_VALUES:
        ma.threads = 1
    # the GEMVs' requantization constants in the SIMD layout, made once here
    size = native.function("ei_se_consts_size", ctypes.c_void_p, restype=ctypes.c_int64)(ctypes.addressof(args))
    if size > 0:
        from .native.kernels import aligned         # (imports the kernels: not at module load)
        consts = aligned(int(size))
        native.function("ei_se_prepare", ctypes.c_void_p, ctypes.c_void_p)(ctypes.addressof(args),
                                                                          consts.ctypes.data)
        keep.append(consts)
    # the pool's and the Mul's steps hold the arrays their structs point into; the convs' steps
    # (their packed GEMM weights) are dropped with them: the GEMVs copied what they read
    return native.native_step("ei_se_s8", args, *keep, steps[k], steps[k + 3])


def gemv_isa() -> str:
    """The GEMV code of the fused step under the current ISA mask (plan notes)."""
    fn = native.function("ei_se_isa", restype=ctypes.c_int)
    return "AVX-512 VNNI" if fn is not None and fn() == 1 else "plain loops"


def fuse_squeeze_excite(graph: Graph, nodes: List[Node], steps: List[Callable[[], None]],
                        notes: Optional[Dict[str, str]] = None
                        ) -> Tuple[List[Node], List[Callable[[], None]], Dict[str, List[str]]]:
    """(nodes, steps) of a prepared plan with each fusable squeeze-excite block's four as one
    (the Mul's node, a copy with ``ATTR`` set, and the fused step), and {Mul node name: [pool,
    conv, conv]} of the blocks fused. ``notes`` (the plan's, by node name) gets the fused
    node's note. ``graph`` and its nodes are left as they are."""
    if not ENABLED or native.lib is None or _symbol("ei_se_s8") is None:
        return list(nodes), list(steps), {}
    readers = _readers(nodes)
    out_nodes: List[Node] = []
    out_steps: List[Callable[[], None]] = []
    fused: Dict[str, List[str]] = {}
    k = 0
    while k < len(nodes):
        step = _fuse_at(graph, nodes, steps, k, readers) if k + 4 <= len(nodes) else None
        if step is None:
            out_nodes.append(nodes[k])
            out_steps.append(steps[k])
            k += 1
            continue
        pool, c1, c2, mul = nodes[k:k + 4]
        names = [pool.name, c1.name, c2.name]
        out_nodes.append(Node(mul.op, list(mul.inputs), list(mul.outputs), {**mul.attrs, ATTR: names}, mul.name))
        out_steps.append(step)
        fused[mul.name] = names
        if notes is not None:
            notes[mul.name] = (f"int8 squeeze-excite as one native step: {' -> '.join(names)} -> {mul.name} "
                               f"(the mean and Mul kernels, two GEMVs: {gemv_isa()})")
        k += 4
    return out_nodes, out_steps, fused
