"""The edge-infer command line: the happy path and the exit-2 contract for user errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from edge_infer.cli import main
from edge_infer.data import digits_model_path, load_digits_samples


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "digits.eim"
    assert main(["convert", digits_model_path(), "-o", str(out)]) == 0
    return str(out)


def _err_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("edge-infer: error:")
    return err[0]


def test_convert_run_inspect_bench(artifact, tmp_path, capsys):
    x, y = load_digits_samples()
    np.save(tmp_path / "x.npy", x[:5])
    out_npz = tmp_path / "out.npz"
    assert main(["run", artifact, "--input", f"input={tmp_path / 'x.npy'}", "--output", str(out_npz)]) == 0
    logits = np.load(out_npz)["logits"]
    assert logits.shape == (5, 10)
    assert (logits.argmax(1) == y[:5]).mean() >= 0.8
    # a bare file is accepted for one-input models and gives the same result
    assert main(["run", artifact, "--input", str(tmp_path / "x.npy"), "--output", str(out_npz)]) == 0
    np.testing.assert_array_equal(np.load(out_npz)["logits"], logits)

    capsys.readouterr()
    assert main(["inspect", artifact, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"][0]["name"] == "input" and info["outputs"][0]["name"] == "logits"
    assert info["provenance"]["source"] == "digits_cnn.onnx"
    assert len(info["provenance"]["source_sha256"]) == 64
    assert sum(info["ops"].values()) == info["nodes"]

    assert main(["bench", artifact, "--runs", "5", "--warmup", "1", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert 0 < b["median_ms"] <= b["p99_ms"]
    assert b["ops"] and abs(sum(e["share"] for e in b["ops"]) - 1) < 1e-6

    assert main(["ops", "--json"]) == 0
    ops = json.loads(capsys.readouterr().out)
    assert "Conv" in ops["cpu"]["ops"]


@pytest.mark.parametrize("argv_fn, needle", [
    (lambda a, t: ["run", str(t / "missing.eim"), "--input", "x.npy"], "not found"),
    (lambda a, t: ["convert", str(t / "missing.onnx")], "not found"),
    (lambda a, t: ["run", a, "--input", f"nosuch={t / 'x.npy'}"], "unknown input"),
    (lambda a, t: ["run", a, "--input", f"input={t / 'bad_shape.npy'}"], "shape"),
    (lambda a, t: ["run", a, "--input", f"input={t / 'bad_dtype.npy'}"], "dtype"),
    (lambda a, t: ["run", a, "--input", f"input={t / 'not_npy.npy'}"], "not a .npy"),
    (lambda a, t: ["run", a], "give the inputs"),
    (lambda a, t: ["inspect", str(t / "not_a_model.eim")], ""),
    (lambda a, t: ["convert", str(t / "not_a_model.onnx")], ""),
    (lambda a, t: ["convert", digits_model_path(), "--input-shape", "input=1,x"], "integers"),
    (lambda a, t: ["convert", digits_model_path(), "--input-shape", "nosuch=1,1,8,8", "-o", str(t / "o.eim")], "nosuch"),
    (lambda a, t: ["bench", a, "--backend", "nosuch"], "backend"),
])
def test_user_errors_exit_2_with_one_line(artifact, tmp_path, capsys, argv_fn, needle):
    x, _ = load_digits_samples()
    np.save(tmp_path / "x.npy", x[:2])
    np.save(tmp_path / "bad_shape.npy", np.zeros((1, 3, 8, 8), np.float32))
    np.save(tmp_path / "bad_dtype.npy", np.zeros((1, 1, 8, 8), np.int32))
    (tmp_path / "not_npy.npy").write_bytes(b"hello")
    (tmp_path / "not_a_model.eim").write_bytes(b"\x00" * 100)
    (tmp_path / "not_a_model.onnx").write_bytes(b"garbage" * 10)
    capsys.readouterr()
    assert main(argv_fn(artifact, tmp_path)) == 2
    assert needle.lower() in _err_line(capsys).lower()


def test_console_entry_point_has_no_traceback_unless_debug(tmp_path):
    bad = tmp_path / "bad.eim"
    bad.write_bytes(b"EIM" * 50)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "edge_infer", "inspect", str(bad)], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([sys.executable, "-m", "edge_infer", "--debug", "inspect", str(bad)], capture_output=True,
                       text=True, env=env)
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_demo_runs(capsys):
    assert main(["demo", "--runs", "5"]) == 0
    out = capsys.readouterr().out
    acc = float(out.split("accuracy on")[1].split(":")[1].split("%")[0])
    assert acc >= 95.0
