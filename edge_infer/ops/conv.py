"""Conv, ConvTranspose and FusedConv (dense and sparse weights): schemas, geometry checks, and
the one checked geometry object the conv and pool kernels of every backend take (``ConvGeometry``)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Graph, Node, Tensor
from ..ir.padding import resolve_pads
from .cost import flops, numel, prod, shape_of
from .int8 import int8_limit
from .qmath import EXACT_K
from .schema import FLOATS, INT, INTS, STR, fail, known, op, shape
from .shapes import (SHAPE_RULES, base_node, channels_last, check_onto, dtype_of, fresh, is_int, join_layout,
                     rule, split_layout)

AUTO_PAD = STR("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
LAYOUT = STR("NCHW", "NHWC")
MAX_WINDOW = 1 << 20   # taps per spatial dim; a kernel reading further is a hostile file


def window_lengths(node: Node, nsp: int) -> None:
    """strides/dilations have one value per spatial dim, pads two; kernel_shape one."""
    a = node.attrs
    for name, n in (("strides", nsp), ("dilations", nsp), ("kernel_shape", nsp), ("pads", 2 * nsp),
                    ("output_padding", nsp)):
        v = a.get(name)
        if v and len(v) != n:
            fail(node, f"attribute {name!r}", f"{len(v)} values for {nsp} spatial dims (expected {n})")


def _channels(node: Node, graph: Graph):
    xs = shape(graph, node.inputs[0])
    if xs is None or len(xs) < 3:
        return xs, None
    last = (node.attrs.get("data_layout") or "NCHW") == "NHWC"
    return xs, xs[-1] if last else xs[1]


#: what a convolution's input and weight may hold (int8/uint8: the quantized kernels)
CONV_DTYPES = ("float16", "float32", "float64", "int8", "uint8")


def _check_conv_integer(node: Node, graph: Graph) -> None:
    """ConvInteger: the Conv geometry (its zero points are inputs 2 and 3, not a bias)."""
    from .quantize import _check_integer_zero_points
    _check_conv(Node("Conv", node.inputs[:2], node.outputs, node.attrs, node.name), graph)
    _check_integer_zero_points(node, graph)


def _check_conv(node: Node, graph: Graph) -> None:
    for k, what in ((0, "input 0 (X)"), (1, "input 1 (W)")):
        t = graph.tensors.get(node.inputs[k])
        if t is not None and t.dtype not in CONV_DTYPES:
            fail(node, what, f"dtype {t.dtype}; a convolution takes {', '.join(CONV_DTYPES)}")
    ws = shape(graph, node.inputs[1])
    xs, c = _channels(node, graph)
    if ws is None:
        return
    if len(ws) < 3:
        fail(node, "input 1 (W)", f"weight of rank {len(ws)}; a conv weight is [M, C/group, k...]")
    if xs is not None and len(xs) != len(ws):
        fail(node, "input 1 (W)", f"rank {len(ws)} differs from the input's rank {len(xs)}")
    nsp = len(ws) - 2
    window_lengths(node, nsp)
    group = int(node.attrs.get("group", 1))
    transposed = node.op == "ConvTranspose"
    ks = node.attrs.get("kernel_shape")
    if ks and all(known(k) for k in ws[2:]) and [int(k) for k in ks] != [int(k) for k in ws[2:]]:
        fail(node, "attribute 'kernel_shape'", f"{list(ks)} differs from the weight's {list(ws[2:])}")
    if transposed:
        cin, m = ws[0], (ws[1] * group if known(ws[1]) else None)
        if known(cin) and cin % group:
            fail(node, "attribute 'group'", f"group {group} does not divide the {cin} input channels")
        if c is not None and known(c) and known(cin) and c != cin:
            fail(node, "input 1 (W)", f"weight expects {cin} input channels, the input has {c}")
    else:
        m = ws[0]
        if known(m) and m % group:
            fail(node, "attribute 'group'", f"group {group} does not divide the {m} output channels")
        if c is not None and known(c) and known(ws[1]) and c != ws[1] * group:
            fail(node, "attribute 'group'", f"input has {c} channels, weight expects {ws[1]} x group {group}")
    if len(node.inputs) > 2 and node.inputs[2]:
        bs = shape(graph, node.inputs[2])
        if bs is not None and m is not None and known(m):
            if len(bs) != 1 or (known(bs[0]) and bs[0] != m):
                fail(node, "input 2 (B)", f"bias of shape {list(bs)}; expected [{m}] (the output channels)")
    dil = node.attrs.get("dilations") or [1] * nsp
    for i, k in enumerate(ws[2:]):
        if known(k) and (k - 1) * int(dil[i]) + 1 > MAX_WINDOW:
            fail(node, "attribute 'dilations'", f"a window of {(k - 1) * int(dil[i]) + 1} taps")


_WINDOW = dict(strides=INTS(1, MAX_WINDOW), dilations=INTS(1, MAX_WINDOW), pads=INTS(0, MAX_WINDOW),
               kernel_shape=INTS(1, MAX_WINDOW), auto_pad=AUTO_PAD, group=INT(1, 1 << 24),
               data_layout=LAYOUT)
_FUSED = dict(activation=STR(), activation_params=FLOATS())

SCHEMAS = {
    "Conv": op((2, 3), check=_check_conv, **_WINDOW),
    "ConvInteger": op((2, 4), check=_check_conv_integer, **_WINDOW),
    "FusedConv": op((2, 4), check=_check_conv, **_WINDOW, **_FUSED),
    "ConvTranspose": op((2, 3), check=_check_conv, **_WINDOW, output_padding=INTS(0, MAX_WINDOW),
                        output_shape=INTS(0)),
}


# -- the one checked conv / window geometry ---------------------------------------------------

@dataclass(frozen=True)
class ConvGeometry:
    """The checked window geometry of a Conv or pool node, from which every backend derives its
    kernel arguments: layout, batch, input and output channels, group, kernel, strides,
    dilations, pads (the begin of each spatial dim, then the ends) and spatial sizes."""
    last: bool
    n: int
    c: int
    m: int
    group: int
    kernel: Tuple[int, ...]
    strides: Tuple[int, ...]
    dilations: Tuple[int, ...]
    pads: Tuple[int, ...]
    in_sp: Tuple[int, ...]
    out_sp: Tuple[int, ...]

    @property
    def nsp(self) -> int:
        return len(self.kernel)

    @property
    def cg(self) -> int:
        return self.c // self.group

    @property
    def mg(self) -> int:
        return self.m // self.group

    def planar(self) -> "ConvGeometry":
        """A 1-D window as a 2-D one of height 1 (2-D ones unchanged)."""
        if self.nsp != 1:
            return self
        return replace(self, kernel=(1,) + self.kernel, strides=(1,) + self.strides,
                       dilations=(1,) + self.dilations, pads=(0, self.pads[0], 0, self.pads[1]),
                       in_sp=(1,) + self.in_sp, out_sp=(1,) + self.out_sp)


def window_geometry(node: Node, x_shape, y_shape, kernel: Sequence[int], m: Optional[int] = None,
                    group: int = 1, ceil_mode: bool = False, last: Optional[bool] = None) -> ConvGeometry:
    """The geometry of a window op (a pool: ``m`` None, the output has the input's channels)
    over ``x_shape``, checked against the planned ``y_shape``."""
    last = channels_last(node) if last is None else last
    n, c, insp = split_layout(tuple(x_shape), last)
    nsp = len(x_shape) - 2
    wa = window_attrs(node, nsp, list(kernel))
    pads, osp = resolve_pads(list(insp), list(kernel), wa["strides"], wa["dilations"], wa["pads"], wa["auto_pad"],
                             wa["ceil_mode"] if ceil_mode else False)
    m = int(c if m is None else m)
    want = join_layout(n, m, osp, last)
    if tuple(y_shape) != tuple(want):
        raise ShapeError(f"{node.op} {node.name!r}: planned output {tuple(y_shape)} != computed {tuple(want)}"
                         f"{' (NHWC)' if last else ''}")
    ints = lambda v: tuple(int(i) for i in v)  # noqa: E731
    return ConvGeometry(bool(last), int(n), int(c), m, int(group), ints(kernel), ints(wa["strides"]),
                        ints(wa["dilations"]), ints(pads), ints(insp), ints(osp))


def conv_geometry(node: Node, x_shape, w_shape, y_shape, last: Optional[bool] = None) -> ConvGeometry:
    """The geometry of a Conv / FusedConv: weights (M, C / group, *kernel) against the input,
    the group and the planned output."""
    group = int(node.attrs.get("group", 1))
    kernel = [int(k) for k in (node.attrs.get("kernel_shape") or w_shape[2:])]
    if list(w_shape[2:]) != kernel:
        raise ShapeError(f"{node.op} {node.name!r}: kernel_shape {kernel} != weight shape {tuple(w_shape)}")
    m, cg = int(w_shape[0]), int(w_shape[1])
    c = split_layout(tuple(x_shape), channels_last(node) if last is None else last)[1]
    if group < 1 or c != cg * group or m % group:
        raise ShapeError(f"{node.op} {node.name!r}: X {tuple(x_shape)}, W {tuple(w_shape)}, group {group} disagree")
    return window_geometry(node, x_shape, y_shape, kernel, m=m, group=group, last=last)


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

def window_attrs(node: Node, nsp: int, kernel: Sequence[int]) -> dict:
    """Sliding-window attributes with ONNX defaults filled in for ``nsp`` spatial dims."""
    a = node.attrs
    return dict(
        kernel=[int(k) for k in kernel],
        strides=[int(s) for s in (a.get("strides") or [1] * nsp)],
        dilations=[int(d) for d in (a.get("dilations") or [1] * nsp)],
        pads=[int(p) for p in (a.get("pads") or [0] * (2 * nsp))],
        auto_pad=str(a.get("auto_pad", "NOTSET") or "NOTSET"),
        ceil_mode=bool(a.get("ceil_mode", 0)),
    )


def window_out_dims(node: Node, spatial: Sequence, kernel: Sequence[int],
                    ceil_allowed: bool = False, first_axis: int = 2) -> List:
    """Output spatial dims of a sliding-window op; symbolic where the input dim is."""
    n = len(spatial)
    w = window_attrs(node, n, kernel)
    if len(w["strides"]) != n or len(w["dilations"]) != n or len(w["pads"]) != 2 * n:
        raise ShapeError(f"strides/dilations/pads do not match {n} spatial dims")
    out = []
    for i, d in enumerate(spatial):
        if not is_int(d):
            out.append(fresh(node, first_axis + i))
            continue
        _, o = resolve_pads([int(d)], [w["kernel"][i]], [w["strides"][i]], [w["dilations"][i]],
                            [w["pads"][i], w["pads"][i + n]], w["auto_pad"],
                            w["ceil_mode"] and ceil_allowed)
        if o[0] < 1:
            raise ShapeError(f"spatial dim {i} of size {d} is smaller than the window "
                             f"(kernel {w['kernel'][i]}, dilation {w['dilations'][i]})")
        out.append(o[0])
    return out


@rule("Conv")
def _conv(node: Node, ins: List[Optional[Tensor]]):
    x, w = ins[0], ins[1]
    if x.shape is None or w.shape is None:
        return [(dtype_of(x), None)]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(f"Conv needs X of rank >= 3 and W of the same rank, got {x.shape} and {w.shape}")
    group = int(node.attrs.get("group", 1))
    last = channels_last(node)
    n, c, insp = split_layout(x.shape, last)
    cg = w.shape[1]
    first = 1 if last else 2
    if is_int(c) and is_int(cg) and c != cg * group:
        raise ShapeError(f"input has {c} channels but W expects {cg} x group {group}")
    kernel = node.attrs.get("kernel_shape") or list(w.shape[2:])
    if not all(is_int(k) for k in kernel):
        sp = tuple(fresh(node, first + i) for i in range(len(kernel)))
        return [(x.dtype, join_layout(n, w.shape[0], sp, last))]
    sp = window_out_dims(node, insp, kernel, first_axis=first)
    return [(x.dtype, join_layout(n, w.shape[0], sp, last))]


def conv_transpose_geometry(in_spatial: Sequence[int], kernel: Sequence[int], attrs: dict
                            ) -> Tuple[List[int], List[int]]:
    """(pads [b..., e...], output spatial size) of a ConvTranspose, per the ONNX spec."""
    n = len(in_spatial)
    strides = [int(s) for s in (attrs.get("strides") or [1] * n)]
    dil = [int(d) for d in (attrs.get("dilations") or [1] * n)]
    opad = [int(p) for p in (attrs.get("output_padding") or [0] * n)]
    pads = [int(p) for p in (attrs.get("pads") or [0] * (2 * n))]
    auto_pad = str(attrs.get("auto_pad", "NOTSET") or "NOTSET")
    out_shape = [int(o) for o in (attrs.get("output_shape") or [])]
    if len(out_shape) == n + 2:       # some exporters write the full N, C, ... shape
        out_shape = out_shape[2:]
    full = [strides[i] * (in_spatial[i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(n)]
    if out_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if not out_shape:
            out_shape = [in_spatial[i] * strides[i] for i in range(n)]
        total = [full[i] - out_shape[i] for i in range(n)]
        if auto_pad == "SAME_UPPER":
            b = [t // 2 for t in total]
        else:   # SAME_LOWER, and NOTSET with output_shape (the spec's "else" branch)
            b = [t - t // 2 for t in total]
        return b + [total[i] - b[i] for i in range(n)], out_shape
    if auto_pad == "VALID":
        pads = [0] * (2 * n)
    return pads, [full[i] - pads[i] - pads[i + n] for i in range(n)]


@rule("ConvTranspose")
def _conv_transpose(node: Node, ins):
    x, w = ins[0], ins[1]
    if x.shape is None or w.shape is None:
        return [(dtype_of(x), None)]
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(f"ConvTranspose needs X of rank >= 3 and W of the same rank, got {x.shape} and {w.shape}")
    group = int(node.attrs.get("group", 1))
    last = channels_last(node)
    n, c, sp = split_layout(x.shape, last)
    if is_int(c) and is_int(w.shape[0]) and c != w.shape[0]:
        raise ShapeError(f"input has {c} channels but W has {w.shape[0]}")
    m = w.shape[1] * group if is_int(w.shape[1]) else fresh(node, len(x.shape) - 1 if last else 1)
    kernel = node.attrs.get("kernel_shape") or list(w.shape[2:])
    first = 1 if last else 2
    if all(is_int(d) for d in sp) and all(is_int(k) for k in kernel):
        _, out = conv_transpose_geometry([int(d) for d in sp], [int(k) for k in kernel], node.attrs)
    else:
        fixed = node.attrs.get("output_shape") or []
        if len(fixed) == len(sp) + 2:
            fixed = fixed[2:]
        out = list(fixed) if fixed else [fresh(node, first + i) for i in range(len(sp))]
        if not fixed:
            # dims that are known can still be computed one at a time
            for i, d in enumerate(sp):
                if is_int(d) and is_int(kernel[i]):
                    one = {k: v for k, v in node.attrs.items()}
                    nd = len(sp)
                    for key in ("strides", "dilations", "output_padding"):
                        if node.attrs.get(key):
                            one[key] = [node.attrs[key][i]]
                    if node.attrs.get("pads"):
                        one["pads"] = [node.attrs["pads"][i], node.attrs["pads"][i + nd]]
                    out[i] = conv_transpose_geometry([int(d)], [int(kernel[i])], one)[1][0]
    bad = [o for o in out if is_int(o) and o < 1]
    if bad:
        raise ShapeError(f"output spatial size {out} is not positive (pads too large?)")
    return [(x.dtype, join_layout(n, m, out, last))]


@rule("FusedConv")
def _fused_conv(node: Node, ins: List[Optional[Tensor]]):
    res = SHAPE_RULES["Conv"](base_node(node, "Conv", 3), list(ins[:3]))
    check_onto(res[0][1], ins[3] if len(ins) > 3 else None, "residual Z")
    return res


@rule("ConvInteger")
def _conv_integer(node, ins):
    (_, shape), = SHAPE_RULES["Conv"](node, ins[:2])
    return [("int32", shape)]


# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

@flops("Conv")
def _conv_flops(node: Node, graph: Graph) -> int:
    n_out = numel(graph, node.outputs[0])
    w = shape_of(graph, node.inputs[1])
    if w is None or len(w) < 3:
        return 0
    bias = n_out if len(node.inputs) > 2 and node.inputs[2] else 0
    return 2 * n_out * prod(w[1:]) + bias


@flops("ConvTranspose")
def _conv_transpose_flops(node: Node, graph: Graph) -> int:
    w = shape_of(graph, node.inputs[1])
    if w is None:
        return 0
    bias = numel(graph, node.outputs[0]) if len(node.inputs) > 2 and node.inputs[2] else 0
    return 2 * numel(graph, node.inputs[0]) * prod(w[1:]) + bias


# -- int8 (``ops/int8.py``: what the int8 kernel of these ops covers) ------------------------------

def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


@int8_limit("Conv", "FusedConv")
def _conv_int8(node: Node, g: Graph):
    T = g.tensors
    w = T[node.inputs[1]]
    if not w.is_const or w.data.ndim < 3:
        return "weights are not a constant"
    if _opt(node, 2) and not T[_opt(node, 2)].is_const:
        return "bias is not a constant"
    if int(np.prod(w.data.shape[2:])) > EXACT_K and int(node.attrs.get("group", 1)) == w.data.shape[0]:
        return "depthwise kernel too large"
    return None


@int8_limit("ConvTranspose")
def _conv_transpose_int8(node: Node, g: Graph):
    T = g.tensors
    w = T[node.inputs[1]]
    if not w.is_const or w.data.ndim != 4 or int(node.attrs.get("group", 1)) != 1 \
            or any(int(d) != 1 for d in (node.attrs.get("dilations") or [1, 1])):
        return "int8 ConvTranspose covers 2-D, group 1, dilation 1, constant weights"
    if _opt(node, 2) and not T[_opt(node, 2)].is_const:
        return "bias is not a constant"
    return None
