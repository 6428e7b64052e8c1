"""Transformer and recurrent models built with onnx.helper (seeded random weights), shared by
tests/test_seq_ops.py, tests/test_seq_models.py and benchmarks/seq_bench.py:

* ``decomposed_layer_norm``: LayerNorm written out as PyTorch below opset 17 and tf2onnx do;
* ``vit_model``: a ViT-style stack (patch-embedding conv, pre-norm blocks with multi-head
  attention as MatMul/Reshape/Transpose/Softmax chains, GELU MLPs in the erf and tanh
  decompositions, residuals, a mean-pooled classifier);
* ``crnn_model``: a CRNN text recognizer (conv features -> bidirectional LSTM or GRU ->
  linear -> per-timestep LogSoftmax).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def decomposed_layer_norm(x_name, out, shape, k, rng, square="Pow", divide="Div", affine=True,
                          prefix="ln"):
    """(nodes, initializers) of LayerNorm over the last ``k`` axes as PyTorch < opset 17
    and tf2onnx write it (ReduceMean with axes as an input: opset 18)."""
    p = lambda s: f"{prefix}_{s}"  # noqa: E731
    norm = shape[len(shape) - k:]
    inits = [(p("axes"), np.arange(-k, 0, dtype=np.int64)), (p("two"), np.array(2.0, np.float32)),
             (p("eps"), np.array(1e-5, np.float32))]
    nodes = [helper.make_node("ReduceMean", [x_name, p("axes")], [p("mean")]),
             helper.make_node("Sub", [x_name, p("mean")], [p("d")])]
    if square == "Pow":
        nodes.append(helper.make_node("Pow", [p("d"), p("two")], [p("sq")]))
    else:
        nodes.append(helper.make_node("Mul", [p("d"), p("d")], [p("sq")]))
    nodes += [helper.make_node("ReduceMean", [p("sq"), p("axes")], [p("var")]),
              helper.make_node("Add", [p("var"), p("eps")], [p("ve")]),
              helper.make_node("Sqrt", [p("ve")], [p("std")])]
    last = out if not affine else p("n")
    if divide == "Div":
        nodes.append(helper.make_node("Div", [p("d"), p("std")], [last]))
    else:
        nodes += [helper.make_node("Reciprocal", [p("std")], [p("rstd")]),
                  helper.make_node("Mul", [p("d"), p("rstd")], [last])]
    if affine:
        inits += [(p("gamma"), rng.standard_normal(norm).astype(np.float32)),
                  (p("beta"), rng.standard_normal(norm).astype(np.float32))]
        nodes += [helper.make_node("Mul", [p("n"), p("gamma")], [p("scaled")]),
                  helper.make_node("Add", [p("scaled"), p("beta")], [out])]
    return nodes, inits


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
