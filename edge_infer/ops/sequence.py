"""Transformer and recurrent ops: LayerNormalization, GroupNormalization, Einsum,
LSTM, GRU, RNN. Shapes of weights and states against X, the activation lists against
the direction, the Einsum equation parsed (``parse_einsum``, below)."""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ShapeError
from ..ir.graph import Graph, Node, Tensor
from .cost import flops, numel, prod, shape_of
from .schema import (BOOL, FLOAT, FLOATS, INT, STR, UNBOUNDED, check_axis, const, fail, int_values, known,
                     op, rank, shape)
from .shapes import broadcast_shapes, channels_last, rule

#: activation name -> (uses alpha, uses beta); ONNX's list for the recurrent ops
RNN_ACTIVATIONS = {"Relu": (False, False), "Tanh": (False, False), "Sigmoid": (False, False),
                   "Affine": (True, True), "LeakyRelu": (True, False), "ThresholdedRelu": (True, False),
                   "ScaledTanh": (True, True), "HardSigmoid": (True, True), "Elu": (True, False),
                   "Softsign": (False, False), "Softplus": (False, False)}
#: the op's activations per direction when the model names none: RNN f; GRU f, g; LSTM f, g, h
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
#: activations per direction
RNN_ACTIVATION_COUNT = {op: len(v) for op, v in DEFAULT_ACTIVATIONS.items()}
MAX_EINSUM_OPERANDS = 16


def _stash(node: Node) -> None:
    st = node.attrs.get("stash_type", 1)
    if st not in STASH_DTYPES:
        fail(node, "attribute 'stash_type'",
             f"{st!r} is not one of {sorted(STASH_DTYPES)} (float, float16, double)")


def _check_layer_norm(node: Node, graph: Graph) -> None:
    _stash(node)
    xs = shape(graph, node.inputs[0])
    r = None if xs is None else len(xs)
    axis = node.attrs.get("axis", -1)
    check_axis(node, "attribute 'axis'", axis, r)
    if xs is None:
        return
    norm = xs[axis % r:]
    for k in (1, 2):
        ps = shape(graph, node.inputs[k]) if len(node.inputs) > k and node.inputs[k] else None
        if ps is None:
            continue
        if len(ps) > len(norm) or any(known(p) and known(d) and p not in (1, d)
                                      for p, d in zip(ps[::-1], norm[::-1])):
            fail(node, f"input {k}",
                 f"shape {list(ps)} does not broadcast onto the normalized dims {list(norm)}")


def _check_group_norm(node: Node, graph: Graph) -> None:
    _stash(node)
    if "num_groups" not in node.attrs:
        fail(node, "attribute 'num_groups'", "is required")
    xs = shape(graph, node.inputs[0])
    if xs is not None and len(xs) < 2:
        fail(node, "input 0", f"rank {len(xs)}; expected (N, C, ...)")
    ch = -1 if (node.attrs.get("data_layout") or "NCHW") == "NHWC" else 1     # the layout pass's NHWC
    if xs is None or not known(xs[ch]):
        return
    c, g = xs[ch], node.attrs["num_groups"]
    if c % g:
        fail(node, "attribute 'num_groups'", f"{g} does not divide the {c} channels")
    for k in (1, 2):
        ps = shape(graph, node.inputs[k])
        if ps is not None and (len(ps) != 1 or (known(ps[0]) and ps[0] != c)):
            fail(node, f"input {k}", f"shape {list(ps)}; expected [{c}] (per channel, opset 21)")


def _check_einsum(node: Node, graph: Graph) -> None:
    eq = node.attrs.get("equation")
    if not isinstance(eq, str):
        fail(node, "attribute 'equation'", "is required (a string)")
    if len(node.inputs) > MAX_EINSUM_OPERANDS:
        fail(node, "inputs", f"{len(node.inputs)} operands; at most {MAX_EINSUM_OPERANDS}")
    try:
        parse_einsum(eq, [rank(graph, i) for i in node.inputs])
    except ValueError as e:
        fail(node, "attribute 'equation'", str(e))


def _expect(node: Node, graph: Graph, k: int, what: str, want) -> None:
    """Input ``k``, when present and of known shape, must have shape ``want`` (None: any dim)."""
    if len(node.inputs) <= k or not node.inputs[k]:
        return
    s = shape(graph, node.inputs[k])
    if s is None:
        return
    if len(s) != len(want) or any(known(a) and known(b) and a != b for a, b in zip(s, want)
                                  if a is not None and b is not None):
        expected = ["?" if w is None or not known(w) else w for w in want]
        fail(node, f"input {k} ({what})", f"shape {list(s)}; expected {expected}")


def _check_activations(node: Node, nd: int) -> None:
    acts = node.attrs.get("activations")
    if acts is None:
        return
    per = RNN_ACTIVATION_COUNT[node.op]
    if not isinstance(acts, list) or len(acts) != per * nd:
        fail(node, "attribute 'activations'",
             f"expected {per * nd} names ({per} per direction), got {acts!r}"[:200])
    for a in acts:
        if a not in RNN_ACTIVATIONS:
            fail(node, "attribute 'activations'", f"{a!r} is not one of {sorted(RNN_ACTIVATIONS)}"[:300])


def _check_recurrent(node: Node, graph: Graph) -> None:
    gates = RNN_GATES[node.op]
    nd = 2 if (node.attrs.get("direction") or "forward") == "bidirectional" else 1
    _check_activations(node, nd)
    layout = node.attrs.get("layout", 0)
    xs = shape(graph, node.inputs[0])
    if xs is not None and len(xs) != 3:
        fail(node, "input 0 (X)", f"rank {len(xs)}; expected 3")
    rs = shape(graph, node.inputs[2])
    hidden = node.attrs.get("hidden_size")
    if hidden is None and rs is not None and len(rs) == 3 and known(rs[2]):
        hidden = rs[2]
    if hidden is None:
        return                                # nothing to check the weights against
    seq, batch, inp = (None, None, None) if xs is None else (
        (xs[1], xs[0], xs[2]) if layout else (xs[0], xs[1], xs[2]))
    _expect(node, graph, 1, "W", (nd, gates * hidden, inp))
    _expect(node, graph, 2, "R", (nd, gates * hidden, hidden))
    _expect(node, graph, 3, "B", (nd, 2 * gates * hidden))
    _expect(node, graph, 4, "sequence_lens", (batch,))
    state = (batch, nd, hidden) if layout else (nd, batch, hidden)
    _expect(node, graph, 5, "initial_h", state)
    if node.op == "LSTM":
        _expect(node, graph, 6, "initial_c", state)
        _expect(node, graph, 7, "P", (nd, 3 * hidden))
    lens = int_values(node, graph, 4)
    if lens is not None and seq is not None and known(seq) and any(not 0 <= v <= seq for v in lens):
        fail(node, "input 4 (sequence_lens)", f"a length outside [0, {seq}]")
    if len(node.inputs) > 4 and node.inputs[4] and const(graph, node.inputs[4]) is None:
        t = graph.tensors.get(node.inputs[4])
        if t is not None and t.dtype not in ("int32", "int64"):
            fail(node, "input 4 (sequence_lens)", f"dtype {t.dtype}; expected int32")


_RECURRENT = dict(direction=STR("forward", "reverse", "bidirectional"), hidden_size=INT(1, 1 << 20),
                  activation_alpha=FLOATS(), activation_beta=FLOATS(), clip=FLOAT(0), layout=BOOL)
_NORM = dict(epsilon=FLOAT(0), stash_type=INT())

SCHEMAS = {
    "LayerNormalization": op((2, 3), (1, 3), check=_check_layer_norm, axis=INT(), **_NORM),
    "GroupNormalization": op((3, 3), check=_check_group_norm, num_groups=INT(1, 1 << 20),
                             data_layout=STR("NCHW", "NHWC"), **_NORM),
    "Einsum": op((1, UNBOUNDED), check=_check_einsum, equation=STR()),
    "RNN": op((3, 6), (1, 2), check=_check_recurrent, **_RECURRENT),
    "GRU": op((3, 6), (1, 2), check=_check_recurrent, linear_before_reset=BOOL, **_RECURRENT),
    "LSTM": op((3, 8), (1, 3), check=_check_recurrent, input_forget=BOOL, **_RECURRENT),
}


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

#: ONNX ``stash_type`` (a TensorProto element type) -> the dtype the statistics are kept in
STASH_DTYPES = {1: "float32", 10: "float16", 11: "float64"}


_TERM = re.compile(r"^[A-Za-z]*(\.\.\.)?[A-Za-z]*$")


def parse_einsum(equation: str, ranks: Sequence[Optional[int]]) -> Tuple[List[str], str]:
    """(input terms, output term) of an Einsum ``equation`` for inputs of ``ranks``
    (None: unknown). The implicit form (no ``->``) gets numpy's/ONNX's output: the
    ellipsis first, then the letters used exactly once, in alphabetical order.
    Raises ValueError naming what is wrong."""
    if not isinstance(equation, str) or len(equation) > 1024:
        raise ValueError("the equation must be a string of at most 1024 characters")
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise ValueError(f"{equation!r} has more than one '->'")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"{equation!r} names {len(terms)} operand(s), the node has {len(ranks)}")
    for t in terms + ([out] if arrow else []):
        if not _TERM.match(t):
            raise ValueError(f"term {t!r} of {equation!r}: only letters and one '...' are allowed")
    for t, r in zip(terms, ranks):
        n = len(t.replace("...", ""))
        if r is not None and (n > r if "..." in t else n != r):
            raise ValueError(f"term {t!r} of {equation!r} does not fit an operand of rank {r}")
    letters = "".join(t.replace("...", "") for t in terms)
    if arrow:
        bare = out.replace("...", "")
        if len(set(bare)) != len(bare):
            raise ValueError(f"output term {out!r} repeats a letter")
        if any(c not in letters for c in bare):
            raise ValueError(f"output term {out!r} uses a letter no operand has")
        if "..." in out and not any("..." in t for t in terms):
            raise ValueError(f"output term {out!r} has '...' but no operand has")
    else:
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        out = ("..." if any("..." in t for t in terms) else "") + "".join(once)
    return terms, out


def einsum_shape(equation: str, shapes: Sequence[Sequence]) -> Tuple:
    """The output shape of Einsum over operands of ``shapes`` (symbolic dims allowed)."""
    terms, out = parse_einsum(equation, [len(s) for s in shapes])
    sizes: Dict[str, object] = {}
    ell: List[Sequence] = []
    for t, s in zip(terms, shapes):
        head, dots, tail = t.partition("...")
        if dots:
            ell.append(tuple(s[len(head):len(s) - len(tail)]))
            pairs = list(zip(head, s)) + list(zip(tail, s[len(s) - len(tail):]))
        else:
            pairs = list(zip(t, s))
        for c, d in pairs:
            prev = sizes.get(c)
            if isinstance(prev, int) and isinstance(d, int) and prev != d:
                raise ShapeError(f"Einsum {equation!r}: letter {c!r} has sizes {prev} and {d}")
            if prev is None or not isinstance(prev, int):
                sizes[c] = d
    ell_shape = tuple(broadcast_shapes(*ell)) if ell else ()
    head, dots, tail = out.partition("...")
    return tuple(sizes[c] for c in head) + (ell_shape if dots else ()) + tuple(sizes[c] for c in tail)


@rule("Einsum")
def _einsum(node: Node, ins: List[Optional[Tensor]]):
    eq = node.attrs.get("equation", "")
    if any(t.shape is None for t in ins):
        parse_einsum(eq, [None if t.shape is None else len(t.shape) for t in ins])
        return [(ins[0].dtype, None)]
    return [(ins[0].dtype, einsum_shape(eq, [t.shape for t in ins]))]


@rule("LayerNormalization")
def _layer_norm(node: Node, ins: List[Optional[Tensor]]):
    x = ins[0]
    stash = STASH_DTYPES.get(int(node.attrs.get("stash_type", 1)))
    if stash is None:
        raise ShapeError(f"stash_type {node.attrs.get('stash_type')!r} is not float, float16 or double")
    if x.shape is None:
        return [(x.dtype, None), (stash, None), (stash, None)]
    r = len(x.shape)
    axis = int(node.attrs.get("axis", -1))
    if not -r <= axis < r:
        raise ShapeError(f"axis {axis} is out of range for rank {r}")
    axis %= r
    stats = tuple(x.shape[:axis]) + (1,) * (r - axis)
    return [(x.dtype, x.shape), (stash, stats), (stash, stats)]


@rule("GroupNormalization")
def _group_norm(node: Node, ins: List[Optional[Tensor]]):
    x = ins[0]
    channels_last(node)                # rejects an unknown data_layout
    if x.shape is not None and len(x.shape) < 2:
        raise ShapeError(f"input of rank {len(x.shape)}; GroupNormalization takes (N, C, ...)")
    return [(x.dtype, x.shape)]


#: op -> gates per direction
RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnn_dims(node: Node, x_shape: Sequence, r_shape: Optional[Sequence]) -> Tuple:
    """(seq, batch, directions, hidden) of a recurrent node (dims may be symbols)."""
    if len(x_shape) != 3:
        raise ShapeError(f"X of rank {len(x_shape)}; expected 3")
    layout = int(node.attrs.get("layout", 0))
    seq, batch = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
    nd = 2 if (node.attrs.get("direction") or "forward") == "bidirectional" else 1
    hidden = node.attrs.get("hidden_size")
    if hidden is None:
        if r_shape is None or len(r_shape) != 3:
            raise ShapeError("hidden_size is not given and R's shape is unknown")
        hidden = r_shape[2]
    return seq, batch, nd, hidden


@rule("LSTM", "GRU", "RNN")
def _recurrent(node: Node, ins: List[Optional[Tensor]]):
    x, r = ins[0], ins[2]
    if x.shape is None:
        return [(x.dtype, None)] * len(node.outputs)
    seq, batch, nd, hidden = rnn_dims(node, x.shape, None if r is None else r.shape)
    if int(node.attrs.get("layout", 0)):
        y, state = (batch, seq, nd, hidden), (batch, nd, hidden)
    else:
        y, state = (seq, nd, batch, hidden), (nd, batch, hidden)
    return [(x.dtype, y)] + [(x.dtype, state)] * (len(node.outputs) - 1)


# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

@flops("LayerNormalization", "GroupNormalization")
def _norm_flops(node: Node, graph: Graph) -> int:
    return 8 * numel(graph, node.outputs[0])      # mean, deviation, square, sum, scale, affine (two passes)


@flops("LSTM", "GRU", "RNN")
def _recurrent_flops(node: Node, graph: Graph) -> int:
    """2 * steps * batch * directions * (input + hidden) * gates * hidden, plus ~10 per gate value."""
    x, w = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1])
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        return 0
    nd, gh, n_in = (int(d) for d in w)
    hidden = gh // RNN_GATES[node.op]
    rows = int(x[0]) * int(x[1])
    return rows * nd * gh * (2 * (n_in + hidden) + 10)


@flops("Einsum")
def _einsum_flops(node: Node, graph: Graph) -> int:
    """2 * (product of every letter's size) per contraction of two operands."""
    shapes = [shape_of(graph, i) for i in node.inputs]
    if any(s is None for s in shapes):
        return 0
    terms, _ = parse_einsum(node.attrs.get("equation", ""), [len(s) for s in shapes])
    sizes, ell = {}, 1
    for t, s in zip(terms, shapes):
        head, dots, tail = t.partition("...")
        n_ell = len(s) - len(head) - len(tail) if dots else 0
        sizes.update(zip(head, s))
        sizes.update(zip(tail, s[len(s) - len(tail):] if tail else ()))
        ell = max(ell, prod(s[len(head):len(head) + n_ell]))
    return 2 * max(len(shapes) - 1, 1) * ell * prod(sizes.values())
