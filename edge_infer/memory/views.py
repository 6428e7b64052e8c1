"""Tensors that can live inside another tensor's bytes, so the op between them copies nothing.

A Concat whose inputs are contiguous slabs of its output (the concat axis is the first one
larger than 1: a YOLO head's (1, N, 144) pieces, a channel concat of NCHW maps with batch 1),
a Split or a Slice whose outputs are contiguous slabs of its input, and a Reshape (Flatten,
Squeeze, Unsqueeze: the same bytes) are *views*: ``contiguous_views`` names, per node, each
(tensor, base tensor, byte offset of the tensor inside the base). The arena planner
(``plan_arena(views=...)``) places such a tensor at that offset of its base where it safely
can, and the backend's copy for it then copies a buffer onto itself, which the copy kernels
skip (``native.ops.copy_step``). Channels-last channel concats are strided, not slabs: they
keep one copy pass.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..ir import Graph, Node

#: ops whose output is its input's bytes, reinterpreted
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def slab_offset(shape: Sequence[int], starts: Sequence[int], lens: Sequence[int]) -> Optional[int]:
    """Element offset of the box ``starts[a] : starts[a] + lens[a]`` of a C-ordered array of
    ``shape`` when the box is one contiguous run of elements, else None."""
    k = max((a for a in range(len(shape)) if lens[a] != shape[a]), default=-1)
    if any(lens[a] != 1 for a in range(k)):
        return None
    strides = np.cumprod([1] + list(shape[::-1]))[:-1][::-1]
    return int(sum(int(s) * int(st) for s, st in zip(starts, strides)))


def _axis(node: Node, rank: int) -> int:
    axis = int(node.attrs.get("axis", 0))
    return axis + rank if axis < 0 else axis


def _slabs(names: Sequence[str], graph: Graph, whole: str, axis: int) -> List[Tuple[str, int]]:
    """(name, byte offset) of each named piece laid end to end along ``axis`` of ``whole``
    where it is a contiguous slab of it (unnamed pieces still take their room)."""
    shape = graph.tensors[whole].shape
    size = np.dtype(graph.tensors[whole].dtype).itemsize
    out, at = [], 0
    for name, n in names:
        starts = [0] * len(shape)
        starts[axis] = at
        lens = list(shape)
        lens[axis] = n
        off = slab_offset(shape, starts, lens)
        if name and off is not None:
            out.append((name, off * size))
        at += n
    return out


def contiguous_views(node: Node, graph: Graph) -> List[Tuple[str, str, int]]:
    """(tensor, base, byte offset inside base) for each tensor of ``node`` that may be placed
    inside another one's bytes (see the module doc); [] for other ops."""
    t = graph.tensors
    if node.op in RESHAPES:
        x, y = node.inputs[0], node.outputs[0]
        return [(y, x, 0)] if x and y and t[x].nbytes == t[y].nbytes else []
    if node.op == "Concat":
        y = node.outputs[0]
        axis = _axis(node, len(t[y].shape))
        pieces = [(i, t[i].shape[axis]) for i in node.inputs if i]
        return [(i, y, off) for i, off in _slabs(pieces, graph, y, axis)]
    if node.op == "Split":
        from ..ops.shapes import SHAPE_RULES
        x = node.inputs[0]
        axis = _axis(node, len(t[x].shape))
        shapes = SHAPE_RULES["Split"](node, [t[i] if i else None for i in node.inputs])
        pieces = [(o, s[axis]) for o, (_, s) in zip(node.outputs, shapes)]
        return [(o, x, off) for o, off in _slabs(pieces, graph, x, axis)]
    if node.op == "Slice":
        from ..ops.tensor import slice_bounds, slice_params
        x, y = node.inputs[0], node.outputs[0]
        shape = t[x].shape
        params = slice_params(node, [t[i] if i else None for i in node.inputs], len(shape))
        if params is None:
            return []
        starts, lens = [0] * len(shape), list(shape)
        for a, (s, e, st) in params.items():
            start, _, n = slice_bounds(shape[a], s, e, st)
            if st != 1 and n > 1:
                return []
            starts[a], lens[a] = (start if n else 0), n
        if tuple(lens) != tuple(t[y].shape) or 0 in lens:
            return []
        off = slab_offset(shape, starts, lens)
        return [] if off is None else [(y, x, off * np.dtype(t[x].dtype).itemsize)]
    return []


def concat_slices(node: Node, graph: Graph) -> List[Tuple[str, str, int, Tuple[int, ...]]]:
    """(input, output, byte offset, byte strides) of each input of a Concat that is a strided
    box of its output, not a contiguous slab (a channels-last channel concat): a producer that
    can write with the output's strides may write it in place (the backend decides which)."""
    if node.op != "Concat":
        return []
    t = graph.tensors
    y = node.outputs[0]
    shape, size = t[y].shape, np.dtype(t[y].dtype).itemsize
    axis = _axis(node, len(shape))
    strides = tuple(int(v) * size for v in np.cumprod([1] + list(shape[::-1]))[:-1][::-1])
    contiguous = {name for name, _ in _slabs([(i, t[i].shape[axis]) for i in node.inputs if i], graph, y, axis)}
    out, at = [], 0
    for i in node.inputs:
        if not i:
            continue
        if i not in contiguous:
            out.append((i, y, at * strides[axis], strides))
        at += t[i].shape[axis]
    return out
