"""Reader and writer of ``.eim`` artifacts: one file with graph, weights and metadata.

The byte layout is specified in ``docs/format.md``. In short: a 64-byte header
with its own CRC32, a section table (CRC'd from the header), then 64-byte
aligned sections, each with a CRC32: ``META`` (metadata JSON), ``GRPH`` (graph
JSON) and ``WGHT`` (raw constant bytes). The gaps between sections must be zero,
so every byte of a valid file is covered by a checksum or a zero check. A signed
file adds a 128-byte Ed25519 trailer after the container (``edge_infer.signing``);
with trusted keys it is verified before the header is parsed.

Loading maps the file with ``mmap`` and hands out constants as read-only
``np.frombuffer`` views on it: nothing is copied, and each array keeps the map
alive through its ``base``. JSON is parsed with ``json.loads`` only; nothing in
a file can make the loader execute code. Everything is validated before the
Graph is built, so a bad file raises ArtifactError and never yields half a graph.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from . import signature
from .artifact_compact import INLINE_MAX, decode_graph, encode_graph
# the format constants and the container reader are re-exported: artifact.X as before the split
from .artifact_container import (ALIGN, ENTRY_SIZE, FLAG_COMPACT_GRAPH, FORMAT_VERSION, HEADER_SIZE,  # noqa: F401
                                 INFLATE_RATIO, KIND_GRAPH, KIND_META, KIND_WEIGHTS, KNOWN_HEADER_FLAGS, KNOWN_KINDS,
                                 KNOWN_SECTION_FLAGS, MAGIC, MAX_SECTIONS, SECTION_REQUIRED, SECTION_ZLIB, _ENTRY,
                                 _HEADER, Section, _align, _Container, _check_header, _check_table, _inflate,
                                 _inflate_limit, _open, _open_map, _refuse_malformed)
from .artifact_graph import (MAX_DIM, MAX_RANK, _build_graph, _check_json_value, _dim_to_json,  # noqa: F401
                             _parse_json)
from .errors import ArtifactError, GraphError
from .ir.graph import Graph
from .sparse.encodings import SparseArray

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class ArtifactInfo:
    """What ``read_info`` learns from an artifact without touching its weights."""
    path: str
    version: Tuple[int, int]
    file_size: int
    sections: List[Section]
    meta: dict
    #: None for an unsigned file; ``verified`` says whether trusted keys checked it
    signature: Optional[signature.SignatureInfo] = None

    @property
    def weights_nbytes(self) -> int:
        return sum(s.length for s in self.sections if s.kind == KIND_WEIGHTS)


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _json_default(obj):
    # numpy scalars and small arrays sneak into attrs, quant and metadata via
    # arithmetic; store them as the plain JSON values they stand for.
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def _dump_json(obj, what: str) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"),
                          default=_json_default).encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeError) as e:
        raise ArtifactError(f"cannot write {what}: {e}") from e


def _check_writable(graph: Graph) -> None:
    """Refuse what validate() lets through but the loader would refuse: write only loadable files."""
    if not isinstance(graph.name, str) or not isinstance(graph.metadata, dict):
        raise GraphError("graph name must be a str and graph metadata a dict")
    for name, t in graph.tensors.items():
        if not (isinstance(name, str) and name) or t.name != name:
            raise GraphError(f"tensor {name!r}: name must be a non-empty string equal to its key")
        if t.shape is not None and len(t.shape) > MAX_RANK:
            raise GraphError(f"tensor {name!r}: rank {len(t.shape)} exceeds {MAX_RANK}")
        if t.quant is not None:
            if not isinstance(t.quant, dict):
                raise GraphError(f"tensor {name!r}: quant must be a dict")
            _check_json_value(t.quant, f"tensor {name!r} quant")
    for n in graph.nodes:
        for o in n.outputs:
            if o and o not in graph.tensors:
                raise GraphError(f"node {n.name!r} ({n.op}) writes {o!r}, which has no tensor")
        if not isinstance(n.attrs, dict):
            raise GraphError(f"node {n.name!r} ({n.op}): attrs must be a dict")
        _check_json_value(n.attrs, f"node {n.name!r} attrs")
    _check_json_value(graph.metadata, "graph metadata")


def _plan_weights(graph: Graph, inline_max: int = -1) -> Tuple[Dict[str, dict], List[Tuple[int, np.ndarray]], int]:
    """Lay out constants in the weights section: entries by tensor name, blobs, size.

    Dense constants of at most ``inline_max`` bytes get no entry (the graph inlines them)."""
    entries: Dict[str, dict] = {}
    blobs: List[Tuple[int, np.ndarray]] = []
    by_id: Dict[int, dict] = {}  # the same array object used twice is stored once
    pos = 0
    for t in graph.tensors.values():
        if t.data is None:
            continue
        if t.data.dtype.name != t.dtype:
            raise GraphError(f"constant {t.name!r}: data dtype {t.data.dtype} != declared {t.dtype}")
        known = by_id.get(id(t.data))
        if known is not None:
            entries[t.name] = known
            continue
        if isinstance(t.data, SparseArray):
            entry, pos = _plan_sparse(t.data, pos, blobs)
            entries[t.name] = by_id[id(t.data)] = entry
            continue
        if t.data.nbytes <= inline_max:
            continue
        arr = np.ascontiguousarray(t.data, dtype=np.dtype(t.dtype).newbyteorder("<"))
        entry = {"offset": pos, "nbytes": int(arr.nbytes), "encoding": "raw"}
        entries[t.name] = by_id[id(t.data)] = entry
        blobs.append((pos, arr))
        pos = _align(pos + arr.nbytes)
    return entries, blobs, pos


def _plan_sparse(s: SparseArray, pos: int, blobs: list) -> Tuple[dict, int]:
    """A sparse entry: each part of the encoding its own aligned little-endian blob."""
    parts = {}
    for name, a in s.parts().items():
        arr = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        parts[name] = [pos, int(arr.nbytes)]
        blobs.append((pos, arr))
        pos = _align(pos + arr.nbytes)
    entry = {"encoding": s.encoding, "parts": parts}
    if s.encoding != "bitmask":
        entry["index_dtype"] = s.indices.dtype.name
    if s.encoding == "bcsr":
        entry["block"] = list(s.block)
    return entry, pos


def save_artifact(path: PathLike, graph: Graph, meta: Optional[dict] = None, strip_names: bool = False,
                  sign_key=None) -> int:
    """Write ``graph`` and ``meta`` to ``path`` as an .eim artifact; return its size in bytes.

    The graph is stored in the compact encoding (artifact_compact.py): tensors and nodes by
    index, the original names in a side table; ``strip_names`` leaves the side table out
    (names but the graph inputs' and outputs' then load as short base-36 ids).
    ``sign_key`` (an Ed25519 private key: file path, bytes or key object) appends a signature
    trailer (``edge_infer.signing``), computed as the bytes are written.

    The graph is validated first (on a copy: ``validate`` reorders nodes), so a
    file that is written can be loaded. ``meta`` must be a JSON-able dict. The
    file is written next to ``path`` under a temporary name, synced, and
    renamed over ``path``, so readers see the old file or the new one, never a
    mix. Raises GraphError for an invalid graph, ArtifactError for values that
    are not JSON (or nest deeper than the loader accepts), and OSError when the
    file system fails.
    """
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise ArtifactError(f"meta must be a dict, not {type(meta).__name__}")
    signer = None if sign_key is None else signature.load_private_key(sign_key)
    graph.copy().validate()
    _check_writable(graph)
    _check_json_value(meta, "meta")
    entries, blobs, weights_len = _plan_weights(graph, INLINE_MAX)
    meta_flags, meta_bytes = _pack_section(_dump_json(meta, "meta"))
    graph_flags, graph_bytes = _pack_section(
        _dump_json(encode_graph(graph, entries, strip_names), f"graph {graph.name!r}"))

    table_end = HEADER_SIZE + 3 * ENTRY_SIZE
    meta_off = _align(table_end)
    graph_off = _align(meta_off + len(meta_bytes))
    weights_off = _align(graph_off + len(graph_bytes))
    file_size = weights_off + weights_len

    weights_crc = 0
    for pos, arr in blobs:
        weights_crc = zlib.crc32(_bytes_view(arr), weights_crc)
        weights_crc = zlib.crc32(bytes(_align(pos + arr.nbytes) - pos - arr.nbytes), weights_crc)
    sections = [
        Section(KIND_META, meta_flags, meta_off, len(meta_bytes), zlib.crc32(meta_bytes)),
        Section(KIND_GRAPH, graph_flags, graph_off, len(graph_bytes), zlib.crc32(graph_bytes)),
        Section(KIND_WEIGHTS, 0, weights_off, weights_len, weights_crc),
    ]
    table = b"".join(_ENTRY.pack(s.kind, s.flags, s.offset, s.length, s.crc, 0) for s in sections)
    head = _pack_header(FORMAT_VERSION, FLAG_COMPACT_GRAPH, file_size, len(sections), zlib.crc32(table))

    def write(f) -> None:
        f.write(head)
        f.write(table)
        _pad_to(f, table_end, meta_off)
        f.write(meta_bytes)
        _pad_to(f, meta_off + len(meta_bytes), graph_off)
        f.write(graph_bytes)
        _pad_to(f, graph_off + len(graph_bytes), weights_off)
        for pos, arr in blobs:
            f.write(_bytes_view(arr))
            _pad_to(f, pos + arr.nbytes, _align(pos + arr.nbytes))

    if signer is None:
        _atomic_write(os.fspath(path), write)
        return file_size
    _atomic_write(os.fspath(path), signature.signed_writer(write, signer, file_size))
    return file_size + signature.TRAILER_SIZE


def _pack_section(raw: bytes) -> Tuple[int, bytes]:
    """(flags, payload): zlib-compressed where that is smaller and within what a reader inflates."""
    packed = zlib.compress(raw, 9)
    if len(packed) < len(raw) and len(raw) <= _inflate_limit(len(packed)):
        return SECTION_ZLIB, packed
    return 0, raw


def _bytes_view(arr: np.ndarray) -> memoryview:
    # zero-copy bytes of a C-contiguous array, 0-d and empty arrays included
    return memoryview(arr.reshape(-1)).cast("B")


def _pad_to(f, pos: int, target: int) -> None:
    if target > pos:
        f.write(bytes(target - pos))


def _pack_header(version: Tuple[int, int], flags: int, file_size: int, count: int,
                 table_crc: int) -> bytes:
    body = _HEADER.pack(MAGIC, version[0], version[1], flags, file_size, count, table_crc,
                        bytes(28), 0)[:HEADER_SIZE - 4]
    return body + struct.pack("<I", zlib.crc32(body))


def _atomic_write(path: str, write: Callable, check: Optional[Callable[[str], object]] = None) -> None:
    """``write(f)`` into a temporary file next to ``path``, then rename it over ``path``;
    ``check(tmp)``, if given, runs on the finished temporary file first (an exception leaves
    ``path`` untouched). Nothing is left behind on failure."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.urandom(6).hex()}.tmp")
    # os.open with 0o666 so the umask applies, as for a plain open(path, "wb")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        # a large buffer turns many small blob writes into few big ones; Linux
        # then caches the file in large folios, which halves the page-fault
        # cost of the first pass over the mmap at load time
        with os.fdopen(fd, "wb", buffering=4 << 20) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_meta(c: _Container) -> dict:
    meta = _parse_json(c.read(KIND_META), "META")
    if not isinstance(meta, dict):
        raise ArtifactError(f"META section holds a {type(meta).__name__}, not an object")
    _check_json_value(meta, "meta")
    return meta


def read_meta(path: PathLike) -> dict:
    """Return the metadata dict of the artifact at ``path``, checking header, table and META only.

    Cheap: the graph and the weights are not read. Raises ArtifactError on a bad file.
    """
    return read_info(path).meta


def read_info(path: PathLike, trusted_keys=None) -> ArtifactInfo:
    """Return format version, size, section table, metadata and signature of the artifact at
    ``path``.

    Checks header, section table and META, like ``read_meta``; with ``trusted_keys`` (as for
    ``load_artifact``) also the signature, first. ``file_size`` is the container's size: a
    signed file is ``signature.TRAILER_SIZE`` bytes longer.
    """
    trust = signature.trust_for_load(trusted_keys)
    with _refuse_malformed():
        c = _open(path, trust)
        try:
            return ArtifactInfo(os.fspath(path), c.version, len(c.mm), c.sections, _read_meta(c),
                                c.signature)
        finally:
            c.close()


def load_artifact(path: PathLike, max_bytes: Optional[int] = None,
                  trusted_keys=None) -> Tuple[Graph, dict]:
    """Load the artifact at ``path``; return ``(graph, meta)``.

    ``trusted_keys`` (Ed25519 public keys: file paths, bytes, or a ``signature.trusted_set``):
    when given, even empty, the file must carry a signature by one of them, verified before
    anything else of the file is parsed; an unsigned file, another signer or a bad signature
    raises ArtifactError. Without it the keys listed in ``$EDGE_INFER_TRUSTED_KEYS`` (a
    device-wide policy) are required the same way; with neither, a signed file loads like an
    unsigned one, unless its target profile says ``"require_signed": true`` (then
    ArtifactError: no key to verify).

    Every checksum is verified and the graph is validated before it is
    returned. Constants are read-only numpy views on a read-only memory map of
    the file: they are not copied, and the map stays open while any of them
    lives. Replace artifacts atomically (as ``save_artifact`` does), never
    rewrite one in place while it is loaded. Raises ArtifactError when the file
    cannot be read or is truncated, corrupt, of an unsupported version or
    otherwise malformed, or when a node fails its op schema or the graph would allocate more
    than ``max_bytes`` (default: the target profile's budget, else the memory available; see
    ``ops.validate_graph``).
    """
    trust = signature.trust_for_load(trusted_keys)
    with _refuse_malformed():
        c = _open(path, trust)
        try:
            c.start_weights_check()
            try:
                meta = _read_meta(c)
                signature.check_required(meta, c.signature)
                doc = _parse_json(c.read(KIND_GRAPH), "GRPH")
                if c.flags & FLAG_COMPACT_GRAPH:
                    graph = decode_graph(doc, c)
                else:                                   # 1.0 and 1.1 files
                    graph = _build_graph(doc, c)
            except ArtifactError:
                c.finish_weights_check()  # corruption explains any other error best
                raise
            c.finish_weights_check()
            from .ops import validate_graph, validate_meta   # semantic checks, before any backend
            validate_meta(meta, "load")
            validate_graph(graph, "load", max_bytes, meta.get("target"), count_constants=False)
        except BaseException:
            c.close()
            raise
    return graph, meta
