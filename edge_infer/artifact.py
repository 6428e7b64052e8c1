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
from .artifact_graph import ALIGN, MAX_DIM, MAX_RANK, _build_graph, _check_json_value, _parse_json
from .errors import ArtifactError, GraphError
from .ir.graph import Graph
from .sparse.encodings import SparseArray

PathLike = Union[str, "os.PathLike[str]"]

FORMAT_VERSION: Tuple[int, int] = (1, 2)   # 1.1: sparse weight encodings; 1.2: compact graph
MAGIC = b"\x89EIM\r\n\x1a\n"
HEADER_SIZE = 64
ENTRY_SIZE = 32
MAX_SECTIONS = 64
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
    trust = signing.trust_for_load(trusted_keys)
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

    ``trusted_keys`` (Ed25519 public keys: file paths, bytes, or a ``signing.trusted_set``):
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
    trust = signing.trust_for_load(trusted_keys)
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
