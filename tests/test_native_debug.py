"""The native kernels' debug build (issue #16 #1: "the native kernels also check their
preconditions in a debug build that the tests use"): built here with
``EDGE_INFER_NATIVE_DEBUG=1 setup.py build_ext`` into a temporary folder, loaded through
``EDGE_INFER_NATIVE_LIB`` in subprocesses. Valid graphs give the release build's outputs
(no false alarm); a hostile argument struct aborts naming the failed condition instead of
reading out of bounds."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from edge_infer.backends.cpu import native

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.fixture(scope="module")
def debug_lib(tmp_path_factory):
    if not native.available()[0]:
        pytest.skip(f"native kernels not built: {native.available()[1]}")
    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("native_debug")
    env = dict(os.environ, EDGE_INFER_NATIVE_DEBUG="1")
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(d / "lib"),
                        "--build-temp", str(d / "tmp")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    found = glob.glob(str(d / "lib" / "edge_infer" / "backends" / "cpu" / "native" / "_edge_native*"))
    assert r.returncode == 0 and found, r.stderr[-2000:]
    return found[0]


def _run(args, lib=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
    env.pop("EDGE_INFER_NO_NATIVE", None)
    if lib:
        env["EDGE_INFER_NATIVE_LIB"] = lib
    return subprocess.run([sys.executable, os.path.join(HERE, "native_debug_cases.py"), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def test_debug_build_runs_valid_graphs_like_the_release_build(debug_lib, tmp_path):
    rel, dbg = tmp_path / "release.npz", tmp_path / "debug.npz"
    for lib, out in ((None, rel), (debug_lib, dbg)):
        r = _run(["models", str(out)], lib)
        assert r.returncode == 0, r.stderr[-2000:]
    a, b = np.load(rel), np.load(dbg)
    assert not a["debug_checks"] and b["debug_checks"]           # each process loaded its library
    assert sorted(a.files) == sorted(b.files) and len(a.files) > 4
    for k in a.files:
        if k == "debug_checks":
            continue
        if a[k].dtype.kind == "f":       # -O1 vs -O3 may contract multiply-adds differently
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-5 * float(np.abs(a[k]).max()), err_msg=k)
        else:
            np.testing.assert_array_equal(b[k], a[k], err_msg=k)


def test_debug_build_aborts_on_a_negative_dilation(debug_lib):
    r = _run(["bad_pool"], debug_lib)
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stdout, r.stderr[-1000:])
    assert "edge_native: precondition failed in ei_pool2d_f32:" in r.stderr
    assert "dh >= 1" in r.stderr and "returned" not in r.stdout


def test_fuzzed_artifacts_never_trip_a_precondition(debug_lib, tmp_path):
    """Mutated artifacts (tests/fuzz_cases.py) through the debug build: whatever the loader's
    validation lets through reaches the kernels with arguments that hold their preconditions."""
    import json
    from fuzz_cases import make_cases
    written = make_cases(31, 120, str(tmp_path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]), EDGE_INFER_NATIVE_LIB=debug_lib)
    env.pop("EDGE_INFER_NO_NATIVE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_cases.py"), str(tmp_path)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0 and "precondition failed" not in r.stderr, r.stderr[-1500:]
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == len(written) and {x["outcome"] for x in lines} == {"ok", "error"}
