"""TFLite forms that LiteRT's XNNPACK delegate takes, for ops whose plain form it leaves out.

LiteRT runs every op the delegate refuses in its own kernels, between delegate partitions: a
file with such ops makes LiteRT look slower than it is. Measured one op between two
convolutions (ai-edge-litert 2.3.0; docs/benchmarks.md): the delegate refuses PADV2,
SPLIT_V, RESIZE_NEAREST_NEIGHBOR (any options), RELU_0_TO_1, GATHER, CONCATENATION of more than
5 inputs, and in int8 HARD_SWISH, RELU, RELU6, MINIMUM, AVERAGE_POOL_2D and SOFTMAX; it takes
PAD, SPLIT, SLICE, CONCATENATION, RESHAPE, 6-D TRANSPOSE, MEAN, MUL, QUANTIZE, DEQUANTIZE and
ADD with a fused RELU / RELU6 / RELU_N1_TO_1 in fp32 and int8, and fp32 HARD_SWISH / MINIMUM /
SOFTMAX.
Each function here writes the delegated form of one op through the exporter ``ex``
(``export_tflite._Exporter``); those that may decline return whether they wrote it.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import List, Optional, Sequence

import numpy as np

from .export_tflite_common import _q8, _tflite_nearest
from .tflite_format import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, VALID

#: int8 clamps written as ADD(x, 0) with the clamp fused: exact (the sum is x's own integer)
_INT8_CLAMP = {"RELU": ACT_RELU, "RELU6": ACT_RELU6, "RELU_N1_TO_1": ACT_RELU_N1_TO_1}


def write_pad(ex, x: int, paddings: int, value, xt, out: int) -> None:
    """PAD (delegated) when ``value`` is what PAD fills with (0, an int8 tensor's zero
    point), else PADV2 with ``value`` (raw, in x's dtype)."""
    q8 = _q8(xt)
    default = int(xt.quant["zero_point"][0]) if q8 else 0
    v = np.asarray(value, xt.dtype).reshape(())
    if (int(v) == default) if q8 else (float(v) == 0.0):
        ex.w.op("PAD", [x, paddings], [out])
        return
    ex.w.op("PADV2", [x, paddings, ex.const("pad_value", v, xt.dtype, ex.tq(xt.quant))], [out])


def int8_clamp(ex, name: str, x: int, y: int, yt) -> bool:
    """int8 RELU / RELU6 / RELU_N1_TO_1 as ADD(x, 0) with that fused activation (the int8
    clamps alone are not delegated); True when written."""
    if name not in _INT8_CLAMP or not _q8(yt):
        return False
    # 0 at y's own parameters: both addends then share one scale, which the int8 ADD rescales
    # exactly (halves, then a power of two), so the sum is x's integer requantized once
    zp = int(yt.quant["zero_point"][0])
    zq = {"scale": [float(yt.quant["scale"][0])], "zero_point": [zp], "axis": 0}
    zero = ex.const("zero", np.int8(zp), "int8", zq)
    ex.w.op("ADD", [x, zero], [y], {"fused_activation_function": _INT8_CLAMP[name]})
    return True


def hard_sigmoid_float(ex, alpha: float, beta: float, x: int, y: int, yname: str) -> None:
    """fp32 clip(alpha x + beta, 0, 1) as MUL, ADD + fused RELU, MINIMUM 1: the CPU kernel's
    own float32 order (multiply, add, clamp), all delegated (RELU_0_TO_1 is not)."""
    m = ex.temp("hsig_mul", yname)
    ex.w.op("MUL", [x, ex.const("alpha", np.float32(alpha))], [m], {"fused_activation_function": ACT_NONE})
    p = ex.temp("hsig_add", yname)
    ex.w.op("ADD", [m, ex.const("beta", np.float32(beta))], [p], {"fused_activation_function": ACT_RELU})
    ex.w.op("MINIMUM", [p, ex.const("one", np.float32(1.0))], [y])


def hard_swish_int8(ex, x: int, y: int, yname: str) -> None:
    """int8 x * clip(x / 6 + 1 / 2, 0, 1) as the delegated int8 HardSigmoid (ADD + RELU6,
    MUL; exporter's ``hard_sigmoid_int8``) into a [0, 1] tensor at scale 1/255, then MUL by x.
    Two roundings where the IR's lookup table has one: within a step of it (the [0, 1]
    factor's half step of 1/510 times |x| is under half of y's step when y's range covers x's
    positive range, as hard-swish's does)."""
    shape = ex.w.tensors[y]["shape"]
    hq = {"scale": [float(np.float32(1 / 255))], "zero_point": [-128], "axis": 0}
    ex.k += 1
    h = ex.w.tensor(f"hswish_gate_{ex.k}", "int8", shape, None, hq)

    ex.hard_sigmoid_int8(1 / 6, 0.5, x, h, SimpleNamespace(quant=hq))      # (it reads .quant only)
    ex.w.op("MUL", [x, h], [y], {"fused_activation_function": ACT_NONE})


def softmax(ex, name: str, x: int, y: int, opts: Optional[dict]) -> None:
    """SOFTMAX / LOG_SOFTMAX over the last axis; int8 SOFTMAX as DEQUANTIZE -> float SOFTMAX ->
    QUANTIZE (XNNPACK has no int8 softmax; those three it delegates). That is
    round(256 softmax(x)) - 128 in float, which our int8 kernel's 2^20-scaled exp table and exact
    quotient compute too (TFLite's int8 kernel is within a step of it)."""
    tx, ty = ex.w.tensors[x], ex.w.tensors[y]
    if name != "SOFTMAX" or ty["quant"] is None or tx["quant"] is None:
        ex.w.op(name, [x], [y], opts)
        return
    ex.k += 1
    xf = ex.w.tensor(f"softmax_in_float_{ex.k}", "float32", tx["shape"])
    yf = ex.w.tensor(f"softmax_out_float_{ex.k}", "float32", ty["shape"])
    ex.w.op("DEQUANTIZE", [x], [xf])
    ex.w.op(name, [xf], [yf], opts)
    ex.w.op("QUANTIZE", [yf], [y])


def _nonnegative(ex, name: str) -> bool:
    """Whether IR tensor ``name`` is made by an op whose output is never below 0 (a Relu,
    Relu6 / Clip from >= 0, Sigmoid, HardSigmoid, or a fused epilogue of one)."""
    prod = ex.__dict__.setdefault("_producers", {o: n for n in ex.g.nodes for o in n.outputs if o})
    node = prod.get(ex.alias.get(name, name))
    if node is None:
        return False
    if node.op in ("Relu", "Sigmoid", "HardSigmoid"):
        return True
    if node.op == "Clip":
        lo = ex.cval(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        return lo is not None and ex.g.tensors[node.inputs[1]].quant is None and float(lo.reshape(-1)[0]) >= 0
    act = str(node.attrs.get("activation", "") or "")
    params = list(node.attrs.get("activation_params") or [])
    return act in ("Relu", "Sigmoid", "HardSigmoid") or (act == "Clip" and bool(params) and float(params[0]) >= 0)


def max_pool_pad_value(ex, xname: str, lowest):
    """The value to pad a max pool's input with: 0 (int8: the zero point) when the input is
    never below it, which PAD writes and XNNPACK delegates (the window's maximum is unchanged:
    every window holds an input element), else ``lowest`` (PADV2)."""
    if not _nonnegative(ex, xname):
        return lowest
    xt = ex.g.tensors[ex.alias.get(xname, xname)]
    return int(xt.quant["zero_point"][0]) if _q8(xt) else 0.0


def int8_average_pool(ex, x: int, y: int, opts: dict) -> None:
    """int8 AVERAGE_POOL_2D (XNNPACK has no int8 kernel for it): over the whole map as MEAN,
    else DEQUANTIZE -> float AVERAGE_POOL_2D -> QUANTIZE; both requantize to y's parameters
    and are within a step of the integer average (ties round differently)."""
    xs, ys = ex.w.tensors[x]["shape"], ex.w.tensors[y]["shape"]
    whole = (opts["padding"] == VALID and ys[1] == ys[2] == 1 and (opts["filter_height"], opts["filter_width"])
             == (xs[1], xs[2]))
    if whole:
        ex.w.op("MEAN", [x, ex.ints([1, 2], "axes")], [y], {"keep_dims": True})
        return
    ex.k += 1
    xf = ex.w.tensor(f"avgpool_in_float_{ex.k}", "float32", xs)
    yf = ex.w.tensor(f"avgpool_out_float_{ex.k}", "float32", ys)
    ex.w.op("DEQUANTIZE", [x], [xf])
    ex.w.op("AVERAGE_POOL_2D", [xf], [yf], opts)
    ex.w.op("QUANTIZE", [yf], [y])


def _factors(k: int) -> List[int]:
    """k as factors of at most 5 (XNNPACK concatenates at most 5 inputs), or [] if it has none."""
    out = []
    for f in (4, 5, 3, 2):
        while k % f == 0:
            out.append(f)
            k //= f
    return out if k == 1 else []


def nearest_upsample(ex, x: int, y: int, xs: Sequence[int], ys: Sequence[int], align: bool, half: bool,
                     yname: str) -> bool:
    """NHWC nearest resize by integer factors (source index floor(i / k) on both axes) as
    CONCATENATION + RESHAPE (exact data movement, delegated in fp32 and int8, where
    RESIZE_NEAREST_NEIGHBOR is not): k copies along C then a reshape repeats each pixel k
    times along W; k copies of those rows along W then a reshape repeats each row along H.
    Factors over 5 go in stages (floor(floor(i / a) / b) = floor(i / ab)). True when written."""
    n, h, w, c = (int(v) for v in xs)
    kh, kw = int(ys[1]) // h, int(ys[2]) // w
    if ys[0] != n or ys[3] != c or kh * h != ys[1] or kw * w != ys[2] or kh * kw == 1:
        return False
    for out, inp, k in ((ys[1], h, kh), (ys[2], w, kw)):
        if not np.array_equal(_tflite_nearest(out, inp, align, half), np.arange(out) // k):
            return False
    fw, fh = _factors(kw), _factors(kh)
    if (kw > 1 and not fw) or (kh > 1 and not fh):
        return False
    steps = [(2, f) for f in fw] + [(1, f) for f in fh]
    cur, shape = x, [n, h, w, c]
    for j, (axis, k) in enumerate(steps):
        cat_shape = list(shape)
        cat_shape[axis + 1] *= k
        cat = ex.temp("upsample_cat", yname, shape=cat_shape)
        ex.w.op("CONCATENATION", [cur] * k, [cat], {"axis": axis + 1, "fused_activation_function": ACT_NONE})
        shape[axis] *= k
        dst = y if j == len(steps) - 1 else ex.temp("upsample", yname, shape=shape)
        ex.w.op("RESHAPE", [cat, ex.ints(shape)], [dst], {"new_shape": list(shape)})
        cur = dst
    return True


def split(ex, x: int, xs: Sequence[int], axis: int, sizes: List[int], outs: List[int]) -> None:
    """SPLIT for equal parts, else one SLICE per part: both delegated, SPLIT_V is not."""
    if len(set(sizes)) == 1:
        ex.w.op("SPLIT", [ex.const("axis", np.int32(axis), "int32"), x], outs, {"num_splits": len(outs)})
        return
    start = 0
    for size, o in zip(sizes, outs):
        begin, shape = [0] * len(xs), list(xs)
        begin[axis], shape[axis] = start, size
        ex.w.op("SLICE", [x, ex.ints(begin, "begin"), ex.ints(shape, "size")], [o])
        start += size


def _perm_of(w, op: dict) -> Optional[List[int]]:
    t = w.tensors[op["inputs"][1]]
    if not t["buffer"]:
        return None
    return np.frombuffer(w.buffers[t["buffer"]], "<i4").tolist()


#: ops that compute each element alone, in any layout (a TRANSPOSE commutes with them)
_ELEMENTWISE_UNARY = frozenset({"RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH", "HARD_SWISH",
                                "QUANTIZE", "DEQUANTIZE", "ABS", "NEG", "EXP", "ELU", "LEAKY_RELU", "GELU"})


def fold_transpose_pairs(w, graph_inputs: Sequence[int], graph_outputs: Sequence[int]) -> int:
    """Drop TRANSPOSE(p) -> [element-wise unary ops] -> TRANSPOSE(q) where q after p is the
    identity and each tensor between them has one reader (NCHW ops written between
    layout-boundary transposes leave these): the unary ops then read the first TRANSPOSE's
    input, and readers of the second's output read theirs instead (or, when that output is a
    graph output, the last op before the pair's end writes it directly). Returns how many
    pairs went."""
    ops = [dict(op) for op in w.ops]
    readers: dict = {}
    for i, op in enumerate(ops):
        for t in op["inputs"]:
            readers.setdefault(t, []).append(i)
    producer = {t: i for i, op in enumerate(ops) for t in op["outputs"]}
    keep = set(graph_outputs) | set(graph_inputs)
    drop, rename, retarget = set(), {}, {}
    for j, op in enumerate(ops):
        if op["name"] != "TRANSPOSE" or j in drop:
            continue
        chain, mid = [], op["inputs"][0]
        while True:
            i = producer.get(mid)
            if i is None or i in drop or mid in keep or len(readers.get(mid, ())) != 1:
                i = None
                break
            if ops[i]["name"] != "TRANSPOSE" and ops[i]["name"] in _ELEMENTWISE_UNARY and len(ops[i]["inputs"]) == 1:
                chain.append(i)
                mid = ops[i]["inputs"][0]
                continue
            break
        if i is None or ops[i]["name"] != "TRANSPOSE":
            continue
        src, out = ops[i]["inputs"][0], op["outputs"][0]
        last = ops[chain[0]]["outputs"][0] if chain else src          # what the pair's end equals
        p, q = _perm_of(w, ops[i]), _perm_of(w, op)
        if p is None or q is None or [p[k] for k in q] != list(range(len(q))):
            continue
        if w.tensors[out]["quant"] != w.tensors[last]["quant"] or w.tensors[out]["type"] != w.tensors[last]["type"]:
            continue
        if out not in keep:
            rename[out] = last
        elif last not in keep and last in producer and producer[last] not in drop and len(readers[last]) == 1:
            retarget[last] = out
        else:
            continue
        for c in chain:                   # the unary ops now run in the source's layout
            for t in ops[c]["outputs"]:
                w.tensors[t]["shape"] = list(w.tensors[src]["shape"])
        if chain:
            ops[chain[-1]]["inputs"] = [src]
        drop |= {i, j}
    if not drop:
        return 0

    def resolve(t):
        while t in rename:
            t = rename[t]
        return t
    w.ops = [dict(op, inputs=[resolve(t) for t in op["inputs"]],
                  outputs=[retarget.get(t, t) for t in op["outputs"]])
             for k, op in enumerate(ops) if k not in drop]
    return len(drop) // 2
