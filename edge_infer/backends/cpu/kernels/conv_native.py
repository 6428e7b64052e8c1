"""fp32 Conv / Gemm / MatMul on the native packed SGEMM (native/src/sgemm.c, conv_f32.c).

Each ``*_step`` function is called first by the numpy kernel's prepare (conv.py's NHWC Conv,
nn.py's Gemm and MatMul, fused.py's fused forms) and returns the native step, or None when
the node does not fit it (then the numpy/BLAS kernel serves). Prepare packs the weights once
into 16-column panels (``pack_panels``), sizes the per-thread im2col tile scratch from the
plan's shared column scratch, and fills the argument struct; a run is one C call with no
allocation, the fused epilogue (bias, residual, activation) applied to each output tile in
the kernel, in the order of kernels/fused.py. 3x3 stride-1 convs that conv_winograd.py's size
rule picks run as Winograd F(4x4, 3x3), or F(2x2, 3x3) on outputs of few tiles
(native/src/winograd_f32.c), on weights transformed at
prepare instead, with the same argument struct, scratch role and epilogue. Convs on at most
``STEM_MAX_CHANNELS`` input channels (an image's first conv) run on the direct kernel of
native/src/conv_stem_f32.c instead (same struct and panels, no scratch, the epilogue in registers).
"""
from __future__ import annotations

import ctypes
from typing import Callable, Optional, Tuple

import numpy as np

from ....ir import Node
from ....ops.shapes import channels_last
from ....memory.arena import ArenaHoles
from ....memory.pages import drop_pages, private_copy
from .. import native as _native
from ..native import ops as native_ops
from ..native.kernels import aligned, threads_of
from . import conv_winograd
from .conv_operands import _conv_geometry, shared_cols

_P, _I = ctypes.c_void_p, ctypes.c_int32
NR = 16      #: EI_SG_NR of src/sgemm.h: output channels per packed weight panel
#: KC_MAX of src/conv_f32.c: a conv whose K = Cg*kh*kw is at most this sums in one K block
#: (tests/test_memory.py checks an aliased residual at K = K_BLOCK and K_BLOCK + 1)
K_BLOCK = 320


class ConvF32Args(ctypes.Structure):
    """``ei_conv_f32_args`` of src/conv_f32.c."""
    _fields_ = ([(f, _P) for f in ("x", "y", "z", "wpack", "bias", "scratch")]
                + [(f, _I) for f in ("n", "c", "h", "w", "m", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw",
                                     "pt", "pl", "group", "act")]
                + [("p0", ctypes.c_float), ("p1", ctypes.c_float), ("threads", _I)]
                + [(f, _I) for f in ("split_mr", "split_threads", "split_rows", "split_panels")])


def _lib_ok() -> bool:
    return _native.lib is not None and hasattr(_native.lib, "ei_conv_f32")


def isa_name() -> str:
    """The micro-kernel the current ISA mask selects (AVX-512, AVX2, NEON or scalar)."""
    fn = _native.function("ei_conv_f32_isa", restype=ctypes.c_char_p)
    return fn().decode() if fn is not None else "none"


def pack_panels(w_gkm: np.ndarray, done: Optional[Callable[[int, int], None]] = None) -> np.ndarray:
    """(groups, K, Mg) weights -> (groups, panels, K, 16) float32, zero-padded columns.

    Written panel by panel into the packed array (no padded intermediate: a 151 MB FC layer
    took three times its size at prepare); ``done(c0, c1)``: called once columns [c0, c1) are
    packed (the caller drops their pages of the file map). The panels start on a 64-byte
    boundary, so every 16-float row of a panel is one cache line: numpy's own allocation left
    40 of ResNet-50's 54 packs 16, 32 or 48 bytes off, every weight vector load split across
    two lines (its 7x7 stem, one thread: 1.49 -> 1.40 ms aligned)."""
    g, k, mg = w_gkm.shape
    panels = -(-mg // NR)
    out = aligned(g * panels * k * NR * 4).view(np.float32).reshape(g, panels, k, NR)
    for p in range(panels):
        c0, c1 = p * NR, min(mg, (p + 1) * NR)
        out[:, p, :, :c1 - c0] = w_gkm[:, :, c0:c1]
        if c1 - c0 < NR:
            out[:, p, :, c1 - c0:] = 0
        if done is not None:
            done(c0, c1)
    return out


def _f32c(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.aligned


def _epilogue(node: Node):
    """(EI_U_* code, p0, p1) of the node's fused activation, or None when unknown."""
    name = str(node.attrs.get("activation", "") or "") if node.op.startswith("Fused") else ""
    params = [float(p) for p in node.attrs.get("activation_params", []) or []]
    if name not in native_ops._EPILOGUE:
        return None
    if len(params) != {"Clip": 2, "HardSigmoid": 2, "LeakyRelu": 1}.get(name, 0):
        return None
    op, pp = native_ops._EPILOGUE[name]
    p0, p1 = pp(params)
    return native_ops.UNARY[op], float(p0), float(p1), name


def _bias(ctx, name: str, m: int, scale: float = 1.0) -> Optional[np.ndarray]:
    """A constant per-output-channel bias (any shape of m values broadcast over rows) as
    float32, None for no bias; False when there is one the kernel cannot take."""
    if not name:
        return None
    b = ctx.const(name)
    if b is None or b.size != m or (b.ndim > 1 and b.shape[-1] != m):
        return False
    # read at every run: the kernel's own copy, never the file map (memory/pages.py)
    return private_copy(np.ascontiguousarray((b.astype(np.float64) * scale if scale != 1.0 else b).reshape(m),
                                             np.float32))


def _step(ctx, args: ConvF32Args, keep, entry: str = "ei_conv_f32") -> Optional[Callable[[], None]]:
    """The native step ``entry`` (ei_conv_f32, ei_winograd_f32 or ei_winograd2_f32), its per-thread tile scratch
    taken from the plan's shared column scratch (steps run one at a time, so every conv of a
    plan can use the same bytes)."""
    fn = _native.function(entry + "_scratch", ctypes.c_void_p, restype=ctypes.c_int64)
    # the work split for these threads, searched once here (into args.split_*), before the
    # scratch that it sizes; a library without it searches at each run
    plan = _native.function(entry + "_plan", ctypes.c_void_p) if hasattr(_native.lib, entry + "_plan") else None
    if plan is not None:
        plan(ctypes.addressof(args))
    nbytes = int(fn(ctypes.addressof(args)))
    if not ctx.scratch_fits("im2col", nbytes) and args.threads > 1:
        # one tile per thread: fewer threads under a tight budget (the same sums per output)
        per = nbytes // args.threads
        args.threads = int(max(1, min(args.threads, (ctx.workspace_budget + ctx.scratch_held("im2col")) // max(per, 1))))
        if plan is not None:
            plan(ctypes.addressof(args))
        nbytes = int(fn(ctypes.addressof(args)))
    if not ctx.scratch_fits("im2col", nbytes):
        return None         # its tile does not fit what the memory budget leaves: the numpy conv bands
    scratch = shared_cols(ctx, nbytes // 4, np.float32) if nbytes else None
    args.scratch = None if scratch is None else scratch.ctypes.data
    return _native.native_step(entry, args, scratch, *keep)


#: input channels up to which conv_stem_f32.c's direct kernel computes a conv (one group,
#: dilation 1): with K = kh*kw*C of 27 or 147 the im2col tile + SGEMM spent a quarter of its time
#: copying patches
STEM_MAX_CHANNELS = 4


def stem_fits(c: int, group: int, dh: int, dw: int) -> bool:
    """Whether the direct few-channel kernel (native/src/conv_stem_f32.c) computes this conv."""
    return group == 1 and c <= STEM_MAX_CHANNELS and dh == 1 and dw == 1


def _dense_const(ctx, name: str) -> bool:
    """A constant dense weight: a sparse-encoded one goes to the sparse dispatch instead."""
    return isinstance(ctx.const(name), np.ndarray)


def conv_step(node: Node, ctx) -> Optional[Callable[[], None]]:
    """An NHWC float32 Conv / FusedConv (1-D or 2-D, constant weights, any group, stride,
    dilation and padding) as the native kernel, or None."""
    if not _lib_ok() or not channels_last(node) or not _dense_const(ctx, node.inputs[1]):
        return None
    x, y, w, n, c, m, cg, nsp, group, kernel, strides, dil, pads, osp = _conv_geometry(node, ctx, True)
    if nsp not in (1, 2) or not (_f32c(x) and _f32c(y)) or y.size == 0:
        return None
    if group == c and cg == 1 and group > 1:
        return None         # depthwise: its own kernels (a 16-column panel per channel wastes 15/16)
    ep = _epilogue(node)
    if ep is None:
        return None
    z, z_is_y = None, False
    if node.op == "FusedConv" and len(node.inputs) > 3 and node.inputs[3]:
        z = ctx.value(node.inputs[3])
        if not _f32c(z) or z.shape != y.shape:
            return None
        # the arena may have planned y over z (residual_in_place); any other overlap: numpy
        z_is_y = z.ctypes.data == y.ctypes.data
        if np.shares_memory(z, y) and not z_is_y:
            return None
    bias = _bias(ctx, node.inputs[2] if len(node.inputs) > 2 else "", m)
    if bias is False:
        return None
    if nsp == 1:
        h, wd, oh, ow, kh, kw = 1, x.shape[1], 1, osp[0], 1, kernel[0]
        sh, sw, dh, dw, pt, pl = 1, strides[0], 1, dil[0], 0, pads[0]
    else:
        h, wd, (oh, ow), (kh, kw) = x.shape[1], x.shape[2], osp, kernel
        (sh, sw), (dh, dw), pt, pl = strides, dil, pads[0], pads[1]
    mg = m // group
    wino = conv_winograd.eligible(nsp, kernel, strides, dil, group)
    why = conv_winograd.chosen(n, c, m, oh, ow) if wino else (False, "")
    if why[0] and node.name not in _winograd_allowed(ctx):
        why = (False, f"its transformed weights and scratch are past the plan's allowance "
                      f"({conv_winograd.WEIGHT_GROWTH:g}x the fp32 weights; most multiply-adds per byte first)")
    args = ConvF32Args(x=x.ctypes.data, y=y.ctypes.data, z=None if z is None else z.ctypes.data,
                       bias=None if bias is None else bias.ctypes.data,
                       n=n, c=c, h=h, w=wd, m=m, oh=oh, ow=ow, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw,
                       pt=pt, pl=pl, group=group, act=ep[0], p0=ep[1], p1=ep[2], threads=threads_of(ctx))
    direct = kh == kw == sh == sw == 1 and pt == pl == 0 and (oh, ow) == (h, wd)
    extra = ", ".join((["bias"] if bias is not None else []) + (["residual"] if z is not None else [])
                      + ([ep[3]] if ep[3] else []))
    step = None
    # (Winograd is never picked under 8 channels unless EDGE_INFER_WINOGRAD=1 forces it)
    if not why[0] and stem_fits(c, group, dh, dw) and hasattr(_native.lib, "ei_conv_stem_f32"):
        # few input channels (the image): direct from the input, sums in registers; reads
        # each residual element before it writes it, so y over z is fine at any K
        wk = np.asarray(w, np.float32).reshape(m, c, kh, kw).transpose(2, 3, 1, 0).reshape(1, -1, m)
        wpack = pack_panels(wk)
        args.wpack = wpack.ctypes.data
        stem_isa = _native.function("ei_conv_stem_f32_isa", restype=ctypes.c_char_p)().decode()
        ctx.note(node, f"NHWC conv {'x'.join(map(str, kernel))} native direct few-channel ({stem_isa}, "
                       f"{c} -> {m} channels, {kh * kw * c} taps in registers)"
                       + (f"; fused {extra}" if extra else "") + f"; {threads_of(ctx)} thread(s)"
                       + (f"; not Winograd: {why[1]}" if why[1] else ""))
        return _native.native_step("ei_conv_stem_f32", args, x, y, z, wpack, bias)
    wr = conv_winograd.tile(n, c, m, oh, ow)
    if why[0]:      # 3x3 stride 1: Winograd F(wr x wr, 3x3) on the transformed weights
        wpack = conv_winograd.pack(np.asarray(w), wr)
        args.wpack = wpack.ctypes.data
        step = _step(ctx, args, (x, y, z, wpack, bias), conv_winograd.entry(wr))
        if step is None:
            why = (False, "its scratch does not fit the memory budget")
            args.threads = threads_of(ctx)
    if step is None and z_is_y and cg * kh * kw > K_BLOCK:
        return None         # its first K blocks would write y over z before z is read: numpy serves
    if step is None:
        # (M, Cg, kh, kw) -> per group (K = (ky, kx, ci), Mg): the im2col order of the kernel
        wk = np.asarray(w, np.float32).reshape(group, mg, cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(group, -1, mg)
        wpack = pack_panels(wk)
        args.wpack = wpack.ctypes.data
        step = _step(ctx, args, (x, y, z, wpack, bias))
    if step is None:
        return None
    fewer = args.threads < threads_of(ctx)           # _step's choice under a tight budget
    if fewer:
        ctx.tiled_to_fit(node, f"tiles for {args.threads} thread(s) to fit the memory budget")
    if why[0]:
        how = (f"Winograd F({wr}x{wr},3x3) ({isa_name()}, {why[1]}: {conv_winograd.points(wr)} GEMMs "
               f"{n * -(-oh // wr) * -(-ow // wr)}x{c} @ {c}x{m})")
    else:
        how = (f"SGEMM ({isa_name()}, {'direct on the input' if direct else _a_rows(args)}, "
               f"{n * oh * ow}x{cg * kh * kw} @ {cg * kh * kw}x{mg}" + (f", {group} groups" if group > 1 else "")
               + ")" + (f"; not Winograd: {why[1]}" if why[1] else ""))
    if wino:
        ctx.winograd[node.name] = None if why[0] else why[1]
    ctx.note(node, f"NHWC conv {'x'.join(map(str, kernel))} native {how}"
                   + (f"; fused {extra}" if extra else "") + f"; {threads_of(ctx)} thread(s)"
                   + (f", tiles for {args.threads} to fit the memory budget" if fewer else ""))
    return step


def _a_rows(args: ConvF32Args) -> str:
    """Where a non-1x1 conv's A rows come from: per-tap row pointers into the input
    (src/conv_f32.c's indirect path, AVX-512) or im2col tiles."""
    fn = _native.function("ei_conv_f32_indirect", ctypes.c_void_p, restype=ctypes.c_int)
    return "indirect on the input" if fn is not None and fn(ctypes.addressof(args)) else "im2col per tile"


def residual_in_place(node: Node, graph) -> Tuple[int, ...]:
    """(3,) when the CPU conv kernel may write ``node``'s output over its residual Z (the arena
    planner's ``inplace_inputs``), else (): where it reads every Z element before it writes
    that element of y.

    * fp32, the native conv: each output tile adds Z in its epilogue right before its store,
      once all its K blocks are summed; with one K block (K = Cg*kh*kw <= K_BLOCK) nothing of
      the tile is stored before that, and Winograd sums in its own scratch. More K blocks
      would store partial sums over Z first; the kernel then refuses the alias (``conv_step``
      returns None) and fused.py's copy of Z serves.
    * int8 (kernels/int8_conv.py, native/int8_gemm.c): sums in int32/int64 accumulators or
      registers, never in y; the requantizing store of each element (a band of rows in the
      numpy kernels) reads Z at that element (band) right before it writes y there."""
    if node.op != "FusedConv" or len(node.inputs) < 4 or not node.inputs[3]:
        return ()
    t = graph.tensors
    x, w, z, y = t[node.inputs[0]], t[node.inputs[1]], t[node.inputs[3]], t[node.outputs[0]]
    if not w.is_const or not isinstance(w.data, np.ndarray) or w.data.ndim not in (3, 4):
        return ()
    group = int(node.attrs.get("group", 1))
    cg, m = int(w.data.shape[1]), int(w.data.shape[0])
    if (group > 1 and cg == 1) or m % group:
        return ()                               # depthwise: its own kernels
    if {x.dtype, z.dtype, y.dtype, w.dtype} == {"int8"}:
        return (3,)
    if not _lib_ok() or not channels_last(node) or {x.dtype, z.dtype, y.dtype} != {"float32"}:
        return ()
    return (3,) if cg * int(np.prod(w.data.shape[2:])) <= K_BLOCK else ()


def _winograd_candidates(graph, nodes):
    """(step, node, input shape, output shape, M, C) of the NHWC convs Winograd may compute."""
    for step, nd in enumerate(nodes):
        if nd.op not in ("Conv", "FusedConv") or len(nd.inputs) < 2:
            continue
        w, x, y = (graph.tensors[nd.inputs[1]], graph.tensors[nd.inputs[0]], graph.tensors[nd.outputs[0]])
        if not w.is_const or not isinstance(w.data, np.ndarray) or w.data.ndim != 4 or y.shape is None \
                or x.shape is None or not channels_last(nd) or {w.dtype, x.dtype, y.dtype} != {"float32"}:
            continue
        k = nd.attrs.get("kernel_shape") or list(w.data.shape[2:])
        if conv_winograd.eligible(2, k, nd.attrs.get("strides") or [1, 1], nd.attrs.get("dilations") or [1, 1],
                                  int(nd.attrs.get("group", 1))):
            yield step, nd, x.shape, y.shape, int(w.data.shape[0]), int(w.data.shape[1])


def winograd_choice(graph, nodes, threads: int, plan, replan) -> Tuple[set, dict]:
    """(names of the convs that run as Winograd, {step: scratch bytes} the arena should
    reserve for them), decided once per plan before its arena is allocated. ``plan``: the
    arena plan without reservations; ``replan(reserve)``: the plan with them. A conv whose
    scratch (up to a 4 MB band of transformed input) no free bytes of its step hold would need
    the arena to grow: the convs that would need it share that growth in conv_winograd's
    allowance; those the allowance takes get their scratch reserved."""
    # Which convs take Winograd is decided on their one-thread scratch, so a plan computes the
    # same arithmetic, and gives the same bytes, at every thread count; the reservations are then
    # made for ``threads`` (more threads, more bands of transformed input). Deciding at the
    # machine's 2 threads instead kept DB-640's 2-thread arena at 16.4 MB (21.3 this way) but
    # ran it in 22.9 ms instead of 18.2: the one-thread scratch lets the convs that save most in.
    holes, cands, need1, need = ArenaHoles(plan), [], {}, {}
    for step, nd, xs, ys, m, c in _winograd_candidates(graph, nodes):
        if any(not isinstance(d, (int, np.integer)) for d in tuple(xs) + tuple(ys)):
            continue
        if conv_winograd.chosen(int(ys[0]), c, m, int(ys[1]), int(ys[2]))[0]:
            for want, t in ((need1, 1), (need, threads)):
                nbytes = _winograd_scratch(xs, ys, m, c, t)
                if nbytes and holes.take(step, nbytes, keep=False) is None:
                    want[step] = nbytes
        r = conv_winograd.tile(int(ys[0]), c, m, int(ys[1]), int(ys[2]))
        cands.append((step, nd.name, int(ys[1]) * int(ys[2]), m * c, r))
    growth = max(0, replan(need1).size - plan.size) if need1 else 0
    allowed = conv_winograd.allowed(graph, [(name, px, cm, growth if step in need1 else 0, r)
                                            for step, name, px, cm, r in cands])
    return allowed, {s: n for s, n in need.items() if nodes[s].name in allowed}


def _winograd_allowed(ctx) -> set:
    """The convs that may run as Winograd: decided with the arena (``winograd_choice``, set by
    the executor), else conv_winograd.allowed over the plan's eligible convs, once per plan."""
    if "winograd" not in ctx.plan_facts:
        graph = ctx.graph
        steps = [nd for nd in graph.nodes if not all(graph.tensors[o].is_const for o in nd.outputs if o)]
        cands = [(nd.name, int(ys[1]) * int(ys[2]), m * c, _winograd_scratch_outside(ctx, step, xs, ys, m, c),
                  conv_winograd.tile(int(ys[0]), c, m, int(ys[1]), int(ys[2])))
                 for step, nd, xs, ys, m, c in _winograd_candidates(graph, steps)]
        ctx.plan_facts["winograd"] = conv_winograd.allowed(graph, cands)
    return ctx.plan_facts["winograd"]


def _winograd_scratch(xs, ys, m: int, c: int, threads: int) -> int:
    """Bytes of scratch src/winograd_f32.c asks for a 3x3 stride-1 NHWC conv (0: unknown)."""
    if any(not isinstance(d, (int, np.integer)) for d in tuple(xs) + tuple(ys)):
        return 0
    entry = conv_winograd.entry(conv_winograd.tile(int(ys[0]), c, m, int(ys[1]), int(ys[2])))
    fn = _native.function(entry + "_scratch", ctypes.c_void_p, restype=ctypes.c_int64)
    if fn is None:
        return 0
    args = ConvF32Args(n=int(ys[0]), c=c, h=int(xs[1]), w=int(xs[2]), m=m, oh=int(ys[1]), ow=int(ys[2]),
                       kh=3, kw=3, sh=1, sw=1, dh=1, dw=1, pt=1, pl=1, group=1, threads=max(1, int(threads)))
    return int(fn(ctypes.addressof(args)))


def _winograd_scratch_outside(ctx, step: int, xs, ys, m: int, c: int) -> int:
    """Bytes of a Winograd conv's scratch that no arena hole of its step takes: what it would
    add to the plan's shared scratch."""
    nbytes = _winograd_scratch(xs, ys, m, c, 1)      # one thread's: as winograd_choice decides
    holes = ctx.roles.holes
    return 0 if holes is not None and holes.take(step, nbytes, keep=False) is not None else nbytes


def gemm_step(node: Node, ctx) -> Optional[Callable[[], None]]:
    """Gemm / FusedGemm (no transA) and MatMul / FusedMatMul with a constant 2-D B on float32
    as the native kernel (rows of A as 1x1 conv pixels), or None."""
    if not _lib_ok() or not _dense_const(ctx, node.inputs[1]):
        return None
    a, b, y = ctx.value(node.inputs[0]), ctx.value(node.inputs[1]), ctx.value(node.outputs[0])
    if not (_f32c(a) and _f32c(y)) or b.ndim != 2 or a.ndim < 1 or y.size == 0:
        return None
    ep = _epilogue(node)
    if ep is None:
        return None
    if node.op in ("Gemm", "FusedGemm"):
        if node.attrs.get("transA", 0) or a.ndim != 2:
            return None
        alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
        bt = b.T if node.attrs.get("transB", 0) else b
        cname = node.inputs[2] if len(node.inputs) > 2 and beta != 0.0 else ""
        bk = bt.astype(np.float64) * alpha if alpha != 1.0 else bt
        bias = _bias(ctx, cname, bt.shape[1], beta)
    else:
        bk = b
        bias = _bias(ctx, node.inputs[2] if node.op == "FusedMatMul" and len(node.inputs) > 2 else "", b.shape[1])
    if bias is False:
        return None
    k, m = bk.shape
    rows = a.size // k if k else 0
    if a.shape[-1] != k or y.size != rows * m or y.shape[-1] != m:
        return None
    done = None
    if node.op in ("Gemm", "FusedGemm") and node.attrs.get("transB", 0) and bk is bt:
        # a panel's columns are rows of B: their pages leave the resident set as they are packed
        done = lambda c0, c1: drop_pages([b[c0:c1]])  # noqa: E731
    wpack = pack_panels(np.asarray(bk, np.float32)[None], done)
    args = ConvF32Args(x=a.ctypes.data, y=y.ctypes.data, z=None, wpack=wpack.ctypes.data,
                       bias=None if bias is None else bias.ctypes.data, scratch=None,
                       n=1, c=k, h=rows, w=1, m=m, oh=rows, ow=1, kh=1, kw=1, sh=1, sw=1, dh=1, dw=1,
                       pt=0, pl=0, group=1, act=ep[0], p0=ep[1], p1=ep[2], threads=threads_of(ctx))
    ctx.note(node, f"native SGEMM ({isa_name()}, {rows}x{k} @ {k}x{m}, packed B)"
                   + (" + bias" if bias is not None else "") + (f" + {ep[3]}" if ep[3] else "")
                   + f"; {threads_of(ctx)} thread(s)")
    return _step(ctx, args, (a, y, wpack, bias))
