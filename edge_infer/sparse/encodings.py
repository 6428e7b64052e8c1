"""Sparse weight encodings: a constant's value kept encoded in memory.

A weight is seen as a 2-D matrix: rows = ``shape[0]`` (output channels), cols =
``prod(shape[1:])``. Three encodings, for float32 and int8 values:

* ``bitmask``: one bit per element (``np.packbits``, little-endian bit order, row-major),
  then the non-zero values in row-major order;
* ``csr``: ``indptr`` (int32, rows + 1), ``indices`` (uint8 or uint16) and ``values`` (nnz);
* ``bcsr``: block-CSR with blocks (1, 4) or (4, 1): ``indptr`` over block rows, ``indices``
  over block columns, ``values`` (nblocks, br, bc).

Column indices are DELTA-encoded within a row: the first entry is relative to column 0,
each next one relative to the previous entry, so uint8 holds most gaps. A gap larger than
the index type's maximum is bridged by explicit zero-valued entries, each advancing by the
maximum. Every delta after a row's first is >= 1 (columns strictly increase).

``encode(dense)`` picks, per tensor, whichever of dense and these is smallest.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

ENCODINGS = ("bitmask", "csr", "bcsr")
BLOCKS = ((1, 4), (4, 1))
INDEX_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16))
VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.int8))


class SparseArray:
    """An encoded constant; ``todense()`` / ``np.asarray`` give the dense value on demand."""

    __array_priority__ = 1.0

    def __init__(self, encoding: str, shape, dtype, *, indptr=None, indices=None, values=None,
                 block: Optional[Tuple[int, int]] = None, mask=None):
        self.encoding = encoding
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.indptr, self.indices, self.values = indptr, indices, values
        self.block = None if block is None else (int(block[0]), int(block[1]))
        self.mask = mask

    # -- array-like facts -------------------------------------------------------------
    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def cols(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes of the encoded form (what it occupies in memory and in the file)."""
        return sum(int(a.nbytes) for a in (self.indptr, self.indices, self.values, self.mask) if a is not None)

    @property
    def dense_nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def nnz(self) -> int:
        """Non-zero values (stored explicit zeros excluded)."""
        return int(np.count_nonzero(self.values))

    @property
    def density(self) -> float:
        return self.nnz / max(self.size, 1)

    def parts(self) -> dict:
        """The raw arrays of the encoding, by name (as stored in an artifact)."""
        names = ("mask", "values") if self.encoding == "bitmask" else ("indptr", "indices", "values")
        return {k: getattr(self, k) for k in names}

    def __repr__(self) -> str:
        blk = f" {self.block[0]}x{self.block[1]}" if self.block else ""
        idx = f" {self.indices.dtype}" if self.indices is not None else ""
        return (f"SparseArray({self.encoding}{blk}{idx}, shape={self.shape}, dtype={self.dtype}, "
                f"density={self.density:.3f}, {self.nbytes} of {self.dense_nbytes} bytes)")

    # -- dense on demand ----------------------------------------------------------------
    def rows_cols(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, col, value) of every stored element (block elements expanded), row-major."""
        if self.encoding == "bitmask":
            bits = np.unpackbits(self.mask, count=self.size, bitorder="little")
            flat = np.flatnonzero(bits)
            return flat // max(self.cols, 1), flat % max(self.cols, 1), self.values
        counts = np.diff(self.indptr.astype(np.int64))
        brow = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        bcol = segment_cumsum(self.indices, self.indptr)
        if self.encoding == "csr":
            return brow, bcol, self.values
        br, bc = self.block
        full = (brow.size, br, bc)
        r = np.broadcast_to(brow[:, None, None] * br + np.arange(br)[None, :, None], full)
        c = np.broadcast_to(bcol[:, None, None] * bc + np.arange(bc)[None, None, :], full)
        return r.reshape(-1), c.reshape(-1), self.values.reshape(-1)

    def todense(self) -> np.ndarray:
        out = np.zeros((self.rows, self.cols), self.dtype)
        r, c, v = self.rows_cols()
        out[r, c] = v
        return out.reshape(self.shape)

    def __array__(self, dtype=None, copy=None):
        d = self.todense()
        return d if dtype is None else d.astype(dtype)

    def __getattr__(self, name):
        # generic code asking for an ndarray attribute (astype, reshape, T, ...) gets the dense
        # value's; the kernels that matter read the encoded arrays and never come here
        if name.startswith("__") or name in ("encoding", "shape", "dtype", "indptr", "indices", "values",
                                             "block", "mask"):
            raise AttributeError(name)
        if hasattr(np.ndarray, name):
            return getattr(self.todense(), name)
        raise AttributeError(f"SparseArray has no attribute {name!r}")

    def __getitem__(self, key):
        return self.todense()[key]

    def __len__(self) -> int:
        return self.shape[0]


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def popcount(mask: np.ndarray) -> int:
    """Set bits in a uint8 array (in 1 MB chunks: no 8x unpacked temporary)."""
    return int(sum(int(_POPCOUNT[mask[i:i + (1 << 20)]].sum(dtype=np.int64)) for i in range(0, mask.size, 1 << 20)))


def segment_cumsum(deltas: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Absolute (block) column of every entry: the per-row cumulative sum of the deltas."""
    cum = np.cumsum(deltas, dtype=np.int64)
    if cum.size == 0:
        return cum
    starts = indptr[:-1].astype(np.int64)
    counts = np.diff(indptr.astype(np.int64))
    base = np.where(starts > 0, cum[np.maximum(starts - 1, 0)], 0)
    return cum - np.repeat(base, counts)


def _delta_encode(rows: int, brow: np.ndarray, bcol: np.ndarray, idx_dtype: np.dtype):
    """CSR structure with delta indices for entries (brow, bcol) sorted row-major.

    Returns (indptr int32, deltas idx_dtype, position of each real entry in the output,
    output length): bridges are the other positions (explicit zeros)."""
    mx = int(np.iinfo(idx_dtype).max)
    nnz = brow.size
    prev = np.zeros(nnz, np.int64)
    if nnz:
        same = np.zeros(nnz, bool)
        same[1:] = brow[1:] == brow[:-1]
        prev[1:] = np.where(same[1:], bcol[:-1], 0)
    d = bcol - prev
    bridges = np.maximum(0, -(-d // mx) - 1)
    counts = bridges + 1
    pos = np.cumsum(counts) - 1
    total = int(counts.sum())
    deltas = np.full(total, mx, np.int64)
    deltas[pos] = d - bridges * mx
    row_len = np.bincount(brow, weights=counts, minlength=rows).astype(np.int64) if nnz else np.zeros(rows, np.int64)
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(row_len, out=indptr[1:])
    if indptr[-1] > np.iinfo(np.int32).max:
        raise ValueError("too many entries for int32 indptr")
    return indptr.astype(np.int32), deltas.astype(idx_dtype), pos, total


def encode_csr(dense: np.ndarray, idx_dtype=np.uint8) -> SparseArray:
    m = _matrix(dense)
    r, c = np.nonzero(m)
    indptr, idx, pos, total = _delta_encode(m.shape[0], r.astype(np.int64), c.astype(np.int64),
                                            np.dtype(idx_dtype))
    vals = np.zeros(total, dense.dtype)
    vals[pos] = m[r, c]
    return SparseArray("csr", dense.shape, dense.dtype, indptr=indptr, indices=idx, values=vals)


def encode_bcsr(dense: np.ndarray, block=(1, 4), idx_dtype=np.uint8) -> Optional[SparseArray]:
    """Block-CSR; None when the matrix does not tile into ``block``."""
    m = _matrix(dense)
    br, bc = block
    rows, cols = m.shape
    if rows % br or cols % bc:
        return None
    tiles = m.reshape(rows // br, br, cols // bc, bc).transpose(0, 2, 1, 3)     # (RB, CB, br, bc)
    nz = np.any(tiles != 0, axis=(2, 3))
    r, c = np.nonzero(nz)
    indptr, idx, pos, total = _delta_encode(rows // br, r.astype(np.int64), c.astype(np.int64),
                                            np.dtype(idx_dtype))
    vals = np.zeros((total, br, bc), dense.dtype)
    vals[pos] = tiles[r, c]
    return SparseArray("bcsr", dense.shape, dense.dtype, indptr=indptr, indices=idx, values=vals, block=block)


def encode_bitmask(dense: np.ndarray) -> SparseArray:
    flat = np.ascontiguousarray(dense).reshape(-1)
    nzm = flat != 0
    return SparseArray("bitmask", dense.shape, dense.dtype, mask=np.packbits(nzm, bitorder="little"),
                       values=flat[nzm].copy())


def _matrix(dense: np.ndarray) -> np.ndarray:
    dense = np.asarray(dense)
    if dense.dtype not in VALUE_DTYPES:
        raise ValueError(f"sparse encodings hold float32 or int8 values, not {dense.dtype}")
    rows = dense.shape[0] if dense.ndim else 1
    return np.ascontiguousarray(dense).reshape(rows, -1)


def candidates(dense: np.ndarray, pattern: Optional[str] = None):
    """Every sparse encoding of ``dense`` worth comparing (csr and bcsr with both index types)."""
    out = [encode_bitmask(dense)]
    for it in INDEX_DTYPES:
        out.append(encode_csr(dense, it))
        blocks = BLOCKS if pattern in (None, "unstructured", "2:4") else \
            [(1, 4)] if pattern == "block1x4" else [(4, 1)]
        for b in blocks:
            s = encode_bcsr(dense, b, it)
            if s is not None:
                out.append(s)
    return out


def encode(dense: np.ndarray, pattern: Optional[str] = None):
    """``dense`` as whichever is smallest: itself or one of its sparse encodings.

    Only float32 and int8 tensors of rank >= 2 with at least one zero are encoded; anything
    else comes back unchanged. ``pattern`` (the pruning pattern) narrows the block shapes tried."""
    dense = np.asarray(dense)
    if isinstance(dense, SparseArray) or dense.dtype not in VALUE_DTYPES or dense.ndim < 2 or dense.size == 0:
        return dense
    if np.count_nonzero(dense) == dense.size:
        return dense
    best = min(candidates(dense, pattern), key=lambda s: s.nbytes)
    return best if best.nbytes < dense.nbytes else dense


def validate(s: SparseArray) -> Optional[str]:
    """What is wrong with the structure of ``s`` (None when it is consistent)."""
    rows, cols = s.rows, s.cols
    if s.dtype not in VALUE_DTYPES:
        return f"values must be float32 or int8, not {s.dtype}"
    if s.encoding == "bitmask":
        nbits = rows * cols
        if s.mask is None or s.mask.dtype != np.uint8 or s.mask.size != (nbits + 7) // 8:
            return f"mask must be {(nbits + 7) // 8} bytes"
        if nbits % 8 and s.mask[-1] >> (nbits % 8):
            return "mask has bits set past the last element"
        nnz = popcount(s.mask)
        if s.values is None or s.values.dtype != s.dtype or s.values.shape != (nnz,):
            return f"mask marks {nnz} values, values hold {None if s.values is None else s.values.shape}"
        return None
    if s.encoding not in ("csr", "bcsr"):
        return f"unknown encoding {s.encoding!r}"
    br, bc = s.block if s.encoding == "bcsr" else (1, 1)
    if s.encoding == "bcsr" and s.block not in BLOCKS:
        return f"block {s.block} is not one of {BLOCKS}"
    if rows % br or cols % bc:
        return f"{rows}x{cols} does not tile into {br}x{bc} blocks"
    rb, cb = rows // br, cols // bc
    ip = s.indptr
    if ip is None or ip.dtype != np.int32 or ip.shape != (rb + 1,):
        return f"indptr must be {rb + 1} int32 values"
    if s.indices is None or s.indices.dtype not in INDEX_DTYPES or s.indices.ndim != 1:
        return "indices must be a 1-D uint8 or uint16 array"
    n = s.indices.size
    if ip[0] != 0 or int(ip[-1]) != n or np.any(np.diff(ip.astype(np.int64)) < 0):
        return f"indptr must rise monotonically from 0 to {n} (the number of indices)"
    want = (n,) if s.encoding == "csr" else (n, br, bc)
    if s.values is None or s.values.dtype != s.dtype or s.values.shape != want:
        return f"values must have shape {want} and dtype {s.dtype}"
    if n:
        col = segment_cumsum(s.indices, ip)
        if int(col.max()) >= cb:
            return f"column indices run past {cb} (block) columns"
        first = np.zeros(n, bool)
        starts = ip[:-1][np.diff(ip) > 0]
        first[starts] = True
        if np.any((s.indices == 0) & ~first):
            return "a zero delta after a row's first entry (columns must strictly increase)"
    return None
