"""Permutations and the reshape-through-layout rule of the layout pass (convert_layout.py).

A stored version of a logical tensor is ``logical.transpose(perm)``; these helpers compose
perms and decide whether a Reshape can run on the stored data directly."""
from __future__ import annotations

from typing import List, Sequence, Tuple

from ..ops.shapes import is_int, mul_dims

Perm = Tuple[int, ...]

NHWC: Perm = (0, 2, 3, 1)


def inverse(p: Sequence[int]) -> Perm:
    inv = [0] * len(p)
    for i, a in enumerate(p):
        inv[a] = i
    return tuple(inv)


def identity(r: int) -> Perm:
    return tuple(range(r))


def is_identity(p: Sequence[int]) -> bool:
    return all(a == i for i, a in enumerate(p))


def between(src: Perm, dst: Perm) -> List[int]:
    """The Transpose perm turning data stored as ``src`` into data stored as ``dst``."""
    inv = inverse(src)
    return [inv[dst[i]] for i in range(len(dst))]


def permute_shape(shape, p: Sequence[int]):
    return None if shape is None else tuple(shape[a] for a in p)


def drop_axes(perm: Perm, axes: Sequence[int]) -> Perm:
    """The layout of ``x`` (stored as ``perm``) with logical ``axes`` removed."""
    keep = [a for a in range(len(perm)) if a not in set(axes)]
    pos = {a: i for i, a in enumerate(keep)}
    return tuple(pos[a] for a in perm if a in pos)


def reshape_layout(lin: Sequence, lout: Sequence, perm: Perm):
    """How a reshape ``lin -> lout`` of data stored as ``perm`` can run on the stored data.

    Returns (fix, p_out) or None: ``fix`` is None when the stored data can be
    reshaped as it is, else the layout it must be transposed to first; ``p_out``
    is the layout of the result (``stored_out = out.transpose(p_out)``).
    Size-1 dims never matter for the memory order; other dims are grouped into
    runs of equal product (merges and splits), each run must be stored
    contiguously and in logical order.
    """
    groups = _reshape_groups(lin, lout)
    if groups is None:
        return None
    owner = {}
    for gi, (ins, _) in enumerate(groups):
        for a in ins:
            owner[a] = gi
    stored = [a for a in perm if lin[a] != 1]
    # groups in the order storage meets them; each must be contiguous and in order
    order, ok, pos = [], True, 0
    while pos < len(stored):
        gi = owner[stored[pos]]
        ins = groups[gi][0]
        if gi in order or stored[pos:pos + len(ins)] != ins:
            ok = False
            break
        order.append(gi)
        pos += len(ins)
    fix = None
    if not ok:
        seen = []
        for a in stored:
            if owner[a] not in seen:
                seen.append(owner[a])
        order = seen
        fix = _place_units([a for gi in order for a in groups[gi][0]], lin)
        if sorted(fix) != list(range(len(lin))):
            return None
    outs = _place_units([b for gi in order for b in groups[gi][1]], lout)
    if sorted(outs) != list(range(len(lout))):
        return None
    return fix, outs


def _place_units(order: List[int], shape: Sequence) -> Perm:
    """A full layout from the stored order of the non-size-1 axes: each size-1 axis goes
    right after its logical predecessor (they do not move memory; this way data stored
    in logical order gets the identity layout)."""
    out = list(order)
    for b in range(len(shape)):
        if shape[b] == 1:
            prev = [i for i, c in enumerate(out) if c < b]
            out.insert(prev[-1] + 1 if prev else 0, b)
    return tuple(out)


def _reshape_groups(lin: Sequence, lout: Sequence):
    """Runs (input axes, output axes) of equal element count, size-1 dims left out;
    a symbolic dim must map to the same symbol on its own. None if none fit."""
    a = [i for i, d in enumerate(lin) if d != 1]
    b = [j for j, d in enumerate(lout) if d != 1]
    groups, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        da, db = lin[a[i]], lout[b[j]]
        if not is_int(da) or not is_int(db):
            if da != db:
                return None
            groups.append(([a[i]], [b[j]]))
            i, j = i + 1, j + 1
            continue
        gi, gj, pi, pj = [a[i]], [b[j]], int(da), int(db)
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                if i >= len(a) or not is_int(lin[a[i]]):
                    return None
                gi.append(a[i])
                pi *= int(lin[a[i]])
                i += 1
            else:
                if j >= len(b) or not is_int(lout[b[j]]):
                    return None
                gj.append(b[j])
                pj *= int(lout[b[j]])
                j += 1
        groups.append((gi, gj))
    if i != len(a) or j != len(b):
        return None
    if mul_dims([lin[k] for k in a]) != mul_dims([lout[k] for k in b]):
        return None
    return groups
