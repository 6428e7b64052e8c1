"""TFLite ops of segmentation and pose models: DEPTH_TO_SPACE / SPACE_TO_DEPTH and the custom ops
XNNPACK runs for MediaPipe-style models (Convolution2DTransposeBias, MaxPoolingWithArgmax2D,
MaxUnpooling2D), imported and run against LiteRT (XNNPACK, which implements the custom ops)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("flatbuffers")
litert = pytest.importorskip("ai_edge_litert.interpreter")

from edge_infer.errors import ConversionError, UnsupportedOpError  # noqa: E402
from edge_infer.tflite_format import ModelWriter  # noqa: E402
from test_tflite import rel, run_litert, run_ours  # noqa: E402

R = np.random.default_rng(7)
SAME_C, VALID_C = 1, 2        # TfLitePadding in custom option structs


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def pool_params(padding, stride, filt):
    return struct.pack("<6i", padding, stride, stride, filt, filt, 0) + bytes(16)


def space_depth_model(op: str, shape, block: int, int8: bool):
    w = ModelWriter()
    n, h, wd, c = shape
    out = (n, h * block, wd * block, c // block ** 2) if op == "DEPTH_TO_SPACE" else \
        (n, h // block, wd // block, c * block ** 2)
    q = {"scale": [0.05], "zero_point": [3]} if int8 else None
    dt = "int8" if int8 else "float32"
    x = w.tensor("x", dt, shape, quant=q)
    y = w.tensor("y", dt, out, quant=q)
    w.op(op, [x], [y], {"block_size": block})
    return w.finish([x], [y])


@pytest.mark.parametrize("op,shape,block", [("DEPTH_TO_SPACE", (1, 3, 5, 8), 2), ("DEPTH_TO_SPACE", (2, 2, 2, 27), 3),
                                            ("SPACE_TO_DEPTH", (1, 6, 4, 3), 2), ("SPACE_TO_DEPTH", (2, 6, 9, 2), 3)])
@pytest.mark.parametrize("int8", [False, True])
def test_depth_space_match_litert(op, shape, block, int8):
    data = space_depth_model(op, shape, block, int8)
    x = R.integers(-128, 128, shape).astype(np.int8) if int8 else f32(*shape)
    ref = run_litert(data, [x])[0]
    ours, g = run_ours(data, [x])
    np.testing.assert_array_equal(ours[0], ref)          # data movement: exact
    if int8:
        assert {n.op for n in g.nodes} <= {"Reshape", "Transpose"}, [n.op for n in g.nodes]


def test_depth_to_space_refuses_bad_block():
    with pytest.raises(ConversionError, match="DEPTH_TO_SPACE"):
        run_ours(space_depth_model("DEPTH_TO_SPACE", (1, 2, 2, 6), 2, False), [f32(1, 2, 2, 6)])


def transpose_conv_bias_model(padding, stride, k, hw, cin, cout):
    w = ModelWriter()
    h = hw
    oh = h * stride if padding == SAME_C else (h - 1) * stride + k
    x = w.tensor("x", "float32", (1, h, h, cin))
    wt = w.tensor("w", "float32", (cout, k, k, cin), f32(cout, k, k, cin))
    b = w.tensor("b", "float32", (cout,), f32(cout))
    y = w.tensor("y", "float32", (1, oh, oh, cout))
    w.op("CUSTOM", [x, wt, b], [y], custom="Convolution2DTransposeBias",
         custom_options=struct.pack("<3i", padding, stride, stride))
    return w.finish([x], [y]), (1, h, h, cin)


@pytest.mark.parametrize("padding,stride,k", [(SAME_C, 2, 4), (SAME_C, 2, 3), (VALID_C, 2, 2), (VALID_C, 1, 3)])
def test_convolution2d_transpose_bias_matches_litert(padding, stride, k):
    data, xs = transpose_conv_bias_model(padding, stride, k, 5, 4, 3)
    x = f32(*xs)
    ref = run_litert(data, [x])[0]
    ours, _ = run_ours(data, [x])
    assert ours[0].shape == ref.shape and rel(ours[0], ref) < 1e-5


def argmax_unpool_model(padding, stride, filt, hw, c):
    """x -> MaxPoolingWithArgmax2D -> (values * 2, indices) -> MaxUnpooling2D -> y (SegNet's
    encoder/decoder pair); the pooled values also come out."""
    w = ModelWriter()
    h = hw
    ph = -(-h // stride) if padding == SAME_C else (h - filt) // stride + 1
    x = w.tensor("x", "float32", (1, h, h, c))
    p = w.tensor("p", "float32", (1, ph, ph, c))
    i = w.tensor("i", "float32", (1, ph, ph, c))
    p2 = w.tensor("p2", "float32", (1, ph, ph, c))
    y = w.tensor("y", "float32", (1, h, h, c))
    opts = pool_params(padding, stride, filt)
    w.op("CUSTOM", [x], [p, i], custom="MaxPoolingWithArgmax2D", custom_options=opts)
    w.op("MUL", [p, w.tensor("two", "float32", (1,), np.array([2.0], np.float32))], [p2], {"fused_activation_function": 0})
    w.op("CUSTOM", [p2, i], [y], custom="MaxUnpooling2D", custom_options=opts)
    return w.finish([x], [y, p]), (1, h, h, c)


# XNNPACK unpools VALID windows only ("invalid padding mode" for SAME)
@pytest.mark.parametrize("padding,stride,filt,hw", [(VALID_C, 2, 2, 8), (VALID_C, 2, 2, 6), (VALID_C, 3, 3, 9)])
def test_argmax_pool_and_unpool_match_litert(padding, stride, filt, hw):
    data, xs = argmax_unpool_model(padding, stride, filt, hw, 3)
    x = f32(*xs)
    ref = run_litert(data, [x])
    ours, g = run_ours(data, [x])
    for a, b in zip(ours, ref):
        np.testing.assert_array_equal(a, b)              # maxima and their placement: exact
    assert {"MaxPool", "MaxUnpool"} <= {n.op for n in g.nodes}


def test_argmax_indices_as_graph_output_are_refused():
    w = ModelWriter()
    x = w.tensor("x", "float32", (1, 4, 4, 2))
    p = w.tensor("p", "float32", (1, 2, 2, 2))
    i = w.tensor("i", "float32", (1, 2, 2, 2))
    w.op("CUSTOM", [x], [p, i], custom="MaxPoolingWithArgmax2D", custom_options=pool_params(VALID_C, 2, 2))
    with pytest.raises(UnsupportedOpError, match="indices as a graph output"):
        run_ours(w.finish([x], [p, i]), [f32(1, 4, 4, 2)])


def test_custom_op_options_are_checked():
    w = ModelWriter()
    x = w.tensor("x", "float32", (1, 4, 4, 2))
    p = w.tensor("p", "float32", (1, 2, 2, 2))
    i = w.tensor("i", "float32", (1, 2, 2, 2))
    w.op("CUSTOM", [x], [p, i], custom="MaxPoolingWithArgmax2D", custom_options=struct.pack("<5i", 2, 0, 2, 2, 2))
    w.op("CUSTOM", [p, i], [w.tensor("y", "float32", (1, 4, 4, 2))], custom="MaxUnpooling2D",
         custom_options=pool_params(VALID_C, 2, 2))
    with pytest.raises(ConversionError, match="strides and filter sizes must be positive"):
        run_ours(w.finish([x], [3]), [f32(1, 4, 4, 2)])
