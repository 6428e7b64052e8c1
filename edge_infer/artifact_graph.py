"""Reading the graph section of an ``.eim`` artifact (the 1.0/1.1 JSON form; the compact 1.2
form, ``artifact_compact.py``, shares these checks): every tensor, node and weight view decoded
and checked before a ``Graph`` is built, and the JSON value checks the metadata reader uses too.
Split from ``artifact.py`` (the writer and ``load_artifact``, which calls ``build_graph``) and
``artifact_container.py`` (header, section table, checksums); ``docs/format.md`` specifies both."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Callable, Dict, List

import numpy as np

from .artifact_container import ALIGN
from .errors import ArtifactError, GraphError
from .ir.graph import DTYPES, Graph, Node, Tensor
from .sparse.encodings import BLOCKS, INDEX_DTYPES, SparseArray, validate as _validate_sparse

if TYPE_CHECKING:
    from .artifact_container import _Container

MAX_RANK = 64           # numpy's own limit (NPY_MAXDIMS in numpy 2)
MAX_JSON_DEPTH = 64     # for free-form values: attrs, quant, metadata
MAX_DIM = 2 ** 62

_GRAPH_KEYS = {"name", "inputs", "outputs", "metadata", "tensors", "nodes"}
_TENSOR_KEYS = {"name", "dtype", "shape", "quant", "data"}
_NODE_KEYS = {"op", "name", "inputs", "outputs", "attrs"}
_RAW_KEYS = {"encoding", "offset", "nbytes"}


def _parse_json(raw: bytes, what: str):
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ArtifactError(f"{what} section is not UTF-8: {e}") from e
    except RecursionError as e:
        raise ArtifactError(f"{what} section JSON is nested too deeply") from e
    except ValueError as e:  # JSONDecodeError and over-long integer literals
        raise ArtifactError(f"{what} section is not valid JSON: {e}") from e


def _dim_to_json(d, name: str):
    if isinstance(d, str) and d:
        return d
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 0 <= d < MAX_DIM:
        return int(d)
    raise GraphError(f"tensor {name!r}: dimension {d!r} cannot be stored "
                     f"(a non-empty symbol or an int in [0, 2**62))")


def _check_json_value(value, where: str, depth: int = 0) -> None:
    """Bound the nesting of a free-form JSON value so later recursive code cannot blow the stack."""
    if depth > MAX_JSON_DEPTH:
        raise ArtifactError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels")
    # tuples only occur on the writing side, where json.dumps turns them into arrays
    children = value.values() if type(value) is dict else value if type(value) in (list, tuple) else ()
    for v in children:
        if type(v) in _CONTAINERS:
            _check_json_value(v, where, depth + 1)


_CONTAINERS = (dict, list, tuple)


# The checks below run once per tensor and node, so the happy path avoids
# building messages; they are formatted only when something is wrong.

def _expect_keys(obj, keys: set, where, lenient: bool) -> None:
    """Check obj is a dict with ``keys`` (and, unless lenient, no others)."""
    if type(obj) is dict and obj.keys() == keys:
        return
    if not isinstance(obj, dict):
        raise ArtifactError(f"{where}: expected an object, got {type(obj).__name__}")
    missing = keys - obj.keys()
    if missing:
        raise ArtifactError(f"{where}: missing field(s) {sorted(missing)}")
    if not lenient and len(obj) != len(keys):
        raise ArtifactError(f"{where}: unknown field(s) {sorted(obj.keys() - keys)}")


def _str_list(value, where: str) -> List[str]:
    if type(value) is not list:
        raise ArtifactError(f"{where}: expected a list of strings")
    for v in value:
        if type(v) is not str:
            raise ArtifactError(f"{where}: expected a list of strings, found {v!r}")
    return value


def _shape(value, name: str):
    if value is None:
        return None
    if type(value) is not list:
        raise ArtifactError(f"tensor {name!r}: shape must be a list or null")
    if len(value) > MAX_RANK:
        raise ArtifactError(f"tensor {name!r}: rank {len(value)} exceeds {MAX_RANK}")
    for d in value:
        if type(d) is int:  # not isinstance: bool is an int subclass
            if not 0 <= d < MAX_DIM:
                raise ArtifactError(f"tensor {name!r}: dimension {d} out of range")
        elif not (type(d) is str and d):
            raise ArtifactError(f"tensor {name!r}: dimension {d!r} is neither an int nor a symbol name")
    return tuple(value)


def _decode_raw(entry: dict, dtype: np.dtype, shape: tuple, c: _Container, name: str,
                lenient: bool) -> np.ndarray:
    """Decode a ``raw`` weight entry: a little-endian C-order blob in the weights section."""
    if not (type(entry) is dict and entry.keys() == _RAW_KEYS):
        _expect_keys(entry, _RAW_KEYS, f"tensor {name!r} data", lenient)
    return _raw_view(entry["offset"], entry["nbytes"], dtype, shape, c, name)


def _raw_view(offset, nbytes, dtype: np.dtype, shape: tuple, c: _Container, name: str) -> np.ndarray:
    """The read-only array of ``nbytes`` bytes at ``offset`` in WGHT, all of it checked."""
    if not (type(offset) is int and type(nbytes) is int) or offset < 0 or nbytes < 0:
        raise ArtifactError(f"tensor {name!r}: offset and nbytes must be non-negative integers")
    if offset % ALIGN:
        raise ArtifactError(f"tensor {name!r}: offset {offset} is not {ALIGN}-byte aligned")
    weights = c.weights
    if offset + nbytes > len(weights):
        raise ArtifactError(f"tensor {name!r}: bytes {offset}..{offset + nbytes} lie outside the "
                            f"{len(weights)}-byte weights section")
    count = 1
    for d in shape:  # Python ints do not overflow; dims and rank are bounded
        count *= d
    if count * dtype.itemsize != nbytes:
        raise ArtifactError(f"tensor {name!r}: nbytes {nbytes} != {count} elements "
                            f"* {dtype.itemsize} bytes")
    return _checked_array(weights[offset:offset + nbytes].view(dtype), shape, name)


def _checked_array(arr: np.ndarray, shape: tuple, name: str) -> np.ndarray:
    if arr.dtype.kind == "b" and arr.size and arr.view(np.uint8).max() > 1:
        # any byte but 0 and 1 would be an ill-formed numpy bool
        raise ArtifactError(f"tensor {name!r}: bool data holds bytes other than 0 and 1")
    return arr.reshape(shape)


_SPARSE_PARTS = {"bitmask": ("mask", "values"), "csr": ("indptr", "indices", "values"),
                 "bcsr": ("indptr", "indices", "values")}


def _part(c: _Container, parts: dict, key: str, dtype: np.dtype, name: str) -> np.ndarray:
    """One blob of a sparse entry: a read-only 1-D view on the weights section."""
    where = parts.get(key)
    if not (type(where) is list and len(where) == 2 and all(type(v) is int and v >= 0 for v in where)):
        raise ArtifactError(f"tensor {name!r}: sparse part {key!r} must be [offset, nbytes] (non-negative ints)")
    offset, nbytes = where
    if offset % ALIGN:
        raise ArtifactError(f"tensor {name!r}: part {key!r} offset {offset} is not {ALIGN}-byte aligned")
    if offset + nbytes > len(c.weights):
        raise ArtifactError(f"tensor {name!r}: part {key!r} bytes {offset}..{offset + nbytes} lie outside "
                            f"the {len(c.weights)}-byte weights section")
    if nbytes % dtype.itemsize:
        raise ArtifactError(f"tensor {name!r}: part {key!r} of {nbytes} bytes is not whole {dtype} items")
    return c.weights[offset:offset + nbytes].view(dtype)


def _decode_sparse(entry: dict, dtype: np.dtype, shape: tuple, c: _Container, name: str,
                   lenient: bool) -> SparseArray:
    """Decode a ``bitmask`` / ``csr`` / ``bcsr`` entry (docs/format.md) into a SparseArray of
    views on the map (nothing densified, nothing copied), its structure fully checked."""
    enc = entry["encoding"]
    keys = {"encoding", "parts"} | ({"index_dtype"} if enc != "bitmask" else set()) \
        | ({"block"} if enc == "bcsr" else set())
    _expect_keys(entry, keys, f"tensor {name!r} data ({enc})", lenient)
    if dtype.name not in ("float32", "int8"):
        raise ArtifactError(f"tensor {name!r}: {enc} holds float32 or int8 values, not {dtype.name}")
    if len(shape) < 1:
        raise ArtifactError(f"tensor {name!r}: a {enc} tensor needs rank >= 1")
    parts = entry["parts"]
    if type(parts) is not dict:
        raise ArtifactError(f"tensor {name!r}: parts must be an object")
    _expect_keys(parts, set(_SPARSE_PARTS[enc]), f"tensor {name!r} parts", False)
    block = None
    if enc == "bcsr":
        block = entry["block"]
        if type(block) is not list or tuple(block) not in BLOCKS:
            raise ArtifactError(f"tensor {name!r}: block {block!r} is not one of {[list(b) for b in BLOCKS]}")
    values = _part(c, parts, "values", dtype, name)
    if enc == "bitmask":
        s = SparseArray(enc, shape, dtype, mask=_part(c, parts, "mask", np.dtype(np.uint8), name), values=values)
    else:
        idt = entry["index_dtype"]
        if type(idt) is not str or idt not in [d.name for d in INDEX_DTYPES]:
            raise ArtifactError(f"tensor {name!r}: index_dtype {idt!r} is not uint8 or uint16")
        idx = _part(c, parts, "indices", np.dtype(idt).newbyteorder("<"), name)
        if block is not None:
            br, bc = block
            if values.size != idx.size * br * bc:
                raise ArtifactError(f"tensor {name!r}: {values.size} values for {idx.size} {br}x{bc} blocks")
            values = values.reshape(idx.size, br, bc)
        s = SparseArray(enc, shape, dtype, indptr=_part(c, parts, "indptr", np.dtype("<i4"), name),
                        indices=idx, values=values, block=block)
    err = _validate_sparse(s)
    if err:
        raise ArtifactError(f"tensor {name!r}: corrupt {enc} weights: {err}")
    return s


# Each decoder checks its own fields; raw returns the dense read-only array, the sparse
# encodings a SparseArray of read-only views (kept encoded in memory).
_DECODERS: Dict[str, Callable[..., np.ndarray]] = {"raw": _decode_raw, "bitmask": _decode_sparse,
                                                   "csr": _decode_sparse, "bcsr": _decode_sparse}
_LE_DTYPES = {name: np.dtype(name).newbyteorder("<") for name in DTYPES}


def _build_tensor(doc, k: int, c: _Container, lenient: bool) -> Tensor:
    if not (type(doc) is dict and doc.keys() == _TENSOR_KEYS):
        _expect_keys(doc, _TENSOR_KEYS, f"tensor #{k}", lenient)
    name = doc["name"]
    if not (type(name) is str and name):
        raise ArtifactError(f"tensor #{k}: name must be a non-empty string")
    dtype = doc["dtype"]
    if type(dtype) is not str or dtype not in _LE_DTYPES:
        raise ArtifactError(f"tensor {name!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    shape = _shape(doc["shape"], name)
    quant = doc["quant"]
    if quant is not None:
        if type(quant) is not dict:
            raise ArtifactError(f"tensor {name!r}: quant must be an object or null")
        _check_json_value(quant, f"tensor {name!r} quant")
    data = None
    entry = doc["data"]
    if entry is not None:
        if type(entry) is not dict:
            raise ArtifactError(f"tensor {name!r}: data must be an object or null")
        if shape is None or any(type(d) is not int for d in shape):
            raise ArtifactError(f"tensor {name!r}: a constant needs a static shape, got {doc['shape']}")
        data = decode_entry(entry, _LE_DTYPES[dtype], shape, c, name, lenient)
    return Tensor(name, dtype, shape, data, quant)


def decode_entry(entry: dict, dtype: np.dtype, shape, c: "_Container", name: str, lenient: bool):
    """A constant's data from its weight-table ``entry``, by the decoder its encoding names."""
    encoding = entry.get("encoding")
    decode = _DECODERS.get(encoding) if type(encoding) is str else None
    if decode is None:
        raise ArtifactError(f"tensor {name!r}: unknown weight encoding {encoding!r} "
                            f"(this edge_infer knows {', '.join(_DECODERS)})")
    return decode(entry, dtype, shape, c, name, lenient)


def _build_node(doc, k: int, tensors: Dict[str, Tensor], lenient: bool) -> Node:
    if not (type(doc) is dict and doc.keys() == _NODE_KEYS):
        _expect_keys(doc, _NODE_KEYS, f"node #{k}", lenient)
    op, name, attrs = doc["op"], doc["name"], doc["attrs"]
    if not (type(op) is str and op):
        raise ArtifactError(f"node #{k}: op must be a non-empty string, got {op!r}")
    if type(name) is not str:
        raise ArtifactError(f"node #{k}: name must be a string, got {name!r}")
    inputs, outputs = doc["inputs"], doc["outputs"]
    for refs in (inputs, outputs):
        if type(refs) is not list:
            raise ArtifactError(f"node {name!r} ({op}): inputs and outputs must be lists")
        for t in refs:
            # "" marks a missing optional input; anything else must be a tensor
            if type(t) is not str or (t and t not in tensors):
                raise ArtifactError(f"node {name!r} ({op}) references missing tensor {t!r}")
    _check_attrs(attrs, f"node {name!r} ({op})")
    return Node(op, inputs, outputs, attrs, name)


def _check_attrs(attrs, where: str) -> None:
    if type(attrs) is not dict:
        raise ArtifactError(f"{where}: attrs must be an object")
    for v in attrs.values():
        if type(v) is list or type(v) is dict:
            _check_json_value(attrs, f"{where} attrs")
            break


def _build_graph(doc, c: _Container) -> Graph:
    lenient = c.newer_minor  # newer minor versions may add fields we can ignore
    _expect_keys(doc, _GRAPH_KEYS, "graph", lenient)
    name, metadata = doc["name"], doc["metadata"]
    if not isinstance(name, str):
        raise ArtifactError("graph name must be a string")
    if not isinstance(metadata, dict):
        raise ArtifactError("graph metadata must be an object")
    _check_json_value(metadata, "graph metadata")
    if not isinstance(doc["tensors"], list) or not isinstance(doc["nodes"], list):
        raise ArtifactError("graph tensors and nodes must be lists")
    tensors: Dict[str, Tensor] = {}
    for k, t in enumerate(doc["tensors"]):
        tensor = _build_tensor(t, k, c, lenient)
        if tensor.name in tensors:
            raise ArtifactError(f"tensor {tensor.name!r} defined twice")
        tensors[tensor.name] = tensor
    nodes = [_build_node(n, k, tensors, lenient) for k, n in enumerate(doc["nodes"])]
    inputs = _str_list(doc["inputs"], "graph inputs")
    outputs = _str_list(doc["outputs"], "graph outputs")
    for t in inputs + outputs:
        if t not in tensors:
            raise ArtifactError(f"graph input/output {t!r} is not a tensor")
    return _new_graph(name, tensors, nodes, inputs, outputs, metadata)


def _new_graph(name: str, tensors: Dict[str, Tensor], nodes: List[Node], inputs: List[str],
               outputs: List[str], metadata: dict) -> Graph:
    """The Graph of decoded parts, after its structural check (Graph.validate)."""
    g = Graph(name)
    g.tensors, g.nodes, g.inputs, g.outputs, g.metadata = tensors, nodes, inputs, outputs, metadata
    try:
        g.validate()
    except GraphError as e:
        raise ArtifactError(f"artifact holds an invalid graph: {e}") from e
    return g
