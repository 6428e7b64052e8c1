"""fp32 ConvTranspose on NHWC tensors as the native sub-pixel kernel (native/src/convtranspose.c).

``convt_f32_step`` is called first by the ConvTranspose kernel's prepare (kernels/conv_transpose.py)
and returns the native step, or None with the reason (then the numpy kernel serves and the plan's
note says why). Prepare packs the weights once per output phase into 16-column panels
(``ei_convt_f32_pack``), takes the per-thread row tiles (none for a k2 s2 upsampling: every row is
read in place) from the plan's "im2col" scratch role, and fills the argument struct; a run is one
C call inside the compiled execution loop, allocating nothing.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Optional, Tuple

import numpy as np

from ....ir import Node
from ....ops.conv import conv_transpose_geometry
from .. import native as _native
from ..native.kernels import aligned, threads_of
from .conv_native import _f32c, isa_name
from .conv_operands import shared_cols

_P, _I = ctypes.c_void_p, ctypes.c_int32


class ConvTF32Args(ctypes.Structure):
    """``ei_convt_f32_args`` of src/convtranspose.c."""
    _fields_ = ([(f, _P) for f in ("x", "y", "wpack", "bias", "scratch")]
                + [(f, _I) for f in ("n", "c", "h", "w", "m", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw",
                                     "pt", "pl", "group", "act")]
                + [("p0", ctypes.c_float), ("p1", ctypes.c_float), ("threads", _I)])


#: pads and sizes the int32 argument struct holds with room for the index arithmetic
_LIMIT = 1 << 24


def _lib_ok() -> bool:
    return _native.lib is not None and hasattr(_native.lib, "ei_convt_f32")


def _geometry(node: Node, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> Tuple[Optional[tuple], str]:
    """(n, c, h, w, m, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, group) of a 1-D or 2-D NHWC
    ConvTranspose, or (None, why not)."""
    nsp = x.ndim - 2
    if nsp not in (1, 2) or w.ndim != x.ndim:
        return None, f"{nsp}-D"
    a = node.attrs
    group = int(a.get("group", 1))
    n, c, m = x.shape[0], x.shape[-1], w.shape[1] * group
    kernel = [int(k) for k in w.shape[2:]]
    strides = [int(s) for s in (a.get("strides") or [1] * nsp)]
    dil = [int(d) for d in (a.get("dilations") or [1] * nsp)]
    insp = [int(d) for d in x.shape[1:-1]]
    pads, osp = conv_transpose_geometry(insp, kernel, a)
    if tuple(y.shape) != (n, *osp, m) or w.shape[0] != c or c % group:
        return None, "shapes disagree"
    if nsp == 1:
        insp, osp, kernel, strides, dil = [1] + insp, [1] + list(osp), [1] + kernel, [1] + strides, [1] + dil
        pads = [0, pads[0], 0, pads[1]]
    vals = (n, c, *insp, m, *osp, *kernel, *strides, *dil, pads[0], pads[1], group)
    if any(abs(int(v)) >= _LIMIT for v in vals):
        return None, "a size or stride beyond the kernel's int32 index range"
    return vals, ""


def convt_f32_step(node: Node, ctx) -> Tuple[Optional[Callable[[], None]], str]:
    """(the native step, "") for an NHWC float32 ConvTranspose with constant weights (1-D or 2-D,
    any group, stride, dilation, pads, output padding), else (None, why not)."""
    if not _lib_ok():
        return None, ""             # the numpy kernels serve everything: nothing to explain per node
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    w = ctx.const(node.inputs[1])
    if not isinstance(w, np.ndarray):
        return None, "its weight is not a dense constant"
    if not (_f32c(x) and _f32c(y)) or y.size == 0 or x.size == 0:
        return None, "not a float32 graph"
    geo, why = _geometry(node, x, w, y)
    if geo is None:
        return None, why
    bias = None
    if len(node.inputs) > 2 and node.inputs[2]:
        b = ctx.const(node.inputs[2])
        if b is None or b.size != geo[4]:
            return None, "its bias is not a constant of one value per output channel"
        bias = np.ascontiguousarray(b.reshape(-1), np.float32)
    args = ConvTF32Args(x=x.ctypes.data, y=y.ctypes.data, bias=None if bias is None else bias.ctypes.data,
                        act=0, p0=0.0, p1=0.0, threads=threads_of(ctx))
    for f, v in zip(("n", "c", "h", "w", "m", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "group"),
                    geo):
        setattr(args, f, int(v))
    size = _native.function("ei_convt_f32_pack_size", _P, restype=ctypes.c_int64)(ctypes.addressof(args))
    wpack = aligned(int(size) * 4).view(np.float32)     # on a cache line, as pack_panels'
    w32 = np.ascontiguousarray(w, np.float32)
    _native.function("ei_convt_f32_pack", _P, _P, _P)(ctypes.addressof(args), w32.ctypes.data, wpack.ctypes.data)
    args.wpack = wpack.ctypes.data
    scratch_fn = _native.function("ei_convt_f32_scratch", _P, restype=ctypes.c_int64)
    nbytes = int(scratch_fn(ctypes.addressof(args)))
    if nbytes and not ctx.scratch_fits("im2col", nbytes) and args.threads > 1:
        # one tile per thread: fewer threads under a tight budget (the same sums per output)
        per = nbytes // args.threads
        room = ctx.workspace_budget + ctx.scratch_held("im2col")
        args.threads = int(max(1, min(args.threads, room // max(per, 1))))
        nbytes = int(scratch_fn(ctypes.addressof(args)))
    if nbytes and not ctx.scratch_fits("im2col", nbytes):
        return None, "its row tiles do not fit the memory budget"
    scratch = None
    if nbytes:
        scratch = shared_cols(ctx, nbytes // 4, np.float32)
        args.scratch = scratch.ctypes.data
    n, c, h, wd, m, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, group = geo
    ctx.note(node, f"NHWC ConvTranspose {kh}x{kw} stride {sh}x{sw} native sub-pixel SGEMM ({isa_name()}, "
                   f"{min(sh, oh) * min(sw, ow)} output phase(s), {n * h * wd}x{c // group} @ "
                   f"{c // group}x{m // group * kh * kw}" + (f", {group} groups" if group > 1 else "")
                   + (", rows read in place" if not nbytes else ", border rows copied per tile")
                   + (", bias fused" if bias is not None else "") + f"); {threads_of(ctx)} thread(s)"
                   + (f", tiles for {args.threads}" if args.threads < threads_of(ctx) else ""))
    return _native.native_step("ei_convt_f32", args, x, y, wpack, bias, scratch), ""
