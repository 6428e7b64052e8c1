"""Whole transformer and recurrent models built with onnx.helper, converted by the full
converter (optimizer, verification, artifact) and run, against onnxruntime:

* the ViT-style stack of seq_model_builders.py (LayerNorm as the op and as PyTorch's
  decomposition, attention as MatMul/Reshape/Transpose/Softmax chains, GELU in the erf and
  tanh decompositions); also its int8 conversion (LayerNorm stays a float island; Softmax
  and GELU have int8 kernels) against fp32;
* the CRNN text recognizer (conv features -> bidirectional LSTM or GRU -> linear ->
  per-timestep log-probabilities), also in int8;
* a conv / GroupNorm stack, GroupNorm kept channels-last.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from onnx_models import ort_run, rel_l2  # noqa: E402
from seq_model_builders import Builder, crnn_model, vit_model  # noqa: E402

import edge_infer  # noqa: E402
from edge_infer.artifact import load_artifact  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402


def _convert(model, tmp_path, name, **options):
    src = tmp_path / f"{name}.onnx"
    onnx.save(model, src)
    dst = tmp_path / f"{name}.eim"
    report = edge_infer.convert(str(src), str(dst), **options)
    return dst, report


def _ops(path) -> list:
    return [n.op for n in load_artifact(str(path))[0].nodes]


def test_vit_block_stack_matches_onnxruntime(tmp_path):
    model = vit_model()
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = ort_run(model, {"image": x})["logits"]
    dst, _ = _convert(model, tmp_path, "vit")
    ops = _ops(dst)
    # 5 LayerNorms (2 ops, 3 decompositions recognized), both GELU forms recognized (and
    # then fused into their MatMul as its epilogue), the attention chains kept as MatMul/Softmax
    assert ops.count("LayerNormalization") == 5, ops
    acts = [n.attrs.get("activation") for n in load_artifact(str(dst))[0].nodes if n.op == "FusedMatMul"]
    assert sorted(a for a in acts if a) == ["Gelu", "GeluTanh"], acts
    assert "Erf" not in ops and "Tanh" not in ops and "Pow" not in ops, ops
    assert ops.count("Softmax") == 2 and "ReduceMean" in ops
    got = Runtime(str(dst), backend="cpu").run({"image": x})["logits"]
    assert rel_l2(got, ref) < 1e-5, rel_l2(got, ref)
    assert 0.1 < float(np.std(ref)) < 100        # the random weights give informative logits


def test_vit_int8_keeps_norms_float_and_tracks_fp32(tmp_path):
    model = vit_model()
    dst, report = _convert(model, tmp_path, "vit_int8", quantize="int8", calib="random", calib_samples=16)
    g = load_artifact(str(dst))[0]
    norms = [n for n in g.nodes if n.op == "LayerNormalization"]
    assert len(norms) == 5
    for n in norms:                                  # float islands between int8 MatMuls
        assert g.tensors[n.inputs[0]].dtype == "float32" and g.tensors[n.outputs[0]].dtype == "float32"
    assert any(n.op in ("MatMul", "FusedMatMul") and g.tensors[n.inputs[0]].dtype == "int8"
               for n in g.nodes), "no MatMul ran int8"
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 1, 3, 32, 32)).astype(np.float32)
    rt = Runtime(str(dst), backend="cpu")
    got = np.concatenate([rt.run({"image": xi})["logits"] for xi in x])
    ref = np.concatenate([ort_run(model, {"image": xi})["logits"] for xi in x])
    sqnr = 10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((got - ref).astype(np.float64) ** 2))
    print(f"\nViT int8 vs fp32 (onnxruntime): SQNR {sqnr:.1f} dB; top-1 agreement "
          f"{np.mean(got.argmax(-1) == ref.argmax(-1)):.2f}")
    assert sqnr > 20, sqnr


@pytest.mark.parametrize("rnn", ["LSTM", "GRU"])
def test_crnn_matches_onnxruntime(rnn, tmp_path):
    model = crnn_model(rnn)
    x = np.random.default_rng(3).random((1, 1, 32, 64), dtype=np.float32)
    ref = ort_run(model, {"image": x})["log_probs"]
    dst, _ = _convert(model, tmp_path, f"crnn_{rnn}")
    assert rnn in _ops(dst)
    got = Runtime(str(dst), backend="cpu").run({"image": x})["log_probs"]
    assert got.shape == (32, 1, 11)
    assert rel_l2(got, ref) < 1e-5, rel_l2(got, ref)
    # the recognizer's greedy decoding agrees per time step
    assert np.array_equal(got.argmax(-1), ref.argmax(-1))


def test_crnn_int8_conversion_keeps_the_lstm_float(tmp_path):
    model = crnn_model("LSTM")
    dst, _ = _convert(model, tmp_path, "crnn_int8", quantize="int8", calib="random", calib_samples=8)
    g = load_artifact(str(dst))[0]
    lstm = next(n for n in g.nodes if n.op == "LSTM")
    assert g.tensors[lstm.inputs[0]].dtype == "float32"
    x = np.random.default_rng(4).random((1, 1, 32, 64), dtype=np.float32)
    got = Runtime(str(dst), backend="cpu").run({"image": x})["log_probs"]
    ref = ort_run(model, {"image": x})["log_probs"]
    assert np.mean(got.argmax(-1) == ref.argmax(-1)) >= 0.8


def test_group_norm_conv_stack_runs_channels_last(tmp_path):
    """Conv -> GroupNorm -> Relu -> Conv: the layout pass keeps GroupNorm in NHWC (no
    transposes around it), and the result matches onnxruntime."""
    b = Builder(5)
    x = "image"
    for cin, cout in ((3, 16), (16, 16)):
        x = b.op("Conv", [x, b.weight(cout, cin, 3, 3), b.const(np.zeros(cout, np.float32))],
                 kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        gamma = b.const((1 + 0.2 * b.rng.standard_normal(cout)).astype(np.float32))
        beta = b.const((0.2 * b.rng.standard_normal(cout)).astype(np.float32))
        x = b.op("Relu", [b.op("GroupNormalization", [x, gamma, beta], num_groups=4, epsilon=1e-5)])
    b.nodes[-1].output[0] = "features"
    model = b.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 12, 10])],
                    [helper.make_tensor_value_info("features", TensorProto.FLOAT, [2, 16, 12, 10])], opset=21)
    dst, _ = _convert(model, tmp_path, "gn")
    nodes = load_artifact(str(dst))[0].nodes
    assert [n.attrs.get("data_layout") for n in nodes if n.op == "GroupNormalization"] == ["NHWC", "NHWC"]
    assert [n.op for n in nodes].count("Transpose") == 2, [n.op for n in nodes]    # in and out only
    x = np.random.default_rng(6).standard_normal((2, 3, 12, 10)).astype(np.float32)
    got = Runtime(str(dst), backend="cpu").run({"image": x})["features"]
    assert rel_l2(got, ort_run(model, {"image": x})["features"]) < 1e-5
