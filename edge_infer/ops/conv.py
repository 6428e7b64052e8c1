"""Conv, ConvTranspose and FusedConv (dense and sparse weights): schemas and geometry checks."""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .schema import FLOATS, INT, INTS, STR, fail, known, op, shape

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
