"""``edge-infer verify``: differential testing of an artifact against its source model
(onnxruntime / LiteRT) on thousands of inputs, every available backend (issue #16 #6)."""
import json
import os

import numpy as np
import pytest

from edge_infer.cli import main
from edge_infer.data import digits_model_path, digits_samples_path, load_digits_samples

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify")
    fp32 = str(d / "digits.eim")
    assert main(["convert", digits_model_path(), "-o", fp32]) == 0
    return d, fp32


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_digits_2000_samples_every_backend_within_1e5(digits, tmp_path, capsys):
    _, fp32 = digits
    out = tmp_path / "v"
    assert main(["verify", digits_model_path(), fp32, "--samples", "2000", "--out", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["samples"] == 2000 and rep["batch"] == 256 and rep["kind"] == "fp32" and rep["passed"]
    backends = {r["backend"] for r in rep["rows"]}
    assert "cpu" in backends
    sess = ort.InferenceSession(digits_model_path(), providers=["CPUExecutionProvider"])
    from edge_infer.runtime import Runtime
    for r in rep["rows"]:
        assert r["vs"] == "source" and r["tolerance"] == 1e-5
        assert 0 < r["max_rel"] <= 1e-5 and r["p99_9_rel"] <= r["max_rel"] and r["mean_abs"] <= r["max_abs"]
        # the saved worst input replays to the reported error
        x = np.load(r["worst_file"])
        assert x.shape == (1, 1, 8, 8)
        ours = Runtime(fp32, backend=r["backend"]).run(x)["logits"]
        ref = sess.run(None, {"input": x})[0]
        # (batch 1 here, 256 in the run: BLAS may sum in another order, so the same order of error)
        assert 0.1 * r["max_rel"] <= _rel(ours, ref) <= min(10 * r["max_rel"], 1e-5)
        assert float(np.abs(ours.astype(np.float64) - ref).max()) <= r["max_abs"]
    assert "passed" in capsys.readouterr().out


def test_a_wrong_artifact_fails_and_names_the_worst_input(digits, tmp_path, capsys):
    """The artifact of a slightly different model (one classifier weight off by 1e-3 of the
    weights' scale) must fail the 1e-5 bar, exit 1, and save an input that shows it."""
    import onnx
    from onnx import numpy_helper
    d, _ = digits
    m = onnx.load(digits_model_path())
    init = max(m.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    w = numpy_helper.to_array(init).copy()
    w.flat[7] += 1e-3 * float(np.abs(w).max())
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    bad_src = tmp_path / "other.onnx"
    onnx.save(m, str(bad_src))
    bad = str(tmp_path / "other.eim")
    assert main(["convert", str(bad_src), "-o", bad]) == 0
    capsys.readouterr()
    assert main(["verify", digits_model_path(), bad, "--samples", "300", "--backend", "cpu",
                 "--out", str(tmp_path / "v")]) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out and "beyond the tolerance" in captured.err
    x = np.load(tmp_path / "v" / "worst_cpu.npy")
    from edge_infer.runtime import Runtime
    ref = ort.InferenceSession(digits_model_path(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    assert _rel(Runtime(bad, backend="cpu").run(x)["logits"], ref) > 1e-5


def test_int8_artifact_gates_on_backend_agreement_in_steps(digits, tmp_path):
    from edge_infer.difftest import output_step, verify_at_scale
    from edge_infer.artifact import load_artifact
    d, _ = digits
    q = str(d / "digits_int8.eim")
    assert main(["convert", digits_model_path(), "--quantize", "int8", "--calib", digits_samples_path(),
                 "--calib-recipe", "digits", "-o", q]) == 0
    rep = verify_at_scale(digits_model_path(), q, samples=1000, out_dir=str(tmp_path / "v"))
    assert rep["kind"] == "int8" and rep["inputs"] == "uniform [0.0, 1.0]"    # the digits recipe's range
    step = output_step(load_artifact(q)[0], "logits")
    assert step and step > 0
    vs_source = [r for r in rep["rows"] if r["vs"] == "source"]
    assert vs_source and all(r["passed"] is None and r["max_abs"] > 0 for r in vs_source)  # reported only
    for r in (r for r in rep["rows"] if r["vs"] == "cpu"):
        assert r["metric"] == "steps" and r["max_steps"] == pytest.approx(r["max_abs"] / step)
        assert r["passed"] == (r["max_steps"] <= 2 * (1 + 1e-4))
    assert rep["passed"] == all(r["passed"] is not False for r in rep["rows"])


def test_int8_tflite_source_is_compared_in_steps(tmp_path):
    """An int8 TFLite model computes in int8 like its artifact: the source row is gated in
    output steps (the fuzz suite's int8 base, its float Softmax output dropped so that the
    last op is the DEQUANTIZE whose scale is the step)."""
    from edge_infer.backends.litert import interpreter_class
    from edge_infer.difftest import verify_at_scale
    from fuzz_convert_cases import tflite_base
    if interpreter_class()[0] is None:
        pytest.skip("LiteRT not installed")
    w, ins, _ = tflite_base()
    w.ops.pop()                                      # SOFTMAX: the DEQUANTIZE's output is the output
    fl = next(k for k, t in enumerate(w.tensors) if t["name"] == "fl")
    src = tmp_path / "q.tflite"
    src.write_bytes(w.finish(ins, [fl]))
    art = str(tmp_path / "q.eim")
    assert main(["convert", str(src), "-o", art]) == 0
    rep = verify_at_scale(str(src), art, samples=300, backends=["cpu"])
    row = rep["rows"][0]
    assert row["vs"] == "source" and row["metric"] == "steps" and row["step"] == pytest.approx(0.2)
    assert row["max_steps"] == pytest.approx(row["max_abs"] / 0.2, rel=1e-6) and row["passed"]
    assert rep["inputs"].startswith("integers")


def test_tflite_source_and_real_data(digits, tmp_path):
    """A TFLite model as the source (LiteRT runs it), and --data with the bundled digits."""
    from edge_infer.backends.litert import interpreter_class
    from edge_infer.difftest import verify_at_scale
    from edge_infer.export_tflite import export_tflite
    if interpreter_class()[0] is None:
        pytest.skip("LiteRT not installed")
    _, fp32 = digits
    tfl = str(tmp_path / "digits.tflite")
    export_tflite(fp32, tfl)
    art = str(tmp_path / "from_tflite.eim")
    assert main(["convert", tfl, "-o", art]) == 0
    rep = verify_at_scale(tfl, art, samples=400, backends=["cpu"])
    assert rep["passed"] and rep["samples"] == 400 and rep["rows"][0]["max_rel"] <= 1e-5
    x, _ = load_digits_samples()
    rep = verify_at_scale(digits_model_path(), fp32, samples=10 ** 6, backends=["cpu"], data=digits_samples_path(),
                          batch=100)
    assert rep["passed"] and rep["samples"] == len(x) and rep["inputs"] == "data"
    folder = tmp_path / "npy"                   # a folder of .npy files: one sample, or a batch, each
    folder.mkdir()
    np.save(folder / "a.npy", x[0])
    np.save(folder / "b.npy", x[1:8])
    rep = verify_at_scale(digits_model_path(), fp32, samples=100, backends=["cpu"], data=str(folder))
    assert rep["passed"] and rep["samples"] == 8


@pytest.mark.parametrize("args, needle", [
    (["--samples", "0"], "--samples"), (["--range", "1,0"], "LOW must be below"),
    (["--backend", "nosuch"], "unknown backend"), (["--data", "/nonexistent"], "data not found"),
])
def test_verify_user_errors_exit_2(digits, capsys, args, needle):
    _, fp32 = digits
    capsys.readouterr()
    assert main(["verify", digits_model_path(), fp32, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
