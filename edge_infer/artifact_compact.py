"""The compact graph encoding of ``.eim`` 1.2 (docs/format.md, "GRPH: compact graph").

The 1.1 graph JSON spelled out every tensor name at each use, field names in every record, and
per-channel quantization scales as 17-digit decimals: for an int8 detector of 1M parameters it
took 540 KB next to 970 KB of weights. This encoding keeps the same JSON safety (``json.loads``
only, nothing executable) and stores:

* tensors and nodes as positional arrays, tensors referenced by their index (``-1``: none);
* the original names once, in the side tables ``tensor_names`` / ``node_names`` (``null`` where
  stripped; the loader then names the tensor or node by its index in base 36); graph inputs and
  outputs always keep their names;
* dtypes as small codes, trailing empty fields left out;
* quantization parameters as ``[scale, zero_point, axis]``: float32 scales as base64 of their
  bytes, a constant zero point as one integer, and a scale that is the float32 product of two
  earlier tensors' scales (an int32 bias: input scale x weight scale) as ``{"mul": [i, j]}``;
* constants of at most ``INLINE_MAX`` bytes inline (base64), not as 64-byte aligned blobs.

The section is zlib-compressed on top (artifact.py). Decoding rebuilds exactly the Graph that
was written, original names included, so validation errors name what the user knows.
"""
from __future__ import annotations

import base64
import binascii
from typing import Dict, List, Optional

import numpy as np

from .artifact_container import ALIGN, FLAG_COMPACT_GRAPH, KIND_GRAPH, _open, _refuse_malformed
from .artifact_graph import (_check_attrs, _check_json_value, _checked_array, _dim_to_json, _expect_keys, _new_graph,
                             _parse_json, _raw_view, _shape, decode_entry)
from .errors import ArtifactError, GraphError
from .ir.graph import Graph, Node, Tensor

# dtype codes of the format: fixed forever (append only), independent of ir.graph.DTYPES' order
DTYPE_CODES = ("float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32",
               "uint32", "int64", "uint64", "bool")
_CODE_OF = {name: k for k, name in enumerate(DTYPE_CODES)}
_LE = [np.dtype(name).newbyteorder("<") for name in DTYPE_CODES]
INLINE_MAX = 64          # constants up to this many bytes are stored in the graph, not in WGHT
GRAPH_KEYS = {"name", "metadata", "inputs", "outputs", "tensors", "nodes", "tensor_names", "node_names"}
_QUANT_KEYS = {"scale", "zero_point", "axis"}
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def short_id(k: int) -> str:
    """The base-36 id of tensor or node ``k``: its name in a file without the side table."""
    s = ""
    while True:
        k, r = divmod(k, 36)
        s = _DIGITS[r] + s
        if not k:
            return s


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _f32_scales(scale: list) -> Optional[np.ndarray]:
    """The float32 array of a list of Python floats that float32 holds exactly, else None."""
    if not scale or any(type(v) is not float for v in scale):
        return None
    a = np.asarray(scale, np.float64)
    f = a.astype(np.float32)
    return f if np.array_equal(f.astype(np.float64), a) else None


def scale_product(a: list, b: list) -> Optional[list]:
    """The float32 product of two scale lists (one of length 1 broadcasts), as Python floats;
    None if their lengths do not broadcast. Writer and reader share it: the writer stores a
    ``mul`` scale only where this reproduces the stored values bit for bit."""
    if len(a) != len(b) and 1 not in (len(a), len(b)):
        return None
    return (np.asarray(a, np.float32) * np.asarray(b, np.float32)).astype(np.float32).tolist()


def _product_of(k: int, scale: list, t: Tensor, uses: list, index: Dict[str, int], graph: Graph):
    """``{"mul": [i, j]}`` if ``scale`` is the product of the scales of the first two inputs
    (both earlier tensors) of a node that reads ``t``, else None."""
    for node in uses:
        if len(node.inputs) < 3 or t.name in node.inputs[:2]:
            continue
        refs = [index.get(n, k) for n in node.inputs[:2]]
        if max(refs) >= k:
            continue
        qa, qb = (graph.tensors[n].quant for n in node.inputs[:2])
        if not (_standard(qa) and _standard(qb) and _floats(qa["scale"]) and _floats(qb["scale"])):
            continue
        if scale_product(qa["scale"], qb["scale"]) == scale:
            return {"mul": refs}
    return None


def _floats(values: list) -> bool:
    return all(type(v) is float for v in values)


def _standard(q) -> bool:
    """Whether ``q`` has the standard form [scale list, zero point list, axis int or None]."""
    return (type(q) is dict and q.keys() == _QUANT_KEYS and type(q["scale"]) is list
            and type(q["zero_point"]) is list and (q["axis"] is None or type(q["axis"]) is int))


def _quant_record(k: int, t: Tensor, uses: list, index: Dict[str, int], graph: Graph):
    q = t.quant
    if not _standard(q):
        return q                                  # null, or a free-form object as in 1.1
    scale, zp = q["scale"], q["zero_point"]
    enc = _product_of(k, scale, t, uses, index, graph) if t.data is not None else None
    if enc is None:
        f = _f32_scales(scale)
        enc = scale if f is None else base64.b64encode(f.astype("<f4").tobytes()).decode("ascii")
    if zp and len(zp) == len(scale) and all(type(z) is int and z == zp[0] for z in zp):
        zp = zp[0]
    return [enc, zp, q["axis"]]


def _data_record(t: Tensor, entries: Dict[str, dict]):
    entry = entries.get(t.name)
    if entry is None:       # small enough to inline: base64 of the little-endian C-order bytes
        arr = np.ascontiguousarray(t.data, dtype=np.dtype(t.dtype).newbyteorder("<"))
        return base64.b64encode(arr.tobytes()).decode("ascii")
    if entry.get("encoding") == "raw":
        return entry["offset"]                    # nbytes follows from the shape
    return entry                                  # sparse encodings: the 1.1 entry object


def encode_graph(graph: Graph, entries: Dict[str, dict], strip_names: bool = False) -> dict:
    """The compact JSON document of ``graph`` (already validated and checked writable);
    ``entries``: the weight entries of the constants laid out in WGHT (the others are inlined)."""
    index = {name: k for k, name in enumerate(graph.tensors)}
    uses: Dict[str, list] = {}
    for n in graph.nodes:
        for i in n.inputs:
            uses.setdefault(i, []).append(n)
    tensors = []
    for k, t in enumerate(graph.tensors.values()):
        if t.dtype not in _CODE_OF:
            raise GraphError(f"tensor {t.name!r}: dtype {t.dtype!r} is not one of {', '.join(DTYPE_CODES)}")
        # a constant's shape is its data's shape, even where the tensor left it unset
        shape = t.data.shape if t.data is not None else t.shape
        rec = [_CODE_OF[t.dtype], None if shape is None else [_dim_to_json(d, t.name) for d in shape],
               _quant_record(k, t, uses.get(t.name, ()), index, graph),
               None if t.data is None else _data_record(t, entries)]
        while len(rec) > 2 and rec[-1] is None:
            rec.pop()
        tensors.append(rec)
    nodes = []
    for n in graph.nodes:
        if not isinstance(n.name, str):
            raise GraphError(f"node {n.name!r} ({n.op}): name must be a string")
        try:
            rec = [n.op, [index[i] if i else -1 for i in n.inputs], [index[o] if o else -1 for o in n.outputs]]
        except KeyError as e:
            raise GraphError(f"node {n.name!r} ({n.op}) references missing tensor {e.args[0]!r}") from None
        if n.attrs:
            rec.append(n.attrs)
        nodes.append(rec)
    return {"name": graph.name, "metadata": graph.metadata,
            "inputs": [index[i] for i in graph.inputs], "outputs": [index[o] for o in graph.outputs],
            "tensors": tensors, "nodes": nodes,
            "tensor_names": _tensor_names(graph, strip_names), "node_names": _node_names(graph, strip_names)}


def _tensor_names(graph: Graph, strip: bool) -> list:
    if not strip:
        return list(graph.tensors)
    io = set(graph.inputs) | set(graph.outputs)
    names = []
    for k, name in enumerate(graph.tensors):
        if name in io:
            names.append(name)
            continue
        gen = short_id(k)
        if gen not in io:
            names.append(None)                    # the reader names it short_id(k)
            continue
        while gen in io or gen in graph.tensors:  # would clash with a kept name: store another
            gen += "_"
        names.append(gen)
    return names


def _node_names(graph: Graph, strip: bool) -> list:
    return [None] * len(graph.nodes) if strip else [n.name for n in graph.nodes]


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------

def _names(value, count: int, what: str) -> list:
    if type(value) is not list or len(value) != count:
        raise ArtifactError(f"graph {what}_names must be a list of {count} strings or nulls")
    names = value[:]
    for k, v in enumerate(value):
        if v is None:
            names[k] = short_id(k)
        elif type(v) is not str or (what == "tensor" and not v):
            raise ArtifactError(f"graph {what}_names[{k}] is {v!r}, not a{' non-empty' if what == 'tensor' else ''} "
                                f"string or null")
    return names


def _refs(value, names: list, where: str, allow_none: bool) -> List[str]:
    """Tensor indices to names (-1 -> "" where allowed)."""
    if type(value) is not list:
        raise ArtifactError(f"{where}: expected a list of tensor indices")
    n = len(names)
    out = []
    for i in value:
        if type(i) is not int or not (-1 if allow_none else 0) <= i < n:
            raise ArtifactError(f"{where} references missing tensor {i!r} (the graph has {n})")
        out.append(names[i] if i >= 0 else "")
    return out


def _b64(value: str, name: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ArtifactError(f"tensor {name!r}: {what} is not valid base64: {e}") from None


def _scale(enc, k: int, name: str, quants: list) -> list:
    if type(enc) is list:
        return enc
    if type(enc) is str:
        raw = _b64(enc, name, "scale")
        if not raw or len(raw) % 4:
            raise ArtifactError(f"tensor {name!r}: scale holds {len(raw)} bytes, not whole float32 values")
        return np.frombuffer(raw, "<f4").tolist()
    if type(enc) is dict and enc.keys() == {"mul"}:
        refs = enc["mul"]
        if (type(refs) is list and len(refs) == 2 and all(type(i) is int and 0 <= i < k for i in refs)
                and all(_standard(quants[i]) for i in refs)):
            a, b = (quants[i]["scale"] for i in refs)
            if _floats(a) and _floats(b):
                prod = scale_product(a, b)
                if prod is not None:
                    return prod
        raise ArtifactError(f"tensor {name!r}: scale {enc!r} is not the product of two earlier "
                            "tensors' numeric scales of broadcastable lengths")
    raise ArtifactError(f"tensor {name!r}: scale must be a list, a base64 string or {{\"mul\": [i, j]}}")


def _quant(rec, k: int, name: str, quants: list):
    if rec is None:
        return None
    if type(rec) is dict:
        _check_json_value(rec, f"tensor {name!r} quant")
        return rec
    if type(rec) is not list or len(rec) != 3:
        raise ArtifactError(f"tensor {name!r}: quant must be null, an object or [scale, zero_point, axis]")
    scale = _scale(rec[0], k, name, quants)
    zp, axis = rec[1], rec[2]
    if type(zp) is int:
        zp = [zp] * len(scale)
    if type(zp) is not list:
        raise ArtifactError(f"tensor {name!r}: zero_point must be a list or an integer")
    if not (axis is None or type(axis) is int):
        raise ArtifactError(f"tensor {name!r}: quant axis must be an integer or null")
    _check_json_value(scale, f"tensor {name!r} quant")
    _check_json_value(zp, f"tensor {name!r} quant")
    return {"scale": scale, "zero_point": zp, "axis": axis}


def _data(entry, dtype: np.dtype, shape: tuple, c, name: str, lenient: bool):
    count = 1
    for d in shape:  # Python ints: no overflow; rank and dims are bounded
        count *= d
    if type(entry) is int:
        return _raw_view(entry, count * dtype.itemsize, dtype, shape, c, name)
    if type(entry) is str:
        raw = _b64(entry, name, "inline data")
        if len(raw) != count * dtype.itemsize:
            raise ArtifactError(f"tensor {name!r}: {len(raw)} inline bytes != {count} elements "
                                f"* {dtype.itemsize} bytes")
        return _checked_array(_aligned(raw, dtype), shape, name)
    if type(entry) is not dict:
        raise ArtifactError(f"tensor {name!r}: data must be an offset, a base64 string or an object")
    return decode_entry(entry, dtype, shape, c, name, lenient)


def _aligned(raw: bytes, dtype: np.dtype) -> np.ndarray:
    """A read-only array of ``raw`` at a 64-byte aligned address, as WGHT constants are."""
    buf = np.empty(len(raw) + ALIGN, np.uint8)
    start = -buf.ctypes.data % ALIGN
    arr = buf[start:start + len(raw)]
    arr[:] = np.frombuffer(raw, np.uint8)
    arr.flags.writeable = False
    return arr.view(dtype)


def _tensor(rec, k: int, name: str, c, lenient: bool, quants: list) -> Tensor:
    n = len(rec) if type(rec) is list else 0
    if not 2 <= n <= 4 and not (lenient and n > 4):
        raise ArtifactError(f"tensor {name!r}: expected [dtype, shape, quant, data] (2 to 4 items)")
    code = rec[0]
    if type(code) is not int or not 0 <= code < len(DTYPE_CODES):
        raise ArtifactError(f"tensor {name!r}: dtype code {code!r} is not one of 0..{len(DTYPE_CODES) - 1}")
    shape = _shape(rec[1], name)
    quant = None if n < 3 or rec[2] is None else _quant(rec[2], k, name, quants)
    quants.append(quant)
    data = None
    if n > 3 and rec[3] is not None:
        if shape is None or any(type(d) is not int for d in shape):
            raise ArtifactError(f"tensor {name!r}: a constant needs a static shape, got {rec[1]}")
        data = _data(rec[3], _LE[code], shape, c, name, lenient)
    return Tensor(name, DTYPE_CODES[code], shape, data, quant)


def _node(rec, name: str, tnames: list, lenient: bool) -> Node:
    n = len(rec) if type(rec) is list else 0
    if not 3 <= n <= 4 and not (lenient and n > 4):
        raise ArtifactError(f"node {name!r}: expected [op, inputs, outputs, attrs] (3 or 4 items)")
    op = rec[0]
    if not (type(op) is str and op):
        raise ArtifactError(f"node {name!r}: op must be a non-empty string, got {op!r}")
    where = f"node {name!r} ({op})"
    inputs = _refs(rec[1], tnames, where, True)
    outputs = _refs(rec[2], tnames, where, True)
    attrs = rec[3] if n > 3 else {}
    _check_attrs(attrs, where)
    return Node(op, inputs, outputs, attrs, name)


def decode_graph(doc, c) -> Graph:
    """The Graph of a compact GRPH document (``c``: the opened container, for the weights);
    raises ArtifactError naming the tensor or node (by its original name where the file keeps it)."""
    lenient = c.newer_minor
    _expect_keys(doc, GRAPH_KEYS, "graph", lenient)
    name, metadata, trecs, nrecs = doc["name"], doc["metadata"], doc["tensors"], doc["nodes"]
    if type(name) is not str:
        raise ArtifactError("graph name must be a string")
    if type(metadata) is not dict:
        raise ArtifactError("graph metadata must be an object")
    _check_json_value(metadata, "graph metadata")
    if type(trecs) is not list or type(nrecs) is not list:
        raise ArtifactError("graph tensors and nodes must be lists")
    tnames = _names(doc["tensor_names"], len(trecs), "tensor")
    nnames = _names(doc["node_names"], len(nrecs), "node")
    tensors: Dict[str, Tensor] = {}
    quants: list = []
    for k, rec in enumerate(trecs):
        t = _tensor(rec, k, tnames[k], c, lenient, quants)
        if t.name in tensors:
            raise ArtifactError(f"tensor {t.name!r} defined twice")
        tensors[t.name] = t
    nodes = [_node(rec, nnames[k], tnames, lenient) for k, rec in enumerate(nrecs)]
    inputs = _refs(doc["inputs"], tnames, "graph inputs", False)
    outputs = _refs(doc["outputs"], tnames, "graph outputs", False)
    for key, refs in (("inputs", doc["inputs"]), ("outputs", doc["outputs"])):
        for i in refs:
            if doc["tensor_names"][i] is None:
                raise ArtifactError(f"graph {key[:-1]} #{i} has no name (graph inputs and outputs keep theirs)")
    return _new_graph(name, tensors, nodes, inputs, outputs, metadata)


def read_side_table(path) -> Optional[dict]:
    """The name side table of the artifact at ``path``: ``{"tensors": [...], "nodes": [...]}``
    (original names by index, None where stripped), or None for a format 1.0/1.1 file, which
    stores its names in place. Checks the container and GRPH's checksum, not the graph."""
    with _refuse_malformed():
        c = _open(path)
        try:
            if not c.flags & FLAG_COMPACT_GRAPH:
                return None
            doc = _parse_json(c.read(KIND_GRAPH), "GRPH")
        finally:
            c.close()
        if type(doc) is not dict:
            raise ArtifactError("GRPH section holds no graph object")
        return {"tensors": doc.get("tensor_names"), "nodes": doc.get("node_names")}
