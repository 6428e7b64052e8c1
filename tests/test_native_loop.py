"""The compiled execution loop (CpuExecutable.run_steps: consecutive native steps in one C call)
and the Runtime.run fast path: whole models give the per-op result bit for bit, the
numpy-only result (EDGE_INFER_NO_NATIVE=1) within float32 noise, and concurrent runs of one
Runtime give the sequential results."""
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import edge_infer
from edge_infer import InputError, Runtime
from edge_infer.backends.cpu import native
from edge_infer.backends.cpu.executor import group_native
from edge_infer.backends.cpu.native import ops as native_ops
from edge_infer.data import digits_model_path, load_digits_samples

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import randomized_light_model_path, rel_l2, tiny_chain  # noqa: E402

needs_native = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")
MODELS = ["digits", "squeezenet", "shufflenet"]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    d = tmp_path_factory.mktemp("loop")
    paths = {}
    for name in MODELS:
        src = digits_model_path() if name == "digits" else randomized_light_model_path(name)
        paths[name] = str(d / f"{name}.eim")
        edge_infer.convert(src, paths[name])
    return paths


def model_input(rt, seed=0):
    info = rt.inputs[0]
    shape = tuple(1 if isinstance(s, str) else s for s in info.shape)
    if info.shape[0] == "N":
        return load_digits_samples()[0][:4]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@needs_native
def test_tiny_chain_is_one_native_call(monkeypatch):
    rt = Runtime(tiny_chain(), backend="cpu")
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(1, 8)
    got = rt.run(x)
    ex = rt.plan({"x": (1, 8)})
    assert len(ex.steps) == 300 and len(ex.run_steps) == 1
    profiled, times = ex.run_profiled({"x": x})
    assert len(times) == 300 and times[0][1] == "Add"
    monkeypatch.setattr(native, "lib", None)
    ref = Runtime(tiny_chain(), backend="cpu")
    assert len(ref.plan({"x": (1, 8)}).run_steps) == 300
    want = ref.run(x)
    np.testing.assert_array_equal(got["t299"], want["t299"])
    np.testing.assert_array_equal(profiled["t299"], want["t299"])


@needs_native
def test_group_native_keeps_order_and_python_steps():
    a = np.arange(6, dtype=np.float32)
    b, c, d = np.zeros(6, np.float32), np.zeros(6, np.float32), np.zeros(6, np.float32)
    log = []
    steps = [native_ops.unary_step("Neg", a, b), native_ops.binary_step("Add", b, a, c),   # c = 0
             lambda: log.append(c.copy()),
             native_ops.unary_step("Abs", b, d),
             native_ops.binary_step("Mul", d, d, c), native_ops.copy_step([(b, c)])]       # b = a*a
    grouped = group_native(steps)
    assert len(grouped) == 3 and grouped[1] is steps[2]
    # the group before the Python step sends the pool's workers to sleep (numpy/BLAS may need
    # the cores); the plan's last one leaves them spinning out their idle budget
    assert not grouped[0].native_lingers and grouped[2].native_lingers
    assert not group_native(steps[:3])[0].native_lingers
    for s in grouped:
        s()
    np.testing.assert_array_equal(log[0], np.zeros(6))
    np.testing.assert_array_equal(b, a * a)
    assert group_native([]) == []


@needs_native
@pytest.mark.parametrize("name", MODELS)
def test_model_loop_equals_per_op(artifacts, name):
    rt = Runtime(artifacts[name], backend="cpu", threads=2)
    x = model_input(rt)
    feeds = {rt.inputs[0].name: x}
    got = rt.run(feeds)
    ex = rt.plan({rt.inputs[0].name: x.shape})
    native_ops_n = sum(getattr(s, "native_step", None) is not None for s in ex.steps)
    assert native_ops_n > 0 and len(ex.run_steps) < len(ex.steps)
    per_op, _ = ex.run_profiled(feeds)
    for k in got:
        np.testing.assert_array_equal(got[k], per_op[k])


_CHILD = r"""
import json, sys, numpy as np
from edge_infer import Runtime
from edge_infer.backends.cpu import native
assert native.lib is None
out = {}
for name, path, inp in json.loads(sys.argv[1]):
    rt = Runtime(path, backend="cpu", threads=2)
    res = rt.run({rt.inputs[0].name: np.load(inp)})
    np.savez(inp + ".out.npz", **res)
"""


@needs_native
def test_models_equal_numpy_only_path(artifacts, tmp_path):
    jobs, ours = [], {}
    for name in MODELS:
        rt = Runtime(artifacts[name], backend="cpu", threads=2)
        x = model_input(rt, seed=3)
        inp = str(tmp_path / f"{name}.npy")
        np.save(inp, x)
        jobs.append((name, artifacts[name], inp))
        ours[name] = rt.run({rt.inputs[0].name: x})
    env = dict(os.environ, EDGE_INFER_NO_NATIVE="1")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", _CHILD, json.dumps(jobs)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name, _, inp in jobs:
        ref = np.load(inp + ".out.npz")
        for k, v in ours[name].items():
            assert rel_l2(v, ref[k]) < 1e-5, (name, k, rel_l2(v, ref[k]))


@pytest.mark.parametrize("name", ["digits", "squeezenet"])
def test_threads_times_runs_identical(artifacts, name):
    rt = Runtime(artifacts[name], backend="cpu", threads=2)
    key = rt.inputs[0].name
    xs = [model_input(rt, seed=s) + np.float32(0.01 * s) for s in range(12)]
    want = [rt.run({key: x}) for x in xs]
    got = [None] * len(xs)
    errors = []

    def worker(i0):
        try:
            for _ in range(3):
                for i in range(i0, len(xs), 4):
                    got[i] = rt.run({key: xs[i]})
                    for k in want[i]:
                        np.testing.assert_array_equal(got[i][k], want[i][k])
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors, errors[0]
    assert all(g is not None for g in got)


def test_fast_path_still_checks_inputs():
    rt = Runtime(tiny_chain(6), backend="cpu")
    x = np.ones((1, 8), np.float32)
    ref = rt.run(x)["t5"]
    np.testing.assert_array_equal(rt.run({"x": x})["t5"], ref)           # now cached
    with pytest.raises(InputError):
        rt.run(np.ones((1, 9), np.float32))
    with pytest.raises(InputError):
        rt.run(np.ones((1, 8), np.int32))
    with pytest.raises(InputError):
        rt.run({"y": x})
    with pytest.raises(InputError):
        rt.run({"x": x, "y": x})
    np.testing.assert_array_equal(rt.run(x.astype(np.float64))["t5"], ref)  # float kinds convert
    np.testing.assert_array_equal(rt.run([[1.0] * 8])["t5"], ref)          # lists take the checked path
