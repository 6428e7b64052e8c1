"""Whole transformer and recurrent models built with onnx.helper, converted by the full
converter (optimizer, verification, artifact) and run, against onnxruntime:

* a ViT-style stack: patch-embedding conv, position embedding, pre-norm blocks with
  multi-head attention as exporters write it (MatMul/Reshape/Transpose/Softmax chains
  with a scale), LayerNorm as the op and as PyTorch's decomposition, GELU MLP in the
  erf and tanh decompositions, residuals, a mean-pooled classifier; also its int8
  conversion (LayerNorm stays a float island; Softmax and GELU have int8 kernels) against fp32;
* a CRNN text recognizer: conv feature extractor -> bidirectional LSTM (or GRU) ->
  linear -> per-timestep log-probabilities.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from onnx_models import ort_run, rel_l2  # noqa: E402
from test_seq_ops import decomposed_layer_norm  # noqa: E402

import edge_infer  # noqa: E402
from edge_infer.artifact import load_artifact  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402

D, HEADS, TOKENS, MLP, CLASSES = 32, 4, 16, 64, 10


class Builder:
    """Nodes and initializers of a model under construction, with unique names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def const(self, value, base="c") -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def weight(self, *shape, scale=None) -> str:
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[0] if len(shape) == 2 else
                                                                  int(np.prod(shape[1:])))
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def op(self, op, inputs, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def linear(self, x, n_in, n_out) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight(n_in, n_out)]),
                               self.const((self.rng.standard_normal(n_out) * 0.1).astype(np.float32))])

    def model(self, inputs, outputs, opset=18):
        g = helper.make_graph(self.nodes, "g", inputs, outputs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _layer_norm(b: Builder, x: str, decomposed: bool) -> str:
    if not decomposed:
        gamma = b.const((1 + 0.1 * b.rng.standard_normal(D)).astype(np.float32))
        beta = b.const((0.1 * b.rng.standard_normal(D)).astype(np.float32))
        return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-6)
    out = b.name("ln")
    nodes, inits = decomposed_layer_norm(x, out, (1, TOKENS, D), 1, b.rng, prefix=b.name("ln"))
    b.nodes += nodes
    b.inits += [numpy_helper.from_array(a, n) for n, a in inits]
    return out


def _gelu(b: Builder, x: str, form: str) -> str:
    """GELU as exporters decompose it: erf (PyTorch) or tanh (approximate='tanh')."""
    half, one = b.const(np.float32(0.5)), b.const(np.float32(1.0))
    if form == "erf":
        inner = b.op("Erf", [b.op("Div", [x, b.const(np.float32(math.sqrt(2.0)))])])
    else:
        cube = b.op("Pow", [x, b.const(np.float32(3.0))])
        poly = b.op("Add", [x, b.op("Mul", [cube, b.const(np.float32(0.044715))])])
        inner = b.op("Tanh", [b.op("Mul", [poly, b.const(np.float32(math.sqrt(2 / math.pi)))])])
    return b.op("Mul", [b.op("Mul", [x, half]), b.op("Add", [inner, one])])


def _split_heads(b: Builder, x: str, perm) -> str:
    r = b.op("Reshape", [x, b.const(np.array([1, TOKENS, HEADS, D // HEADS], np.int64))])
    return b.op("Transpose", [r], perm=perm)


def _attention(b: Builder, x: str) -> str:
    """Multi-head self-attention as torch.onnx writes nn.MultiheadAttention-style code."""
    q = _split_heads(b, b.linear(x, D, D), [0, 2, 1, 3])           # (1, h, T, d)
    k = _split_heads(b, b.linear(x, D, D), [0, 2, 3, 1])           # (1, h, d, T)
    v = _split_heads(b, b.linear(x, D, D), [0, 2, 1, 3])
    scores = b.op("Mul", [b.op("MatMul", [q, k]), b.const(np.float32(1 / math.sqrt(D // HEADS)))])
    attn = b.op("Softmax", [scores], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [attn, v])], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.const(np.array([1, TOKENS, D], np.int64))])
    return b.linear(ctx, D, D)


def vit_model(seed: int = 0, blocks: int = 2):
    b = Builder(seed)
    # patch embedding: 8x8 patches of a 32x32 image -> 16 tokens of width D
    x = b.op("Conv", ["image", b.weight(D, 3, 8, 8), b.const(np.zeros(D, np.float32))],
             kernel_shape=[8, 8], strides=[8, 8])
    x = b.op("Transpose", [b.op("Reshape", [x, b.const(np.array([1, D, TOKENS], np.int64))])], perm=[0, 2, 1])
    x = b.op("Add", [x, b.const((0.02 * b.rng.standard_normal((1, TOKENS, D))).astype(np.float32))])
    for k in range(blocks):
        x = b.op("Add", [x, _attention(b, _layer_norm(b, x, decomposed=k % 2 == 1))])
        h = b.linear(_layer_norm(b, x, decomposed=k % 2 == 0), D, MLP)
        x = b.op("Add", [x, b.linear(_gelu(b, h, "erf" if k % 2 == 0 else "tanh"), MLP, D)])
    x = _layer_norm(b, x, decomposed=True)
    pooled = b.op("ReduceMean", [x, b.const(np.array([1], np.int64))], keepdims=0)
    logits = b.linear(pooled, D, CLASSES)
    b.nodes[-1].output[0] = "logits"
    return b.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES])])


def crnn_model(rnn: str = "LSTM", seed: int = 1, width: int = 64, hidden: int = 24, classes: int = 11):
    """Conv stack (1x32xW grayscale line) -> (W/2) time steps of 16 features -> bidirectional
    RNN -> linear -> LogSoftmax per time step, as PyTorch exports a CRNN."""
    b = Builder(seed)

    def conv(x, cin, cout):
        bias = b.const((0.1 * b.rng.standard_normal(cout)).astype(np.float32))
        y = b.op("Conv", [x, b.weight(cout, cin, 3, 3), bias], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        return b.op("Relu", [y])
    x = b.op("MaxPool", [conv("image", 1, 8)], kernel_shape=[2, 2], strides=[2, 2])      # 16 x W/2
    x = b.op("MaxPool", [conv(x, 8, 16)], kernel_shape=[2, 1], strides=[2, 1])          # 8 x W/2
    x = b.op("MaxPool", [conv(x, 16, 16)], kernel_shape=[8, 1], strides=[8, 1])         # 1 x W/2
    x = b.op("Squeeze", [x, b.const(np.array([2], np.int64))])                           # (1, 16, T)
    seq = b.op("Transpose", [x], perm=[2, 0, 1])                                         # (T, 1, 16)
    gates = {"LSTM": 4, "GRU": 3}[rnn]
    ins = [seq, b.weight(2, gates * hidden, 16, scale=0.3), b.weight(2, gates * hidden, hidden, scale=0.3),
           b.const((0.1 * b.rng.standard_normal((2, 2 * gates * hidden))).astype(np.float32)), "",
           b.const(np.zeros((2, 1, hidden), np.float32))]
    attrs = dict(hidden_size=hidden, direction="bidirectional")
    if rnn == "LSTM":
        ins.append(b.const(np.zeros((2, 1, hidden), np.float32)))
    else:
        attrs["linear_before_reset"] = 1                 # as torch.nn.GRU exports
    y = b.name("y")
    b.nodes.append(helper.make_node(rnn, ins, [y], **attrs))                             # (T, 2, 1, H)
    y = b.op("Reshape", [b.op("Transpose", [y], perm=[0, 2, 1, 3]),
                         b.const(np.array([0, 0, 2 * hidden], np.int64))])               # (T, 1, 2H)
    logits = b.linear(y, 2 * hidden, classes)
    b.nodes.append(helper.make_node("LogSoftmax", [logits], ["log_probs"], axis=-1))
    steps = width // 2
    return b.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 32, width])],
                   [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, [steps, 1, classes])])


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
