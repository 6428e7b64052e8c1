"""Convolution kernels: Conv (1-D/2-D/3-D, groups, dilations); ConvTranspose is conv_transpose.py.

Conv picks one of four algorithms at prepare time:

* ``pointwise``: 1x1, stride 1, no padding: the input already *is* the column
  matrix, so the conv is one (batched) BLAS matmul, no copy at all;
* ``depthwise``: group == C_in (any channel multiplier): accumulate kernel-size
  shifted input views times per-channel weights with in-place numpy ops; this
  is far cheaper than a tiny im2col matmul per group;
* ``im2col``: everything else with group == 1: copy the (padded) input into a
  preallocated column matrix laid out (k*C, OH*OW) (rows: kernel tap, then
  channel) through an ``as_strided`` window view, then one BLAS matmul with the
  weights packed to (M, k*C) at prepare writes NCHW output directly;
* ``grouped im2col``: as above with a (g, Cg*k, P) column matrix and a batched
  matmul over groups.

Padding uses a workspace whose borders are zeroed once at prepare; every run
copies the input into its interior only.

With ``data_layout="NHWC"`` (set by passes/convert_layout.py) the input and output
are channels-last, (N, *spatial, C); weights stay OIHW in the graph and are packed
once, here, for the channels-last algorithms:

* ``pointwise``: (N*P, C) @ W^T (C, M) -> (N*P, M): one GEMM for the whole batch;
* ``depthwise``: the same shifted multiply-adds, now over contiguous channel rows
  (numpy's inner loop runs over C instead of over a short, possibly strided, row);
* ``im2col``: the column matrix is (P, k*C), copied from a C-contiguous strided
  window view (inner runs of C contiguous values), and ``cols @ W (k*C, M)`` writes
  the NHWC output directly; grouped: (g, P, k*Cg) @ (g, k*Cg, Mg), scattered
  into the interleaved output channels.

See docs/layout.md for the measurements behind the two layouts.
"""
from __future__ import annotations

import math
from typing import Callable, List, Sequence, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ....errors import ShapeError, UnsupportedOpError
from ....ir import Node
from ....ops.shapes import channels_last
from ..native import kernels as native_kernels
from ..registry import kernel
from . import conv_native
from .conv_operands import _conv_geometry, held_cols, shared_cols


def view_as(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A reshaped *view* of ``a``; raises instead of silently copying (an ``out=``
    into a copy would lose the result)."""
    v = a.reshape(tuple(int(s) for s in shape))
    if v.size and not np.may_share_memory(v, a):   # reshape copied: a view is impossible
        raise ValueError(f"cannot view an array of shape {a.shape} and strides {a.strides} as {tuple(shape)}")
    return v


def padded_input(ctx, x: np.ndarray, pads: Sequence[int], extra: Sequence[int] = (),
                 fill=0, last: bool = False) -> Tuple[np.ndarray, Callable[[], None]]:
    """A workspace holding ``x`` padded by ``pads`` (plus ``extra`` at the end of
    each spatial dim) and the step that refreshes it.

    With no padding at all the input itself is returned. The padded buffer is the plan's
    "padded" scratch role (``ctx.scratch``: one buffer for the padded Conv and pool inputs,
    sized for the largest, or bytes of the arena dead during the step): each step writes the
    border (with ``fill``, a few slabs) and copies its input into the interior at its start.
    ``last``: x is channels-last (N, *spatial, C) rather than (N, C, *spatial).
    """
    nsp = x.ndim - 2
    first = 1 if last else 2
    extra = list(extra) or [0] * nsp
    if not any(pads) and not any(extra):
        return x, lambda: None
    if min(pads) < 0:
        raise UnsupportedOpError(f"negative pads {list(pads)} are not supported")
    shape = list(x.shape)
    for i in range(nsp):
        shape[first + i] += pads[i] + pads[i + nsp] + extra[i]
    idx = [slice(None)] * x.ndim
    for i in range(nsp):
        idx[first + i] = slice(pads[i], pads[i] + x.shape[first + i])
    dt = np.dtype(x.dtype)
    xp = ctx.scratch("padded", shape, dt)
    inner = xp[tuple(idx)]
    slabs = []                       # the border: per spatial dim, the part before and after x
    for i in range(nsp):
        lo, hi = list(idx), list(idx)
        for j in range(i):
            lo[first + j] = hi[first + j] = slice(None)
        lo[first + i] = slice(0, pads[i])
        hi[first + i] = slice(pads[i] + x.shape[first + i], None)
        slabs += [xp[tuple(v)] for v in (lo, hi)]
    slabs = [v for v in slabs if v.size]
    copyto = np.copyto

    def step():
        for v in slabs:
            v.fill(fill)
        copyto(inner, x)
    return xp, step


def window_view(xp: np.ndarray, lead: Sequence[int], lead_strides: Sequence[int],
                kernel: Sequence[int], dilations: Sequence[int], strides: Sequence[int],
                out: Sequence[int]) -> np.ndarray:
    """Strided view of the sliding windows of ``xp`` (spatial dims last):
    shape ``(*lead, *kernel, *out)``; no data is copied."""
    nsp = len(kernel)
    sp_strides = xp.strides[xp.ndim - nsp:]
    return as_strided(xp, tuple(lead) + tuple(kernel) + tuple(out),
                      tuple(lead_strides) + tuple(sp_strides[i] * dilations[i] for i in range(nsp))
                      + tuple(sp_strides[i] * strides[i] for i in range(nsp)), writeable=False)


def tap_views(xp: np.ndarray, kernel: Sequence[int], dilations: Sequence[int],
              strides: Sequence[int], out: Sequence[int], last: bool = False) -> List[np.ndarray]:
    """One strided view per kernel position, each of shape ``(*xp.shape[:-nsp], *out)``
    (``last``: channels-last, ``(N, *out, C)``): the input values that kernel tap
    sees for every output position."""
    nsp = len(kernel)
    first = 1 if last else xp.ndim - nsp
    shape, st = list(xp.shape), list(xp.strides)
    for i in range(nsp):
        shape[first + i] = out[i]
        st[first + i] = xp.strides[first + i] * strides[i]
    views = []
    for tap in np.ndindex(*kernel):
        idx = [slice(None)] * xp.ndim
        for i in range(nsp):
            idx[first + i] = slice(tap[i] * dilations[i], None)
        views.append(as_strided(xp[tuple(idx)], tuple(shape), tuple(st), writeable=False))
    return views


def tile_factor(rows: int, m: int, target: int = 2048) -> int:
    """The largest k <= target / m dividing ``rows``: how many rows of m channels to
    treat as one line when broadcasting a per-channel vector (tiled k times)."""
    k = max(1, min(rows, target // max(m, 1)))
    while rows % k:
        k -= 1
    return k


def _bias_step(ctx, node: Node, y: np.ndarray, m: int) -> Callable[[], None]:
    """The step adding the optional bias (input 2) to ``y`` (N, M, ...)."""
    if len(node.inputs) < 3 or not node.inputs[2]:
        return None
    b = ctx.value(node.inputs[2])
    if ctx.const(node.inputs[2]) is not None:
        b = np.ascontiguousarray(b, dtype=y.dtype)
    if b.size != m:
        raise ShapeError(f"{node.op} {node.name!r}: bias has {b.size} values for {m} output channels")
    if channels_last(node):
        # (rows, M) + b would run numpy's inner loop over M only; with k rows per line
        # and b tiled k times the inner loop covers k*M values (2-3x faster for small M)
        rows = y.size // m
        k = tile_factor(rows, m)
        y2 = view_as(y, (rows // k, k * m))
        if ctx.const(node.inputs[2]) is not None:
            bt = np.tile(view_as(b, (m,)), k)
            return lambda: np.add(y2, bt, out=y2)
        bt = ctx.workspace((k, m), y.dtype)
        bt2 = view_as(bt, (k * m,))
        b1 = view_as(b, (m,))
        return lambda: (np.copyto(bt, b1), np.add(y2, bt2, out=y2))
    y3 = view_as(y, (y.shape[0], m, int(np.prod(y.shape[2:]))))
    b2 = view_as(b, (m, 1))
    return lambda: np.add(y3, b2, out=y3)


def conv_algorithm(group: int, c: int, cg: int, ksize: int, strides: Sequence[int],
                   pads: Sequence[int]) -> str:
    """Which Conv algorithm prepare picks: 'pointwise', 'depthwise' or 'im2col'."""
    if group == 1 and ksize == 1 and all(s == 1 for s in strides) and not any(pads):
        return "pointwise"
    if group == c and cg == 1 and group > 1:
        return "depthwise"
    return "im2col"


#: most bytes of the fp32 im2col column scratch when no budget asks for less: convs whose
#: whole column matrix is larger run in bands of output rows. The row split leaves every
#: output's sum as it was (BLAS blocks over K, not M), costs one copy+GEMM call per band,
#: and the bands stay in cache between the copy and the GEMM: as fast or faster (7x7 stem
#: 12544x147 @ 147x64: 1.9 -> 1.7 ms; 3025x576 @ 576x192: 6.4 -> 3.8 ms at 2 threads) for
#: 1 MB instead of 7 MB of scratch (ResNet-50, Inception, DenseNet stems), and BLAS packs less.
COLS_CAP = 1 << 20


def band_rows(ctx, row_bytes: int, rows: int, held: int = 0, cap: float = math.inf) -> int:
    """How many output rows (along the first spatial dim) one im2col pass covers: all of
    them when the column matrix fits the workspace budget (``ctx.workspace_budget``, at
    most ``cap``) or the ``held`` bytes of scratch the plan already has, else as many as
    fit, at least one."""
    room = max(min(getattr(ctx, "workspace_budget", math.inf), cap), held)
    if row_bytes * rows <= room:
        return rows
    return int(max(1, min(rows, room // max(row_bytes, 1))))


def bands(rows: int, per_band: int) -> List[Tuple[int, int]]:
    """[(first row, end row)] of bands of ``per_band`` rows covering ``rows``."""
    return [(r0, min(rows, r0 + per_band)) for r0 in range(0, rows, per_band)]


def band_note(ctx, node: Node, rows: int, per_band: int, row_bytes: int) -> str:
    """The note's tail for a banded im2col (empty when the whole matrix fit); a banded one is
    also recorded as tiled to fit (``ctx.tiled_to_fit``, what inspect lists)."""
    if per_band >= rows:
        return ""
    from ....memory.budget import mib
    text = (f"{len(bands(rows, per_band))} bands of {per_band} output row(s) (columns "
            f"{mib(per_band * row_bytes)}; whole {mib(rows * row_bytes)} is over the workspace budget "
            f"or the column cap)")
    ctx.tiled_to_fit(node, text)
    return ", " + text


def _chain(steps: List[Callable[[], None]]) -> Callable[[], None]:
    steps = [s for s in steps if s is not None]
    if len(steps) == 1:
        return steps[0]
    if len(steps) == 2:
        a, b = steps
        def run2():
            a(); b()
        return run2
    def run():
        for s in steps:
            s()
    return run


@kernel("Conv")
def conv(node: Node, ctx) -> Callable[[], None]:
    if channels_last(node):
        return conv_nhwc(node, ctx)
    x, y, w, n, c, m, cg, nsp, group, kernel, strides, dil, pads, osp = _conv_geometry(node, ctx, False)
    dtype = y.dtype
    ksize = int(np.prod(kernel))
    p = int(np.prod(osp))
    bias = _bias_step(ctx, node, y, m)
    if y.size == 0:
        return lambda: None
    kdesc = "x".join(map(str, kernel))
    if x.dtype != dtype:
        raise UnsupportedOpError(f"Conv {node.name!r}: input dtype {x.dtype} != output dtype {dtype}")

    algo = conv_algorithm(group, c, cg, ksize, strides, pads)

    # -- pointwise: the input is the column matrix ------------------------------------
    if algo == "pointwise":
        w2 = view_as(w, (m, c))
        x3, y3 = view_as(x, (n, c, p)), view_as(y, (n, m, p))
        if n == 1:
            x2, y2 = x3[0], y3[0]
            mm = lambda: np.matmul(w2, x2, out=y2)
        else:
            mm = lambda: np.matmul(w2, x3, out=y3)
        ctx.note(node, f"pointwise 1x1 matmul ({m}x{c} @ {c}x{p})")
        return _chain([mm, bias])

    if algo == "depthwise":
        step = native_kernels.fp32_depthwise(node, ctx)     # the native kernel, bias fused, or None
        if step is not None:
            return step
    xp, pad_step = padded_input(ctx, x, pads)
    s_n, s_c = xp.strides[:2]

    # -- depthwise: per-channel multiply-accumulate of shifted views ------------------
    if algo == "depthwise":
        mult = m // c
        taps = tap_views(xp, kernel, dil, strides, osp)                  # each (N, C, *out)
        taps = [np.expand_dims(t, 2) for t in taps]                      # (N, C, 1, *out)
        wt = view_as(w, (c, mult, ksize))
        wtaps = [wt[(slice(None), slice(None), k) + (None,) * nsp] for k in range(ksize)]  # views
        if ctx.const(node.inputs[1]) is not None:
            wtaps = [np.ascontiguousarray(v) for v in wtaps]
        y5 = view_as(y, (n, c, mult, *osp))
        depthwise = shifted_multiply_add(pad_step, taps, wtaps, y5, ctx.workspace(y5.shape, dtype))
        ctx.note(node, f"depthwise {kdesc} (multiplier {mult}, {ksize} shifted multiply-adds)")
        return _chain([depthwise, bias])

    # -- im2col (grouped when group > 1) ----------------------------------------------
    # rows of the column matrix are (kernel tap, channel), as in the NHWC kernel: the
    # GEMM then sums in the same order in both layouts, so they agree bit for bit
    # in bands of output rows along the first spatial dim when the whole column matrix is
    # over the workspace budget (one band otherwise)
    kc = cg * ksize
    rest = p // osp[0]
    row_bytes = group * kc * rest * dtype.itemsize
    rows = band_rows(ctx, row_bytes, osp[0], held_cols(ctx, dtype), COLS_CAP)
    flat = shared_cols(ctx, group * kc * rows * rest, dtype)
    mg = m // group
    wt, wstep = _packed_weights(ctx, node, w, view_as(w, (group, mg, cg, ksize)).transpose(0, 1, 3, 2))
    w3 = view_as(wt, (group, mg, kc))
    y4 = view_as(y, (n, group, mg, p))
    sp_st = xp.strides[2:]
    win_shape = (group, *kernel, cg, *osp)
    win_strides = ((s_c * cg,) + tuple(sp_st[i] * dil[i] for i in range(nsp)) + (s_c,)
                   + tuple(sp_st[i] * strides[i] for i in range(nsp)))
    wins = [as_strided(xp[b], win_shape, win_strides, writeable=False) for b in range(n)]
    wmat = w3[0] if group == 1 else w3
    jobs = []            # (window band, its column view, column matrix, output band)
    for b in range(n):
        for r0, r1 in bands(osp[0], rows):
            nb = (r1 - r0) * rest
            cols = view_as(flat[:group * kc * nb], (group, kc, nb))
            jobs.append((wins[b][(slice(None),) * (nsp + 2) + (slice(r0, r1),)],
                         view_as(cols, (group, *kernel, cg, r1 - r0, *osp[1:])),
                         cols[0] if group == 1 else cols,
                         y4[b, 0, :, r0 * rest:r1 * rest] if group == 1 else y4[b, :, :, r0 * rest:r1 * rest]))
    copyto, matmul = np.copyto, np.matmul

    def im2col():
        pad_step()
        for win, cols_v, cols, out in jobs:
            copyto(cols_v, win)
            matmul(wmat, cols, out=out)
    if group == 1:
        ctx.note(node, f"im2col {kdesc} + matmul ({m}x{kc} @ {kc}x{p})"
                 + (f", batch loop {n}" if n > 1 else "") + band_note(ctx, node, osp[0], rows, row_bytes))
    else:
        ctx.note(node, f"grouped im2col {kdesc} ({group} groups, batched matmul "
                       f"{m // group}x{kc} @ {kc}x{p})" + band_note(ctx, node, osp[0], rows, row_bytes))
    return _chain([wstep, im2col, bias])


def _packed_weights(ctx, node: Node, w: np.ndarray, view: np.ndarray, transposed_ok: bool = False
                    ) -> Tuple[np.ndarray, Callable[[], None]]:
    """``view`` (a transposed view of the weights ``w``) as a contiguous array, and
    the step refreshing it: packed once when the weights are constant, else copied
    into a workspace every run (a computed weight changes between runs).
    ``transposed_ok``: the caller hands the result to BLAS as one matrix, which takes a
    Fortran-ordered operand as it is, so constant weights whose view already is one are
    used in place: no copy at prepare, the artifact's mapped pages (NHWC 1x1 convs: 46 of
    ResNet-50's 97 MB of weights)."""
    if ctx.const(node.inputs[1]) is not None:
        if transposed_ok and view.flags.f_contiguous:
            return view, None
        return np.ascontiguousarray(view), None
    buf = ctx.workspace(view.shape, w.dtype)
    return buf, lambda: np.copyto(buf, view)


def conv_nhwc(node: Node, ctx) -> Callable[[], None]:
    """Conv in NHWC: x (N, *spatial, C), y (N, *out, M), W stays (M, Cg, *k)."""
    x, y, w, n, c, m, cg, nsp, group, kernel, strides, dil, pads, osp = _conv_geometry(node, ctx, True)
    dtype = y.dtype
    ksize = int(np.prod(kernel))
    p = int(np.prod(osp))
    bias = _bias_step(ctx, node, y, m)
    if y.size == 0:
        return lambda: None
    kdesc = "x".join(map(str, kernel))
    if x.dtype != dtype:
        raise UnsupportedOpError(f"Conv {node.name!r}: input dtype {x.dtype} != output dtype {dtype}")
    algo = conv_algorithm(group, c, cg, ksize, strides, pads)
    matmul, copyto = np.matmul, np.copyto
    step = conv_native.conv_step(node, ctx)             # the native packed SGEMM, bias fused, or None
    if step is not None:
        return step

    # -- pointwise: the input is the column matrix, the whole batch in one GEMM ---------
    if algo == "pointwise":
        wt, wstep = _packed_weights(ctx, node, w, view_as(w, (m, c)).T, transposed_ok=True)       # (C, M)
        x2, y2 = view_as(x, (n * p, c)), view_as(y, (n * p, m))
        mm = lambda: matmul(x2, wt, out=y2)
        ctx.note(node, f"NHWC pointwise 1x1 matmul ({n * p}x{c} @ {c}x{m})")
        return _chain([wstep, mm, bias])

    if algo == "depthwise":
        step = native_kernels.fp32_depthwise(node, ctx)     # the native kernel, bias fused, or None
        if step is not None:
            return step
    xp, pad_step = padded_input(ctx, x, pads, last=True)

    # -- depthwise: shifted multiply-adds over contiguous channel rows -------------------
    if algo == "depthwise":
        mult = m // c
        taps = tap_views(xp, kernel, dil, strides, osp, last=True)          # each (N, *out, C)
        wt, wstep = _packed_weights(ctx, node, w, np.moveaxis(view_as(w, (c, mult, ksize)), 2, 0))
        if mult == 1:
            wtaps = [wt[k, :, 0] for k in range(ksize)]                      # (C,)
            y5 = y
            ow = osp[-1]
            if strides[-1] == 1 and wstep is None and ksize * ow * c * dtype.itemsize <= (2 << 20):
                # stride 1 along W: a tap's (OW, C) rows are contiguous, so with the weights
                # tiled OW times numpy's inner loop runs over OW*C values instead of C
                wtaps = [np.tile(v, ow).reshape(ow, c) for v in wtaps]
        else:
            taps = [t[..., None] for t in taps]                              # (N, *out, C, 1)
            wtaps = [wt[k] for k in range(ksize)]                            # (C, mult)
            y5 = view_as(y, (n, *osp, c, mult))
        depthwise = shifted_multiply_add(pad_step, taps, wtaps, y5, ctx.workspace(y5.shape, dtype))
        ctx.note(node, f"NHWC depthwise {kdesc} (multiplier {mult}, {ksize} shifted multiply-adds)")
        return _chain([wstep, depthwise, bias])

    # -- im2col: cols (P, k*C) from a C-contiguous window view, cols @ W -> NHWC --------
    kc = cg * ksize
    sp_st = xp.strides[1:1 + nsp]
    s_c = xp.strides[-1]
    win_strides = (tuple(sp_st[i] * strides[i] for i in range(nsp))
                   + tuple(sp_st[i] * dil[i] for i in range(nsp)))
    # in bands of output rows (first spatial dim) when the whole matrix is over the budget
    rest = p // osp[0]
    row_bytes = group * kc * rest * dtype.itemsize
    rows = band_rows(ctx, row_bytes, osp[0], held_cols(ctx, dtype), COLS_CAP)
    flat = shared_cols(ctx, group * kc * rows * rest, dtype)
    if group == 1:
        # W (M, C, k) -> (k, C, M): row (tap, channel) matches a column of cols
        wt, wstep = _packed_weights(ctx, node, w, view_as(w, (m, c, ksize)).transpose(2, 1, 0),
                                    transposed_ok=ksize == 1)
        w2 = view_as(wt, (kc, m))
        jobs = []        # (window band, its column view, column matrix, output band)
        for b in range(n):
            win = as_strided(xp[b], (*osp, *kernel, c), win_strides + (s_c,), writeable=False)
            yb = view_as(y[b], (p, m))
            for r0, r1 in bands(osp[0], rows):
                nb = (r1 - r0) * rest
                jobs.append((win[r0:r1], view_as(flat[:nb * kc], (r1 - r0, *osp[1:], *kernel, c)),
                             view_as(flat[:nb * kc], (nb, kc)), yb[r0 * rest:r1 * rest]))

        def im2col():
            pad_step()
            for win, cols_v, cols, out in jobs:
                copyto(cols_v, win)
                matmul(cols, w2, out=out)
        ctx.note(node, f"NHWC im2col {kdesc} + matmul ({p}x{kc} @ {kc}x{m})"
                 + (f", batch loop {n}" if n > 1 else "") + band_note(ctx, node, osp[0], rows, row_bytes))
        return _chain([wstep, im2col, bias])

    mg = m // group
    # W (g, Mg, Cg, k) -> (g, k, Cg, Mg)
    wt, wstep = _packed_weights(ctx, node, w, view_as(w, (group, mg, cg, ksize)).transpose(0, 3, 2, 1))
    w3 = view_as(wt, (group, kc, mg))
    # the batched matmul writes the interleaved output channels directly: each group's
    # (rows, Mg) block of y is a BLAS-able matrix (row stride M), so no per-conv result
    # scratch and no scatter copy (ShuffleNet: 8.3 MB of workspace less, and faster)
    jobs = []            # (window band, its column view, column matrix, output band)
    for b in range(n):
        win = as_strided(xp[b], (group, *osp, *kernel, cg), (s_c * cg,) + win_strides + (s_c,),
                         writeable=False)
        yb = view_as(y[b], (p, group, mg))
        for r0, r1 in bands(osp[0], rows):
            nb = (r1 - r0) * rest
            jobs.append((win[:, r0:r1], view_as(flat[:group * nb * kc], (group, r1 - r0, *osp[1:], *kernel, cg)),
                         view_as(flat[:group * nb * kc], (group, nb, kc)),
                         yb[r0 * rest:r1 * rest].transpose(1, 0, 2)))

    def grouped():
        pad_step()
        for win, cols_v, cols, out in jobs:
            copyto(cols_v, win)
            matmul(cols, w3, out=out)
    ctx.note(node, f"NHWC grouped im2col {kdesc} ({group} groups, batched matmul "
                   f"{p}x{kc} @ {kc}x{mg})" + band_note(ctx, node, osp[0], rows, row_bytes))
    return _chain([wstep, grouped, bias])


def shifted_multiply_add(pad_step, taps, wtaps, y, tmp):
    """Eval step of a depthwise conv: y = sum_k taps[k] * wtaps[k] (views, broadcast),
    accumulated in place with one scratch buffer."""
    first_x, first_w = taps[0], wtaps[0]
    rest = list(zip(taps[1:], wtaps[1:]))
    mul, add = np.multiply, np.add

    def depthwise():
        pad_step()
        mul(first_x, first_w, out=y)
        for xv, wv in rest:
            mul(xv, wv, out=tmp)
            add(y, tmp, out=y)
    return depthwise
