"""Tests of the .eim artifact reader and writer (edge_infer/artifact.py, artifact_compact.py,
docs/format.md). ``tests/data/artifact_v1_1.eim`` is ``make_graph()`` + ``META`` as the format 1.1
writer (before the compact graph encoding) wrote it: old files must keep loading."""
from __future__ import annotations

import base64
import gc
import json
import math
import mmap
import os
import random
import struct
import tracemalloc
import zlib

import numpy as np
import pytest

from edge_infer.artifact import (FORMAT_VERSION, load_artifact, read_info, read_meta,
                                 save_artifact)
from edge_infer.errors import ArtifactError, GraphError
from edge_infer.ir.graph import DTYPES, Graph

# The container layout, written out here from docs/format.md rather than
# imported, so that the tests also pin the spec.
MAGIC = b"\x89EIM\r\n\x1a\n"
HEADER = struct.Struct("<8sHHIQII28sI")
ENTRY = struct.Struct("<4sIQQII")
ZLIB = 2                # section flag: compressed payload
COMPACT = 1             # header flag: compact graph encoding
OLD_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "artifact_v1_1.eim")

META = {
    "provenance": {"source_sha256": "ab" * 32, "converter": "edge_infer 0.1.0",
                   "options": {"fold": True, "quantize": None}},
    "target": {"profile": "cortex-a53", "threads": 4},
    "passes": [{"name": "fold_constants", "removed": 3}, {"name": "fuse_bn", "fused": 1}],
    "unicode": "température ✓",
}


def make_graph() -> Graph:
    """A small graph touching every dtype, 0-d and empty constants, symbols and quant."""
    g = Graph("tiny-net")
    g.add_input("x", "float32", ("batch", 4))
    g.add_const("w", np.arange(8, dtype=np.float32).reshape(4, 2))
    g.add_const("big", np.linspace(-1, 1, 40, dtype=np.float32).reshape(4, 10))  # too big to inline
    g.add_const("scalar", np.float64(3.25))
    g.add_const("empty", np.zeros((0, 3), np.uint8))
    g.add_const("mask", np.array([[True, False, True]]))
    g.add_const("idx", np.array([0, 2 ** 40, -1], dtype=np.int64))
    g.add_const("half", np.array([1.5, -2.0, 65504.0], dtype=np.float16))
    g.add_const("q", np.array([-128, 0, 127], dtype=np.int8))
    g.tensors["q"].quant = {"scale": [0.5], "zero_point": [0], "axis": None}
    rest = []
    for dt in DTYPES:
        name = f"c_{dt}"
        g.add_const(name, np.arange(5).astype(dt))
        rest.append(name)
    g.add_node("MatMul", ["x", "w"], ["y"], name="mm")
    g.tensors["y"].shape = ("batch", 2)
    g.add_node("Gemm", ["y", "w", ""], ["z"], name="gemm", alpha=1.0, beta=0.5, transA=0, transB=1,
               perm=[1, 0], scales=[0.25, float("inf")], mode="nearest", names=["a", "b"])
    g.add_node("Custom", ["z", "big", "scalar", "empty", "mask", "idx", "half", "q"] + rest, ["out"],
               name="custom")
    g.tensors["out"].quant = {"scale": [0.1, 0.2], "zero_point": [3, 4], "axis": 1}
    g.outputs = ["out", "y"]
    g.metadata = {"opset": 17, "producer": "pytest", "nested": {"a": [1, 2, {"b": None}]}}
    return g


@pytest.fixture
def small(tmp_path):
    """Path of a saved small artifact (a few KB)."""
    path = tmp_path / "small.eim"
    save_artifact(path, make_graph(), META)
    return path


@pytest.fixture
def old(tmp_path):
    """Path of a copy of the format 1.1 artifact of make_graph()."""
    path = tmp_path / "old.eim"
    with open(OLD_FILE, "rb") as f:
        path.write_bytes(f.read())
    return path


# -- helpers to read and rebuild files by the spec --------------------------------------

def align(n: int) -> int:
    return (n + 63) // 64 * 64


def split(raw: bytes):
    """Return (version, header flags, [[kind, flags, payload], ...]) of a well-formed file."""
    magic, major, minor, flags, size, count, _, _, _ = HEADER.unpack_from(raw, 0)
    assert magic == MAGIC and size == len(raw)
    sections = []
    for k in range(count):
        kind, sflags, off, length, _, _ = ENTRY.unpack_from(raw, 64 + 32 * k)
        sections.append([kind, sflags, raw[off:off + length]])
    return (major, minor), flags, sections


def build(sections, version=FORMAT_VERSION, flags=COMPACT, reserved=bytes(28), pad=b"\0",
          trailing=b"", offsets=None) -> bytes:
    """Lay out sections with correct CRCs everywhere: only what is asked for is wrong."""
    pos = 64 + 32 * len(sections)
    body, table = b"", b""
    for k, (kind, sflags, payload) in enumerate(sections):
        off = align(pos)
        body += pad * (off - pos) + payload
        if offsets and k in offsets:
            off = offsets[k]
        table += ENTRY.pack(kind, sflags, off, len(payload), zlib.crc32(payload), 0)
        pos = align(pos) + len(payload)
    size = pos + len(trailing)
    head = HEADER.pack(MAGIC, version[0], version[1], flags, size, len(sections),
                       zlib.crc32(table), reserved, 0)[:60]
    return head + struct.pack("<I", zlib.crc32(head)) + table + body + trailing


def section_json(s):
    """The JSON document of a META or GRPH section [kind, flags, payload] (inflated if compressed)."""
    return json.loads(zlib.decompress(s[2]) if s[1] & ZLIB else s[2])


def _edit(s, fn, raw):
    """Change a META or GRPH section's document (``fn``) or its whole (inflated) text (``raw``)."""
    if fn is not None:
        doc = section_json(s)
        fn(doc)
        raw = json.dumps(doc).encode()
    if raw is not None:
        s[2] = zlib.compress(raw) if s[1] & ZLIB else raw


def rewrite(path, graph=None, meta=None, weights=None, raw_graph=None, raw_meta=None, **kw):
    """Rebuild the file at path with its graph/meta JSON or weights changed; valid CRCs."""
    version, flags, sections = split(path.read_bytes())
    for s in sections:
        if s[0] == b"GRPH":
            _edit(s, graph, raw_graph)
        elif s[0] == b"META":
            _edit(s, meta, raw_meta)
        elif s[0] == b"WGHT" and weights is not None:
            s[2] = weights(bytearray(s[2]))
    kw.setdefault("version", version)
    kw.setdefault("flags", flags)
    path.write_bytes(build(sections, **kw))
    return path


def refused(path, fn=load_artifact) -> str:
    """Assert that loading path raises ArtifactError (and nothing else); return the message."""
    with pytest.raises(ArtifactError) as info:
        fn(path)
    return str(info.value)


def tensor(doc, name):
    """A tensor object of a 1.1 graph document."""
    return next(t for t in doc["tensors"] if t["name"] == name)


def node(doc, name):
    """A node object of a 1.1 graph document."""
    return next(n for n in doc["nodes"] if n["name"] == name)


def ct(doc, name):
    """A tensor record [dtype code, shape, quant?, data?] of a compact graph document."""
    return doc["tensors"][doc["tensor_names"].index(name)]


def cn(doc, name):
    """A node record [op, inputs, outputs, attrs?] of a compact graph document."""
    return doc["nodes"][doc["node_names"].index(name)]


# -- round trip -------------------------------------------------------------------------

def test_round_trip(small):
    assert_same_as_make_graph(*load_artifact(small))


def test_old_format_still_loads(old, small):
    # a 1.1 file (the JSON graph with names in place, written by the 1.1 writer) loads the same graph
    assert read_info(old).version == (1, 1) and split(old.read_bytes())[1] == 0
    assert_same_as_make_graph(*load_artifact(old))
    assert read_meta(old) == META
    assert os.path.getsize(small) < os.path.getsize(old)


def test_bundled_microbench_artifacts_load():
    """The microbenchmark's bundled artifacts (rebuilt in format 1.2 when the converter began writing
    the int8 nodes' requantization mode; the 1.1 reader path is covered above) load as written."""
    from edge_infer.artifact_container import FORMAT_VERSION
    from edge_infer.data.microbench.make_microbench import GRAPHS, path_of
    for key in GRAPHS:
        g, meta = load_artifact(path_of(key))
        assert read_info(path_of(key)).version == FORMAT_VERSION and meta == {"microbench": key} and g.nodes


def assert_same_as_make_graph(g, meta):
    g0 = make_graph()
    assert meta == META
    assert g.name == g0.name and g.metadata == g0.metadata
    assert g.inputs == g0.inputs and g.outputs == g0.outputs
    assert list(g.tensors) == list(g0.tensors)
    for name, t0 in g0.tensors.items():
        t = g.tensors[name]
        assert (t.dtype, t.shape, t.quant) == (t0.dtype, t0.shape, t0.quant), name
        if t0.data is None:
            assert t.data is None
        else:
            assert t.data.dtype == t0.data.dtype and t.data.shape == t0.data.shape
            np.testing.assert_array_equal(t.data, t0.data)
    assert [(n.op, n.name, n.inputs, n.outputs, n.attrs) for n in g.nodes] == \
           [(n.op, n.name, n.inputs, n.outputs, n.attrs) for n in g0.nodes]
    assert g.tensors["x"].shape == ("batch", 4) and g.tensors["out"].shape is None
    assert g.tensors["scalar"].data.shape == () and g.tensors["empty"].data.shape == (0, 3)
    assert math.isinf(g.nodes[1].attrs["scales"][1])


def test_save_returns_size_and_is_aligned(small, tmp_path):
    n = save_artifact(tmp_path / "again.eim", make_graph(), META)
    assert n == os.path.getsize(small) == os.path.getsize(tmp_path / "again.eim")
    assert (tmp_path / "again.eim").read_bytes() == small.read_bytes()  # deterministic
    g, _ = load_artifact(small)
    for t in g.constants().values():   # inline ones too (an empty one has no address to align)
        assert t.data.ctypes.data % 64 == 0 or not t.data.size, t.name
    assert sorted(os.listdir(tmp_path)) == ["again.eim", "small.eim"]  # no temp files left


def test_meta_defaults_to_empty_and_numpy_values_become_json(tmp_path):
    g = make_graph()
    g.nodes[1].attrs["alpha"] = np.float32(0.5)
    g.nodes[1].attrs["perm"] = np.array([1, 0])
    path = tmp_path / "a.eim"
    save_artifact(path, g)
    g2, meta = load_artifact(path)
    assert meta == {}
    assert g2.nodes[1].attrs["alpha"] == 0.5 and g2.nodes[1].attrs["perm"] == [1, 0]


def test_byte_order_and_layout_of_input_arrays_do_not_matter(tmp_path):
    g = Graph("g")
    big_endian = np.arange(6, dtype=">i4").reshape(2, 3)
    g.add_const("be", big_endian)
    g.add_const("t", np.arange(6, dtype=np.float32).reshape(2, 3).T)  # not C-contiguous
    g.outputs = ["be", "t"]
    path = tmp_path / "a.eim"
    save_artifact(path, g)
    g2, _ = load_artifact(path)
    np.testing.assert_array_equal(g2.tensors["be"].data, big_endian)
    np.testing.assert_array_equal(g2.tensors["t"].data, np.arange(6, dtype=np.float32).reshape(2, 3).T)


def test_shared_array_is_stored_once(tmp_path):
    g = Graph("g")
    w = np.ones(1000, np.float32)
    g.add_const("a", w)
    g.add_const("b", w)
    g.outputs = ["a", "b"]
    n = save_artifact(tmp_path / "a.eim", g)
    assert n < 4000 + 1024
    g2, _ = load_artifact(tmp_path / "a.eim")
    np.testing.assert_array_equal(g2.tensors["b"].data, w)


def test_save_refuses_bad_input_and_leaves_nothing(tmp_path):
    path = tmp_path / "a.eim"
    with pytest.raises(ArtifactError, match="meta"):
        save_artifact(path, make_graph(), {"x": object()})
    with pytest.raises(ArtifactError):
        save_artifact(path, make_graph(), ["not", "a", "dict"])
    g = make_graph()
    g.add_node("Relu", ["nowhere"], ["r"])
    with pytest.raises(GraphError):
        save_artifact(path, g)
    g = make_graph()
    g.tensors["y"].shape = (-1, 2)  # the loader would refuse it, so the writer does
    with pytest.raises(GraphError, match="dimension"):
        save_artifact(path, g)
    g = make_graph()
    g.metadata["deep"] = _nest(100)
    with pytest.raises(ArtifactError, match="nested"):
        save_artifact(path, g)
    assert os.listdir(tmp_path) == []


def test_save_replaces_a_loaded_artifact(small):
    g, _ = load_artifact(small)
    w = g.tensors["w"].data.copy()
    g2 = make_graph()
    g2.tensors["w"].data = w + 1
    save_artifact(small, g2)
    np.testing.assert_array_equal(g.tensors["w"].data, w)  # the old map is untouched
    np.testing.assert_array_equal(load_artifact(small)[0].tensors["w"].data, w + 1)


def test_read_meta_and_info_skip_graph_and_weights(small):
    info = read_info(small)
    assert info.version == FORMAT_VERSION and info.file_size == os.path.getsize(small)
    assert [s.kind for s in info.sections] == [b"META", b"GRPH", b"WGHT"]
    assert info.meta == META == read_meta(small)
    # a corrupt weights section does not bother read_meta, but load refuses it
    raw = bytearray(small.read_bytes())
    raw[-1] ^= 0x10
    small.write_bytes(bytes(raw))
    assert read_meta(small) == META
    assert "WGHT" in refused(small)


# -- zero copy -----------------------------------------------------------------------------

def backing_object(arr: np.ndarray):
    base = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def test_constants_are_read_only_views_on_the_map(small, old):
    from edge_infer.artifact_compact import INLINE_MAX
    for path in (small, old):
        g, _ = load_artifact(path)
        for t in g.constants().values():
            assert not t.data.flags.writeable, t.name
            # the compact encoding keeps constants up to INLINE_MAX bytes in the graph
            mapped = isinstance(backing_object(t.data), mmap.mmap)
            assert mapped == (t.data.nbytes > INLINE_MAX or path == old), (path, t.name)
    with pytest.raises(ValueError):
        g.tensors["w"].data[0, 0] = 1.0


def test_map_outlives_graph_while_arrays_live(small):
    g, _ = load_artifact(small)
    w = g.tensors["w"].data
    del g
    gc.collect()
    np.testing.assert_array_equal(w, np.arange(8, dtype=np.float32).reshape(4, 2))


def test_large_artifact_is_not_copied(tmp_path):
    g = Graph("big")
    g.add_input("x", "float32", (1,))
    n = 50 * 2 ** 20 // 4
    g.add_const("w", np.arange(n, dtype=np.float32))
    g.add_const("v", np.full(1000, 7, np.int16))
    g.add_node("Add", ["x", "w"], ["y"])
    g.outputs = ["y"]
    path = tmp_path / "big.eim"
    save_artifact(path, g)
    tracemalloc.start()
    try:
        g2, _ = load_artifact(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2 ** 20, f"load allocated {peak} bytes for a 50 MB artifact"
    w = g2.tensors["w"].data
    assert isinstance(backing_object(w), mmap.mmap) and not w.flags.writeable
    assert w[0] == 0 and w[-1] == n - 1 and g2.tensors["v"].data[3] == 7


# -- corruption --------------------------------------------------------------------------

def test_every_truncation_is_refused(small):
    raw = small.read_bytes()
    assert 1000 < len(raw) < 8192
    cut = small.with_name("cut.eim")
    for n in range(len(raw)):
        cut.write_bytes(raw[:n])
        refused(cut)
        refused(cut, read_meta)


def test_trailing_bytes_are_refused(small):
    small.write_bytes(small.read_bytes() + b"\0")
    assert "header says" in refused(small)


def test_bit_flips_are_refused(small):
    raw = small.read_bytes()
    rng = random.Random(1234)
    # every header and table byte, then a sample over the whole file
    spots = [(i, rng.randrange(8)) for i in range(64 + 3 * 32)]
    spots += [(rng.randrange(len(raw)), rng.randrange(8)) for _ in range(300)]
    bad = small.with_name("flip.eim")
    for i, bit in spots:
        flipped = bytearray(raw)
        flipped[i] ^= 1 << bit
        bad.write_bytes(bytes(flipped))
        refused(bad)


def test_threaded_weights_check(small, monkeypatch):
    # big WGHT sections are checksummed in a thread while the graph is parsed
    import edge_infer.artifact_container as container
    monkeypatch.setattr(container, "_THREADED_CRC_MIN", 0)
    g, _ = load_artifact(small)
    np.testing.assert_array_equal(g.tensors["w"].data, make_graph().tensors["w"].data)
    raw = bytearray(small.read_bytes())
    raw[-60] ^= 4  # in the weights section
    small.write_bytes(bytes(raw))
    assert "WGHT" in refused(small)
    # a corrupt file also breaking the graph checks is reported as corrupt
    rewrite(small, graph=_ct_set("big", 0, 99))
    raw = bytearray(small.read_bytes())
    raw[-60] ^= 4
    small.write_bytes(bytes(raw))
    assert "WGHT" in refused(small)


def test_nonzero_padding_is_refused(small):
    rewrite(small, pad=b"\x01")
    assert "padding" in refused(small)


def test_bad_magic(small):
    raw = small.read_bytes()
    small.write_bytes(b"PK\x03\x04" + raw[4:])
    assert "magic" in refused(small)
    small.write_bytes(b"")
    assert "truncated" in refused(small)


def test_missing_file_and_directory(tmp_path):
    assert "cannot read" in refused(tmp_path / "nope.eim")
    assert "cannot read" in refused(tmp_path)


def test_other_major_version_is_refused(small):
    rewrite(small, version=(2, 0))
    assert "version 2.0" in refused(small)
    assert "version 2.0" in refused(small, read_meta)
    rewrite(small, version=(0, 9))
    assert "version 0.9" in refused(small)


def test_newer_minor_version_ignores_optional_additions(small):
    def add_fields(doc):
        doc["future"] = {"x": 1}
        ct(doc, "w").extend([None, "NCHW"])           # records may grow at their end
        cn(doc, "mm").extend([{}, "npu"])

    newer = (1, FORMAT_VERSION[1] + 1)
    rewrite(small, graph=add_fields, version=newer, reserved=b"\x07" + bytes(27))
    g, meta = load_artifact(small)
    assert meta == META and g.tensors["w"].data.shape == (4, 2)
    _, _, sections = split(small.read_bytes())
    small.write_bytes(build(sections + [[b"XTRA", 0, b"optional extra"]], version=newer))
    assert load_artifact(small)[1] == META


def test_newer_minor_version_with_required_features_is_refused(small):
    raw = small.read_bytes()
    newer = (1, FORMAT_VERSION[1] + 1)
    rewrite(small, version=newer, flags=COMPACT | 4)
    assert "features" in refused(small)
    _, _, sections = split(small.read_bytes())
    sections.append([b"XTRA", 1, b"must understand"])
    small.write_bytes(build(sections, version=newer))
    assert "XTRA" in refused(small)
    small.write_bytes(raw)
    rewrite(small, graph=_ct_set("big", 3, {"encoding": "block-csr"}), version=newer)
    assert "block-csr" in refused(small)


def test_current_version_is_strict(small):
    raw = small.read_bytes()
    rewrite(small, graph=lambda d: d.update(future=1))
    assert "future" in refused(small)
    small.write_bytes(raw)
    rewrite(small, reserved=b"\x01" + bytes(27))
    assert "reserved" in refused(small)
    small.write_bytes(raw)
    _, _, sections = split(raw)
    small.write_bytes(build(sections + [[b"XTRA", 0, b""]]))
    assert "XTRA" in refused(small)


# -- hostile files: valid CRCs, bad content ----------------------------------------------

def _set(key, value):
    return lambda d: d.update({key: value})


def _tensor_set(name, key, value):
    return lambda d: tensor(d, name).update({key: value})


def _data_set(name, key, value):
    return lambda d: tensor(d, name)["data"].update({key: value})


def _node_set(name, key, value):
    return lambda d: node(d, name).update({key: value})


def _nest(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


# top-level fields both graph encodings share
TOP_LEVEL_CASES = {
    "graph name not a string": _set("name", 3),
    "graph metadata not an object": _set("metadata", []),
    "graph metadata nested deeply": _set("metadata", {"x": _nest(100)}),
    "tensors not a list": _set("tensors", {}),
    "nodes not a list": _set("nodes", None),
    "graph missing field": lambda d: d.pop("nodes"),
}

HOSTILE_GRAPHS = {
    "offset past section": _data_set("w", "offset", 1 << 20),
    # the last blob (5 bytes) is padded to 64, so this starts at the section's end
    "offset+nbytes past section": (lambda d: tensor(d, "w")["data"].update(
        offset=max(t["data"]["offset"] for t in d["tensors"] if t["data"]) + 64)),
    "negative offset": _data_set("w", "offset", -64),
    "negative nbytes": _data_set("w", "nbytes", -32),
    "huge offset": _data_set("w", "offset", 2 ** 64),
    "unaligned offset": _data_set("w", "offset", 4),
    "string offset": _data_set("w", "offset", "0"),
    "bool nbytes": _data_set("scalar", "nbytes", True),
    "float offset": _data_set("w", "offset", 0.0),
    "nbytes mismatch": _data_set("w", "nbytes", 16),
    "unknown encoding": _data_set("w", "encoding", "csr"),
    "missing encoding": lambda d: tensor(d, "w")["data"].pop("encoding"),
    "data not an object": _tensor_set("w", "data", [0, 32]),
    "dtype not whitelisted": _tensor_set("w", "dtype", "object"),
    "dtype complex": _tensor_set("w", "dtype", "complex64"),
    "dtype not a string": _tensor_set("w", "dtype", 4),
    "dtype changes nbytes": _tensor_set("w", "dtype", "float64"),
    "overflowing shape": _tensor_set("w", "shape", [2 ** 61, 2 ** 61, 2 ** 61, 8]),
    # 8 * (2**59 + 1) elements * 4 bytes is 2**64 + 32: 32 in uint64 arithmetic
    "product wraps to nbytes": _tensor_set("w", "shape", [8, 2 ** 59 + 1]),
    "dim too big": _tensor_set("x", "shape", [2 ** 70]),
    "negative dim": _tensor_set("w", "shape", [-4, -2]),
    "bool dim": _tensor_set("x", "shape", [True, 4]),
    "float dim": _tensor_set("x", "shape", [1.0, 4]),
    "empty symbol": _tensor_set("x", "shape", ["", 4]),
    "rank too big": _tensor_set("x", "shape", [1] * 65),
    "shape not a list": _tensor_set("x", "shape", "batch"),
    "symbolic constant": _tensor_set("w", "shape", ["n", 2]),
    "constant without shape": _tensor_set("w", "shape", None),
    "quant not an object": _tensor_set("q", "quant", [0.5]),
    "quant nested deeply": _tensor_set("q", "quant", {"scale": _nest(200)}),
    "tensor name empty": _tensor_set("scalar", "name", ""),
    "tensor name not a string": _tensor_set("scalar", "name", 7),
    "duplicate tensor": lambda d: d["tensors"].append(dict(tensor(d, "w"))),
    "tensor missing field": lambda d: tensor(d, "w").pop("quant"),
    "tensor unknown field": _tensor_set("w", "extra", 1),
    "tensor not an object": lambda d: d["tensors"].append("w"),
    "node reads missing tensor": _node_set("mm", "inputs", ["x", "ghost"]),
    "node writes missing tensor": _node_set("mm", "outputs", ["ghost"]),
    "node input not a string": _node_set("mm", "inputs", ["x", 1]),
    "node inputs not a list": _node_set("mm", "inputs", "x"),
    "op not a string": _node_set("mm", "op", 42),
    "op null": _node_set("mm", "op", None),
    "op empty": _node_set("mm", "op", ""),
    "node name not a string": _node_set("mm", "name", ["mm"]),
    "attrs not an object": _node_set("mm", "attrs", [1]),
    "attrs nested deeply": _node_set("mm", "attrs", {"a": _nest(100)}),
    "node not an object": lambda d: d["nodes"].append(None),
    "graph input missing": _set("inputs", ["x", "ghost"]),
    "graph output missing": _set("outputs", ["ghost"]),
    "graph outputs not strings": _set("outputs", [None]),
    **TOP_LEVEL_CASES,
    "graph invalid: cycle": lambda d: node(d, "mm").update(inputs=["x", "out"]),
    "graph invalid: two producers": _node_set("gemm", "outputs", ["y"]),
    "graph invalid: overwrites constant": _node_set("mm", "outputs", ["w"]),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_GRAPHS))
def test_hostile_graph_json_old_format(old, case):
    # the 1.1 graph schema keeps its checks: old files are read as strictly as before
    rewrite(old, graph=HOSTILE_GRAPHS[case])
    message = refused(old)
    assert message and "malformed artifact" not in message, message  # refused by name


def test_hostile_bool_bytes(old, small):
    doc = section_json(split(old.read_bytes())[2][1])
    offset = tensor(doc, "mask")["data"]["offset"]

    def poke(w):
        w[offset] = 2
        return bytes(w)

    rewrite(old, weights=poke)
    assert "bool" in refused(old)
    # compact: the 3 bool bytes are inline
    rewrite(small, graph=lambda d: ct(d, "mask").__setitem__(3, base64.b64encode(b"\1\2\1").decode()))
    assert "bool" in refused(small)


def _ct_set(name, pos, value):
    return lambda d: ct(d, name).__setitem__(pos, value)


def _cn_set(name, pos, value):
    return lambda d: cn(d, name).__setitem__(pos, value)


def _names_set(kind, name, value):
    return lambda d: d[kind + "_names"].__setitem__(d[kind + "_names"].index(name), value)


def _last_offset(d):
    return max(t[3] for t in d["tensors"] if len(t) > 3 and type(t[3]) is int)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# the compact encoding (artifact_compact.py): what each 1.1 case became, and the new fields
HOSTILE_COMPACT = {
    "offset past section": _ct_set("big", 3, 1 << 20),
    "offset+nbytes past section": lambda d: ct(d, "big").__setitem__(3, _last_offset(d) + 64),
    "negative offset": _ct_set("big", 3, -64),
    "huge offset": _ct_set("big", 3, 2 ** 64),
    "unaligned offset": _ct_set("big", 3, 4),
    "bool offset": _ct_set("big", 3, True),
    "float offset": _ct_set("big", 3, 0.0),
    "data a list": _ct_set("big", 3, [0, 32]),
    "inline not base64": _ct_set("scalar", 3, "@@@@"),
    "inline size mismatch": _ct_set("scalar", 3, _b64(b"1234")),
    "inline for a big tensor": _ct_set("big", 3, _b64(b"12")),
    "unknown encoding": _ct_set("big", 3, {"encoding": "block-csr"}),
    "missing encoding": _ct_set("big", 3, {"offset": 0}),
    "sparse parts missing": _ct_set("big", 3, {"encoding": "csr", "index_dtype": "uint8"}),
    "dtype code too big": _ct_set("big", 0, 12),
    "dtype code negative": _ct_set("big", 0, -1),
    "dtype a name": _ct_set("big", 0, "float32"),
    "dtype bool": _ct_set("big", 0, True),
    "dtype changes nbytes": _ct_set("big", 0, 2),
    "overflowing shape": _ct_set("big", 1, [2 ** 61, 2 ** 61, 2 ** 61, 8]),
    "product wraps to nbytes": _ct_set("big", 1, [8, 2 ** 59 + 1]),
    "dim too big": _ct_set("x", 1, [2 ** 70]),
    "negative dim": _ct_set("big", 1, [-4, -2]),
    "bool dim": _ct_set("x", 1, [True, 4]),
    "float dim": _ct_set("x", 1, [1.0, 4]),
    "empty symbol": _ct_set("x", 1, ["", 4]),
    "rank too big": _ct_set("x", 1, [1] * 65),
    "shape not a list": _ct_set("x", 1, "batch"),
    "symbolic constant": _ct_set("big", 1, ["n", 2]),
    "constant without shape": _ct_set("big", 1, None),
    "quant a number": _ct_set("q", 2, 0.5),
    "quant list too short": _ct_set("q", 2, [[0.5], 0]),
    "quant object nested deeply": _ct_set("q", 2, {"scale": _nest(200)}),
    "quant scale nested deeply": _ct_set("q", 2, [[_nest(200)], 0, None]),
    "scale not base64": _ct_set("q", 2, ["not base64!", 0, None]),
    "scale not whole float32": _ct_set("q", 2, [_b64(b"123"), 0, None]),
    "scale empty base64": _ct_set("q", 2, ["", 0, None]),
    "scale a number": _ct_set("q", 2, [0.5, 0, None]),
    "mul of a later tensor": _ct_set("q", 2, [{"mul": [0, 30]}, 0, None]),
    "mul of itself": lambda d: ct(d, "q").__setitem__(2, [{"mul": [0, d["tensor_names"].index("q")]}, 0, None]),
    "mul of unquantized tensors": _ct_set("q", 2, [{"mul": [0, 1]}, 0, None]),
    "mul refs not ints": _ct_set("q", 2, [{"mul": ["x", "w"]}, 0, None]),
    "mul with extra key": _ct_set("q", 2, [{"mul": [0, 1], "add": 1}, 0, None]),
    "zero point a string": _ct_set("q", 2, [[0.5], "0", None]),
    "zero point an object": _ct_set("q", 2, [[0.5], {"0": 0}, None]),
    "axis a string": _ct_set("q", 2, [[0.5], 0, "0"]),
    "axis a list": _ct_set("q", 2, [[0.5], 0, [0]]),
    "tensor record too short": _ct_set("big", slice(None), [0]),
    "tensor record too long": lambda d: ct(d, "big").extend([None, 1]),
    "tensor not a list": lambda d: d["tensors"].__setitem__(0, {"name": "x"}),
    "tensor name empty": _names_set("tensor", "scalar", ""),
    "tensor name not a string": _names_set("tensor", "scalar", 7),
    "duplicate tensor name": _names_set("tensor", "scalar", "w"),
    "tensor names too short": lambda d: d["tensor_names"].pop(),
    "tensor names not a list": _set("tensor_names", None),
    "graph output without a name": _names_set("tensor", "out", None),
    "node reads missing tensor": _cn_set("mm", 1, [0, 999]),
    "node reads index -2": _cn_set("mm", 1, [0, -2]),
    "node writes missing tensor": _cn_set("mm", 2, [999]),
    "node input a name": _cn_set("mm", 1, ["x", "w"]),
    "node input a float": _cn_set("mm", 1, [0.0]),
    "node inputs not a list": _cn_set("mm", 1, 0),
    "op not a string": _cn_set("mm", 0, 42),
    "op null": _cn_set("mm", 0, None),
    "op empty": _cn_set("mm", 0, ""),
    "node name not a string": _names_set("node", "mm", ["mm"]),
    "node names too long": lambda d: d["node_names"].append("extra"),
    "attrs not an object": _cn_set("gemm", 3, [1]),
    "attrs nested deeply": _cn_set("gemm", 3, {"a": _nest(100)}),
    "node not a list": lambda d: (d["nodes"].append(None), d["node_names"].append("n")),
    "node record too short": _cn_set("mm", slice(None), ["MatMul", [0]]),
    "graph input missing": _set("inputs", [0, 999]),
    "graph input -1": _set("inputs", [-1]),
    "graph outputs not ints": _set("outputs", [None]),
    "graph outputs names": _set("outputs", ["out"]),
    **TOP_LEVEL_CASES,
    "graph without names": lambda d: d.pop("tensor_names"),
    "graph invalid: cycle": lambda d: cn(d, "mm").__setitem__(1, [0, d["tensor_names"].index("out")]),
    "graph invalid: two producers": lambda d: cn(d, "gemm").__setitem__(2, [d["tensor_names"].index("y")]),
    "graph invalid: overwrites constant": lambda d: cn(d, "mm").__setitem__(2, [d["tensor_names"].index("w")]),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_COMPACT))
def test_hostile_graph_json(small, case):
    rewrite(small, graph=HOSTILE_COMPACT[case])
    message = refused(small)
    assert message and "malformed artifact" not in message, message  # refused by name


RAW_GRAPHS = {
    "not json": b"\x00\x01garbage",
    "not utf-8": b'{"name": "\xff"}',
    "array": b"[]",
    "truncated json": b'{"name": "g", "tensors": [',
    "nested 100000": b"[" * 100000 + b"]" * 100000,
    "nested objects": b'{"a":' * 5000 + b"1" + b"}" * 5000,
    "huge int": b'{"name": ' + b"9" * 5000 + b"}",
    "empty": b"",
    "nan": b"NaN",
}


@pytest.mark.parametrize("case", sorted(RAW_GRAPHS))
def test_hostile_raw_json(small, case):
    raw = small.read_bytes()
    rewrite(small, raw_graph=RAW_GRAPHS[case])
    assert refused(small)
    small.write_bytes(raw)
    rewrite(small, raw_meta=RAW_GRAPHS[case])
    assert refused(small)
    assert refused(small, read_meta)


def test_hostile_meta_nesting(small):
    rewrite(small, meta=lambda d: d.update(deep=_nest(500)))
    assert "nested" in refused(small, read_meta)


def test_hostile_section_tables(small):
    raw = small.read_bytes()
    _, _, sections = split(raw)
    meta, grph, wght = sections
    cases = {
        "duplicate": [meta, grph, wght, grph],
        "missing weights": [meta, grph],
        "missing graph": [meta, wght],
        "unknown kind": [meta, grph, wght, [b"\0\0\0\0", 0, b""]],
        "unknown section flag": [meta, [b"GRPH", grph[1] | 4, grph[2]], wght],
        "too many sections": [meta, grph, wght] + [[b"XTRA", 0, b""]] * 70,
    }
    for name, secs in cases.items():
        small.write_bytes(build(secs))
        assert refused(small), name
    for offsets in ({1: 0}, {1: 64 * 1000}, {2: 2 ** 63}, {0: 64 + 96 + 64}):
        small.write_bytes(build(sections, offsets=offsets))
        assert "offset" in refused(small), offsets
    small.write_bytes(build(sections, trailing=b"\0" * 64))
    assert refused(small)


def test_hostile_compression(small):
    raw = small.read_bytes()
    version, flags, (meta, grph, wght) = split(raw)
    assert meta[1] == grph[1] == ZLIB and wght[1] == 0     # both pay for their compression here
    text = zlib.decompress(grph[2])
    cases = {
        "does not inflate": [meta, [b"GRPH", ZLIB, text], wght],
        "truncated zlib": [meta, [b"GRPH", ZLIB, grph[2][:-5]], wght],
        "data after the zlib stream": [meta, [b"GRPH", ZLIB, grph[2] + b"\0"], wght],
        "inflates past": [meta, [b"GRPH", ZLIB, zlib.compress(b" " * (8 << 20) + text, 9)], wght],
        "compressed WGHT": [meta, grph, [b"WGHT", ZLIB, zlib.compress(wght[2])]],
    }
    for what, secs in cases.items():
        small.write_bytes(build(secs))
        message = refused(small)
        assert what.split()[-1] in message, (what, message)
    # no compression in format 1.1
    small.write_bytes(build([meta, grph, wght], version=(1, 1)))
    assert "1.1 does not allow" in refused(small)
    # uncompressed sections stay fine in 1.2
    small.write_bytes(build([[b"META", 0, zlib.decompress(meta[2])], [b"GRPH", 0, text], wght]))
    assert load_artifact(small)[1] == META


def test_hostile_header_fields(small):
    raw = bytearray(small.read_bytes())
    # a huge section count and file size, with a header CRC that matches
    for field, value in ((5, 2 ** 32 - 1), (4, 2 ** 64 - 1), (4, 0)):
        fields = list(HEADER.unpack_from(raw, 0))
        fields[field] = value
        head = HEADER.pack(*fields)[:60]
        small.write_bytes(head + struct.pack("<I", zlib.crc32(head)) + bytes(raw[64:]))
        assert refused(small)


def test_rebuild_helper_matches_writer(small):
    # the spec (as coded in build()) and the writer agree byte for byte
    raw = small.read_bytes()
    version, flags, sections = split(raw)
    assert version == FORMAT_VERSION == (1, 2) and flags == COMPACT
    assert build(sections, flags=flags) == raw
