"""Structured mutations of artifacts for tests/test_fuzz.py (issue #16).

``make_cases(seed, n, folder)`` writes ``n`` mutated copies of a small conv net (Conv, Relu,
MaxPool, int8 QDQ, Gemm) with valid checksums (save_artifact writes them, as a hostile user
recomputing the CRCs would), each with one or two mutations of attributes, shapes, quant
params or sparse encodings; ``make_doc_cases`` mutates the stored graph document itself (the
compact encoding of format 1.2: any field of a tensor or node record, the name side tables, the
quantization and inline data fields) and fixes the checksums. ``python fuzz_cases.py FOLDER`` (run in a subprocess by the test)
loads and runs every file there twice and prints one JSON line per file: ``ok`` (identical
outputs), ``error`` (an edge_infer error) or ``raw`` (any other exception: a bug). A signal
or hang kills the subprocess, which the test sees as such.
"""
from __future__ import annotations

import json
import os
import sys
import zlib

import numpy as np

HOSTILE_INTS = [-1048576, -3, -1, 0, 1, 2, 3, 7, 255, 65536, 2 ** 31, 2 ** 62]


def base_graph():
    from edge_infer.ir import Graph
    from edge_infer.sparse.encodings import encode_csr
    rng = np.random.default_rng(0)
    g = Graph("fuzz")
    g.add_input("x", "float32", (1, 2, 8, 8))
    g.add_const("w", rng.standard_normal((4, 2, 3, 3)).astype(np.float32))
    g.add_const("b", rng.standard_normal(4).astype(np.float32))
    g.add_node("Conv", ["x", "w", "b"], ["c"], name="conv", strides=[1, 1], dilations=[1, 1],
               pads=[1, 1, 1, 1], kernel_shape=[3, 3], group=1)
    g.add_node("Relu", ["c"], ["r"], name="relu")
    g.add_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2],
               dilations=[1, 1], pads=[0, 0, 0, 0])
    w1 = (rng.standard_normal((4, 4, 1, 1)) * (rng.random((4, 4, 1, 1)) < 0.3)).astype(np.float32)
    g.add_const("w1", w1)
    g.tensors["w1"].data = encode_csr(w1)      # add_const would densify it
    g.add_const("b1", np.zeros(4, np.float32))
    g.add_node("Conv", ["p", "w1", "b1"], ["s"], name="sparse_conv")
    g.add_const("qs", np.float32(0.05))
    g.add_const("qz", np.int8(2))
    g.add_node("QuantizeLinear", ["s", "qs", "qz"], ["q"], name="quant")
    g.tensors["q"].dtype = "int8"
    g.tensors["q"].quant = {"scale": [0.05], "zero_point": [2], "axis": None}
    g.add_node("DequantizeLinear", ["q", "qs", "qz"], ["d"], name="dequant")
    g.add_const("shape", np.array([1, 64], np.int64))
    g.add_node("Reshape", ["d", "shape"], ["f"], name="flat")
    g.add_const("wg", rng.standard_normal((64, 5)).astype(np.float32))
    g.add_node("Gemm", ["f", "wg"], ["y"], name="gemm", alpha=1.0, beta=1.0, transA=0, transB=0)
    g.outputs = ["y"]
    return g


def _mutate(g, rng) -> str:
    kind = rng.integers(6)
    node = g.nodes[int(rng.integers(len(g.nodes)))]
    if kind == 0 and node.attrs:                       # an attribute value
        key = sorted(node.attrs)[int(rng.integers(len(node.attrs)))]
        v = node.attrs[key]
        if isinstance(v, list):
            v = list(v)
            if v:
                v[int(rng.integers(len(v)))] = int(rng.choice(HOSTILE_INTS))
            if rng.random() < 0.2:
                v = v + [1]
        else:
            v = [int(rng.choice(HOSTILE_INTS)), "x", None, 1.5, [1]][int(rng.integers(5))]
        node.attrs[key] = v
        return f"attr {node.name}.{key}={v}"
    if kind == 1:                                      # a constant replaced by a reshaped/shortened one
        names = [t for t in g.tensors.values() if t.data is not None and not hasattr(t.data, "encoding")]
        t = names[int(rng.integers(len(names)))]
        a = np.asarray(t.data).reshape(-1)
        a = a[: int(rng.integers(a.size + 1))] if a.size else a
        if t.dtype.startswith("int") and a.size:
            a = a.copy()
            a[int(rng.integers(a.size))] = np.array(rng.choice(HOSTILE_INTS[:9])).astype(t.dtype)
        t.data, t.shape = a, a.shape
        return f"const {t.name} -> {a.shape}"
    if kind == 2:                                      # quant params
        q = g.tensors["q"].quant
        key = ["scale", "zero_point", "axis"][int(rng.integers(3))]
        q[key] = [[0.0], [-1.0], [float("inf")], [1e-45], [128], [-129], [3], 5, [0.05, 0.1]][int(rng.integers(9))]
        return f"quant {key}={q[key]}"
    if kind == 3:                                      # an input shape
        x = g.tensors["x"]
        dims = list(x.shape)
        dims[int(rng.integers(4))] = int(rng.choice([0, 1, 3, 2 ** 20, 2 ** 40]))
        x.shape = tuple(dims)
        return f"input shape {dims}"
    if kind == 4:                                      # the sparse encoding
        s = g.tensors["w1"].data
        part = ["indptr", "indices", "values"][int(rng.integers(3))]
        a = getattr(s, part).copy()
        if a.size:
            a[int(rng.integers(a.size))] = a.dtype.type(rng.integers(0, min(np.iinfo(a.dtype).max, 255))) \
                if a.dtype.kind in "iu" else np.float32(rng.standard_normal())
        setattr(s, part, a)
        return f"sparse {part}"
    node.inputs = list(node.inputs[: int(rng.integers(len(node.inputs) + 1))])   # inputs dropped
    if not node.inputs or not node.inputs[0]:
        node.inputs = ["x"]
    return f"inputs {node.name} -> {node.inputs}"


def make_cases(seed: int, n: int, folder: str) -> list:
    """Write ``n`` mutated artifacts to ``folder``; return their (file, description) pairs."""
    from edge_infer.artifact import save_artifact
    from edge_infer.errors import EdgeInferError
    rng = np.random.default_rng(seed)

    out = []
    for k in range(n):
        g = base_graph()   # fresh: deepcopy would densify the SparseArray
        desc = "; ".join(_mutate(g, rng) for _ in range(1 + int(rng.integers(2))))
        path = os.path.join(folder, f"case{k:05d}.eim")
        try:
            save_artifact(path, g, {})
        except EdgeInferError:
            continue      # the writer itself refuses it: nothing to load
        out.append((path, desc))
    return out


HOSTILE_VALUES = [None, True, -2, -1, 0, 1, 7, 2 ** 31, 2 ** 62, 2 ** 64, 1.5, float("nan"), "", "x", "@@",
                  "AAAA", [], [0], [-1], [1, 1], {}, {"mul": [0, 1]}, {"encoding": "csr"}]


def _paths(obj, path=()):
    """Every position in a JSON value, as key/index paths."""
    yield path
    items = enumerate(obj) if isinstance(obj, list) else obj.items() if isinstance(obj, dict) else ()
    for k, v in items:
        yield from _paths(v, path + (k,))


def _mutate_doc(doc: dict, rng) -> str:
    """Replace one field of the graph document (not the free-form metadata) by a hostile value."""
    paths = [p for p in _paths(doc) if p and p[0] != "metadata"]
    path = paths[int(rng.integers(len(paths)))]
    value = HOSTILE_VALUES[int(rng.integers(len(HOSTILE_VALUES)))]
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return f"doc {'/'.join(map(str, path))}={value!r}"


def rewrite_graph(path: str, edit) -> str:
    """Apply ``edit`` to the GRPH document of the artifact at ``path`` and rewrite the file with
    valid checksums, as a hostile user would; return what ``edit`` returns."""
    from edge_infer import artifact as A
    raw = open(path, "rb").read()
    _, major, minor, flags, _, count, _, _, _ = A._HEADER.unpack_from(raw, 0)
    sections, out = [], None
    for k in range(count):
        kind, sflags, off, length, _, _ = A._ENTRY.unpack_from(raw, A.HEADER_SIZE + k * A.ENTRY_SIZE)
        payload = raw[off:off + length]
        if kind == A.KIND_GRAPH:
            zipped = sflags & A.SECTION_ZLIB
            doc = json.loads(zlib.decompress(payload) if zipped else payload)
            out = edit(doc)
            payload = json.dumps(doc).encode()
            payload = zlib.compress(payload) if zipped else payload
        sections.append((kind, sflags, payload))
    body = bytearray(A.HEADER_SIZE + count * A.ENTRY_SIZE)
    table = b""
    for kind, sflags, payload in sections:
        body += bytes(A._align(len(body)) - len(body))
        table += A._ENTRY.pack(kind, sflags, len(body), len(payload), zlib.crc32(payload), 0)
        body += payload
    body[A.HEADER_SIZE:A.HEADER_SIZE + len(table)] = table
    body[:A.HEADER_SIZE] = A._pack_header((major, minor), flags, len(body), count, zlib.crc32(table))
    open(path, "wb").write(bytes(body))
    return out


def make_doc_cases(seed: int, n: int, folder: str) -> list:
    """Write ``n`` artifacts of the base graph, each with one or two fields of its stored graph
    document replaced; return their (file, description) pairs."""
    from edge_infer.artifact import save_artifact
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        path = os.path.join(folder, f"doc{k:05d}.eim")
        save_artifact(path, base_graph(), {})
        desc = rewrite_graph(path, lambda d: "; ".join(_mutate_doc(d, rng) for _ in range(1 + int(rng.integers(2)))))
        out.append((path, desc))
    return out


def random_feeds(rt) -> dict:
    """Seeded standard-normal inputs for a Runtime (symbolic dims 1)."""
    feeds = {}
    for i in rt.graph.inputs:
        t = rt.graph.tensors[i]
        shape = [d if isinstance(d, int) else 1 for d in t.shape]
        feeds[i] = np.random.default_rng(1).standard_normal(shape).astype(t.dtype)
    return feeds


def outcome(name: str, attempt) -> dict:
    """``attempt()`` -> "ok" / another outcome; an edge_infer error is "error", any other
    exception "raw" (a bug). One JSON-able line for the test."""
    from edge_infer.errors import EdgeInferError
    try:
        return {"file": name, "outcome": attempt()}
    except EdgeInferError as e:
        return {"file": name, "outcome": "error", "msg": str(e)[:160]}
    except Exception as e:  # noqa: BLE001  (what the test is looking for)
        return {"file": name, "outcome": "raw", "msg": f"{type(e).__name__}: {e}"[:300]}


def run_folder(folder: str) -> None:
    """Load and run each artifact twice; one JSON line per file."""
    from edge_infer.runtime import Runtime

    def attempt(path):
        rt = Runtime(path, backend="cpu", threads=1)
        feeds = random_feeds(rt)
        a, b = rt.run(feeds), rt.run(feeds)
        return "ok" if all(np.array_equal(a[k], b[k], equal_nan=True) for k in a) else "nondeterministic"
    for name in sorted(os.listdir(folder)):
        print(json.dumps(outcome(name, lambda: attempt(os.path.join(folder, name)))), flush=True)


if __name__ == "__main__":
    run_folder(sys.argv[1])
