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


# -- export: .tflite -> .eim -> .tflite, and ONNX models ------------------------------------------

def _ops_of(data: bytes):
    it = litert.Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    return [o["op_name"] for o in it._get_ops_details() if o["op_name"] != "DELEGATE"]


def _round_trip(data: bytes, tmp_path, **kw) -> bytes:
    import edge_infer
    from edge_infer.export_tflite import export_tflite
    src, eim = tmp_path / "m.tflite", tmp_path / "m.eim"
    src.write_bytes(data)
    edge_infer.convert(str(src), str(eim))
    return export_tflite(str(eim), **kw)


@pytest.mark.parametrize("op,shape,block", [("DEPTH_TO_SPACE", (1, 3, 5, 8), 2), ("DEPTH_TO_SPACE", (2, 2, 2, 27), 3),
                                            ("SPACE_TO_DEPTH", (1, 6, 4, 3), 2), ("SPACE_TO_DEPTH", (2, 6, 9, 2), 3)])
@pytest.mark.parametrize("int8", [False, True])
def test_depth_space_round_trip_is_the_builtin(op, shape, block, int8, tmp_path):
    data = space_depth_model(op, shape, block, int8)
    back = _round_trip(data, tmp_path)
    assert _ops_of(back) == [op]                       # the importer's reshape-transpose-reshape, fused back
    x = R.integers(-128, 128, shape).astype(np.int8) if int8 else f32(*shape)
    np.testing.assert_array_equal(run_litert(back, [x])[0], run_litert(data, [x])[0])


@pytest.mark.parametrize("padding,stride,filt,hw", [(VALID_C, 2, 2, 8), (VALID_C, 3, 3, 9)])
def test_argmax_pool_unpool_round_trip_matches_litert(padding, stride, filt, hw, tmp_path):
    data, xs = argmax_unpool_model(padding, stride, filt, hw, 3)
    back = _round_trip(data, tmp_path)
    assert sorted(_ops_of(back)) == ["MUL", "MaxPoolingWithArgmax2D", "MaxUnpooling2D"]   # no TRANSPOSE left
    x = f32(*xs)
    for a, b in zip(run_litert(back, [x]), run_litert(data, [x])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("custom", [True, False])
@pytest.mark.parametrize("padding,stride,k", [(SAME_C, 2, 4), (VALID_C, 2, 2), (VALID_C, 1, 3)])
def test_transpose_conv_bias_round_trip_matches_litert(padding, stride, k, custom, tmp_path):
    data, xs = transpose_conv_bias_model(padding, stride, k, 5, 4, 3)
    back = _round_trip(data, tmp_path, custom_transpose_conv=custom)
    assert _ops_of(back) == ["Convolution2DTransposeBias" if custom else "TRANSPOSE_CONV"]
    x = f32(*xs)
    assert rel(run_litert(back, [x])[0], run_litert(data, [x])[0]) < 1e-6


def _onnx_model(kind: str, mode: str = "DCR"):
    """NCHW ONNX graphs: [conv ->] DepthToSpace / SpaceToDepth [-> conv], or MaxPool with
    Indices -> Relu -> MaxUnpool (SegNet's pair)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    init = [numpy_helper.from_array(f32(8, 8, 1, 1) * 0.3, "w1"), numpy_helper.from_array(f32(2, 2, 3, 3), "w2")]
    if kind == "d2s_convs":
        nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
                 helper.make_node("DepthToSpace", ["a"], ["b"], blocksize=2, mode=mode),
                 helper.make_node("Conv", ["b", "w2"], ["y"], pads=[1, 1, 1, 1])]
        xs, ys = [1, 8, 5, 6], [1, 2, 10, 12]
    elif kind == "d2s":
        nodes, init = [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)], []
        xs, ys = [1, 8, 5, 6], [1, 2, 10, 12]
    elif kind == "s2d_convs":
        nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
                 helper.make_node("SpaceToDepth", ["a"], ["b"], blocksize=2),
                 helper.make_node("Conv", ["b", "w3"], ["y"])]
        init = init[:1] + [numpy_helper.from_array(f32(4, 32, 1, 1), "w3")]
        xs, ys = [1, 8, 6, 4], [1, 4, 3, 2]
    else:                                                                          # pool / unpool
        nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
                 helper.make_node("MaxPool", ["a"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
                 helper.make_node("Relu", ["p"], ["r"]),
                 helper.make_node("MaxUnpool", ["r", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
        xs, ys = [1, 8, 6, 8], [1, 8, 6, 8]
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tuple(xs)


@pytest.mark.parametrize("kind,mode,ops", [
    ("d2s", "DCR", ["TRANSPOSE", "DEPTH_TO_SPACE", "TRANSPOSE"]),
    ("d2s", "CRD", ["TRANSPOSE", "RESHAPE", "TRANSPOSE", "RESHAPE", "TRANSPOSE"]),
    ("d2s_convs", "DCR", ["TRANSPOSE", "CONV_2D", "DEPTH_TO_SPACE", "CONV_2D", "TRANSPOSE"]),
    ("d2s_convs", "CRD", ["TRANSPOSE", "CONV_2D", "RESHAPE", "TRANSPOSE", "RESHAPE", "CONV_2D", "TRANSPOSE"]),
    ("s2d_convs", "", ["TRANSPOSE", "CONV_2D", "SPACE_TO_DEPTH", "CONV_2D", "TRANSPOSE"]),
    ("pool", "", ["TRANSPOSE", "CONV_2D", "MaxPoolingWithArgmax2D", "RELU", "MaxUnpooling2D", "TRANSPOSE"])])
def test_onnx_vision_ops_export_matches_onnxruntime(kind, mode, ops, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from edge_infer.export_tflite import export_tflite
    model, xs = _onnx_model(kind, mode)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    data = export_tflite(path)
    assert _ops_of(data) == ops                   # NCHW ops in NHWC: no transposes inside the graph
    x = f32(*xs)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_litert(data, [x])[0]
    if "convs" in kind or kind == "pool":
        assert got.shape == ref.shape and rel(got, ref) < 1e-5
    else:
        np.testing.assert_array_equal(got, ref)   # data movement: exact


@pytest.mark.parametrize("kind", ["d2s_convs", "s2d_convs", "pool"])
def test_onnx_int8_vision_ops_export_matches_ours(kind, tmp_path):
    import edge_infer
    import onnx
    from edge_infer.artifact import load_artifact
    from edge_infer.export_tflite import export_tflite
    from edge_infer.runtime import Runtime
    model, xs = _onnx_model(kind)
    src, eim = str(tmp_path / "m.onnx"), str(tmp_path / "m.eim")
    onnx.save(model, src)
    edge_infer.convert(src, eim, quantize="int8", requant="fixed",
                       calib=R.standard_normal((8,) + xs[1:]).astype(np.float32))
    g = load_artifact(eim)[0]
    data = export_tflite(g)
    want = {"d2s_convs": "DEPTH_TO_SPACE", "s2d_convs": "SPACE_TO_DEPTH", "pool": "MaxUnpooling2D"}[kind]
    assert want in _ops_of(data) and _ops_of(data).count("TRANSPOSE") == 2      # the layout boundaries
    x = f32(*xs)
    ours = Runtime(g, backend="cpu", threads=1).run({"x": x})[g.outputs[0]]
    dq = next(n for n in g.nodes if n.op == "DequantizeLinear")
    step = float(g.tensors[dq.inputs[1]].data)
    if kind == "pool":
        # the pool pair runs in float (as the quantizer leaves it) after the int8 conv, which
        # XNNPACK requantizes in float: a step on some of the conv's outputs
        theirs = run_litert(data, [x])[0]
        # a one-step difference can also move a 2x2 window's argmax between two near-tied
        # inputs (calibrations that make it happen: a few in twelve), so the values are
        # compared per window (one nonzero each, at its argmax), the positions where no
        # window disagrees
        def windows(v):
            n, c, h, w = v.shape
            return v.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
        wo, wt = windows(ours), windows(theirs)
        steps = np.abs(wo.max(axis=-1) - wt.max(axis=-1)) / step
        assert steps.max() <= 1.0001
        same_place = (wo.argmax(axis=-1) == wt.argmax(axis=-1)) | (steps > 0) | (wo.max(axis=-1) == 0)
        assert same_place.mean() >= 0.98 and np.count_nonzero(ours) == np.count_nonzero(theirs)
        return
    # TFLite's reference int8 kernels: our scheme, bit for bit but for input-QUANTIZE ties
    steps = np.abs(run_litert(data, [x], litert.OpResolverType.BUILTIN_REF)[0] - ours) / step
    assert steps.max() <= 1.0001 and (steps > 0.5).mean() < 0.02


def test_export_refuses_argmax_indices_outside_unpool(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from edge_infer.export_tflite import ExportError, export_tflite
    g = helper.make_graph([helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 2, 2, 2]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [1, 2, 2, 2])])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    with pytest.raises(ExportError, match="may only feed MaxUnpool"):
        export_tflite(path)
