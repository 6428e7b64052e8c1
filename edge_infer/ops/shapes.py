"""Shape-rule table and what the rules share: every op family module (``ops/<family>.py``)
registers its ops' rules here with ``@rule``; ``ir/shape_inference.py`` walks a graph with them.

A rule is ``rule(node, ins) -> [(dtype, shape), ...]`` where ``ins`` are the input Tensors (None
for a missing optional input); a constant input carries its value in ``.data``.

Dims are ints or symbolic strings. Arithmetic on symbolic dims (Flatten, Reshape, Concat, Pad,
Tile) renders the result as a canonical expression string (``"N*12"``, ``"N+3"``), so two tensors
computed the same way get the same symbol; where a dim depends on a value that is not constant,
the rule invents a fresh symbol ``"<output>_d<i>"`` (the rank is still known), and returns
``None`` only when even the rank is unknown. Conv, the pools and the normalizations take a
``data_layout`` attribute ("NCHW", the default, or "NHWC": ``channels_last``).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, Shape, Tensor
from .schema import registrar

Rule = Callable[[Node, List[Optional[Tensor]]], List[Tuple[str, Shape]]]
#: op -> its shape rule
SHAPE_RULES: Dict[str, Rule] = {}


#: ``@rule(*ops)``: register the shape rule of ``ops``
rule = registrar(SHAPE_RULES)


def broadcast_shapes(*shapes: Sequence) -> Tuple:
    """Numpy-style broadcasting of shapes that may contain symbolic dims."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        ints = {d for d in dims if isinstance(d, int)}
        syms = [d for d in dims if not isinstance(d, int)]
        big = ints - {1}
        if len(big) > 1:
            raise ShapeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        if big:
            out.append(big.pop())
        elif syms:
            out.append(syms[0])
        else:
            out.append(1)
    return tuple(out)


def dtype_of(t: Optional[Tensor]) -> str:
    """The dtype of an input (float32 for a missing optional one)."""
    return t.dtype if t is not None else "float32"


LAYOUTS = ("NCHW", "NHWC")


def channels_last(node: Node) -> bool:
    """True when ``node`` computes in NHWC (``data_layout="NHWC"``); NCHW is the default."""
    layout = node.attrs.get("data_layout") or "NCHW"
    if layout not in LAYOUTS:
        raise ShapeError(f"data_layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    return layout == "NHWC"


def split_layout(shape: Sequence, last: bool) -> Tuple:
    """(batch, channels, spatial dims) of an activation shape in either layout."""
    if last:
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


def join_layout(n, c, spatial: Sequence, last: bool) -> Tuple:
    """The activation shape of (batch, channels, spatial) in either layout."""
    return (n, *spatial, c) if last else (n, c, *spatial)


INT64_MAX = 2 ** 63 - 1


INT32_MAX = 2 ** 31 - 1


# ONNX TensorProto dtype enums, accepted for Cast's ``to`` in case a graph
# carries the raw ONNX value rather than the IR's dtype name.
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def dtype_name(value) -> str:
    """An IR dtype name from a dtype name, numpy dtype or ONNX enum int."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if int(value) not in _ONNX_DTYPES:
            raise ShapeError(f"unsupported ONNX dtype enum {value}")
        return _ONNX_DTYPES[int(value)]
    return np.dtype(value).name


def is_int(d) -> bool:
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool)


def fresh(node, i: int, out: int = 0) -> str:
    """A new symbol for dim ``i`` of output ``out`` (named after it): a size that depends on a
    runtime value or on a symbolic input dim."""
    return f"{node.outputs[out]}_d{i}"


def fresh_shape(node, rank: int, out: int = 0) -> Tuple[str, ...]:
    return tuple(fresh(node, i, out) for i in range(rank))


def _factors(d) -> Tuple[int, Counter]:
    """A dim as integer coefficient times symbols: ``"12*N"`` -> (12, {N: 1})."""
    if is_int(d):
        return int(d), Counter()
    if any(c in d for c in "+-/()"):
        return 1, Counter([d])            # a sum or other expression: an opaque symbol
    coef, syms = 1, Counter()
    for part in d.split("*"):
        if part.isdigit():
            coef *= int(part)
        else:
            syms[part] += 1
    return coef, syms


def _render_product(coef: int, syms: Counter):
    if coef == 0 or not syms:
        return coef
    names = sorted(syms.elements())   # sorted: the same product always renders the same
    return "*".join(([str(coef)] if coef != 1 else []) + names)


def mul_dims(dims: Sequence):
    """The product of dims (1 for none)."""
    coef, syms = 1, Counter()
    for d in dims:
        c, s = _factors(d)
        coef *= c
        syms.update(s)
    return _render_product(coef, syms)


def div_dims(num, den):
    """``num / den`` when it is exact and expressible, else None."""
    cn, sn = _factors(num)
    cd, sd = _factors(den)
    if cd == 0 or cn % cd or any(sn[k] < v for k, v in sd.items()):
        return None
    return _render_product(cn // cd, sn - sd)


def add_dims(dims: Sequence):
    """The sum of dims: an int, or a canonical expression like ``"M+N+3"``."""
    const, terms = 0, []
    for d in dims:
        if is_int(d):
            const += int(d)
            continue
        for tok in re.findall(r"[+-]?[^+-]+", d):
            body = tok.lstrip("+")
            if body.lstrip("-").isdigit():
                const += int(body)
            else:
                terms.append(body)
    if not terms:
        return const
    terms.sort()
    text = terms[0] + "".join(t if t.startswith("-") else "+" + t for t in terms[1:])
    if const:
        text += f"+{const}" if const > 0 else str(const)
    return text


def const_ints(t) -> Optional[List[int]]:
    """A constant input's values as Python ints (None when absent or not constant)."""
    if t is None or not t.is_const:
        return None
    return [int(v) for v in np.asarray(t.data).reshape(-1)]


def axis_index(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def operand_dtype(ins) -> str:
    """The dtype an op computes in: that of its first non-constant input.

    ONNX inputs share one type; a constant that disagrees (a float64 literal
    next to a float32 activation) is cast to this dtype by the kernel instead
    of letting numpy silently upcast the result.
    """
    live = [t for t in ins if t is not None]
    for t in live:
        if not t.is_const:
            return t.dtype
    return live[0].dtype


EPILOGUE_ATTRS = ("activation", "activation_params")


def base_node(node: Node, op: str, n_inputs: int) -> Node:
    """``node`` as its base op: the first ``n_inputs`` inputs, epilogue attributes dropped."""
    attrs = {k: v for k, v in node.attrs.items() if k not in EPILOGUE_ATTRS}
    return Node(op, list(node.inputs[:n_inputs]), list(node.outputs[:1]), attrs, node.name)


def check_onto(out, extra: Optional[Tensor], what: str) -> None:
    if extra is None or extra.shape is None or out is None:
        return
    if len(extra.shape) > len(out) or tuple(broadcast_shapes(out, extra.shape)) != tuple(out):
        raise ShapeError(f"{what} {tuple(extra.shape)} does not broadcast onto the output {tuple(out)}")


def axes_input(node, ins, k: int = 1):
    """(axes list, known): axes from input ``k`` or, for old graphs, the ``axes`` attr."""
    t = ins[k] if len(ins) > k else None
    if t is not None:
        vals = const_ints(t)
        return vals, vals is not None
    attr = node.attrs.get("axes")
    return (list(attr) if attr is not None else None), True
