"""The LiteRT backend: exported in memory, run by LiteRT's interpreter, against the CPU backend."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from edge_infer.backends import BACKENDS
from edge_infer.backends import litert as litert_backend
from edge_infer.backends.litert import LiteRTBackend, interpreter_class
from edge_infer.errors import BackendError
from edge_infer.ir import Graph
from edge_infer.runtime import Runtime, specialize

needs_litert = pytest.mark.skipif(interpreter_class()[0] is None, reason="ai-edge-litert / tflite-runtime missing")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    import edge_infer
    from edge_infer.data import digits_model_path, load_digits_samples
    X, _ = load_digits_samples()
    d = tmp_path_factory.mktemp("litert")
    fp32, int8 = str(d / "digits.eim"), str(d / "digits_int8.eim")
    edge_infer.convert(digits_model_path(), fp32)
    edge_infer.convert(digits_model_path(), int8, quantize="int8", calib=X[:100])
    return fp32, int8, X


def test_registered():
    assert "litert" in BACKENDS
    assert BACKENDS["litert"]().name == "litert"


def test_unavailable_says_why(monkeypatch):
    monkeypatch.setattr(litert_backend, "interpreter_class", lambda: (None, "ai_edge_litert.interpreter: ImportError"))
    ok, why = LiteRTBackend().available()
    assert not ok and "ai_edge_litert" in why and "tflite_runtime" in why
    from edge_infer.backends import get_backend
    with pytest.raises(BackendError, match="not available"):
        get_backend("litert")


def test_falls_back_to_tflite_runtime(monkeypatch):
    """Where only tflite_runtime imports, its Interpreter is used."""
    fake = types.ModuleType("tflite_runtime.interpreter")
    fake.Interpreter = object
    pkg = types.ModuleType("tflite_runtime")
    pkg.interpreter = fake
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)     # import fails
    monkeypatch.setitem(sys.modules, "tflite_runtime", pkg)
    monkeypatch.setitem(sys.modules, "tflite_runtime.interpreter", fake)
    cls, where = interpreter_class()
    assert cls is object and where == "tflite_runtime.interpreter"


@needs_litert
@pytest.mark.parametrize("which", ["fp32", "int8"])
def test_runs_digits_like_cpu(digits, which):
    fp32, int8, X = digits
    path = fp32 if which == "fp32" else int8
    lit = Runtime(path, backend="litert", threads=2)
    cpu = Runtime(path, backend="cpu", threads=1)
    name = lit.graph.outputs[0]
    worst = 0.0
    for i in range(0, 40, 4):
        a, b = lit.run(X[i:i + 1])[name], cpu.run(X[i:i + 1])[name]
        assert a.shape == b.shape and a.dtype == b.dtype
        worst = max(worst, float(np.abs(a - b).max()))
        if which == "fp32":
            assert np.linalg.norm(a - b) <= 1e-4 * np.linalg.norm(b)
    if which == "int8":
        dq = next(n for n in lit.graph.nodes if n.op == "DequantizeLinear" and n.outputs[0] == name)
        step = float(lit.graph.tensors[dq.inputs[1]].data)
        assert worst <= 2 * step * 1.0001          # XNNPACK's float requantization (see test_tflite)


@needs_litert
def test_executable_interface(digits):
    fp32, _, X = digits
    from edge_infer.artifact import load_artifact
    g = load_artifact(fp32)[0]
    g = specialize(g, {g.inputs[0]: (1, 1, 8, 8)})
    ex = LiteRTBackend().prepare(g, threads=1)
    out = ex.run({g.inputs[0]: X[:1]})
    assert list(out) == g.outputs
    out2, prof = ex.run_profiled({g.inputs[0]: X[:1]})
    np.testing.assert_array_equal(out[g.outputs[0]], out2[g.outputs[0]])
    assert len(prof) == 1 and prof[0][2] > 0
    assert ex.model_bytes[4:8] == b"TFL3"
    assert LiteRTBackend().available(g) == (True, "")
    assert all(LiteRTBackend().supports(n, g) for n in g.nodes)


def test_supports_only_what_exports():
    g = Graph("g")
    g.add_input("x", "float32", (1, 2, 8))
    g.add_const("w", np.ones((3, 2, 3), np.float32))
    g.add_node("Conv", ["x", "w"], ["y"], kernel_shape=[3], pads=[0, 0], strides=[1], dilations=[1], group=1)
    g.add_node("Einsum", ["y"], ["z"], equation="ij->ji")
    g.outputs = ["z"]
    g.tensors["y"].shape, g.tensors["y"].dtype = (1, 3, 6), "float32"
    b = LiteRTBackend()
    conv, einsum = g.nodes
    assert not b.supports(conv, g)                # 1-D (NCHW) convolution: no TFLite form
    assert not b.supports(einsum, g)
    if interpreter_class()[0] is not None:
        ok, why = b.available(g)
        assert not ok and "cannot be exported" in why
