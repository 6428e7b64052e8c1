"""The bundled digits CNN fixture (edge_infer/data/digits): files, shapes, and real accuracy."""
import numpy as np
import pytest

from edge_infer.data import digits_model_path, load_digits_samples


def test_samples_shapes_and_dtypes():
    x, y = load_digits_samples()
    assert x.dtype == np.float32 and y.dtype == np.int64
    assert x.ndim == 4 and x.shape[1:] == (1, 8, 8)
    assert y.shape == (x.shape[0],)
    assert x.shape[0] == 450                      # 25% stratified held-out of 1797
    assert x.min() >= 0.0 and x.max() <= 1.0      # pixels / 16
    # scaled from integers 0..16, so every value is an exact multiple of 1/16
    assert np.array_equal(x * 16, np.round(x * 16))
    assert set(np.unique(y).tolist()) == set(range(10))
    assert np.bincount(y, minlength=10).min() >= 40


def test_samples_are_fresh_copies():
    x1, _ = load_digits_samples()
    x1[...] = -1
    x2, _ = load_digits_samples()
    assert x2.min() >= 0.0


def test_model_is_valid_onnx():
    onnx = pytest.importorskip("onnx")
    model = onnx.load(digits_model_path())
    onnx.checker.check_model(model)
    assert model.ir_version == 8
    assert {o.domain: o.version for o in model.opset_import}[""] == 13
    (inp,), (out,) = model.graph.input, model.graph.output
    assert inp.name == "input" and out.name == "logits"
    in_dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    out_dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
    assert in_dims == ["N", 1, 8, 8] and out_dims == ["N", 10]
    ops = [n.op_type for n in model.graph.node]
    # the ops later fusion/quantization passes rely on are really there
    for op in ("Conv", "BatchNormalization", "Relu", "Clip", "MaxPool", "GlobalAveragePool",
               "Flatten", "Gemm"):
        assert op in ops, op
    assert any(n.op_type == "Conv" and any(a.name == "group" and a.i == 32 for a in n.attribute)
               for n in model.graph.node), "depthwise conv missing"


def test_onnxruntime_accuracy_on_bundled_samples():
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    x, y = load_digits_samples()
    sess = ort.InferenceSession(digits_model_path(), providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"input": x})[0]
    assert logits.shape == (x.shape[0], 10) and logits.dtype == np.float32
    acc = float((logits.argmax(axis=1) == y).mean())
    assert acc >= 0.95, f"held-out accuracy {acc:.4f}"
    # symbolic batch: single samples give the same logits as the full batch
    for i in (0, 7, len(y) - 1):
        one = sess.run(["logits"], {"input": x[i:i + 1]})[0]
        np.testing.assert_allclose(one[0], logits[i], rtol=1e-5, atol=1e-5)
