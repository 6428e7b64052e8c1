"""Resource limits: the bytes a graph will allocate, computed before anything is allocated.

What is counted: every constant (initializers, in their stored form), every tensor of static
shape (each must fit on its own: the arena holds it), and the outputs of the ops whose size is
set by a value rather than by their inputs (ConstantOfShape, Expand, Tile, Range), from their
constant inputs. The limit is ``max_bytes`` (``convert(max_bytes=...)``, ``--max-bytes``,
``Runtime(max_bytes=...)``) or else the target profile's memory budget, else the memory
available now (``meminfo.read_meminfo``). Constant folding checks the same limit per node
(``check_fold``), so a hostile shape is refused before numpy is asked for the memory.
"""
from __future__ import annotations

import time
from typing import Dict, Optional, Sequence

import numpy as np

from ..ir.graph import Graph, Node
from ..meminfo import read_meminfo
from .schema import ValidationError, const, int_values, known

MAX_ELEMENTS = 1 << 40           # no tensor of more elements, whatever the memory
#: without an explicit max_bytes, the largest tensor a graph may create from a constant value
#: (ConstantOfShape, Expand, Tile, Range, a fold that grows its inputs): a few hundred bytes of
#: model must not make the converter or the runtime allocate gigabytes
GENERATED_DEFAULT = 1 << 30
_state = {"limit": None, "avail": None, "at": 0.0}


class ResourceLimitError(ValidationError):
    """The graph would allocate more than the limit."""


def available_bytes() -> Optional[int]:
    """Memory available now (re-read at most once a second: folding asks per node)."""
    now = time.monotonic()
    if _state["avail"] is None or now - _state["at"] > 1.0:
        _state["avail"], _state["at"] = read_meminfo().get("available_bytes"), now
    return _state["avail"]


def default_limit(profile: Optional[dict] = None) -> Optional[int]:
    """The target profile's memory budget, else the memory available now (None: unknown)."""
    if isinstance(profile, dict):
        mb = profile.get("memory_budget_mb")
        if isinstance(mb, (int, float)) and not isinstance(mb, bool) and mb > 0:
            return int(mb * 2 ** 20)
    return available_bytes()


def set_limit(max_bytes: Optional[int]) -> Optional[int]:
    """Make ``max_bytes`` the limit constant folding checks in this process; return the old one."""
    old, _state["limit"] = _state["limit"], max_bytes
    return old


def generated_limit(max_bytes: Optional[int] = None) -> int:
    """What one value-sized tensor may take: ``max_bytes`` (else the one ``set_limit`` set), else
    the smaller of GENERATED_DEFAULT and the memory available now."""
    if max_bytes is None:
        max_bytes = _state["limit"]
    if max_bytes is not None:
        return int(max_bytes)
    avail = available_bytes()
    return GENERATED_DEFAULT if avail is None else min(GENERATED_DEFAULT, avail)


def _count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _refuse(what: str, nbytes: int, limit: int):
    raise ResourceLimitError(f"{what} would allocate {nbytes / 2**20:.1f} MiB, over the limit of "
                             f"{limit / 2**20:.1f} MiB (set max_bytes / --max-bytes to allow it)")


def _generated_elements(node: Node, graph: Graph) -> Optional[int]:
    """Elements of the output of a value-sized op, from its constant inputs (None: unknown)."""
    if node.op == "ConstantOfShape":
        dims = int_values(node, graph, 0)
        if dims is not None and any(d < 0 for d in dims):
            raise ValidationError(f"node {node.name!r} (ConstantOfShape): input 0 (shape): negative dims {dims}")
        return None if dims is None else _count(dims)
    if node.op in ("Expand", "Tile"):
        xs = graph.tensors[node.inputs[0]].shape if node.inputs[0] in graph.tensors else None
        if const(graph, node.inputs[0]) is not None:
            xs = const(graph, node.inputs[0]).shape
        vals = int_values(node, graph, 1)
        if vals is None:
            return None
        if any(v < 0 for v in vals):
            raise ValidationError(f"node {node.name!r} ({node.op}): input 1: negative values {vals}")
        if node.op == "Tile":
            base = _count(xs) if xs is not None and all(known(d) for d in xs) else 1
            return base * _count(vals)
        dims = list(vals)
        if xs is not None:   # broadcast: each dim the larger of the two (1 stretches)
            r = max(len(dims), len(xs))
            a = [1] * (r - len(dims)) + dims
            b = [1] * (r - len(xs)) + list(xs)
            dims = [max(x, int(y)) if known(y) else x for x, y in zip(a, b)]
        return _count(dims)
    if node.op == "Range":
        vals = [const(graph, i) for i in node.inputs[:3]]
        if any(v is None for v in vals):
            return None
        start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in vals)
        if delta == 0 or not all(np.isfinite([start, limit, delta])):
            raise ValidationError(f"node {node.name!r} (Range): input 2 (delta): must be finite and non-zero")
        return max(0, int(np.ceil((limit - start) / delta)))
    return None


def check_graph(graph: Graph, max_bytes: Optional[int], generated: Optional[int] = None,
                count_constants: bool = True) -> Dict[str, int]:
    """Refuse a graph that would allocate more than ``max_bytes`` (each static tensor, the
    constants together unless ``count_constants`` is False: mapped weights are file pages) or a
    value-sized op output over ``generated`` (default ``generated_limit(max_bytes)``); return
    what was counted."""
    gen_limit = generated_limit(max_bytes) if generated is None else generated
    consts = 0
    for t in graph.tensors.values():
        if t.data is not None:
            consts += int(t.data.nbytes) if count_constants else 0
            continue
        if t.shape is not None:
            # a symbolic dim counts as 1: the least any run allocates, and what convert's
            # verification feeds (an input [1, 2, 2**40, "N"] is refused, not tried)
            n = _count([d if known(d) else 1 for d in t.shape])
            nbytes = n * np.dtype(t.dtype).itemsize
            if n > MAX_ELEMENTS or (max_bytes is not None and nbytes > max_bytes):
                _refuse(f"tensor {t.name!r} of shape {list(t.shape)}", nbytes, max_bytes or 0)
    if max_bytes is not None and consts > max_bytes:
        _refuse("the constants", consts, max_bytes)
    total = 0
    for node in graph.nodes:
        n = _generated_elements(node, graph)
        if n is None:
            continue
        out = graph.tensors.get(node.outputs[0])
        nbytes = n * np.dtype(out.dtype if out is not None else "float32").itemsize
        if n > MAX_ELEMENTS or nbytes > gen_limit:
            _refuse(f"node {node.name!r} ({node.op})", nbytes, gen_limit)
        total += nbytes
    return {"constants": consts, "generated": total}


def check_fold(node: Node, graph: Graph) -> None:
    """Before constant folding allocates ``node``'s outputs: refuse outputs that grow past the
    generated limit (a fold that only moves big inputs, a weight transpose, may keep their size)
    or past the memory available."""
    total = 0
    for o in node.outputs:
        t = graph.tensors.get(o) if o else None
        if t is None or t.shape is None:
            continue
        if any(not known(d) for d in t.shape):
            return          # not static: nothing to fold here
        if any(d < 0 for d in t.shape):
            raise ValidationError(f"node {node.name!r} ({node.op}): output {o!r} has shape {t.shape}")
        total += _count(t.shape) * np.dtype(t.dtype).itemsize
    if total <= GENERATED_DEFAULT >> 4:      # small: the common case costs no /proc read
        return
    ins = sum(int(graph.tensors[i].data.nbytes) for i in node.inputs
              if i and i in graph.tensors and graph.tensors[i].data is not None)
    limit = max(generated_limit(), ins)
    avail = available_bytes()
    if avail is not None and _state["limit"] is None:
        limit = min(limit, avail)
    if total > limit:
        _refuse(f"folding node {node.name!r} ({node.op})", total, limit)


def check_sparse_coo(idx: np.ndarray, values: np.ndarray, dims: Sequence[int], what: str) -> np.ndarray:
    """Flat indices of an ONNX sparse tensor, checked: dims >= 0, indices in bounds, ascending."""
    from ..errors import ConversionError
    if any(d < 0 for d in dims) or _count(dims) > MAX_ELEMENTS:
        raise ConversionError(f"{what}: sparse tensor dims {list(dims)} are negative or too large")
    size = _count(dims)
    if idx.ndim == 2:        # [NNZ, rank] coordinates -> flat indices
        if idx.shape[1] != len(dims) or np.any(idx < 0) or np.any(idx >= np.asarray(dims, np.int64)):
            raise ConversionError(f"{what}: sparse coordinates outside the dims {list(dims)}")
        idx = np.ravel_multi_index(tuple(idx.T), dims) if idx.size else idx.reshape(-1)
    if idx.ndim != 1 or idx.size != values.size:
        raise ConversionError(f"{what}: {idx.size} sparse indices for {values.size} values")
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise ConversionError(f"{what}: sparse index {int(idx.min()) if idx.min() < 0 else int(idx.max())} "
                              f"outside [0, {size})")
    if np.any(np.diff(idx) <= 0):
        raise ConversionError(f"{what}: sparse indices must be ascending without repeats (ONNX spec)")
    return idx
