"""Declarative op schemas and the checks they drive.

A schema is a dict::

    {"inputs": (min, max), "outputs": (min, max), "attrs": {name: spec}, "check": fn}

An attribute spec (``INT``, ``INTS``, ``FLOAT``, ``FLOATS``, ``STR``) gives the JSON type and the
allowed range; ``check(node, graph)`` holds what a spec cannot say (kernel shape equal to the
weight's, group dividing the channels, ...). Every failure is a ``ValidationError`` naming the
node and the attribute or input; ``validate_graph`` turns it into the caller's error type.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from ..errors import GraphError
from ..ir.graph import Graph, Node

UNBOUNDED = 1 << 30   # "any number of inputs"


class ValidationError(GraphError):
    """A node or tensor fails its schema (ArtifactError / ConversionError at the boundary)."""


def registrar(table: Dict[str, Callable]) -> Callable:
    """The decorator factory of an op-keyed table (shape rules, FLOP counts, int8 limits):
    ``@register(*ops)`` stores the decorated function in ``table`` under each op."""
    def register(*ops: str):
        def deco(fn: Callable) -> Callable:
            for op_name in ops:
                table[op_name] = fn
            return fn
        return deco
    return register


def fail(node: Node, what: str, msg: str):
    """Raise a ValidationError naming ``node`` and the attribute or input ``what``."""
    raise ValidationError(f"node {node.name!r} ({node.op}): {what}: {msg}")


def _spec(kind: str, lo=None, hi=None, values=None, length=None) -> dict:
    return {"type": kind, "lo": lo, "hi": hi, "values": values, "length": length}


def INT(lo=None, hi=None, values=None) -> dict:
    """An integer attribute in [lo, hi] (or one of ``values``)."""
    return _spec("int", lo, hi, values)


def INTS(lo=None, hi=None, length=None) -> dict:
    """A list of integers, each in [lo, hi]."""
    return _spec("ints", lo, hi, length=length)


def FLOAT(lo=None, hi=None) -> dict:
    """A finite number in [lo, hi]."""
    return _spec("float", lo, hi)


def FLOATS(lo=None, hi=None) -> dict:
    """A list of finite numbers, each in [lo, hi]."""
    return _spec("floats", lo, hi)


def STR(*values: str) -> dict:
    """A string, one of ``values`` when given."""
    return _spec("str", values=values or None)


BOOL = INT(values=(0, 1))


def op(inputs: Tuple[int, int] = (1, 1), outputs: Tuple[int, int] = (1, 1), check=None, **attrs) -> dict:
    """A schema: input and output counts, attribute specs, an optional extra check."""
    return {"inputs": inputs, "outputs": outputs, "attrs": attrs, "check": check}


def _is_int(v) -> bool:
    return isinstance(v, Integral) and not isinstance(v, np.bool_)


def _in_range(node: Node, name: str, v, spec: dict) -> None:
    lo, hi = spec["lo"], spec["hi"]
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
        fail(node, f"attribute {name!r}", f"{v!r} is outside {rng}")


def check_attr(node: Node, name: str, value, spec: dict) -> None:
    """Check one attribute value against its spec."""
    kind = spec["type"]
    if kind in ("int", "float"):
        ok = _is_int(value) if kind == "int" else (isinstance(value, Real) and math.isfinite(value))
        if not ok:
            fail(node, f"attribute {name!r}", f"expected a{' finite' if kind == 'float' else 'n'} "
                 f"{'number' if kind == 'float' else 'integer'}, got {value!r}"[:200])
        if spec["values"] is not None and value not in spec["values"]:
            fail(node, f"attribute {name!r}", f"{value!r} is not one of {list(spec['values'])}")
        _in_range(node, name, value, spec)
    elif kind in ("ints", "floats"):
        one = "int" if kind == "ints" else "float"
        if not isinstance(value, (list, tuple)):
            fail(node, f"attribute {name!r}", f"expected a list, got {type(value).__name__}")
        if spec["length"] is not None and len(value) != spec["length"]:
            fail(node, f"attribute {name!r}", f"expected {spec['length']} values, got {len(value)}")
        for v in value:
            check_attr(node, name, v, dict(spec, type=one, values=None))
    elif kind == "str":
        if not isinstance(value, str):
            fail(node, f"attribute {name!r}", f"expected a string, got {type(value).__name__}")
        if spec["values"] is not None and value not in spec["values"]:
            fail(node, f"attribute {name!r}", f"{value!r} is not one of {list(spec['values'])}")


def check_node(node: Node, graph: Graph, schema: dict) -> None:
    """Input/output counts, every declared attribute present, then the op's own check."""
    lo, hi = schema["inputs"]
    if not lo <= len(node.inputs) <= hi:
        fail(node, "inputs", f"{len(node.inputs)} given, the op takes {lo}..{hi if hi < UNBOUNDED else 'any'}")
    for k in range(lo):
        if not node.inputs[k]:
            fail(node, f"input {k}", "is required but missing")
    lo, hi = schema["outputs"]
    if not lo <= len(node.outputs) <= hi or not node.outputs[0]:
        fail(node, "outputs", f"{len(node.outputs)} given, the op has {lo}..{hi}")
    for name, spec in schema["attrs"].items():
        value = node.attrs.get(name)
        # null where a number goes reaches int()/float() in the kernels; lists and strings fall
        # back to their defaults through ``or``
        if value is not None or (name in node.attrs and spec["type"] in ("int", "float")):
            check_attr(node, name, value, spec)
    if schema["check"] is not None:
        schema["check"](node, graph)


# -- graph accessors for the op checks -----------------------------------------------

def const(graph: Graph, name: str):
    """The constant value of ``name`` (ndarray or SparseArray), or None."""
    t = graph.tensors.get(name) if name else None
    return None if t is None else t.data


def shape(graph: Graph, name: str) -> Optional[tuple]:
    """The tensor's shape (a constant's data shape first), or None when unknown."""
    t = graph.tensors.get(name) if name else None
    if t is None:
        return None
    if t.data is not None:
        return tuple(t.data.shape)
    return None if t.shape is None else tuple(t.shape)


def rank(graph: Graph, name: str) -> Optional[int]:
    """The tensor's rank, or None."""
    s = shape(graph, name)
    return None if s is None else len(s)


def known(d) -> bool:
    """True for a static (integer) dim."""
    return _is_int(d)


def check_axis(node: Node, what: str, axis, r: Optional[int]) -> None:
    """``axis`` must be an integer in [-r, r) when the rank ``r`` is known."""
    if not _is_int(axis):
        fail(node, what, f"expected an integer axis, got {axis!r}")
    if r is not None and not -r <= axis < r:
        fail(node, what, f"axis {axis} is out of range for rank {r}")


def int_values(node: Node, graph: Graph, k: int) -> Optional[Sequence[int]]:
    """A constant integer input as a list (None when absent or not constant)."""
    if len(node.inputs) <= k:
        return None
    v = const(graph, node.inputs[k])
    if v is None:
        return None
    a = np.asarray(v)
    if a.dtype.kind not in "iu":
        fail(node, f"input {k}", f"expected integers, got {a.dtype}")
    return [int(x) for x in a.reshape(-1)]
