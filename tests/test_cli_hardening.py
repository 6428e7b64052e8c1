"""Regression tests of issue 16's command-line and memory-limit findings: each reproduction
as it was reported (a traceback, a silent wrong file, a leftover, an ignored limit, a driver
taking the process down) now ends in one line and exit status 2, or in the documented
behaviour."""
import io
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from edge_infer.cli import main
from edge_infer.data import digits_model_path, load_digits_samples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("harden") / "digits.eim"
    assert main(["convert", digits_model_path(), "-o", str(out)]) == 0
    return str(out)


@pytest.fixture(scope="module")
def digits_x(tmp_path_factory):
    path = tmp_path_factory.mktemp("x") / "x.npy"
    np.save(path, load_digits_samples()[0][:3])
    return str(path)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("edge-infer: error:")
    return err[0]


def _pickled_npz(path, member="input.npy"):
    buf = io.BytesIO()
    np.save(buf, np.array([{"payload": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, buf.getvalue())


def _cli(*args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=ROOT, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "edge_infer", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=300)


def test_npz_with_pickled_member_is_refused_for_run_and_calib(artifact, tmp_path, capsys):
    bad = tmp_path / "pickled.npz"
    _pickled_npz(bad)
    capsys.readouterr()
    assert main(["run", artifact, "--input", str(bad)]) == 2
    assert "member 'input'" in _one_error_line(capsys)
    assert main(["convert", digits_model_path(), "--quantize", "int8", "--calib", str(bad),
                 "-o", str(tmp_path / "q.eim")]) == 2
    assert "not a plain array" in _one_error_line(capsys)
    assert not (tmp_path / "q.eim").exists()


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.write_bytes(b""), "not a .npy"),                                   # a 0-byte file
    (lambda p: np.save(p, np.zeros((0, 1, 8, 8), np.float32)), "empty"),            # no elements
    (lambda p: np.save(p, np.array(["a", "b"])), "not numeric"),
])
def test_empty_or_non_numeric_npy_is_refused(artifact, tmp_path, capsys, make, needle):
    path = tmp_path / "in.npy"
    make(path)
    capsys.readouterr()
    assert main(["run", artifact, "--input", f"input={path}"]) == 2
    assert needle in _one_error_line(capsys)


@pytest.mark.parametrize("flags, needle", [(["--runs", "0"], "--runs"), (["--runs", "-1"], "--runs"),
                                           (["--warmup", "-2"], "--warmup"), (["--threads", "0"], "--threads")])
def test_bench_counts_must_be_positive(artifact, capsys, flags, needle):
    capsys.readouterr()
    assert main(["bench", artifact, *flags]) == 2
    assert needle in _one_error_line(capsys)


def test_output_folder_gets_one_npy_per_output_and_bare_name_is_kept(artifact, digits_x, tmp_path, capsys):
    folder = tmp_path / "outs"
    folder.mkdir()
    assert main(["run", artifact, "--input", digits_x, "--output", str(folder)]) == 0
    assert sorted(os.listdir(folder)) == ["logits.npy"] and not (tmp_path / "outs.npz").exists()
    logits = np.load(folder / "logits.npy")
    assert logits.shape == (3, 10)
    # a path that does not exist yet but ends in a separator is a folder too
    assert main(["run", artifact, "--input", digits_x, "--output", str(tmp_path / "new") + os.sep]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "new" / "logits.npy"), logits)
    # a bare name is written exactly as given (numpy would have appended .npz)
    assert main(["run", artifact, "--input", digits_x, "--output", str(tmp_path / "bare")]) == 0
    assert (tmp_path / "bare").is_file() and not (tmp_path / "bare.npz").exists()
    np.testing.assert_array_equal(np.load(tmp_path / "bare")["logits"], logits)
    capsys.readouterr()
    assert main(["run", artifact, "--input", digits_x, "--output", str(tmp_path / "nodir" / "o.npz")]) == 2
    assert "folder not found" in _one_error_line(capsys)


def test_failed_export_leaves_no_temporary_file(artifact, tmp_path, capsys):
    from edge_infer.artifact import load_artifact
    from edge_infer.export_tflite import export_tflite
    pytest.importorskip("flatbuffers")
    target = tmp_path / "taken"
    target.mkdir()                                    # the final rename onto a folder fails
    graph, _ = load_artifact(artifact)
    with pytest.raises(OSError):
        export_tflite(graph, str(target))
    assert os.listdir(tmp_path) == ["taken"]
    capsys.readouterr()
    for fmt in ("tflite", "onnx-qdq"):
        assert main(["export", artifact, "--format", fmt, "-o", str(target)]) == 2
        assert "is a directory" in _one_error_line(capsys)
    assert os.listdir(tmp_path) == ["taken"]


def test_litert_log_lines_stay_off_stderr(artifact, digits_x, tmp_path):
    from edge_infer.backends.litert import interpreter_class
    if interpreter_class()[0] is None:
        pytest.skip("LiteRT not installed")
    ok = _cli("run", artifact, "--backend", "litert", "--input", digits_x)
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr
    # an error after LiteRT started: still exactly one line
    bad = _cli("run", artifact, "--backend", "litert", "--input", digits_x, "--output", tmp_path / "no" / "o.npz")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "XNNPACK" not in bad.stderr


def test_memory_limit_excludes_litert_under_auto_even_when_timed_fastest(artifact, tmp_path, monkeypatch):
    """The reported case: a symbolic batch dim, timings that favour LiteRT, memory_limit=1: the
    cached LiteRT plan ran and the limit was ignored while rt.backend said cpu."""
    from edge_infer.backends.litert import interpreter_class
    from edge_infer.backends.picker import format_report, model_key, record_timing
    from edge_infer.runtime import MemoryBudgetError, Runtime, specialize
    from edge_infer.errors import BackendError
    if interpreter_class()[0] is None:
        pytest.skip("LiteRT not installed")
    monkeypatch.setenv("EDGE_INFER_CACHE_DIR", str(tmp_path / "cache"))
    x = load_digits_samples()[0][:2]
    free = Runtime(artifact)
    record_timing(model_key(specialize(free.graph, {"input": x.shape}), free.threads), "litert", 0.001, 10)
    record_timing(model_key(specialize(free.graph, {"input": x.shape}), free.threads), "cpu", 5.0, 10)
    free.run(x)
    assert free.backend.name == "litert"                       # the timings do favour it
    tight = Runtime(artifact, memory_limit=1)
    for _ in range(2):                                         # the second run took the cached plan
        with pytest.raises(MemoryBudgetError):
            tight.run(x)
    roomy = Runtime(artifact, memory_limit="64MB")
    out = roomy.run(x)["logits"]
    assert roomy.backend.name in ("cpu", "opencl") and roomy.plan({"input": x.shape}).arena_plan is not None
    np.testing.assert_allclose(out, free.run(x)["logits"], rtol=1e-4, atol=1e-4)
    rep = roomy.backend_report({"input": x.shape})
    litert = next(e for e in rep["candidates"] if e["name"] == "litert")
    assert "memory limit" in litert["excluded"] and "litert" not in [o["name"] for o in rep["options"]]
    assert "litert   excluded: cannot honour a memory limit" in format_report(rep)
    with pytest.raises(BackendError, match="cannot honour a memory limit"):
        Runtime(artifact, backend="litert", memory_limit="64MB")


def test_device_probe_that_aborts_leaves_the_process_alive(tmp_path, monkeypatch):
    import importlib.util
    from edge_infer import probe_guard
    if importlib.util.find_spec("pyopencl") is None:
        pytest.skip("pyopencl not installed: no driver is loaded, nothing to guard")
    from edge_infer.backends.opencl import OpenCLBackend
    monkeypatch.setenv("EDGE_INFER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(probe_guard, "CHILD_CODE", "import os; os.abort()")
    probe_guard.forget()
    try:
        ok, why = OpenCLBackend().available()
        assert not ok and "crashed (SIGABRT)" in why
        from edge_infer.probe import probe
        assert "crashed" in probe(backends=False)["opencl"]["reason"]
    finally:
        probe_guard.forget()
    # the child's answer is kept on disk for the next process with the same limits
    assert "crashed" in open(tmp_path / "cache" / "devices.json").read()


def test_microbenchmark_that_crashes_makes_the_backend_unavailable(tmp_path, monkeypatch):
    from edge_infer import probe_guard
    from edge_infer.backends import picker
    from edge_infer.backends.opencl import OpenCLBackend
    from edge_infer.frontends import load_model
    from edge_infer.runtime import specialize
    monkeypatch.setenv("EDGE_INFER_CACHE_DIR", str(tmp_path / "cache"))
    probe_guard.forget()
    if not OpenCLBackend().available()[0]:
        pytest.skip("no OpenCL device")
    monkeypatch.setattr(picker, "_measured_here", {})
    monkeypatch.setattr(picker, "_memory_cache", {})
    monkeypatch.setattr(probe_guard, "MEASURE_CODE", "import os; os.kill(os.getpid(), 11)")
    g = specialize(load_model(digits_model_path()), {"input": (1, 1, 8, 8)})
    choice = picker.pick(g, "auto", ("opencl", "cpu"), 1, estimate=True)
    ocl = next(e for e in choice.report["candidates"] if e["name"] == "opencl")
    assert not ocl["available"] and "crashed (SIGSEGV)" in ocl["reason"]
    assert choice.name != "opencl"
    # remembered for this machine's limits: the next process does not crash a child again
    monkeypatch.setattr(picker, "_measured_here", {})
    monkeypatch.setattr(probe_guard, "MEASURE_CODE", "raise SystemExit('must not run again')")
    again = picker.pick(g, "auto", ("opencl", "cpu"), 1, estimate=True)
    assert "crashed (SIGSEGV)" in next(e for e in again.report["candidates"] if e["name"] == "opencl")["reason"]


@pytest.mark.parametrize("argv", [
    ["convert", "m.onnx", "--quantize", "int8", "--calib", "random", "--requant", "bogus"],
    ["convert", "m.onnx", "--calib-method", "median"], ["bogus"], ["convert"]])
def test_argument_errors_are_one_line(capsys, argv):
    """A mistyped option value, command or a missing argument: one line naming it, exit 2
    (argparse printed its whole usage first)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "--help" in err[0], err
