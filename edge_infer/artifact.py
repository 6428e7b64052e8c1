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
import mmap
import os
import struct
import threading
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from . import signing
from .errors import ArtifactError, GraphError
from .ir.graph import DTYPES, Graph, Node, Tensor
from .sparse.encodings import BLOCKS, INDEX_DTYPES, SparseArray, validate as _validate_sparse

PathLike = Union[str, "os.PathLike[str]"]

FORMAT_VERSION: Tuple[int, int] = (1, 2)   # 1.1: sparse weight encodings; 1.2: compact graph
MAGIC = b"\x89EIM\r\n\x1a\n"
ALIGN = 64
HEADER_SIZE = 64
ENTRY_SIZE = 32
MAX_SECTIONS = 64
MAX_RANK = 64           # numpy's own limit (NPY_MAXDIMS in numpy 2)
MAX_JSON_DEPTH = 64     # for free-form values: attrs, quant, metadata
MAX_DIM = 2 ** 62
_THREADED_CRC_MIN = 8 << 20  # below this a thread costs more than it saves

KIND_META = b"META"
KIND_GRAPH = b"GRPH"
KIND_WEIGHTS = b"WGHT"
KNOWN_KINDS = (KIND_META, KIND_GRAPH, KIND_WEIGHTS)

SECTION_REQUIRED = 1    # section flag: a reader that does not know the kind must refuse
SECTION_ZLIB = 2        # section flag (1.2): the payload is zlib-compressed (META and GRPH only)
FLAG_COMPACT_GRAPH = 1  # header flag (1.2): GRPH holds the compact encoding (artifact_compact.py)
KNOWN_HEADER_FLAGS = FLAG_COMPACT_GRAPH  # header flags are required-feature bits
KNOWN_SECTION_FLAGS = SECTION_REQUIRED | SECTION_ZLIB
INFLATE_RATIO = 256     # a compressed section may inflate to 1 MiB + 256x its size, no more

# magic, major, minor, flags, file_size, section_count, table_crc, reserved, header_crc
_HEADER = struct.Struct("<8sHHIQII28sI")
# kind, flags, offset, length, crc, reserved
_ENTRY = struct.Struct("<4sIQQII")
assert _HEADER.size == HEADER_SIZE and _ENTRY.size == ENTRY_SIZE

_GRAPH_KEYS = {"name", "inputs", "outputs", "metadata", "tensors", "nodes"}
_TENSOR_KEYS = {"name", "dtype", "shape", "quant", "data"}
_NODE_KEYS = {"op", "name", "inputs", "outputs", "attrs"}
_RAW_KEYS = {"encoding", "offset", "nbytes"}


@dataclass
class Section:
    """One section table entry; ``offset`` is from the start of the file."""
    kind: bytes
    flags: int
    offset: int
    length: int
    crc: int


@dataclass
class ArtifactInfo:
    """What ``read_info`` learns from an artifact without touching its weights."""
    path: str
    version: Tuple[int, int]
    file_size: int
    sections: List[Section]
    meta: dict
    #: None for an unsigned file; ``verified`` says whether trusted keys checked it
    signature: Optional[signing.SignatureInfo] = None

    @property
    def weights_nbytes(self) -> int:
        return sum(s.length for s in self.sections if s.kind == KIND_WEIGHTS)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


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


def _dim_to_json(d, name: str):
    if isinstance(d, str) and d:
        return d
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 0 <= d < MAX_DIM:
        return int(d)
    raise GraphError(f"tensor {name!r}: dimension {d!r} cannot be stored "
                     f"(a non-empty symbol or an int in [0, 2**62))")


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
    signer = None if sign_key is None else signing.load_private_key(sign_key)
    graph.copy().validate()
    _check_writable(graph)
    _check_json_value(meta, "meta")
    from .artifact_compact import INLINE_MAX, encode_graph
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
    _atomic_write(os.fspath(path), signing.signed_writer(write, signer, file_size))
    return file_size + signing.TRAILER_SIZE


def _pack_section(raw: bytes) -> Tuple[int, bytes]:
    """(flags, payload): zlib-compressed where that is smaller and within what a reader inflates."""
    packed = zlib.compress(raw, 9)
    if len(packed) < len(raw) and len(raw) <= _inflate_limit(len(packed)):
        return SECTION_ZLIB, packed
    return 0, raw


def _inflate_limit(packed_len: int) -> int:
    # bounds what a small hostile section can make the loader allocate (a zlib bomb)
    return (1 << 20) + INFLATE_RATIO * packed_len


def _inflate(data: bytes, kind: bytes) -> bytes:
    limit = _inflate_limit(len(data))
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise ArtifactError(f"{kind.decode()} section does not inflate: {e}") from e
    if len(out) > limit:
        raise ArtifactError(f"{kind.decode()} section inflates past {limit} bytes")
    if not d.eof or d.unused_data:
        raise ArtifactError(f"{kind.decode()} section: truncated zlib stream or data after it")
    return out


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


# ---------------------------------------------------------------------------
# reading: container
# ---------------------------------------------------------------------------

class _Container:
    """An opened, checked container: the map, its version and its sections by kind."""

    def __init__(self, mm: mmap.mmap, version: Tuple[int, int], sections: List[Section], flags: int = 0):
        self.mm = mm
        self.version = version
        self.flags = flags              # header flags: FLAG_COMPACT_GRAPH
        self.sections = sections
        self.by_kind = {s.kind: s for s in sections}
        self.weights: Optional[np.ndarray] = None  # read-only uint8 view of WGHT
        self._weights_crc: Optional[int] = None
        self._crc_thread: Optional[threading.Thread] = None
        #: the file's signature (verified or not), None for an unsigned file; set by _open
        self.signature: Optional[signing.SignatureInfo] = None

    @property
    def newer_minor(self) -> bool:
        return self.version[1] > FORMAT_VERSION[1]

    def section(self, kind: bytes) -> Section:
        s = self.by_kind.get(kind)
        if s is None:
            raise ArtifactError(f"no {kind.decode()} section")
        return s

    def read(self, kind: bytes) -> bytes:
        """A copy of a (small) section's bytes, its CRC verified, inflated if compressed."""
        s = self.section(kind)
        data = self.mm[s.offset:s.offset + s.length]
        if zlib.crc32(data) != s.crc:
            raise ArtifactError(f"{kind.decode()} section checksum mismatch (file is corrupt)")
        return _inflate(data, kind) if s.flags & SECTION_ZLIB else data

    def start_weights_check(self) -> None:
        """Expose the weights section as one read-only uint8 array and start its CRC.

        The CRC of a large section runs in a thread: zlib releases the GIL, and
        parsing and checking the graph meanwhile does not depend on the weight
        bytes being intact. ``finish_weights_check`` joins it before any array
        is handed out.
        """
        s = self.section(KIND_WEIGHTS)
        # each constant is a slice of this view, so every array's base chain
        # ends at the mmap and keeps it alive; the CRC reads it without a copy
        self.weights = np.frombuffer(self.mm, np.uint8, count=s.length, offset=s.offset)
        if s.length >= _THREADED_CRC_MIN:
            self._crc_thread = threading.Thread(target=self._crc_weights, name="eim-crc", daemon=True)
            self._crc_thread.start()
        else:
            self._crc_weights()

    def _crc_weights(self) -> None:
        # in 1 MB steps, each dropped from the resident set once summed (memory/pages.py): the
        # pages stay in the page cache, and the check costs the process no RSS beyond a step
        # (and the 2 MB page-cache folio it may share: with 8 MB steps the check's transient
        # was the peak RSS of small models, digits 33.2 -> 32.x MB)
        from .memory.pages import drop_range
        crc, offset, step = 0, self.section(KIND_WEIGHTS).offset, 1 << 20
        for k in range(0, self.weights.size, step):
            crc = zlib.crc32(self.weights[k:k + step], crc)
            drop_range(self.mm, offset + k, min(step, self.weights.size - k))
        self._weights_crc = crc

    def finish_weights_check(self) -> None:
        """Wait for the weights CRC; raise ArtifactError if it does not match."""
        if self._crc_thread is not None:
            self._crc_thread.join()
            self._crc_thread = None
        if self._weights_crc != self.section(KIND_WEIGHTS).crc:
            raise ArtifactError("WGHT section checksum mismatch (file is corrupt)")

    def close(self) -> None:
        """Unmap unless arrays still point into the map (then it lives on with them)."""
        if self._crc_thread is not None:
            self._crc_thread.join()
            self._crc_thread = None
        self.weights = None
        try:
            self.mm.close()
        except BufferError:
            pass


def _open_map(path, trust: Optional[signing.TrustedKeys] = None
              ) -> Tuple[mmap.mmap, Optional[signing.SignatureInfo]]:
    """Map the container: the file without its signature trailer, if it has one.

    With ``trust`` (trusted keys by id) the file must be signed by one of them, and the
    signature is verified here, before anything else of the file is parsed. The map covers
    the signed bytes only, so the container checks see the file as an unsigned one.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < HEADER_SIZE:
                raise ArtifactError(f"{path}: truncated: {size} bytes, "
                                    f"the header alone is {HEADER_SIZE}")
            trailer = signing.read_trailer(f, size)
            if trailer is None and trust is not None:
                raise ArtifactError(f"{path} is not signed; with trusted keys only signed artifacts load")
            end = size if trailer is None else trailer.signed_length
            mm = mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ)
    except OSError as e:
        raise ArtifactError(f"cannot read artifact {path}: {e}") from e
    if trailer is None:
        return mm, None
    if trust is None:
        return mm, signing.SignatureInfo(trailer.key_id, trailer.signed_length, False)
    try:
        return mm, signing.verify_trailer(trailer, mm, trust)
    except BaseException:
        mm.close()
        raise


def _check_header(mm: mmap.mmap) -> Tuple[Tuple[int, int], int, int]:
    """Validate the header; return (version, section_count, flags)."""
    head = mm[:HEADER_SIZE]
    magic, major, minor, flags, file_size, count, table_crc, reserved, crc = _HEADER.unpack(head)
    if magic != MAGIC:
        raise ArtifactError("not an .eim artifact (bad magic bytes)")
    # major/minor sit at a fixed place in every format version, so check them
    # before the CRC to name a version mismatch as such
    if major != FORMAT_VERSION[0]:
        raise ArtifactError(f"artifact format version {major}.{minor} is not supported "
                            f"(this edge_infer reads {FORMAT_VERSION[0]}.x)")
    if zlib.crc32(head[:HEADER_SIZE - 4]) != crc:
        raise ArtifactError("header checksum mismatch (file is corrupt)")
    if flags & ~KNOWN_HEADER_FLAGS:
        raise ArtifactError(f"artifact needs features this edge_infer lacks (header flags {flags:#x}; "
                            f"format {major}.{minor})")
    if minor <= FORMAT_VERSION[1] and reserved != bytes(len(reserved)):
        raise ArtifactError("header reserved bytes are not zero")
    if file_size != len(mm):
        raise ArtifactError(f"file is {len(mm)} bytes but its header says {file_size} "
                            f"({'truncated' if len(mm) < file_size else 'trailing data'})")
    if count > MAX_SECTIONS:
        raise ArtifactError(f"section count {count} exceeds the limit of {MAX_SECTIONS}")
    table_end = HEADER_SIZE + count * ENTRY_SIZE
    if table_end > len(mm):
        raise ArtifactError("section table runs past the end of the file")
    if zlib.crc32(mm[HEADER_SIZE:table_end]) != table_crc:
        raise ArtifactError("section table checksum mismatch (file is corrupt)")
    return (major, minor), count, flags


def _check_table(mm: mmap.mmap, version: Tuple[int, int], count: int) -> List[Section]:
    """Parse the section table and check the canonical layout and zero padding."""
    newer = version[1] > FORMAT_VERSION[1]
    sections: List[Section] = []
    pos = HEADER_SIZE + count * ENTRY_SIZE
    for k in range(count):
        kind, flags, offset, length, crc, reserved = _ENTRY.unpack_from(mm, HEADER_SIZE + k * ENTRY_SIZE)
        name = kind.decode("ascii", "replace")
        if flags & ~KNOWN_SECTION_FLAGS or (not newer and reserved):
            raise ArtifactError(f"section {k} ({name!r}): unknown flags or reserved bits set")
        if flags & SECTION_ZLIB and (kind == KIND_WEIGHTS or version < (1, 2)):
            raise ArtifactError(f"section {name!r} is marked compressed, which format "
                                f"{version[0]}.{version[1]} does not allow for it")
        if kind not in KNOWN_KINDS and (flags & SECTION_REQUIRED or not newer):
            raise ArtifactError(f"section {k} has unknown kind {name!r}")
        if any(s.kind == kind for s in sections):
            raise ArtifactError(f"section {name!r} appears twice")
        # sections follow each other in table order, each at the next 64-byte
        # boundary; so the only bytes no CRC covers are padding, checked below
        if offset != _align(pos):
            raise ArtifactError(f"section {name!r} at offset {offset}, expected {_align(pos)}")
        if length > len(mm) - offset:
            raise ArtifactError(f"section {name!r} ({length} bytes at {offset}) "
                                "runs past the end of the file")
        if mm[pos:offset].count(0) != offset - pos:
            raise ArtifactError(f"padding before section {name!r} is not zero")
        sections.append(Section(kind, flags, offset, length, crc))
        pos = offset + length
    if pos != len(mm):
        raise ArtifactError(f"{len(mm) - pos} bytes after the last section")
    for kind in KNOWN_KINDS:
        if not any(s.kind == kind for s in sections):
            raise ArtifactError(f"no {kind.decode()} section")
    return sections


def _open(path, trust: Optional[signing.TrustedKeys] = None) -> _Container:
    mm, sig = _open_map(path, trust)
    try:
        version, count, flags = _check_header(mm)
        c = _Container(mm, version, _check_table(mm, version, count), flags)
    except BaseException:
        mm.close()
        raise
    c.signature = sig
    return c


@contextmanager
def _refuse_malformed():
    """Turn any slip past the named checks into ArtifactError, so callers see one type."""
    try:
        yield
    except ArtifactError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
            RecursionError, struct.error) as e:
        raise ArtifactError(f"malformed artifact ({type(e).__name__}: {e})") from e


def _parse_json(raw: bytes, what: str):
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ArtifactError(f"{what} section is not UTF-8: {e}") from e
    except RecursionError as e:
        raise ArtifactError(f"{what} section JSON is nested too deeply") from e
    except ValueError as e:  # JSONDecodeError and over-long integer literals
        raise ArtifactError(f"{what} section is not valid JSON: {e}") from e


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
    signed file is ``signing.TRAILER_SIZE`` bytes longer.
    """
    trust = None if trusted_keys is None else signing.trusted_set(trusted_keys)
    with _refuse_malformed():
        c = _open(path, trust)
        try:
            return ArtifactInfo(os.fspath(path), c.version, len(c.mm), c.sections, _read_meta(c),
                                c.signature)
        finally:
            c.close()


# ---------------------------------------------------------------------------
# reading: graph
# ---------------------------------------------------------------------------

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


def load_artifact(path: PathLike, max_bytes: Optional[int] = None,
                  trusted_keys=None) -> Tuple[Graph, dict]:
    """Load the artifact at ``path``; return ``(graph, meta)``.

    ``trusted_keys`` (Ed25519 public keys: file paths, bytes, or a ``signing.trusted_set``):
    when given, even empty, the file must carry a signature by one of them, verified before
    anything else of the file is parsed; an unsigned file, another signer or a bad signature
    raises ArtifactError. Without it a signed file loads like an unsigned one, unless its
    target profile says ``"require_signed": true`` (then ArtifactError: no key to verify).

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
    trust = None if trusted_keys is None else signing.trusted_set(trusted_keys)
    with _refuse_malformed():
        c = _open(path, trust)
        try:
            c.start_weights_check()
            try:
                meta = _read_meta(c)
                signing.check_required(meta, c.signature)
                doc = _parse_json(c.read(KIND_GRAPH), "GRPH")
                if c.flags & FLAG_COMPACT_GRAPH:
                    from .artifact_compact import decode_graph
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
