"""Ed25519 signatures of ``.eim`` artifacts: the trailer format, keys and checks
(``signature.py``, re-exported here) and ``sign_artifact``, which signs a file in place and
loads the result before it replaces the file: it sits above the artifact reader, which reads
the trailer through ``signature.py``."""
from __future__ import annotations

import os
from typing import Union

from .artifact import _atomic_write, _open_map, load_artifact
from .signature import (ALG_ED25519_SHA512, SIG_MAGIC, SIG_VERSION, TRAILER_SIZE, TRUST_ENV,
                        _HASH_STEP, KeySource, SignatureInfo, Trailer, TrustedKeys, _public_raw, check_required,
                        digest, generate_key, key_id, load_private_key, load_public_key, read_trailer, signed_writer,
                        signer_id, trust_for_load, trusted_set, verify_trailer)

__all__ = ["ALG_ED25519_SHA512", "SIG_MAGIC", "SIG_VERSION", "TRAILER_SIZE", "TRUST_ENV", "KeySource", "SignatureInfo",
           "Trailer", "TrustedKeys", "check_required", "digest", "generate_key", "key_id", "load_private_key",
           "load_public_key", "read_trailer", "sign_artifact", "signed_writer", "signer_id", "trust_for_load",
           "trusted_set", "verify_trailer"]


def sign_artifact(path: Union[str, "os.PathLike[str]"], key) -> SignatureInfo:
    """Sign the artifact at ``path`` in place with the private ``key`` (a key file path, its
    bytes, or an ``Ed25519PrivateKey``); a signature it already has is replaced.

    The container (the file without an old trailer) and the new trailer are written to a
    temporary file next to ``path`` with the file's mode; that file is loaded with every
    check, its new signature included (an invalid artifact is not signed), and only then
    renamed over ``path``. Returns the new signature's info (verified).
    """
    private_key = load_private_key(key)
    public = _public_raw(private_key)
    path = os.fspath(path)
    mm, _ = _open_map(path)                   # the unsigned bytes (an old trailer left out)
    size = len(mm)
    try:
        mode = os.stat(path).st_mode & 0o7777

        def copy(f) -> None:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), mode)
            with memoryview(mm) as view:
                for k in range(0, size, _HASH_STEP):
                    f.write(view[k:k + _HASH_STEP])
        # vouch only for what loads: the signed file is loaded, its signature checked, before
        # it replaces ``path``
        _atomic_write(path, signed_writer(copy, private_key, size),
                      check=lambda tmp: load_artifact(tmp, trusted_keys={key_id(public): public}))
    finally:
        mm.close()
    return SignatureInfo(key_id(public), size, True)
