"""Shape rules for the transformer and recurrent ops: LayerNormalization,
GroupNormalization, Einsum, LSTM, GRU and RNN.

``parse_einsum`` is the one reader of an Einsum equation (the op schema, this rule and
the CPU kernel all use it): letters, at most one ``...`` per term, an optional ``->``.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ShapeError
from .graph import Node, Tensor
from .shape_inference import broadcast_shapes, rule
from .shape_rules_nn import channels_last

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
