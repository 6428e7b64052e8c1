"""Sparse kernels: 1x1 Conv / FusedConv (NCHW and NHWC), Gemm / FusedGemm, MatMul / FusedMatMul,
fp32 and int8, computing straight from a sparse-encoded weight (edge_infer/sparse/encodings.py).

Every case is one product over the pixels (or rows of A) p::

    normal      Y[r, p] = sum_c S[r, c] X[c, p]      (S's rows are the outputs: Conv, Gemm transB)
    transposed  Y[c, p] = sum_r S[r, c] X[r, p]      (S's rows are K: MatMul B (K, N), Gemm B (K, N))

with X and Y strided views of the input and output (NCHW: p contiguous; NHWC and Gemm: the
channel contiguous). The native kernel (native/src/sparse.c) reads the encoding itself
(delta indices, blocks, bitmask) over tiles of pixels, transposing a tile where the layout is
channels-last (XNNPACK's scheme). Without the library a numpy version gathers the inputs of the
stored weights (``take``), scales them and sums each output row with ``add.reduceat``; its row
structure (absolute columns, int32) is derived at prepare, the weight is never densified.

int8 is bit-exact with kernels/int8_conv.py and int8_gemm.py: the same integer accumulator
(sum x*w + bias - zp_x * sum w, exact), the same ``Requantizer`` / residual table / clamp.

Registration: ``sparse_prepare`` is the registry's (op, sparse=True) entry of SPARSE_OPS, the most
specific one, so ``lookup`` picks it whatever the dtype; it picks the sparse kernel
when the weight constant is a ``SparseArray``, the node's form is supported and the weight is
at least as sparse as the target profile's measured ``sparse_crossover`` (targets/*.json);
otherwise that one weight is densified for the dense kernel (said in ctx.note).
``EDGE_INFER_SPARSE=always|never`` overrides the crossover (tests, benchmarks).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
from typing import Callable, List, Optional, Tuple

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ....ir.padding import resolve_pads
from ....ops.conv import window_attrs
from ....ops.shapes import channels_last, split_layout
from ....sparse.encodings import SparseArray, segment_cumsum
from ..registry import is_int8_node, kernel_for, lookup
from ....ops.qmath import requant_mode
from .int8_common import Requantizer, clamp_range, per_tensor, qparams, quantize_multipliers

SPARSE_OPS = ("Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul")
#: used when neither the graph's target nor the host's profile records a crossover
DEFAULT_CROSSOVER = {"fp32": 0.7, "int8": 1.0, "fp32_numpy": 1.0, "int8_numpy": 1.0, "min_k": 48}
_ENC = {"csr": 0, "bcsr": 1, "bitmask": 2}


# -- the decision ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _host_crossover() -> dict:
    from ....targets import load_target
    name = "generic-aarch64" if platform.machine().lower() in ("aarch64", "arm64") else "generic-x86_64"
    try:
        return dict(load_target(name).get("sparse_crossover") or {})
    except Exception:       # a missing or broken profile: the defaults serve
        return {}


def crossover(ctx, int8: bool, native: bool, key: Optional[str] = None) -> float:
    """The sparsity from which the sparse kernel beats the dense one (target profile); ``key``
    another entry of the profile's "sparse_crossover" (min_k)."""
    key = key or (("int8" if int8 else "fp32") + ("" if native else "_numpy"))
    target = ctx.graph.metadata.get("target") if ctx is not None else None
    for prof in ((target or {}).get("sparse_crossover") or {}, _host_crossover(), DEFAULT_CROSSOVER):
        if key in prof:
            return float(prof[key])
    return 1.0


_FORCED: List[str] = []


@contextlib.contextmanager
def forced(mode: str):
    """Within the block, plans choose as ``EDGE_INFER_SPARSE=mode`` would (convert's check of
    the sparse kernels: "always")."""
    _FORCED.append(mode)
    try:
        yield
    finally:
        _FORCED.pop()


def use_sparse(ctx, s: SparseArray, int8: bool, native: bool, k: int = 0) -> Tuple[bool, str]:
    """Sparse or dense kernel for weight ``s`` summed over ``k`` inputs per output, and why."""
    mode = _FORCED[-1] if _FORCED else os.environ.get("EDGE_INFER_SPARSE", "auto")
    sparsity = 1.0 - s.density
    if mode == "always":
        return True, f"sparsity {sparsity:.2f} (EDGE_INFER_SPARSE=always)"
    if mode == "never":
        return False, "EDGE_INFER_SPARSE=never"
    cut = crossover(ctx, int8, native)
    min_k = crossover(ctx, int8, native, "min_k")
    if k and k < min_k:
        return False, f"{k} inputs per output < min_k {min_k:g} (per-row overhead beats the saving)"
    return sparsity >= cut, f"sparsity {sparsity:.2f} {'>=' if sparsity >= cut else '<'} crossover {cut:.2f}"


# -- native library ------------------------------------------------------------------------------

class SparseMMArgs(ctypes.Structure):
    """``ei_sparse_mm_args`` of native/src/sparse.c."""
    _fields_ = [("encoding", ctypes.c_int32), ("int8", ctypes.c_int32), ("rows", ctypes.c_int32),
                ("cols", ctypes.c_int32), ("br", ctypes.c_int32), ("bc", ctypes.c_int32),
                ("index_bytes", ctypes.c_int32), ("transposed", ctypes.c_int32),
                ("indptr", ctypes.c_void_p), ("indices", ctypes.c_void_p), ("values", ctypes.c_void_p),
                ("mask", ctypes.c_void_p), ("row_offsets", ctypes.c_void_p),
                ("p", ctypes.c_int64), ("x", ctypes.c_void_p), ("x_sk", ctypes.c_int64), ("x_sp", ctypes.c_int64),
                ("y", ctypes.c_void_p), ("y_sr", ctypes.c_int64), ("y_sp", ctypes.c_int64),
                ("bias", ctypes.c_void_p), ("threads", ctypes.c_int32), ("f32_exact", ctypes.c_int32),
                ("rq", ctypes.c_void_p), ("z", ctypes.c_void_p)]


class EiRq(ctypes.Structure):
    """``ei_rq`` of native/src/ei_int8.h (the int8 epilogue's parameters)."""
    _fields_ = [("bias", ctypes.c_void_p), ("mult", ctypes.c_void_p), ("shift", ctypes.c_void_p),
                ("ztab", ctypes.c_void_p), ("zp_y", ctypes.c_int32), ("lo", ctypes.c_int32), ("hi", ctypes.c_int32)]


def native_int8_fused(ctx, s: SparseArray, transposed: bool, jobs, zviews, const_term: np.ndarray, q, sh,
                      zp_y: int, lo: int, hi: int, table: Optional[np.ndarray]) -> Optional[Callable[[], None]]:
    """The native int8 product with the epilogue fused (int32 accumulation, requantization,
    residual table, clamp into the int8 output), or None when it does not apply: no library,
    or bounds under which the int32 arithmetic could differ from the numpy int64 one."""
    nat = _native()
    if nat is None:
        return None
    k = s.rows if transposed else s.cols
    if k * (1 << 14) + int(np.abs(const_term).max(initial=0)) >= (1 << 31):
        return None
    q, sh = np.asarray(q, np.int64).reshape(-1), np.asarray(sh, np.int64).reshape(-1)
    from ..native.kernels import requant_ok
    if not requant_ok(q, sh):
        return None
    if table is not None and np.abs(table).max() > (1 << 29):
        return None
    bias32 = np.ascontiguousarray(const_term, np.int32)
    mult, shift = np.ascontiguousarray(q, np.int32), np.ascontiguousarray(sh, np.int32)
    ztab = None if table is None else np.ascontiguousarray(table, np.int32)
    rq = EiRq(bias32.ctypes.data, mult.ctypes.data, shift.ctypes.data, _addr(ztab), int(zp_y), int(lo), int(hi))
    steps = []
    for (xv, yv), zv in zip(jobs, zviews):
        args, keep = native_args(s, transposed, xv, yv, None, ctx.threads)
        args.rq = ctypes.addressof(rq)
        args.z = _addr(zv)
        steps.append(nat.native_step("ei_sparse_mm", args, *keep, rq, bias32, mult, shift, ztab, zv))
    return steps[0] if len(steps) == 1 else nat.run_steps_call(steps)


def _native():
    from .. import native
    if native.lib is None or not hasattr(native.lib, "ei_sparse_mm"):
        return None
    return native


def _addr(a: Optional[np.ndarray]) -> int:
    return 0 if a is None else a.ctypes.data


def _elem_strides(v: np.ndarray) -> Tuple[int, int]:
    return v.strides[0] // v.itemsize, v.strides[1] // v.itemsize


def native_args(s: SparseArray, transposed: bool, xv: np.ndarray, yv: np.ndarray,
                bias: Optional[np.ndarray], threads: int) -> Tuple[SparseMMArgs, list]:
    """The C kernel's arguments for Y (R, P view) from X (K, P view); bias per output row
    (float32 for fp32, int64 for int8 where Y is the int64 accumulator)."""
    keep = [s, xv, yv, bias]
    a = SparseMMArgs()
    a.encoding = _ENC[s.encoding]
    a.int8 = int(s.dtype == np.int8)
    a.rows, a.cols = s.rows, s.cols
    a.br, a.bc = s.block or (1, 1)
    a.transposed = int(transposed)
    a.values = _addr(s.values)
    if s.encoding == "bitmask":
        a.mask = _addr(s.mask)
        offs = bitmask_row_offsets(s)
        keep.append(offs)
        a.row_offsets = _addr(offs)
    else:
        a.indptr, a.indices = _addr(s.indptr), _addr(s.indices)
        a.index_bytes = s.indices.itemsize
    a.p = xv.shape[1]
    a.x = _addr(xv)
    a.x_sk, a.x_sp = _elem_strides(xv)
    a.y = _addr(yv)
    a.y_sr, a.y_sp = _elem_strides(yv)
    a.bias = _addr(bias)
    a.threads = max(1, int(threads))
    if s.dtype == np.int8 and not transposed:
        # int8 products summed in float32 are exact while a row holds <= 1024 of them
        if s.encoding == "bitmask":
            per_row = np.diff(keep[-1])
        else:
            per_row = np.diff(s.indptr.astype(np.int64)) * (s.block[1] if s.block else 1)
        a.f32_exact = int(per_row.max(initial=0) <= 1024)
    return a, keep


def bitmask_row_offsets(s: SparseArray) -> np.ndarray:
    """Index of each row's first value in a bitmask's values (int64, rows + 1): a popcount
    per row, computed once at prepare (rows * cols bits, no dense copy)."""
    from ....sparse.encodings import _POPCOUNT
    cols, rows = s.cols, s.rows
    offs = np.zeros(rows + 1, np.int64)
    if cols % 8 == 0:
        per = _POPCOUNT[s.mask.reshape(rows, cols // 8)].sum(axis=1, dtype=np.int64)
    else:
        bits = np.unpackbits(s.mask, count=rows * cols, bitorder="little").reshape(rows, cols)
        per = bits.sum(axis=1, dtype=np.int64)
    np.cumsum(per, out=offs[1:])
    return offs


# -- row structure for numpy -----------------------------------------------------------------

def row_structure(s: SparseArray, transposed: bool) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, columns, values) of the output rows, for ``add.reduceat``: row r of the product
    sums values[starts[r]:starts[r+1]] times input rows columns[...]. Every output row has at
    least one entry (an explicit zero where it has none: reduceat needs it)."""
    if s.encoding == "csr" and not transposed:
        counts = np.diff(s.indptr.astype(np.int64))
        if counts.all() and np.all(s.values):   # no empty row, no bridge: the structure as stored
            starts = s.indptr[:-1].astype(np.int64)
            return starts, segment_cumsum(s.indices, s.indptr).astype(np.intp, copy=False), s.values
        r = np.repeat(np.arange(s.rows, dtype=np.int64), counts)
        c = segment_cumsum(s.indices, s.indptr)
        v = s.values
    else:
        r, c, v = s.rows_cols()
    if transposed:
        order = np.lexsort((r, c))
        r, c, v = c[order], r[order], np.asarray(v)[order]
        nout = s.cols
    else:
        if s.encoding == "bcsr":            # blocks come block by block: sort into rows
            order = np.lexsort((c, r))
            r, c, v = r[order], c[order], np.asarray(v)[order]
        nout = s.rows
    keep = v != 0
    if not keep.all():
        r, c, v = r[keep], c[keep], v[keep]
    counts = np.bincount(r, minlength=nout)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        r = np.concatenate([r, empty])
        c = np.concatenate([c, np.zeros(empty.size, np.int64)])
        v = np.concatenate([v, np.zeros(empty.size, v.dtype)])
        order = np.argsort(r, kind="stable")
        r, c, v = r[order], c[order], v[order]
        counts = np.bincount(r, minlength=nout)
    starts = np.zeros(nout, np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return starts, c.astype(np.intp), v


def row_sums(s: SparseArray, transposed: bool) -> np.ndarray:
    """sum of each output row's weights (int64, exact), for the int8 zero-point term."""
    r, c, v = s.rows_cols()
    idx, n = (c, s.cols) if transposed else (r, s.rows)
    out = np.zeros(n, np.int64)
    np.add.at(out, idx, np.asarray(v, np.int64))
    return out


CHUNK_NNZ = 1 << 20


def csr_row_chunks(s: SparseArray, limit: int = CHUNK_NNZ) -> List[Tuple[int, int, SparseArray]]:
    """A big CSR matrix as (row0, row1, CSR of those rows) pieces of about ``limit`` entries
    (views of the encoding): the numpy path's row structure and scratch stay per piece."""
    ip = s.indptr
    out, r0 = [], 0
    while r0 < s.rows:
        r1 = int(np.searchsorted(ip, ip[r0] + limit, side="right")) - 1
        r1 = min(s.rows, max(r1, r0 + 1))
        a, b = int(ip[r0]), int(ip[r1])
        out.append((r0, r1, SparseArray("csr", (r1 - r0, s.cols), s.dtype, indptr=(ip[r0:r1 + 1] - a).astype(np.int32),
                                        indices=s.indices[a:b], values=s.values[a:b])))
        r0 = r1
    return out


def numpy_product(ctx, s: SparseArray, transposed: bool, xv: np.ndarray, yv: np.ndarray,
                  compute=np.float32, scratch: Optional[dict] = None) -> Callable[[], None]:
    """Y (R, P view) = S' X (K, P view) with numpy: gather, scale, segment sums, in pixel
    tiles sized so the gathered block stays about 2 MB."""
    if s.encoding == "csr" and not transposed and s.indices.size > CHUNK_NNZ:
        shared: dict = {}
        parts = [numpy_product(ctx, piece, False, xv, yv[r0:r1], compute, shared)
                 for r0, r1, piece in csr_row_chunks(s)]

        def run_parts():
            for part in parts:
                part()
        return run_parts
    starts, cols, vals = row_structure(s, transposed)
    vals = np.asarray(vals, compute)
    nnz = cols.size
    p = xv.shape[1]
    tile = min(p, max(16, (1 << 19) // max(nnz, 1)))
    take, mul, reduceat, copyto = np.take, np.multiply, np.add.reduceat, np.copyto
    direct = yv.dtype == compute

    def workspace(n, dtype, role):
        """A flat scratch of n items, shared by the pieces of one product."""
        if scratch is None:
            return ctx.workspace((n,), dtype)
        buf = scratch.get(role)
        if buf is None or buf.size < n:
            buf = scratch[role] = ctx.workspace((max(n, CHUNK_NNZ * tile),), dtype)
        return buf[:n]
    if xv.strides[1] == xv.itemsize or p == 1:
        # p contiguous (NCHW): gather rows of X
        g = workspace(nnz * tile, compute, "g")
        graw = g if xv.dtype == compute else workspace(nnz * tile, xv.dtype, "graw")
        tmp = None if direct else workspace(yv.shape[0] * tile, compute, "tmp")
        v2 = vals[:, None]
        jobs = []
        for p0 in range(0, p, tile):
            t = min(p, p0 + tile) - p0          # contiguous (rows, t) views of the flat scratch
            gt = g[:nnz * t].reshape(nnz, t)
            jobs.append((xv[:, p0:p0 + t], gt, gt if graw is g else graw[:nnz * t].reshape(nnz, t),
                         yv[:, p0:p0 + t], None if direct else tmp[:yv.shape[0] * t].reshape(-1, t)))

        def run():
            for xt, gt, gr, yt, tt in jobs:
                take(xt, cols, axis=0, out=gr, mode="clip")
                if gr is not gt:
                    copyto(gt, gr)
                mul(gt, v2, out=gt)
                if tt is None:
                    reduceat(gt, starts, axis=0, out=yt)
                else:
                    reduceat(gt, starts, axis=0, out=tt)
                    copyto(yt, tt, casting="unsafe")
        return run
    # channel contiguous (NHWC, Gemm): gather columns of X^T (P, K)
    xt_all, yt_all = xv.T, yv.T
    g = ctx.workspace((tile, nnz), compute)
    graw = g if xv.dtype == compute else ctx.workspace((tile, nnz), xv.dtype)
    tmp = None if direct else ctx.workspace((tile, yv.shape[0]), compute)
    jobs = []
    for p0 in range(0, p, tile):
        p1 = min(p, p0 + tile)
        jobs.append((xt_all[p0:p1], g[:p1 - p0], graw[:p1 - p0], yt_all[p0:p1], None if direct else tmp[:p1 - p0]))

    def run_t():
        for xt, gt, gr, yt, tt in jobs:
            take(xt, cols, axis=1, out=gr, mode="clip")
            if gr is not gt:
                copyto(gt, gr)
            mul(gt, vals, out=gt)
            if tt is None:
                reduceat(gt, starts, axis=1, out=yt)
            else:
                reduceat(gt, starts, axis=1, out=tt)
                copyto(yt, tt, casting="unsafe")
    return run_t


def product_step(ctx, s: SparseArray, transposed: bool, jobs: List[Tuple[np.ndarray, np.ndarray]],
                 bias: Optional[np.ndarray]) -> Tuple[Callable[[], None], str]:
    """The eval step computing every (X view, Y view) job, with the per-output-row bias
    (float32 for fp32 weights; int64 for int8, Y being the int64 accumulator)."""
    nat = _native()
    int8 = s.dtype == np.int8
    if nat is not None:
        steps = []
        for xv, yv in jobs:
            args, keep = native_args(s, transposed, xv, yv, bias, ctx.threads)
            steps.append(nat.native_step("ei_sparse_mm", args, *keep))
        step = steps[0] if len(steps) == 1 else nat.run_steps_call(steps)
        return step, "native"
    if int8:
        r_nnz = np.bincount((s.rows_cols()[1] if transposed else s.rows_cols()[0]),
                            minlength=s.cols if transposed else s.rows)
        compute = np.float32 if r_nnz.max(initial=0) <= 1024 else np.float64   # exact integer sums
    else:
        compute = np.float32
    steps = [numpy_product(ctx, s, transposed, xv, yv, compute) for xv, yv in jobs]
    if bias is not None:
        b2 = bias.reshape(-1, 1)
        steps += [functools.partial(np.add, yv, b2, out=yv) for _, yv in jobs]

    def run():
        for st in steps:
            st()
    return (steps[0] if len(steps) == 1 else run), "numpy"


# -- per-op geometry ---------------------------------------------------------------------------------

def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def residual_lut(ctx, node: Node, z_name: str, s_y: float) -> np.ndarray:
    """MBQM(v - zp_z, s_z / s_y) for every int8 value v (int64, indexed by v's uint8 pattern):
    the residual term of an int8 FusedConv, as int8_conv.residual_stage computes it."""
    from .int8_common import quantize_multiplier, requantize
    s_z, zp_z = per_tensor(ctx, z_name, "residual")
    qz, shz = quantize_multiplier(float(np.float32(s_z)) / float(np.float32(s_y)))
    values = np.arange(-128, 128, dtype=np.int64)
    table = np.empty(256, np.int64)
    table[values.astype(np.int8).view(np.uint8)] = requantize(values - zp_z, qz, shz)
    return table


def conv_jobs(node: Node, ctx, s: SparseArray, x: np.ndarray, y: np.ndarray):
    """(jobs, acc_shape, per-channel shape, description) of a pointwise conv, or None when
    the conv is not pointwise (1x1, stride 1, no padding, one group)."""
    last = channels_last(node)
    if len(s.shape) < 3 or any(k != 1 for k in s.shape[2:]) or int(node.attrs.get("group", 1)) != 1:
        return None
    n, c, insp = split_layout(x.shape, last)
    nsp = x.ndim - 2
    kernel = [1] * nsp
    wa = window_attrs(node, nsp, kernel)
    pads, osp = resolve_pads(insp, kernel, wa["strides"], wa["dilations"], wa["pads"], wa["auto_pad"])
    if any(st != 1 for st in wa["strides"]) or any(pads) or s.shape[1] != c:
        return None
    m = s.shape[0]
    p = int(np.prod(osp))
    if last:
        x2, y2 = x.reshape(n * p, c), y.reshape(n * p, m)
        return [(x2.T, y2.T)], (n, p, m), (m,), f"NHWC {n * p}x{c} @ sparse {c}x{m}"
    x3, y3 = x.reshape(n, c, p), y.reshape(n, m, p)
    return [(x3[b], y3[b]) for b in range(n)], (n, m, p), (m, 1), f"sparse {m}x{c} @ {c}x{p}" + \
        (f", batch loop {n}" if n > 1 else "")


def gemm_jobs(node: Node, ctx, s: SparseArray, a: np.ndarray, y: np.ndarray):
    """(jobs, transposed, description) of Gemm / MatMul with the sparse constant B, or None."""
    if node.op in ("Gemm", "FusedGemm"):
        if a.ndim != 2 or s.ndim != 2:
            return None
        at = a.T if node.attrs.get("transA", 0) else a                     # (M, K)
        transposed = not node.attrs.get("transB", 0)                        # B (K, N): rows are K
    else:
        if s.ndim != 2 or a.ndim < 2:
            return None
        if a.ndim > 2 and not a.flags.c_contiguous:
            return None
        at = a.reshape(-1, a.shape[-1])
        transposed = True
    k = s.rows if transposed else s.cols
    nout = s.cols if transposed else s.rows
    if at.shape[1] != k or y.size != at.shape[0] * nout:
        raise ShapeError(f"{node.op} {node.name!r}: {a.shape} @ sparse {s.shape} does not give {y.shape}")
    y2 = y.reshape(at.shape[0], nout)
    return [(at.T, y2.T)], transposed, f"{at.shape[0]}x{k} @ sparse {'B' if transposed else 'B^T'} {k}x{nout}"


def _with_dense(ctx, name: str, dense: np.ndarray):
    """``ctx`` seeing ``dense`` as the value of constant ``name`` (its own state shared)."""
    base = type(ctx)

    class Densified(base):
        def value(self, nm):
            return dense if nm == name else base.value(self, nm)

        def const(self, nm):
            return dense if nm == name else base.const(self, nm)
    view = Densified.__new__(Densified)
    view.__dict__ = ctx.__dict__
    return view


# -- fp32 ------------------------------------------------------------------------------------

def sparse_float(node: Node, ctx, s: SparseArray) -> Optional[Callable[[], None]]:
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if s.dtype != np.float32 or x.dtype != np.float32 or y.dtype != np.float32:
        return None
    bias = None
    post: List[Callable[[], None]] = []
    if node.op == "Conv":
        g = conv_jobs(node, ctx, s, x, y)
        if g is None:
            return None
        jobs, _, _, desc = g
        transposed = False
        bname = _opt(node, 2)
        if bname:
            b = ctx.const(bname)
            if b is None:
                return None
            bias = np.ascontiguousarray(np.asarray(b, np.float32).reshape(-1))
    elif node.op == "Gemm":
        g = gemm_jobs(node, ctx, s, x, y)
        if g is None:
            return None
        jobs, transposed, desc = g
        alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
        y2 = y.reshape(-1, y.shape[-1]) if y.ndim else y
        if alpha != 1.0:
            post.append(functools.partial(np.multiply, y, np.float32(alpha), out=y))
        cname = _opt(node, 2)
        if cname and beta != 0.0:
            c = ctx.value(cname)
            if ctx.const(cname) is not None and c.size == y.shape[-1] and alpha == 1.0:
                bias = np.ascontiguousarray(np.asarray(c, np.float32).reshape(-1) * np.float32(beta))
            else:
                cb = np.asarray(c, np.float32) * np.float32(beta) if ctx.const(cname) is not None else None
                if cb is None:
                    if beta != 1.0:
                        return None
                    cb = c
                post.append(functools.partial(np.add, y2, cb, out=y2))
    elif node.op == "MatMul":
        g = gemm_jobs(node, ctx, s, x, y)
        if g is None:
            return None
        jobs, transposed, desc = g
    else:
        return None
    step, how = product_step(ctx, s, transposed, jobs, bias)
    steps = [step] + post
    enc = s.encoding + (f" {s.block[0]}x{s.block[1]}" if s.block else "")
    ctx.note(node, f"sparse {how} ({enc}, density {s.density:.2f}) {desc}" + (" + bias" if bias is not None else ""))
    if len(steps) == 1:
        return step

    def run():
        for st in steps:
            st()
    return run


# -- int8 --------------------------------------------------------------------------------------

def sparse_int8(node: Node, ctx, s: SparseArray) -> Optional[Callable[[], None]]:
    from .int8_conv import conv_requant_params, residual_stage
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    if s.dtype != np.int8 or x.dtype != np.int8 or y.dtype != np.int8:
        return None
    wname = node.inputs[1]
    s_x, zp_x = per_tensor(ctx, node.inputs[0], "input")
    s_y, zp_y = per_tensor(ctx, node.outputs[0], "output")
    wq = qparams(ctx, wname, "weights")
    if np.any(wq.zero_point != 0):
        raise UnsupportedOpError(f"{node.op} {node.name!r}: int8 weights must be symmetric (zero point 0)")
    fused = node.op.startswith("Fused")
    act = str(node.attrs.get("activation", "") or "") if fused else ""
    lo, hi = clamp_range(act, node.attrs.get("activation_params", []) or [], s_y, zp_y)
    if node.op in ("Conv", "FusedConv"):
        g = conv_jobs(node, ctx, s, x, y)
        if g is None:
            return None
        jobs_y, acc_shape, cshape, desc = g
        transposed = False
        m = s.rows
        if wq.scale.size not in (1, m) or (wq.scale.size == m and m > 1 and wq.axis not in (0, None)):
            return None
        s_w = wq.scale if wq.scale.size == m else np.full(m, wq.s, np.float32)
        q, sh = conv_requant_params(s_x, s_w, s_y, requant_mode(node))
        bname = _opt(node, 2)
        b = np.zeros(m, np.int64)
        if bname:
            bc = ctx.const(bname)
            if bc is None or bc.dtype != np.int32 or bc.size != m:
                return None
            b = np.asarray(bc).reshape(-1).astype(np.int64)
        z_name = _opt(node, 3) if node.op == "FusedConv" else ""
        last = channels_last(node)
        ztable, zviews = None, [None] * len(jobs_y)
        if z_name:
            ztable = residual_lut(ctx, node, z_name, s_y)
            z = ctx.value(z_name)
            if tuple(z.shape) != tuple(y.shape):
                return None
            zviews = [z.reshape(acc_shape[0] * acc_shape[1], m).T] if last else list(z.reshape(acc_shape))

        def acc_jobs(acc):
            if last:
                return [(jobs_y[0][0], acc.reshape(acc_shape[0] * acc_shape[1], m).T)]
            return [(xv, acc[i]) for i, (xv, _) in enumerate(jobs_y)]
    else:
        if node.op in ("Gemm", "FusedGemm") and (float(node.attrs.get("alpha", 1.0)) != 1.0
                                                  or float(node.attrs.get("beta", 1.0)) != 1.0):
            return None
        g = gemm_jobs(node, ctx, s, x, y)
        if g is None:
            return None
        jobs_y, transposed, desc = g
        m = s.cols if transposed else s.rows
        axis_n = 1 if transposed else 0
        if wq.scale.size == 1:
            s_w = np.full(m, wq.s, np.float32)
        else:
            ax = wq.axis if wq.axis is None or wq.axis >= 0 else wq.axis + 2
            if wq.scale.size != m or ax != axis_n:
                return None
            s_w = wq.scale
        q, sh = conv_requant_params(s_x, s_w, s_y, requant_mode(node))
        bname = _opt(node, 2) if node.op != "MatMul" else ""
        b = np.zeros(m, np.int64)
        if bname:
            bc = ctx.const(bname)
            if bc is None or bc.dtype != np.int32 or bc.size not in (1, m):
                return None
            b = np.broadcast_to(np.asarray(bc).reshape(-1).astype(np.int64), (m,)).copy()
        rows_a = jobs_y[0][0].shape[1]
        acc_shape, cshape = (rows_a, m), (m,)
        ztable, zviews, z_name = None, [None], ""

        def acc_jobs(acc):
            return [(jobs_y[0][0], acc.T)]
    const_term = b - int(zp_x) * row_sums(s, transposed)
    enc = s.encoding + (f" {s.block[0]}x{s.block[1]}" if s.block else "")
    fused = native_int8_fused(ctx, s, transposed, jobs_y, zviews, const_term, q, sh, zp_y, lo, hi, ztable)
    if fused is not None:
        ctx.note(node, f"int8 sparse native ({enc}, density {s.density:.2f}) {desc}; int32 accumulation, fused "
                 f"requantization (MBQM)" + (", + residual" if ztable is not None else "") + (f", clamp {act}" if act else ""))
        return fused
    # the int64 accumulator path (numpy, or bounds the fused int32 epilogue cannot take)
    acc = ctx.workspace(acc_shape, np.int64)
    residual = residual_stage(ctx, node, z_name, s_y, acc_shape) if z_name else None
    y_acc = y.reshape(acc_shape)
    step, how = product_step(ctx, s, transposed, acc_jobs(acc), const_term)
    rq = Requantizer(q.reshape(cshape), sh.reshape(cshape), acc_shape, ctx, offset=zp_y)
    clip = np.clip

    def run():
        step()
        rq(acc)                         # + zp_y
        if residual is not None:
            residual(acc)
        clip(acc, lo, hi, out=y_acc, casting="unsafe")
    ctx.note(node, f"int8 sparse {how} ({enc}, density {s.density:.2f}) {desc}; requantize per channel (MBQM)"
             + (", + residual" if residual is not None else "") + (f", clamp {act}" if act else ""))
    return run


# -- registration ------------------------------------------------------------------------------

def sparse_prepare(node: Node, ctx) -> Callable[[], None]:
    """The (op, sparse=True) entry of every op of SPARSE_OPS: the sparse kernel when the
    weight's density and form suit it (``use_sparse``), else the dense entry (``lookup(...,
    dense=True)``) on the weight densified at prepare."""
    op = node.op
    wname = node.inputs[1]
    w = ctx.const(wname)
    dense = lambda n, c: lookup(n, c, dense=True).prepare(n, c)  # noqa: E731
    int8 = is_int8_node(node, ctx)
    if not int8 and op.startswith("Fused"):
        return dense(node, ctx)       # the fused kernel prepares its base op, whose sparse entry serves
    kmajor = op in ("MatMul", "FusedMatMul") or (op in ("Gemm", "FusedGemm") and not node.attrs.get("transB", 0))
    ok, why = use_sparse(ctx, w, int8, _native() is not None, w.rows if kmajor else w.cols)
    step = None
    if ok:
        step = (sparse_int8 if int8 else sparse_float)(node, ctx, w)
        if step is None:
            why = "form not supported by the sparse kernel"
    if step is not None:
        return step
    step = dense(node, _with_dense(ctx, wname, w.todense()))
    ctx.notes[node.name] = ctx.notes.get(node.name, op) + f" [sparse weight densified at prepare: {why}]"
    return step


kernel_for(*SPARSE_OPS, sparse=True)(sparse_prepare)
