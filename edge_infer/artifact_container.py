"""The ``.eim`` container, read side: format constants, the header and section table checks,
the checksummed sections, and the map of the file (its signature trailer verified first with
trusted keys, ``signature.py``). ``docs/format.md`` specifies the layout. Below ``artifact.py``
(the writer and ``load_artifact``, which re-export these names), ``artifact_graph.py`` and
``artifact_compact.py``, which decode the graph section from a ``_Container``."""
from __future__ import annotations

import mmap
import os
import struct
import threading
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from . import signature
from .errors import ArtifactError

ALIGN = 64              # sections and weight blobs start on 64-byte boundaries
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


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


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
        self.signature: Optional[signature.SignatureInfo] = None

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


def _open_map(path, trust: Optional[signature.TrustedKeys] = None
              ) -> Tuple[mmap.mmap, Optional[signature.SignatureInfo]]:
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
            trailer = signature.read_trailer(f, size)
            if trailer is None and trust is not None:
                raise ArtifactError(f"{path} is not signed; with trusted keys only signed artifacts load")
            end = size if trailer is None else trailer.signed_length
            mm = mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ)
    except OSError as e:
        raise ArtifactError(f"cannot read artifact {path}: {e}") from e
    if trailer is None:
        return mm, None
    if trust is None:
        return mm, signature.SignatureInfo(trailer.key_id, trailer.signed_length, False)
    try:
        return mm, signature.verify_trailer(trailer, mm, trust)
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


def _open(path, trust: Optional[signature.TrustedKeys] = None) -> _Container:
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
