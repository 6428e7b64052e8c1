"""Ed25519 signatures of ``.eim`` artifacts: a 128-byte trailer after the container.

The trailer (docs/format.md, "Signature trailer") ends a signed file; its signature covers
every byte before it and its own fields. ``artifact.load_artifact`` reads it first: with
trusted keys, the signature is verified before any other byte of the file is parsed (no
header, no JSON, no weights), and an unsigned file, an unknown signer or a bad signature is
refused with ``ArtifactError``. Without trusted keys a signed file loads like an unsigned
one (the trailer's fields are still checked). ``cryptography`` is imported only when a key
is used (verifying, signing, keygen): a runtime without trusted keys never imports it.

This module is the trailer, its keys and its checks, below the container (``artifact_container.py``
reads the trailer first); ``signing.py`` adds signing a file in place (``sign_artifact``), which
loads the signed file, and re-exports these names.
"""
from __future__ import annotations

import os
import struct
from typing import Callable, Dict, Iterable, NamedTuple, Optional, Union

from .errors import ArtifactError, KeyFileError


def _hashlib():
    """hashlib, imported when a signature is read or made: it maps libcrypto (~3.6 MB
    resident), which a runtime loading unsigned artifacts never needs."""
    import hashlib
    return hashlib

SIG_MAGIC = b"\x89EIS\r\n\x1a\n"
SIG_VERSION = 1
ALG_ED25519_SHA512 = 1   # Ed25519 (RFC 8032) of trailer[0:64] + SHA-512(signed bytes)
TRAILER_SIZE = 128
# magic, version, algorithm, flags, signed_length, key_id, reserved, signature
_TRAILER = struct.Struct("<8sHHIQ32s8s64s")
_SIGNED_FIELDS = 64      # the trailer's bytes before the signature, which it covers
_MIN_CONTAINER = 64      # an .eim header: a shorter "signed part" cannot be an artifact
_HASH_STEP = 1 << 20
assert _TRAILER.size == TRAILER_SIZE

KeySource = Union[str, "os.PathLike[str]", bytes]
#: trusted public keys by key id (hex SHA-256 of the raw 32-byte key) -> raw key
TrustedKeys = Dict[str, bytes]


class Trailer(NamedTuple):
    """The parsed fields of a signature trailer (its checks passed, the signature not yet)."""
    head: bytes            # trailer[0:64]: the fields the signature covers
    signed_length: int
    key_id: str            # hex
    signature: bytes


class SignatureInfo(NamedTuple):
    """What a load learnt about a file's signature."""
    key_id: str            # hex SHA-256 of the signer's raw public key
    signed_length: int     # bytes covered (the container; the file is 128 bytes longer)
    verified: bool         # True: checked against a trusted key at this load


def key_id(public_raw: bytes) -> str:
    """The id of an Ed25519 public key: hex SHA-256 of its 32 raw bytes."""
    return _hashlib().sha256(public_raw).hexdigest()


# ---------------------------------------------------------------------------
# the trailer
# ---------------------------------------------------------------------------

def read_trailer(f, size: int) -> Optional[Trailer]:
    """The trailer ending the open file ``f`` of ``size`` bytes, None if it has none.

    A file has a trailer when its last 128 bytes start with the trailer magic; then every
    field must be valid, else ArtifactError. Only these 128 bytes are read.
    """
    if size < _MIN_CONTAINER + TRAILER_SIZE:
        return None
    f.seek(size - TRAILER_SIZE)
    raw = f.read(TRAILER_SIZE)
    if len(raw) != TRAILER_SIZE or raw[:8] != SIG_MAGIC:
        return None
    _, version, alg, flags, signed_length, kid, reserved, sig = _TRAILER.unpack(raw)
    if version != SIG_VERSION:
        raise ArtifactError(f"signature trailer version {version} is not supported "
                            f"(this edge_infer reads version {SIG_VERSION})")
    if alg != ALG_ED25519_SHA512:
        raise ArtifactError(f"signature algorithm {alg} is not supported (1: Ed25519)")
    if flags or reserved != bytes(len(reserved)):
        raise ArtifactError("signature trailer: reserved bytes are not zero")
    if signed_length != size - TRAILER_SIZE:
        raise ArtifactError(f"signature trailer covers {signed_length} bytes but starts at byte "
                            f"{size - TRAILER_SIZE} (file truncated or extended)")
    return Trailer(raw[:_SIGNED_FIELDS], signed_length, kid.hex(), sig)


def _trailer_head(signed_length: int, public_raw: bytes) -> bytes:
    return _TRAILER.pack(SIG_MAGIC, SIG_VERSION, ALG_ED25519_SHA512, 0, signed_length,
                         _hashlib().sha256(public_raw).digest(), bytes(8), bytes(64))[:_SIGNED_FIELDS]


def digest(buf, length: int) -> bytes:
    """SHA-512 of ``buf[:length]`` (an mmap or bytes), in 1 MB steps; pages of an mmap
    are dropped from the resident set once hashed (memory/pages.py), as the CRC check does."""
    from .memory.pages import drop_range
    import mmap
    h = _hashlib().sha512()
    with memoryview(buf) as view:
        for k in range(0, length, _HASH_STEP):
            n = min(_HASH_STEP, length - k)
            h.update(view[k:k + n])
            if isinstance(buf, mmap.mmap):
                drop_range(buf, k, n)
    return h.digest()


def verify_trailer(t: Trailer, buf, keys: TrustedKeys) -> SignatureInfo:
    """Check that ``t`` is a valid signature of ``buf[:t.signed_length]`` by a key in ``keys``;
    ArtifactError otherwise (the signer checked first: hashing a large file costs time)."""
    public = keys.get(t.key_id)
    if public is None:
        raise ArtifactError(f"artifact is signed by key {t.key_id[:16]}, which is not among the "
                            f"{len(keys)} trusted key(s)")
    ed25519, _, invalid = _crypto()
    message = t.head + digest(buf, t.signed_length)
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(public).verify(t.signature, message)
    except invalid:
        raise ArtifactError(f"artifact signature does not verify against key {t.key_id[:16]}: "
                            "the file was changed after it was signed") from None
    return SignatureInfo(t.key_id, t.signed_length, True)


def signed_writer(write: Callable, private_key, signed_length: int) -> Callable:
    """Wrap the writer ``write(f)`` of an unsigned artifact of ``signed_length`` bytes so that
    it also appends the trailer: the bytes are hashed as they are written, not read back."""
    public_raw = _public_raw(private_key)

    def write_signed(f) -> None:
        tee = _HashingFile(f)
        write(tee)
        if tee.count != signed_length:
            raise ArtifactError(f"internal: wrote {tee.count} bytes, expected {signed_length}")
        f.write(_trailer(private_key, public_raw, signed_length, tee.h.digest()))
    return write_signed


class _HashingFile:
    """A write-only file that hashes what passes through it (SHA-512) on its way to ``f``."""

    def __init__(self, f):
        self.f, self.h, self.count = f, _hashlib().sha512(), 0

    def write(self, data) -> int:
        self.h.update(data)
        self.count += memoryview(data).nbytes
        return self.f.write(data)

    def fileno(self) -> int:
        return self.f.fileno()


def _trailer(private_key, public_raw: bytes, signed_length: int, file_digest: bytes) -> bytes:
    head = _trailer_head(signed_length, public_raw)
    return head + private_key.sign(head + file_digest)


def check_required(meta: dict, sig: Optional[SignatureInfo]) -> None:
    """Refuse an artifact whose target profile says ``"require_signed": true`` unless this
    load verified its signature (which needs trusted keys from the caller)."""
    target = meta.get("target")
    if not isinstance(target, dict) or "require_signed" not in target:
        return
    required = target["require_signed"]
    if type(required) is not bool:
        raise ArtifactError(f"meta target require_signed must be true or false, not {required!r}")
    if required and not (sig is not None and sig.verified):
        why = "the file is not signed" if sig is None else "no trusted key was given to verify its signature"
        raise ArtifactError(f"target profile {target.get('name', '?')!r} requires signed artifacts and {why}; "
                            "load it with trusted keys (Runtime(path, trusted_keys=[...]), --trust KEY.pub)")


# ---------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------

def _crypto():
    """(ed25519 module, serialization module, InvalidSignature), imported on first use."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise KeyFileError("artifact signatures need the 'cryptography' package "
                           "(pip install 'edge-infer[sign]')") from None
    return ed25519, serialization, InvalidSignature


def _read_key(source: KeySource, what: str) -> tuple:
    """(bytes, name for messages) of a key given as a path or as bytes."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), f"{what} (bytes)"
    if not isinstance(source, (str, os.PathLike)):
        raise KeyFileError(f"{what}: expected a key file path or key bytes, got {type(source).__name__}")
    path = os.fspath(source)
    if not os.path.isfile(path):
        raise KeyFileError(f"{what} not found: {path}")
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 16)    # a key file is small; more is not a key
    except OSError as e:
        raise KeyFileError(f"cannot read {what} {path}: {e.strerror or e}") from None
    return data, path


def load_public_key(source) -> bytes:
    """The raw 32 bytes of an Ed25519 public key from a file path or bytes: PEM or DER
    (SubjectPublicKeyInfo, as ``keygen`` writes KEY.pub), OpenSSH ``ssh-ed25519``, or raw 32
    bytes. A cryptography ``Ed25519PublicKey`` is accepted too. KeyFileError if it is none."""
    ed25519, ser, _ = _crypto()
    if isinstance(source, ed25519.Ed25519PublicKey):
        return source.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    data, name = _read_key(source, "trusted key")
    if len(data) == 32:
        return data
    if b"PRIVATE KEY-----" in data[:100]:
        raise KeyFileError(f"{name} is a private key; trust its public key (KEY.pub) instead")
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = ser.load_pem_public_key(data)
        elif data.startswith(b"ssh-"):
            key = ser.load_ssh_public_key(data)
        else:
            key = ser.load_der_public_key(data)
    except (ValueError, TypeError, IndexError):
        raise KeyFileError(f"{name} is not a public key file (PEM, DER, OpenSSH or raw 32 bytes)") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise KeyFileError(f"{name} is a {type(key).__name__.lstrip('_')}, not an Ed25519 key")
    return key.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)


def load_private_key(source):
    """An ``Ed25519PrivateKey`` from a file path or bytes: unencrypted PEM/DER PKCS#8 (as
    ``keygen`` writes it), OpenSSH, or raw 32 bytes; a key object is returned as it is."""
    ed25519, ser, _ = _crypto()
    if isinstance(source, ed25519.Ed25519PrivateKey):
        return source
    data, name = _read_key(source, "signing key")
    if len(data) == 32:
        return ed25519.Ed25519PrivateKey.from_private_bytes(data)
    if b"PUBLIC KEY-----" in data[:100] or data.startswith(b"ssh-"):
        raise KeyFileError(f"{name} is a public key; signing needs the private key")
    try:
        if b"OPENSSH PRIVATE KEY-----" in data[:100]:
            key = ser.load_ssh_private_key(data, None)
        elif data.lstrip().startswith(b"-----BEGIN"):
            key = ser.load_pem_private_key(data, None)
        else:
            key = ser.load_der_private_key(data, None)
    except TypeError:          # a password-protected key
        raise KeyFileError(f"{name} is encrypted; edge_infer reads unencrypted private keys only") from None
    except (ValueError, IndexError):
        raise KeyFileError(f"{name} is not a private key file (PEM, DER, OpenSSH or raw 32 bytes)") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise KeyFileError(f"{name} is a {type(key).__name__.lstrip('_')}, not an Ed25519 key")
    return key


def _public_raw(private_key) -> bytes:
    _, ser, _ = _crypto()
    return private_key.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)


def signer_id(private_key) -> str:
    """The key id of the public half of ``private_key`` (what a signature by it records)."""
    return key_id(_public_raw(private_key))


#: a device-wide list of trusted public key files (os.pathsep-separated): loads that pass no
#: keys of their own check against it
TRUST_ENV = "EDGE_INFER_TRUSTED_KEYS"


def trust_for_load(keys=None) -> Optional[TrustedKeys]:
    """The keys a load verifies against: ``keys`` when given (even empty); otherwise the key
    files listed in ``$EDGE_INFER_TRUSTED_KEYS``, so a device configured once refuses unsigned
    and foreign artifacts even where a script passes no keys (a flag inside the file cannot do
    that: an attacker strips it); otherwise None, no signature check."""
    if keys is not None:
        return trusted_set(keys)
    paths = [p for p in os.environ.get(TRUST_ENV, "").split(os.pathsep) if p.strip()]
    if not paths:
        return None
    try:
        return trusted_set(paths)
    except KeyFileError as e:
        raise KeyFileError(f"${TRUST_ENV}: {e}") from None


def trusted_set(keys: Union[Iterable, TrustedKeys]) -> TrustedKeys:
    """Trusted public keys (paths, bytes or key objects; or a set made by this function)
    by key id. An empty collection trusts nobody: every artifact is then refused."""
    if isinstance(keys, dict):
        return keys
    if isinstance(keys, (str, bytes, os.PathLike)):
        keys = [keys]
    raws = [load_public_key(k) for k in keys]
    return {key_id(r): r for r in raws}


def generate_key(path: Union[str, "os.PathLike[str]"]) -> str:
    """Write a new Ed25519 key pair: the private key to ``path`` (PKCS#8 PEM, unencrypted,
    mode 0600) and the public key to ``path + ".pub"`` (SubjectPublicKeyInfo PEM). Existing
    files are never overwritten (KeyFileError). Returns the key id."""
    ed25519, ser, _ = _crypto()
    path = os.fspath(path)
    pub_path = path + ".pub"
    for p in (path, pub_path):
        if os.path.lexists(p):
            raise KeyFileError(f"{p} exists; not overwriting a key (remove it first)")
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
    public = key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)
    written = []
    try:
        for p, data, mode in ((path, private, 0o600), (pub_path, public, 0o644)):
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
            written.append(p)
            with os.fdopen(fd, "wb") as f:
                if p == path and hasattr(os, "fchmod"):
                    os.fchmod(f.fileno(), 0o600)     # whatever the umask
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
    except OSError as e:
        for p in written:
            os.unlink(p)
        raise KeyFileError(f"cannot write key {e.filename or path}: {e.strerror or e}") from None
    return signer_id(key)
