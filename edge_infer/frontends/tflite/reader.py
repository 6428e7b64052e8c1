"""Bound-checked reading of a TFLite flatbuffer, and TFLite's sparse tensor format."""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

from ...tflite_format import DENSE, SPARSE_CSR, _schema


MAGIC = b"TFL3"
#: a tensor larger than this many elements (1 GiB of float32) is refused: a corrupt shape, not
#: an edge model (constants are bounded by their buffers anyway)
MAX_ELEMENTS = 1 << 28


class _Malformed(Exception):
    """The flatbuffer is inconsistent (internal: becomes a ConversionError)."""


# -- reading ----------------------------------------------------------------------------------

class _File:
    """Bound-checked access to the flatbuffer through the generated classes."""

    def __init__(self, buf: bytes):
        self.buf = buf
        self.size = len(buf)

    def count(self, n: int, what: str, elem: int = 4) -> int:
        if not isinstance(n, (int, np.integer)) or n < 0 or n * elem > self.size:
            raise _Malformed(f"{what}: {n} entries do not fit in a {self.size}-byte file")
        return int(n)

    def vec(self, obj, field: str, dtype=np.int32) -> np.ndarray:
        """A numeric vector field as a numpy array (empty when absent)."""
        n = self.count(getattr(obj, field + "Length")(), field, np.dtype(dtype).itemsize)
        if n == 0:
            return np.zeros(0, dtype)
        arr = getattr(obj, field + "AsNumpy")()
        if not isinstance(arr, np.ndarray) or arr.size != n:
            raise _Malformed(f"{field}: unreadable vector")
        return np.array(arr, dtype=dtype)

    def text(self, raw) -> str:
        if raw is None:
            return ""
        return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def _options(op, table: str):
    """The builtin options table of ``op`` as an instance of the generated class ``table``."""
    tab = op.BuiltinOptions()
    if tab is None:
        return None
    cls = getattr(_schema(table), table)
    obj = cls()
    obj.Init(tab.Bytes, tab.Pos)
    return obj


def _opt(obj, field: str, default):
    return default if obj is None else getattr(obj, field)()


def decode_sparse(values: np.ndarray, shape: Sequence[int], traversal_order: Sequence[int],
                  block_map: Sequence[int], dims: Sequence[dict]) -> np.ndarray:
    """Densify a TFLite sparse tensor.

    ``dims[i]`` describes the i-th dimension in traversal order: {"format": DENSE,
    "dense_size": n} or {"format": SPARSE_CSR, "segments": array, "indices": array}. The
    traversal covers the original dims (blocked ones counted in blocks) followed by one
    dim per entry of ``block_map`` (the position inside a block of that original dim).
    ``values`` holds the stored elements in traversal order."""
    shape = [int(d) for d in shape]
    rank, nb = len(shape), len(block_map)
    order = [int(t) for t in traversal_order]
    if sorted(order) != list(range(rank + nb)) or len(dims) != rank + nb:
        raise _Malformed(f"sparsity: traversal order {order} does not cover {rank} dims + {nb} blocks")
    if any(not 0 <= int(b) < rank for b in block_map) or len(set(int(b) for b in block_map)) != nb:
        raise _Malformed(f"sparsity: block map {list(block_map)} is not a set of dims of rank {rank}")
    # expanded dim sizes: original dims (in blocks) then block sizes
    level_of = {d: i for i, d in enumerate(order)}
    block_size = []
    for j in range(nb):
        d = dims[level_of[rank + j]]
        if d["format"] != DENSE or int(d["dense_size"]) <= 0:
            raise _Malformed("sparsity: a block dimension must be dense with a positive size")
        block_size.append(int(d["dense_size"]))
    expanded = list(shape) + block_size
    for j, b in enumerate(block_map):
        if shape[int(b)] % block_size[j]:
            raise _Malformed(f"sparsity: dim {b} of size {shape[int(b)]} is not a multiple of block {block_size[j]}")
        expanded[int(b)] = shape[int(b)] // block_size[j]
    pos = np.zeros(1, np.int64)                       # position of each partial path in its level
    coords: List[np.ndarray] = []
    limit = max(1, int(np.prod(shape, dtype=np.int64)))
    for lvl, d in enumerate(dims):
        size = expanded[order[lvl]]
        if d["format"] == DENSE:
            n = int(d["dense_size"])
            if n != size:
                raise _Malformed(f"sparsity: dense level {lvl} has size {n}, expected {size}")
            if pos.size * n > limit:
                raise _Malformed("sparsity: metadata describes more elements than the tensor has")
            coords = [np.repeat(c, n) for c in coords]
            coords.append(np.tile(np.arange(n, dtype=np.int64), pos.size))
            pos = (np.repeat(pos, n) * n + coords[-1])
        elif d["format"] == SPARSE_CSR:
            seg = np.asarray(d["segments"], np.int64)
            idx = np.asarray(d["indices"], np.int64)
            if seg.size < int(pos.max(initial=-1)) + 2 or seg[0] != 0 or np.any(np.diff(seg) < 0) \
                    or seg[-1] > idx.size:
                raise _Malformed(f"sparsity: CSR segments of level {lvl} are inconsistent")
            if idx.size and (idx.min() < 0 or idx.max() >= size):
                raise _Malformed(f"sparsity: CSR index out of range at level {lvl}")
            starts, ends = seg[pos], seg[pos + 1]
            lens = ends - starts
            total = int(lens.sum())
            if total > limit:
                raise _Malformed("sparsity: metadata describes more elements than the tensor has")
            parent = np.repeat(np.arange(pos.size), lens)
            child = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens) + starts[parent]
            coords = [c[parent] for c in coords]
            coords.append(idx[child])
            pos = child
        else:
            raise _Malformed(f"sparsity: unknown dimension format {d['format']}")
    values = np.asarray(values).reshape(-1)
    if pos.size != values.size or (pos.size and (pos.min() < 0 or pos.max() >= values.size)):
        raise _Malformed(f"sparsity: metadata addresses {pos.size} values, buffer holds {values.size}")
    ex = [None] * (rank + nb)
    for lvl, c in enumerate(coords):
        ex[order[lvl]] = c
    blocks = [int(b) for b in block_map]
    full = []
    for a in range(rank):
        c = ex[a]
        if a in blocks:
            j = blocks.index(a)
            c = c * block_size[j] + ex[rank + j]
        full.append(c)
    out = np.zeros(shape, values.dtype)
    if values.size:
        out[tuple(full)] = values[pos]
    return out
