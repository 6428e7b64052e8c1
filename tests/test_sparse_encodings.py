"""Sparse encodings: round trips, size choice, the artifact form and its validation at load."""
import json
import os
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from edge_infer.artifact import load_artifact, save_artifact
from edge_infer.errors import ArtifactError
from edge_infer.ir import Graph, Node
from edge_infer.sparse.encodings import (SparseArray, candidates, encode, encode_bcsr, encode_bitmask,
                                         encode_csr, validate)


def sparse_matrix(rng, shape, density, dtype, block=None):
    if dtype == np.int8:
        w = rng.integers(-128, 128, shape).astype(np.int8)
        w[w == 0] = 1
    else:
        w = rng.standard_normal(shape).astype(np.float32)
    rows = shape[0]
    cols = int(np.prod(shape[1:]))
    m = w.reshape(rows, cols)
    if block and rows % block[0] == 0 and cols % block[1] == 0:
        keep = rng.random((rows // block[0], cols // block[1])) < density
        keep = np.repeat(np.repeat(keep, block[0], 0), block[1], 1)
    else:
        keep = rng.random((rows, cols)) < density
    m[~keep] = 0
    return m.reshape(shape)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 24), cols=st.integers(1, 700), density=st.sampled_from([0.0, 0.01, 0.1, 0.3, 0.7, 1.0]),
       dtype=st.sampled_from([np.float32, np.int8]), seed=st.integers(0, 2 ** 16),
       extra=st.sampled_from([(), (1, 1), (3, 1)]))
def test_every_encoding_round_trips(rows, cols, density, dtype, seed, extra):
    rng = np.random.default_rng(seed)
    shape = (rows, cols) + extra
    w = sparse_matrix(rng, shape, density, dtype)
    encs = [encode_bitmask(w), encode_csr(w, np.uint8), encode_csr(w, np.uint16)]
    for b in ((1, 4), (4, 1)):
        for it in (np.uint8, np.uint16):
            s = encode_bcsr(w, b, it)
            if s is not None:
                encs.append(s)
    for s in encs:
        assert validate(s) is None, (s, validate(s))
        d = s.todense()
        assert d.dtype == w.dtype and d.shape == w.shape
        np.testing.assert_array_equal(d, w)
        np.testing.assert_array_equal(np.asarray(s), w)
        assert s.nnz == np.count_nonzero(w)


def test_long_gaps_are_bridged_by_explicit_zeros():
    w = np.zeros((2, 2000), np.float32)
    w[0, 0], w[0, 1999], w[1, 700] = 1, 2, 3
    s = encode_csr(w, np.uint8)
    # row 0: col 0, then 1999 = 7 * 255 + 214: seven bridges; row 1: 700 = 2 * 255 + 190: two
    assert s.indices.size == 1 + 8 + 3
    assert np.count_nonzero(s.values) == 3 and s.indices.max() == 255
    np.testing.assert_array_equal(s.todense(), w)
    s16 = encode_csr(w, np.uint16)
    assert s16.indices.size == 3


def test_encode_picks_the_smallest_and_keeps_dense_tensors_dense():
    rng = np.random.default_rng(1)
    dense = rng.standard_normal((32, 64)).astype(np.float32)
    assert encode(dense) is dense
    assert encode(np.ones((4, 4), np.float64)).dtype == np.float64
    w = sparse_matrix(rng, (64, 256), 0.25, np.float32)
    s = encode(w)
    assert isinstance(s, SparseArray)
    assert s.nbytes == min(c.nbytes for c in candidates(w))
    # 75% sparse fp32: >= 3.5x smaller than dense; int8 values: >= 10x smaller than dense fp32
    assert w.nbytes / s.nbytes >= 3.5
    q = sparse_matrix(rng, (64, 256), 0.25, np.int8)
    assert w.nbytes / encode(q).nbytes >= 10
    blocky = sparse_matrix(rng, (64, 256), 0.2, np.float32, block=(1, 4))
    assert encode(blocky, "block1x4").encoding == "bcsr"


def test_sparse_array_behaves_like_its_dense_value():
    rng = np.random.default_rng(2)
    w = sparse_matrix(rng, (8, 6, 1, 1), 0.3, np.float32)
    s = encode_csr(w)
    assert (s.shape, s.dtype, s.ndim, s.size) == (w.shape, w.dtype, 4, w.size)
    np.testing.assert_array_equal(s.reshape(8, 6), w.reshape(8, 6))
    np.testing.assert_array_equal(s.astype(np.float64), w.astype(np.float64))
    np.testing.assert_array_equal(s[1], w[1])
    np.testing.assert_array_equal(np.transpose(s), w.T)
    assert s.nbytes < w.nbytes


# -- artifact ----------------------------------------------------------------------------------

def _graph(weights):
    g = Graph("sparse")
    for i, w in enumerate(weights):
        g.add_tensor(f"x{i}", "float32", (1, w.shape[1]))
        g.add_tensor(f"w{i}", w.dtype.name, w.shape, data=w)
        g.add_tensor(f"y{i}", "float32", (1, w.shape[0]))
        g.nodes.append(Node("Gemm", [f"x{i}", f"w{i}"], [f"y{i}"], {"transB": 1}, f"gemm{i}"))
        g.inputs.append(f"x{i}")
        g.outputs.append(f"y{i}")
    return g


@pytest.fixture
def sparse_file(tmp_path):
    rng = np.random.default_rng(3)
    ws = [sparse_matrix(rng, (16, 40), 0.2, np.float32), sparse_matrix(rng, (8, 16), 0.3, np.float32,
                                                                        block=(4, 1))]
    encs = [encode_csr(ws[0], np.uint8), encode_bcsr(ws[1], (4, 1), np.uint16), encode_bitmask(ws[0])]
    g = _graph([ws[0], ws[1], ws[0]])
    for i, s in enumerate(encs):
        g.tensors[f"w{i}"].data = s
    path = str(tmp_path / "s.eim")
    save_artifact(path, g)
    return path, [ws[0], ws[1], ws[0]], encs


def test_sparse_weights_load_as_encoded_views(sparse_file):
    path, dense, encs = sparse_file
    g, _ = load_artifact(path)
    for i, (w, s) in enumerate(zip(dense, encs)):
        t = g.tensors[f"w{i}"].data
        assert isinstance(t, SparseArray) and t.encoding == s.encoding and t.block == s.block
        for name, part in t.parts().items():
            assert not part.flags.writeable and part.base is not None      # a view on the map
            np.testing.assert_array_equal(part, s.parts()[name])
        np.testing.assert_array_equal(t.todense(), w)


def _rewrite_graph(path, edit):
    """Apply ``edit`` to the GRPH JSON of an artifact and fix every checksum (a well-formed
    file whose sparse entry is wrong: only the sparse validation can refuse it)."""
    from edge_infer.artifact import _ENTRY, _HEADER, ALIGN, HEADER_SIZE, ENTRY_SIZE
    raw = bytearray(open(path, "rb").read())
    head = _HEADER.unpack_from(raw, 0)
    count = head[5]
    entries = [list(_ENTRY.unpack_from(raw, HEADER_SIZE + k * ENTRY_SIZE)) for k in range(count)]
    secs = {e[0]: e for e in entries}
    g = secs[b"GRPH"]
    zipped = g[1] & 2                       # the ZLIB section flag (format 1.2)
    text = bytes(raw[g[2]:g[2] + g[3]])
    doc = json.loads(zlib.decompress(text) if zipped else text)
    edit(doc)
    new = json.dumps(doc, separators=(",", ":")).encode()
    new = zlib.compress(new) if zipped else new
    # rebuild: same layout, GRPH replaced (META first, GRPH, WGHT)
    meta, wght = secs[b"META"], secs[b"WGHT"]
    meta_b = bytes(raw[meta[2]:meta[2] + meta[3]])
    w_b = bytes(raw[wght[2]:wght[2] + wght[3]])
    al = lambda n: (n + ALIGN - 1) // ALIGN * ALIGN
    moff = al(HEADER_SIZE + 3 * ENTRY_SIZE)
    goff = al(moff + len(meta_b))
    woff = al(goff + len(new))
    size = woff + len(w_b)
    out = bytearray(size)
    out[moff:moff + len(meta_b)] = meta_b
    out[goff:goff + len(new)] = new
    out[woff:woff + len(w_b)] = w_b
    table = b"".join(_ENTRY.pack(k, secs[k][1], o, n, zlib.crc32(b), 0) for k, o, n, b in
                     ((b"META", moff, len(meta_b), meta_b), (b"GRPH", goff, len(new), new),
                      (b"WGHT", woff, len(w_b), w_b)))
    body = _HEADER.pack(head[0], head[1], head[2], head[3], size, 3, zlib.crc32(table), bytes(28), 0)[:HEADER_SIZE - 4]
    out[:HEADER_SIZE] = body + struct.pack("<I", zlib.crc32(body))
    out[HEADER_SIZE:HEADER_SIZE + 3 * ENTRY_SIZE] = table
    open(path, "wb").write(bytes(out))


def _tensor(doc, name):
    """The record [dtype code, shape, quant, data] of a tensor in the compact graph encoding."""
    return doc["tensors"][doc["tensor_names"].index(name)]


def _entry(doc, name):
    return _tensor(doc, name)[3]


@pytest.mark.parametrize("edit, message", [
    (lambda d: _entry(d, "w0")["parts"]["indptr"].__setitem__(1, 8), "indptr must be"),
    (lambda d: _entry(d, "w0")["parts"]["values"].__setitem__(1, 4), "values must have shape"),
    (lambda d: _entry(d, "w0")["parts"]["indices"].__setitem__(0, 10 ** 9), "outside"),
    (lambda d: _entry(d, "w0")["parts"]["indices"].__setitem__(0, 1), "aligned"),
    (lambda d: _entry(d, "w0").__setitem__("index_dtype", "int64"), "index_dtype"),
    (lambda d: _entry(d, "w1").__setitem__("block", [2, 2]), "block"),
    (lambda d: _entry(d, "w0").__setitem__("encoding", "coo"), "unknown weight encoding"),
    (lambda d: _entry(d, "w2")["parts"].pop("mask"), "missing"),
    (lambda d: _tensor(d, "w0").__setitem__(1, [16, 2]), "run past"),
    (lambda d: _tensor(d, "w2").__setitem__(1, [16, 41]), "mask"),
])
def test_corrupt_sparse_entries_are_refused(sparse_file, edit, message):
    path = sparse_file[0]
    _rewrite_graph(path, edit)
    with pytest.raises(ArtifactError, match=message):
        load_artifact(path)


def test_corrupt_sparse_structure_in_the_weights_is_refused(tmp_path):
    """Bytes that pass the CRC (rewritten consistently) but break the structure: deltas
    overrunning the row, a non-monotone indptr."""
    rng = np.random.default_rng(4)
    w = sparse_matrix(rng, (4, 30), 0.3, np.float32)
    for breaker, message in ((lambda s: s.indices.__setitem__(slice(None), 200), "run past"),
                             (lambda s: s.indptr.__setitem__(2, s.indptr[3] + 1), "monoton")):
        s = encode_csr(w)
        breaker(s)
        g = _graph([w])
        g.tensors["w0"].data = s
        p = str(tmp_path / "bad.eim")
        save_artifact(p, g)
        with pytest.raises(ArtifactError, match=message):
            load_artifact(p)


def test_dense_files_still_load(tmp_path):
    w = np.ones((4, 4), np.float32)
    p = str(tmp_path / "d.eim")
    save_artifact(p, _graph([w]))
    g, _ = load_artifact(p)
    assert isinstance(g.tensors["w0"].data, np.ndarray)
    assert os.path.getsize(p) > 0
