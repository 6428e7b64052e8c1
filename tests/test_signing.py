"""Signed artifacts (issue 16, item 4): the Ed25519 trailer, verified before anything else of
the file is parsed; tampering with checksums recomputed as an attacker would; key handling;
target profiles that require signatures; the CLI; no ``cryptography`` import without keys."""
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

pytest.importorskip("cryptography")

from edge_infer import artifact as A
from edge_infer import signing
from edge_infer.artifact import load_artifact, read_info, save_artifact
from edge_infer.cli import main
from edge_infer.convert import convert
from edge_infer.data import digits_model_path, load_digits_samples
from edge_infer.errors import ArtifactError, ConversionError, EdgeInferError, KeyFileError
from edge_infer.runtime import Runtime
from edge_infer.targets import load_target

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = signing.TRAILER_SIZE


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Two key pairs, the digits model converted once (unsigned) and a signed copy."""
    d = tmp_path_factory.mktemp("signing")
    for name in ("alice", "bob"):
        signing.generate_key(d / name)
    unsigned = d / "digits.eim"
    convert(digits_model_path(), unsigned)
    signed = d / "digits-signed.eim"
    shutil.copyfile(unsigned, signed)
    signing.sign_artifact(signed, d / "alice")
    return d


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("edge-infer: error:")
    return err[0]


def fix_checksums(buf: bytearray) -> None:
    """Recompute every CRC of a container as the writer does (what an attacker can do)."""
    count = struct.unpack_from("<I", buf, 24)[0]
    for k in range(count):
        at = A.HEADER_SIZE + k * A.ENTRY_SIZE
        kind, flags, off, length, _, res = A._ENTRY.unpack_from(buf, at)
        A._ENTRY.pack_into(buf, at, kind, flags, off, length, zlib.crc32(buf[off:off + length]), res)
    struct.pack_into("<I", buf, 28, zlib.crc32(buf[A.HEADER_SIZE:A.HEADER_SIZE + count * A.ENTRY_SIZE]))
    struct.pack_into("<I", buf, 60, zlib.crc32(buf[:60]))


def _section(buf, kind: bytes):
    count = struct.unpack_from("<I", buf, 24)[0]
    for k in range(count):
        s = A._ENTRY.unpack_from(buf, A.HEADER_SIZE + k * A.ENTRY_SIZE)
        if s[0] == kind:
            return s[2], s[3]
    raise AssertionError(kind)


def _replace_in(buf: bytearray, kind: bytes, old: bytes, new: bytes) -> None:
    off, length = _section(buf, kind)
    at = bytes(buf[off:off + length]).index(old)
    buf[off + at:off + at + len(old)] = new


def _rewritten(src, edit_graph=None, edit_meta=None, **save) -> bytes:
    """An attacker's edit through the writer (the sections are zlib-compressed, so edits are
    made on the loaded graph and meta and written out again, checksums and all)."""
    import tempfile
    g, meta = load_artifact(src)
    if edit_graph:
        edit_graph(g)
    if edit_meta:
        edit_meta(meta)
    with tempfile.TemporaryDirectory() as d:
        save_artifact(os.path.join(d, "t.eim"), g, meta, **save)
        return open(os.path.join(d, "t.eim"), "rb").read()


def _tamper_meta(src, buf):
    # the sections are compressed and 64-byte aligned: an edit whose file keeps the signed length
    # (else the trailer's length check, not the signature, refuses it)
    for name in ("Digits.onnx", "digitS.onnx", "dIgits.onnx", "digits.onnX", "DIGITS.onnx", "Digits.ONNX"):
        out = _rewritten(src, edit_meta=lambda m: m["provenance"].update(source=name))
        if len(out) == len(buf):
            buf[:] = out
            return
    raise AssertionError("no same-length edit of the provenance")


def _tamper_graph(src, buf):
    buf[:] = _rewritten(src, edit_graph=lambda g: setattr(g, "name", "digits_cnm"))


def _tamper_weights(src, buf):       # the lowest mantissa bit of the first weight
    off, _ = _section(buf, A.KIND_WEIGHTS)
    buf[off] ^= 1


def _digits_outputs(path, **kw):
    x, _ = load_digits_samples()
    rt = Runtime(str(path), backend="cpu", **kw)
    return x[:64], {k: v.copy() for k, v in rt.run(x[:64]).items()}


def test_round_trip_outputs_identical_and_unsigned_bytes_unchanged(work):
    unsigned, signed = (work / "digits.eim").read_bytes(), (work / "digits-signed.eim").read_bytes()
    # a signed file is the unsigned one, byte for byte, plus the 128-byte trailer
    assert len(signed) == len(unsigned) + T and signed[:-T] == unsigned
    assert signed[-T:-T + 8] == signing.SIG_MAGIC
    x, ref = _digits_outputs(work / "digits.eim")
    for kw in ({}, {"trusted_keys": [work / "alice.pub"]}, {"trusted_keys": [work / "bob.pub", work / "alice.pub"]}):
        _, out = _digits_outputs(work / "digits-signed.eim", **kw)
        assert out.keys() == ref.keys()
        for k in ref:
            np.testing.assert_array_equal(out[k], ref[k])
    _, y = load_digits_samples()
    assert (next(iter(ref.values())).argmax(1) == y[:64]).mean() > 0.9   # the model really ran
    info = read_info(work / "digits-signed.eim", trusted_keys=[work / "alice.pub"])
    assert info.signature.verified and info.file_size == len(unsigned)
    assert info.signature.key_id == signing.key_id(signing.load_public_key(work / "alice.pub"))
    assert read_info(work / "digits-signed.eim").signature.verified is False
    assert read_info(work / "digits.eim").signature is None


def test_sign_while_writing_equals_sign_in_place(work, tmp_path):
    # Ed25519 is deterministic: hashing as save_artifact writes must give the bytes that
    # signing the finished file gives
    g, meta = load_artifact(work / "digits.eim")
    save_artifact(tmp_path / "a.eim", g, meta)
    signing.sign_artifact(tmp_path / "a.eim", work / "alice")
    n = save_artifact(tmp_path / "b.eim", g, meta, sign_key=work / "alice")
    assert (tmp_path / "a.eim").read_bytes() == (tmp_path / "b.eim").read_bytes()
    assert n == os.path.getsize(tmp_path / "b.eim")


@pytest.mark.parametrize("tamper", [_tamper_meta, _tamper_graph, _tamper_weights],
                         ids=["meta-json", "graph-json", "weights"])
def test_tampering_with_valid_checksums_is_refused(work, tmp_path, tamper):
    signed = (work / "digits-signed.eim").read_bytes()
    body = bytearray(signed[:-T])
    tamper(work / "digits.eim", body)
    fix_checksums(body)
    assert bytes(body) != signed[:-T]
    path = tmp_path / "t.eim"
    path.write_bytes(bytes(body) + signed[-T:])
    load_artifact(path)              # the edit is a valid artifact: only the signature catches it
    refused = "does not verify"
    with pytest.raises(ArtifactError, match=refused):
        load_artifact(path, trusted_keys=[work / "alice.pub"])
    with pytest.raises(ArtifactError, match=refused):
        Runtime(str(path), trusted_keys=[work / "alice.pub"])


def test_any_flipped_byte_is_refused_before_parsing(work, tmp_path):
    signed = (work / "digits-signed.eim").read_bytes()
    n = len(signed) - T
    trust = signing.trusted_set([work / "alice.pub"])
    path = tmp_path / "f.eim"
    positions = list(range(0, n, 61)) + list(range(n, len(signed)))
    messages = set()
    for pos in positions:
        buf = bytearray(signed)
        buf[pos] ^= 0x5A
        path.write_bytes(bytes(buf))
        with pytest.raises(ArtifactError) as e:
            load_artifact(path, trusted_keys=trust)
        if pos < n:    # the signature fails first: no header, CRC or JSON error is reached
            assert "does not verify" in str(e.value), (pos, str(e.value))
        messages.add(str(e.value))
    # the trailer's fields each have their own check
    for needle in ("not signed", "version", "algorithm", "reserved", "covers", "not among", "does not verify"):
        assert any(needle in m for m in messages), (needle, messages)


def test_trailer_fields_are_covered_by_the_signature(work, tmp_path):
    # the key id swapped for another trusted key's: that key's check fails
    signed = bytearray((work / "digits-signed.eim").read_bytes())
    bob = signing.load_public_key(work / "bob.pub")
    signed[-T + 24:-T + 56] = hashlib.sha256(bob).digest()
    (tmp_path / "s.eim").write_bytes(bytes(signed))
    with pytest.raises(ArtifactError, match="does not verify against key"):
        load_artifact(tmp_path / "s.eim", trusted_keys=[work / "alice.pub", work / "bob.pub"])


def test_wrong_key_unsigned_and_empty_trust_refused(work):
    with pytest.raises(ArtifactError, match="not among the 1 trusted key"):
        load_artifact(work / "digits-signed.eim", trusted_keys=[work / "bob.pub"])
    with pytest.raises(ArtifactError, match="not signed"):
        load_artifact(work / "digits.eim", trusted_keys=[work / "alice.pub"])
    with pytest.raises(ArtifactError, match="not among the 0 trusted key"):
        load_artifact(work / "digits-signed.eim", trusted_keys=[])
    with pytest.raises(ArtifactError, match="in-memory Graph"):
        Runtime(load_artifact(work / "digits.eim")[0], trusted_keys=[work / "alice.pub"])


@pytest.mark.parametrize("cut", [1, 8, 64, 127])
def test_truncated_or_extended_trailer_refused(work, tmp_path, cut):
    signed = (work / "digits-signed.eim").read_bytes()
    path = tmp_path / "c.eim"
    path.write_bytes(signed[:-cut])
    with pytest.raises(ArtifactError, match="not signed"):
        load_artifact(path, trusted_keys=[work / "alice.pub"])
    with pytest.raises(ArtifactError, match="trailing data"):   # without keys: not a valid file either
        load_artifact(path)
    path.write_bytes(signed + bytes(cut))
    with pytest.raises(ArtifactError):
        load_artifact(path, trusted_keys=[work / "alice.pub"])
    with pytest.raises(ArtifactError):
        load_artifact(path)
    path.write_bytes(signed[:-T])     # the whole trailer cut: an unsigned file again
    load_artifact(path)
    with pytest.raises(ArtifactError, match="not signed"):
        load_artifact(path, trusted_keys=[work / "alice.pub"])


def test_resign_replaces_and_keeps_mode(work, tmp_path):
    path = tmp_path / "r.eim"
    shutil.copyfile(work / "digits-signed.eim", path)
    os.chmod(path, 0o640)
    info = signing.sign_artifact(path, work / "bob")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    data = path.read_bytes()
    assert len(data) == os.path.getsize(work / "digits.eim") + T
    assert data[:-T] == (work / "digits.eim").read_bytes()
    assert info.key_id == read_info(path).signature.key_id != read_info(work / "digits-signed.eim").signature.key_id
    load_artifact(path, trusted_keys=[work / "bob.pub"])
    with pytest.raises(ArtifactError, match="not among"):
        load_artifact(path, trusted_keys=[work / "alice.pub"])
    assert sorted(os.listdir(tmp_path)) == ["r.eim"]        # no temporary file left


def test_sign_refuses_a_corrupt_artifact(work, tmp_path):
    buf = bytearray((work / "digits.eim").read_bytes())
    _tamper_weights(None, buf)                     # checksum now wrong
    path = tmp_path / "bad.eim"
    path.write_bytes(bytes(buf))
    with pytest.raises(ArtifactError, match="checksum"):
        signing.sign_artifact(path, work / "alice")
    assert path.read_bytes() == bytes(buf) and sorted(os.listdir(tmp_path)) == ["bad.eim"]
    path.write_bytes(b"\x89EIM" + bytes(200))
    with pytest.raises(ArtifactError, match="magic"):
        signing.sign_artifact(path, work / "alice")
    assert sorted(os.listdir(tmp_path)) == ["bad.eim"]


def test_key_formats(work, tmp_path):
    from cryptography.hazmat.primitives import serialization as ser
    pub = ser.load_pem_public_key((work / "alice.pub").read_bytes())
    raw = pub.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    forms = [raw, pub.public_bytes(ser.Encoding.DER, ser.PublicFormat.SubjectPublicKeyInfo),
             pub.public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH), (work / "alice.pub").read_bytes(),
             work / "alice.pub", str(work / "alice.pub"), pub]
    for form in forms:
        assert signing.load_public_key(form) == raw
    load_artifact(work / "digits-signed.eim", trusted_keys=[raw])
    assert oct(stat.S_IMODE(os.stat(work / "alice").st_mode)) == "0o600"
    priv = signing.load_private_key(work / "alice")
    raw_priv = priv.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw, ser.NoEncryption())
    assert signing.signer_id(signing.load_private_key(raw_priv)) == signing.key_id(raw)
    (tmp_path / "junk").write_bytes(b"not a key at all, nor 32 bytes")
    (tmp_path / "enc").write_bytes(priv.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8,
                                                      ser.BestAvailableEncryption(b"pw")))
    cases = [(signing.load_public_key, work / "alice", "is a private key"),
             (signing.load_public_key, tmp_path / "junk", "not a public key"),
             (signing.load_public_key, tmp_path / "missing.pub", "not found"),
             (signing.load_private_key, work / "alice.pub", "is a public key"),
             (signing.load_private_key, tmp_path / "junk", "not a private key"),
             (signing.load_private_key, tmp_path / "enc", "encrypted"),
             (signing.generate_key, work / "alice", "exists")]
    for fn, arg, needle in cases:
        with pytest.raises(KeyFileError, match=needle):
            fn(arg)


def _profile(tmp_path, require) -> str:
    prof = load_target("generic-x86_64")
    prof.update(name="signed-only", require_signed=require)
    path = tmp_path / "signed-only.json"
    path.write_text(json.dumps(prof))
    return str(path)


def test_profile_requiring_signatures(work, tmp_path):
    g, meta = load_artifact(work / "digits.eim")
    meta = dict(meta, target={"name": "signed-only", "require_signed": True})
    save_artifact(tmp_path / "u.eim", g, meta)
    save_artifact(tmp_path / "s.eim", g, meta, sign_key=work / "alice")
    with pytest.raises(ArtifactError, match="requires signed artifacts and the file is not signed"):
        load_artifact(tmp_path / "u.eim")
    with pytest.raises(ArtifactError, match="requires signed artifacts and no trusted key was given"):
        Runtime(str(tmp_path / "s.eim"))
    with pytest.raises(ArtifactError, match="not signed"):
        load_artifact(tmp_path / "u.eim", trusted_keys=[work / "alice.pub"])
    x, ref = _digits_outputs(work / "digits.eim")
    _, out = _digits_outputs(tmp_path / "s.eim", trusted_keys=[work / "alice.pub"])
    for k in ref:
        np.testing.assert_array_equal(out[k], ref[k])
    signing.sign_artifact(tmp_path / "u.eim", work / "bob")      # signing (and re-signing) needs no trust
    signing.sign_artifact(tmp_path / "u.eim", work / "alice")
    assert (tmp_path / "u.eim").read_bytes() == (tmp_path / "s.eim").read_bytes()
    save_artifact(tmp_path / "v.eim", g, dict(meta, target={"require_signed": "yes"}))
    with pytest.raises(ArtifactError, match="true or false"):
        load_artifact(tmp_path / "v.eim")
    # convert for such a profile wants a key
    with pytest.raises(ConversionError, match="requires signed artifacts"):
        convert(digits_model_path(), tmp_path / "c.eim", target=_profile(tmp_path, True))
    assert not (tmp_path / "c.eim").exists()
    with pytest.raises(EdgeInferError, match="require_signed must be"):
        load_target(_profile(tmp_path, 1))


def test_cli_keygen_sign_convert_run_inspect(work, tmp_path, capsys):
    key = str(tmp_path / "k")
    assert main(["keygen", "-o", key]) == 0
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and os.path.isfile(key + ".pub")
    kid = capsys.readouterr().out.split("key id ")[1].split()[0]
    assert main(["keygen", "-o", key]) == 2 and "exists" in _err_line(capsys)

    out = str(tmp_path / "d.eim")
    assert main(["convert", digits_model_path(), "-o", out, "--sign", key,
                 "--target", _profile(tmp_path, True)]) == 0
    assert f"key id {kid}" in capsys.readouterr().out
    x, _ = load_digits_samples()
    np.save(tmp_path / "x.npy", x[:4])
    run = ["run", out, "--input", str(tmp_path / "x.npy"), "--backend", "cpu"]
    assert main(run + ["--output", str(tmp_path / "o.npz"), "--trust", key + ".pub"]) == 0
    ref = Runtime(str(work / "digits.eim"), backend="cpu").run(x[:4])
    with np.load(tmp_path / "o.npz") as o:
        for k in ref:
            np.testing.assert_array_equal(o[k], ref[k])
    capsys.readouterr()
    assert main(run) == 2 and "requires signed artifacts" in _err_line(capsys)   # the profile's rule
    assert main(run + ["--trust", str(work / "bob.pub")]) == 2 and "not among" in _err_line(capsys)

    assert main(["inspect", out, "--json", "--trust", str(work / "bob.pub"), "--trust", key + ".pub"]) == 0
    assert json.loads(capsys.readouterr().out)["signature"] == {"signed": True, "key_id": kid, "verified": True}
    assert main(["inspect", str(work / "digits-signed.eim")]) == 0
    assert "not verified" in capsys.readouterr().out
    assert main(["inspect", str(work / "digits.eim")]) == 0
    assert "signature: none" in capsys.readouterr().out

    # sign in place with another key, then re-sign
    plain = str(tmp_path / "plain.eim")
    shutil.copyfile(work / "digits.eim", plain)
    assert main(["sign", plain, "--key", str(work / "bob")]) == 0
    capsys.readouterr()
    assert main(["inspect", plain, "--trust", str(work / "bob.pub")]) == 0
    assert "verified against --trust" in capsys.readouterr().out
    assert main(["bench", plain, "--runs", "2", "--warmup", "1", "--backend", "cpu", "--json",
                 "--trust", str(work / "bob.pub")]) == 0
    capsys.readouterr()

    errors = [(["sign", plain, "--key", key + ".pub"], "is a public key"),
              (["sign", plain, "--key", str(tmp_path / "nokey")], "signing key not found"),
              (["run", plain, "--input", str(tmp_path / "x.npy"), "--trust", key], "is a private key"),
              (["run", plain, "--input", str(tmp_path / "x.npy"), "--trust", str(tmp_path / "x.npy")],
               "not a public key"),
              (["run", str(work / "digits.eim"), "--input", str(tmp_path / "x.npy"), "--trust", key + ".pub"],
               "is not signed"),
              (["bench", str(work / "digits.eim"), "--trust", key + ".pub"], "is not signed"),
              (["stream", str(work / "digits.eim"), "--source", "synthetic", "--trust", key + ".pub"],
               "is not signed"),
              (["convert", digits_model_path(), "-o", str(tmp_path / "e.eim"), "--sign", key + ".pub"],
               "is a public key")]
    for argv, needle in errors:
        assert main(argv) == 2, argv
        assert needle in _err_line(capsys), argv
    assert not os.path.exists(tmp_path / "e.eim")


def test_unsigned_path_never_imports_cryptography(work, tmp_path):
    x, _ = load_digits_samples()
    np.save(tmp_path / "x.npy", x[:2])
    code = f"""
import sys
import numpy as np
from edge_infer import Runtime
from edge_infer.artifact import read_info
from edge_infer.cli import main
for p in ({str(work / 'digits.eim')!r}, {str(work / 'digits-signed.eim')!r}):
    Runtime(p, backend="cpu").run(np.load({str(tmp_path / 'x.npy')!r}))
    read_info(p)
    assert main(["run", p, "--input", {str(tmp_path / 'x.npy')!r}, "--backend", "cpu"]) == 0
print("before", "cryptography" in sys.modules)
sys.modules["cryptography"] = None          # as if not installed: keys then fail with a clear error
from edge_infer.errors import KeyFileError
try:
    Runtime({str(work / 'digits-signed.eim')!r}, trusted_keys=[{str(work / 'alice.pub')!r}])
except KeyFileError as e:
    print("missing:", e)
del sys.modules["cryptography"]
Runtime({str(work / 'digits-signed.eim')!r}, backend="cpu", trusted_keys=[{str(work / 'alice.pub')!r}])
print("after", "cryptography" in sys.modules)
"""
    env = dict(os.environ, PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "before False" in r.stdout and "after True" in r.stdout, r.stdout
    assert "missing: artifact signatures need the 'cryptography' package" in r.stdout, r.stdout


def test_other_loaders_read_signed_files(work, tmp_path):
    from edge_infer.artifact import read_meta
    from edge_infer.verify import verify
    signed, unsigned = str(work / "digits-signed.eim"), str(work / "digits.eim")
    assert verify(signed, unsigned, samples=2) == 0.0
    assert read_meta(signed) == read_meta(unsigned)
    for src in (signed, unsigned):
        assert main(["export", src, "-o", str(tmp_path / (os.path.basename(src) + ".onnx"))]) == 0
    assert (tmp_path / "digits-signed.eim.onnx").read_bytes() == (tmp_path / "digits.eim.onnx").read_bytes()


def test_cli_export_and_verify_take_trust(work, tmp_path, capsys):
    """export and verify load the artifact through the same check as run: a signed file with
    its key goes through, an unsigned one or another signer is refused (exit 2, one line)."""
    signed, unsigned = str(work / "digits-signed.eim"), str(work / "digits.eim")
    alice, bob = str(work / "alice.pub"), str(work / "bob.pub")
    assert main(["export", signed, "--format", "tflite", "-o", str(tmp_path / "a.tflite"), "--trust", alice]) == 0
    assert (tmp_path / "a.tflite").stat().st_size > 0
    capsys.readouterr()
    assert main(["export", unsigned, "--format", "tflite", "-o", str(tmp_path / "b.tflite"), "--trust", alice]) == 2
    assert "not signed" in _err_line(capsys) and not (tmp_path / "b.tflite").exists()
    verify = ["verify", digits_model_path(), signed, "--samples", "64", "--backend", "cpu"]
    assert main(verify + ["--trust", alice]) == 0
    capsys.readouterr()
    assert main(verify + ["--trust", bob]) == 2 and "not among" in _err_line(capsys)


def test_python_verify_and_pipeline_take_trust(work):
    """verify() and Pipeline(path) load through the same signature check as Runtime."""
    from edge_infer.pipeline import Pipeline
    from edge_infer.verify import verify
    signed, unsigned = str(work / "digits-signed.eim"), str(work / "digits.eim")
    alice, bob = [work / "alice.pub"], [work / "bob.pub"]
    assert verify(signed, signed, samples=1, trusted_keys=alice) == 0.0
    with pytest.raises(ArtifactError, match="not among"):
        verify(signed, signed, samples=1, trusted_keys=bob)
    with pytest.raises(ArtifactError, match="not signed"):
        verify(signed, unsigned, samples=1, trusted_keys=alice)       # every path is checked
    with pytest.raises(ArtifactError, match="not signed"):
        verify(signed, unsigned, samples=1, precision="native", trusted_keys=alice)
    pipe = Pipeline(signed, "synthetic", trusted_keys=alice)
    assert pipe.model.inputs[0].shape[1:] == (1, 8, 8)
    with pytest.raises(ArtifactError, match="not among"):
        Pipeline(signed, "synthetic", trusted_keys=bob)


def test_device_wide_trusted_keys_from_the_environment(work, monkeypatch, capsys):
    """$EDGE_INFER_TRUSTED_KEYS makes every load that passes no keys of its own verify: a device
    configured once refuses an unsigned or foreign artifact even from a script that forgot
    its keys; keys passed explicitly still decide on their own."""
    from edge_infer.artifact import read_meta
    signed, unsigned = str(work / "digits-signed.eim"), str(work / "digits.eim")
    monkeypatch.setenv(signing.TRUST_ENV, os.pathsep.join([str(work / "alice.pub"), str(work / "bob.pub")]))
    assert Runtime(signed).run({"input": np.zeros((1, 1, 8, 8), np.float32)})["logits"].shape == (1, 10)
    for load in (lambda: Runtime(unsigned), lambda: load_artifact(unsigned), lambda: read_meta(unsigned)):
        with pytest.raises(ArtifactError, match="not signed"):
            load()
    assert main(["run", unsigned]) == 2 and "not signed" in _err_line(capsys)
    monkeypatch.setenv(signing.TRUST_ENV, str(work / "bob.pub"))
    with pytest.raises(ArtifactError, match="not among the 1 trusted key"):
        Runtime(signed)
    graph, _ = load_artifact(signed, trusted_keys=[work / "alice.pub"])    # explicit keys decide
    assert graph.inputs == ["input"]
    monkeypatch.setenv(signing.TRUST_ENV, str(work / "missing.pub"))
    with pytest.raises(KeyFileError, match=signing.TRUST_ENV):
        Runtime(signed)
    monkeypatch.setenv(signing.TRUST_ENV, "")
    assert Runtime(unsigned).inputs[0].name == "input"   # empty: no device-wide policy
