"""Unit tests of the ONNX frontend: normalisation into the opset-21 IR form,
opset upgrades, constants, external data, input shapes and error messages."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from onnx_models import make_model, ort_run, vi  # noqa: E402

from edge_infer import ops as op_layer  # noqa: E402
from edge_infer.errors import ConversionError, UnsupportedOpError  # noqa: E402
from edge_infer.frontends import load_model  # noqa: E402
from edge_infer.frontends.onnx import load_onnx  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402

F = TensorProto.FLOAT


def run(graph, feeds):
    return Runtime(graph, backend="cpu").run(feeds)


def ops(graph):
    return [n.op for n in graph.nodes]


def node(graph, op):
    (n,) = [n for n in graph.nodes if n.op == op]
    return n


def const_of(graph, name):
    t = graph.tensors[name]
    assert t.is_const, name
    return t.data


def has_ort():
    try:
        import onnxruntime  # noqa: F401
        return True
    except ImportError:
        return False


needs_ort = pytest.mark.skipif(not has_ort(), reason="onnxruntime not installed")


# -- attributes --------------------------------------------------------------------

def test_defaults_filled_and_json(rng):
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    m = make_model([
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("LeakyRelu", ["c"], ["l"]),
        helper.make_node("Gemm", ["f", "gw"], ["y"]),
        helper.make_node("Flatten", ["l"], ["f"]),
        helper.make_node("ArgMax", ["y"], ["am"]),
    ], [vi("x", [1, 3, 8, 8])], [vi("y", None), vi("am", None, TensorProto.INT64)],
        initializers=[w, numpy_helper.from_array(np.zeros((144, 5), np.float32), "gw")])
    g = load_onnx(m)
    conv = node(g, "Conv")
    assert conv.attrs == {"auto_pad": "NOTSET", "group": 1, "kernel_shape": [3, 3],
                          "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]}
    assert node(g, "LeakyRelu").attrs["alpha"] == pytest.approx(0.01)
    assert node(g, "Gemm").attrs == {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
    assert node(g, "Flatten").attrs == {"axis": 1}
    assert node(g, "ArgMax").attrs == {"axis": 0, "keepdims": 1, "select_last_index": 0}
    for n in g.nodes:
        json.dumps(n.attrs)      # the IR's attributes are JSON values
    assert g.metadata["source_opset"] == 21 and g.metadata["source_format"] == "onnx"
    out = run(g, {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)})
    assert out["y"].shape == (1, 5)


def test_transpose_perm_default_from_rank(rng):
    m = make_model([helper.make_node("Transpose", ["x"], ["y"])], [vi("x", [2, 3, 4])], [vi("y", None)])
    g = load_onnx(m)
    assert node(g, "Transpose").attrs["perm"] == [2, 1, 0]
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run(g, {"x": x})["y"], x.T)


def test_cast_to_is_dtype_name():
    m = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)],
                   [vi("x", [2])], [vi("y", [2], TensorProto.FLOAT16)])
    g = load_onnx(m)
    assert node(g, "Cast").attrs["to"] == "float16"
    assert g.tensors["y"].dtype == "float16"       # output dtype from value_info
    out = run(g, {"x": np.array([1.5, -2], np.float32)})["y"]
    assert out.dtype == np.float16


def test_cast_to_unsupported_dtype_names_tensor():
    m = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
                   [vi("x", [2])], [vi("y", [2], TensorProto.BFLOAT16)])
    with pytest.raises(ConversionError, match="BFLOAT16"):
        load_onnx(m)


def test_unsupported_input_dtype_names_tensor():
    m = make_model([helper.make_node("Identity", ["s"], ["y"])],
                   [vi("s", [2], TensorProto.STRING)], [vi("y", [2], TensorProto.STRING)])
    with pytest.raises(ConversionError, match=r"graph input 's'.*STRING"):
        load_onnx(m)


def test_constant_of_shape_value_attr():
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    m = make_model([
        helper.make_node("ConstantOfShape", ["shape"], ["a"]),
        helper.make_node("ConstantOfShape", ["shape"], ["b"],
                         value=numpy_helper.from_array(np.array([7], np.int64))),
    ], [], [vi("a", None), vi("b", None, TensorProto.INT64)], initializers=[shape])
    g = load_onnx(m)
    a, b = g.nodes
    assert a.attrs == {"value": 0.0, "dtype": "float32"}
    assert b.attrs == {"value": 7, "dtype": "int64"}
    out = run(g, {})
    np.testing.assert_array_equal(out["b"], np.full((2, 3), 7, np.int64))
    assert out["a"].dtype == np.float32 and not out["a"].any()


# -- opset upgrades ------------------------------------------------------------------

def test_clip_opset6_attrs_become_inputs():
    m = make_model([helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=2.0),
                    helper.make_node("Clip", ["x"], ["z"], max=0.5)],
                   [vi("x", [5])], [vi("y", [5]), vi("z", [5])], opset=6, ir_version=3)
    g = load_onnx(m)
    c1, c2 = g.nodes
    assert c1.op == "Clip" and c1.attrs == {} and len(c1.inputs) == 3
    assert const_of(g, c1.inputs[1]) == np.float32(-1) and const_of(g, c1.inputs[2]) == np.float32(2)
    assert c2.inputs[1] == "" and const_of(g, c2.inputs[2]) == np.float32(0.5)
    x = np.array([-3, -0.5, 0.2, 1.5, 4], np.float32)
    out = run(g, {"x": x})
    np.testing.assert_array_equal(out["y"], np.clip(x, -1, 2))
    np.testing.assert_array_equal(out["z"], np.minimum(x, 0.5))


def test_squeeze_unsqueeze_opset11_axes_become_inputs(rng):
    m = make_model([helper.make_node("Squeeze", ["x"], ["s"], axes=[1]),
                    helper.make_node("Unsqueeze", ["s"], ["y"], axes=[0, -1])],
                   [vi("x", [3, 1, 4])], [vi("y", None)], opset=11)
    g = load_onnx(m)
    sq, unsq = g.nodes
    assert sq.attrs == {} and const_of(g, sq.inputs[1]).tolist() == [1]
    assert const_of(g, sq.inputs[1]).dtype == np.int64
    assert const_of(g, unsq.inputs[1]).tolist() == [0, -1]
    x = rng.standard_normal((3, 1, 4)).astype(np.float32)
    assert run(g, {"x": x})["y"].shape == (1, 3, 4, 1)


def test_reduce_split_slice_pad_topk_old_opsets(rng):
    m = make_model([
        helper.make_node("ReduceMean", ["x"], ["rm"], axes=[1], keepdims=0),
        helper.make_node("ReduceSum", ["x"], ["rs"], axes=[0]),
        helper.make_node("Split", ["x"], ["s0", "s1"], axis=1, split=[1, 3]),
        helper.make_node("Slice", ["x"], ["sl"], starts=[1], ends=[3], axes=[1]),
        helper.make_node("Pad", ["x"], ["p"], pads=[0, 1, 0, 1], value=2.0),
        helper.make_node("TopK", ["x"], ["tv", "ti"], k=2),
    ], [vi("x", [2, 4])], [vi(n, None) for n in ("rm", "rs", "s0", "s1", "sl", "p", "tv")]
        + [vi("ti", None, TensorProto.INT64)], opset=9, ir_version=4)
    g = load_onnx(m)
    for n in g.nodes:
        assert not {"axes", "split", "starts", "ends", "pads", "value", "k"} & set(n.attrs), n
    assert node(g, "ReduceMean").attrs == {"keepdims": 0, "noop_with_empty_axes": 0}
    assert node(g, "Split").attrs == {"axis": 1}
    assert node(g, "Pad").attrs == {"mode": "constant"}
    x = rng.standard_normal((2, 4)).astype(np.float32)
    out = run(g, {"x": x})
    np.testing.assert_allclose(out["rm"], x.mean(1), rtol=1e-6)
    np.testing.assert_allclose(out["rs"], x.sum(0, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(out["s1"], x[:, 1:])
    np.testing.assert_array_equal(out["sl"], x[:, 1:3])
    np.testing.assert_array_equal(out["p"], np.pad(x, ((0, 0), (1, 1)), constant_values=2))
    np.testing.assert_array_equal(out["tv"], -np.sort(-x, 1)[:, :2])


def test_split_without_sizes_gets_num_outputs():
    m = make_model([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0)],
                   [vi("x", [6])], [vi("a", None), vi("b", None), vi("c", None)], opset=13)
    g = load_onnx(m)
    assert node(g, "Split").attrs == {"axis": 0, "num_outputs": 3}
    out = run(g, {"x": np.arange(6, dtype=np.float32)})
    np.testing.assert_array_equal(out["c"], [4, 5])


def test_batchnorm_opset7_spatial_dropped_and_nonspatial_rejected(rng):
    params = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("s", "b", "m", "v")]
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=1)
    m = make_model([bn], [vi("x", [1, 3, 2, 2])], [vi("y", None)], opset=7, ir_version=3,
                   initializers=params)
    g = load_onnx(m)
    assert node(g, "BatchNormalization").attrs == {"epsilon": pytest.approx(1e-5),
                                                   "momentum": pytest.approx(0.9), "training_mode": 0}
    m.graph.node[0].attribute[0].i = 0
    with pytest.raises(ConversionError, match="spatial=0"):
        load_onnx(m)


def test_dropout_opset10_ratio_becomes_input(rng):
    m = make_model([helper.make_node("Dropout", ["x"], ["y"], ratio=0.3)],
                   [vi("x", [4])], [vi("y", [4])], opset=10)
    g = load_onnx(m)
    d = node(g, "Dropout")
    assert d.attrs == {} and const_of(g, d.inputs[1]) == np.float32(0.3)
    x = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_array_equal(run(g, {"x": x})["y"], x)


@needs_ort
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("opset", [7, 9])
def test_upsample_becomes_resize(rng, mode, opset):
    scales = [1.0, 1.0, 2.0, 3.0]
    if opset == 7:
        nodes, inits = [helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=scales)], []
    else:
        nodes = [helper.make_node("Upsample", ["x", "sc"], ["y"], mode=mode)]
        inits = [numpy_helper.from_array(np.array(scales, np.float32), "sc")]
    m = make_model(nodes, [vi("x", [1, 2, 3, 4])], [vi("y", None)], opset=opset,
                   ir_version=4, initializers=inits)
    g = load_onnx(m)
    r = node(g, "Resize")
    assert ops(g) == ["Resize"]
    assert r.attrs["mode"] == mode and r.attrs["coordinate_transformation_mode"] == "asymmetric"
    assert r.inputs[1] == "" and const_of(g, r.inputs[2]).tolist() == scales
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(run(g, {"x": x})["y"], ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)


@needs_ort
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_opset10(rng, mode):
    sc = numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "sc")
    m = make_model([helper.make_node("Resize", ["x", "sc"], ["y"], mode=mode)],
                   [vi("x", [1, 1, 3, 4])], [vi("y", None)], opset=10, initializers=[sc])
    g = load_onnx(m)
    assert node(g, "Resize").inputs[:2] == ["x", ""]
    x = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(run(g, {"x": x})["y"], ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_resize_opset11_empty_roi_and_scales_become_absent(rng):
    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
             numpy_helper.from_array(np.zeros(0, np.float32), "scales"),
             numpy_helper.from_array(np.array([1, 1, 4, 4], np.int64), "sizes")]
    m = make_model([helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"])],
                   [vi("x", [1, 1, 2, 2])], [vi("y", None)], opset=11, initializers=inits)
    g = load_onnx(m)
    assert node(g, "Resize").inputs == ["x", "", "", "sizes"]
    assert run(g, {"x": np.ones((1, 1, 2, 2), np.float32)})["y"].shape == (1, 1, 4, 4)


@needs_ort
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis,declared", [(1, True), (1, False), (0, True), (2, True), (-1, False)])
def test_softmax_opset11_coerce_semantics(rng, op, axis, declared):
    # opset < 13: flatten to 2-D at `axis`, normalise rows, reshape back
    shape = [2, 3, 4] if declared else None
    m = make_model([helper.make_node(op, ["x"], ["y"], axis=axis)], [vi("x", shape)],
                   [vi("y", None)], opset=11)
    g = load_onnx(m)
    last = axis in (-1, 2)
    assert (ops(g) == [op]) == last
    assert all(n.attrs.get("axis", -1) == -1 for n in g.nodes if n.op == op)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32) * 3
    ref = ort_run(m, {"x": x})["y"]
    np.testing.assert_allclose(run(g, {"x": x})["y"], ref, rtol=1e-5, atol=1e-6)
    if axis == 1:    # really differs from the opset-13 (single axis) meaning
        m13 = make_model([helper.make_node(op, ["x"], ["y"], axis=1)], [vi("x", shape)],
                         [vi("y", None)], opset=13)
        assert not np.allclose(ort_run(m13, {"x": x})["y"], ref)


def test_post21_attribute_must_be_default():
    m = make_model([helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2, mode="CRD")],
                   [vi("x", [1, 1, 4, 4])], [vi("y", None)], opset=28)
    with pytest.raises(ConversionError, match="mode='CRD'.*opset 21"):
        load_onnx(m)
    m.graph.node[0].attribute[1].s = b"DCR"     # the default: means the same at 21
    g = load_onnx(m)
    assert node(g, "SpaceToDepth").attrs == {"blocksize": 2}


def test_old_opset_accepted_only_when_ops_unchanged():
    m = make_model([helper.make_node("Not", ["x"], ["y"])], [vi("x", [2], TensorProto.BOOL)],
                   [vi("y", [2], TensorProto.BOOL)], opset=1, ir_version=3)
    out = run(load_onnx(m), {"x": np.array([True, False])})
    np.testing.assert_array_equal(out["y"], [False, True])
    m = make_model([helper.make_node("Add", ["x", "x"], ["y"])], [vi("x", [2])], [vi("y", [2])],
                   opset=6, ir_version=3)
    with pytest.raises(ConversionError, match=r"opset 6 is too old.*Add"):
        load_onnx(m)


# -- constants -------------------------------------------------------------------------

@pytest.mark.parametrize("attr,value,expected", [
    ("value", numpy_helper.from_array(np.array([[1, 2]], np.float32)), np.array([[1, 2]], np.float32)),
    ("value", numpy_helper.from_array(np.array(3, np.int32)), np.array(3, np.int32)),
    ("value_float", 1.5, np.array(1.5, np.float32)),
    ("value_floats", [1.0, 2.5], np.array([1.0, 2.5], np.float32)),
    ("value_int", 7, np.array(7, np.int64)),
    ("value_ints", [1, -2], np.array([1, -2], np.int64)),
    ("sparse_value", helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0, 6.0], np.float32), "v"),
        numpy_helper.from_array(np.array([1, 3], np.int64), "i"), [2, 2]),
     np.array([[0, 5], [0, 6]], np.float32)),
])
def test_constant_variants_become_constant_tensors(attr, value, expected):
    m = make_model([helper.make_node("Constant", [], ["c"], **{attr: value}),
                    helper.make_node("Identity", ["c"], ["y"])], [], [vi("y", None, 0)])
    g = load_onnx(m)
    assert ops(g) == ["Identity"]
    c = const_of(g, "c")
    assert c.dtype == expected.dtype and c.shape == expected.shape
    np.testing.assert_array_equal(c, expected)
    np.testing.assert_array_equal(run(g, {})["y"], expected)


def test_string_constant_rejected():
    m = make_model([helper.make_node("Constant", [], ["c"], value_strings=["a"])], [], [vi("c", None, 0)])
    with pytest.raises(ConversionError, match="constant 'c'.*STRING"):
        load_onnx(m)


def test_initializer_listed_as_input_is_constant():
    w = numpy_helper.from_array(np.array([1, 2], np.float32), "w")
    m = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [2]), vi("w", [2])],
                   [vi("y", [2])], opset=9, ir_version=3, initializers=[w])
    g = load_onnx(m)
    assert g.inputs == ["x"] and g.tensors["w"].is_const
    np.testing.assert_array_equal(run(g, {"x": np.ones(2, np.float32)})["y"], [2, 3])


# -- external data -------------------------------------------------------------------------

def _external_model(tmp_path, rng):
    w = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                    helper.make_node("Add", ["h", "b"], ["y"])],
                   [vi("x", ["batch", 8])], [vi("y", ["batch", 16])],
                   initializers=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    d = tmp_path / "model_dir"
    d.mkdir()
    path = str(d / "model.onnx")
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    return path, w, b


def test_external_data_round_trip(tmp_path, rng, monkeypatch):
    path, w, b = _external_model(tmp_path, rng)
    assert os.path.getsize(path) < 1000 and os.path.exists(os.path.join(os.path.dirname(path), "weights.bin"))
    monkeypatch.chdir(tmp_path)      # weights resolve against the model's dir, not the cwd
    g = load_onnx(os.path.relpath(path))
    np.testing.assert_array_equal(const_of(g, "w"), w)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(run(g, {"x": x})["y"], x @ w + b, rtol=1e-5, atol=1e-5)


def test_external_data_missing_file(tmp_path, rng):
    path, _, _ = _external_model(tmp_path, rng)
    os.remove(os.path.join(os.path.dirname(path), "weights.bin"))
    with pytest.raises(ConversionError, match=r"initializer 'w'.*'weights.bin' not found"):
        load_onnx(path)


# -- input shapes ------------------------------------------------------------------------------

def _two_input_model():
    return make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                      [vi("a", ["N", 3, None]), vi("b", ["N", 3, 1])], [vi("y", None)])


def test_symbolic_and_unknown_dims():
    g = load_onnx(_two_input_model())
    a, b = g.tensors["a"].shape, g.tensors["b"].shape
    assert a[:2] == ("N", 3) and isinstance(a[2], str) and a[2] not in ("N",)
    assert b == ("N", 3, 1)
    assert g.tensors["y"].shape is None          # intermediates/outputs: inferred later


def test_input_shapes_pin_dims_and_shared_symbols():
    g = load_onnx(_two_input_model(), input_shapes={"a": (2, 3, 5)})
    assert g.tensors["a"].shape == (2, 3, 5)
    assert g.tensors["b"].shape == (2, 3, 1)     # "N" pinned everywhere
    out = run(g, {"a": np.ones((2, 3, 5), np.float32), "b": np.ones((2, 3, 1), np.float32)})
    assert out["y"].shape == (2, 3, 5)


@pytest.mark.parametrize("shapes,match", [
    ({"c": (1, 3, 1)}, "unknown input"),
    ({"a": (1, 3)}, "rank 2"),
    ({"a": (1, 4, 2)}, "conflicts"),
    ({"a": (1, 3, 2), "b": (2, 3, 1)}, "pinned to both"),
])
def test_input_shapes_errors(shapes, match):
    with pytest.raises(ConversionError, match=match):
        load_onnx(_two_input_model(), input_shapes=shapes)


# -- unsupported ops ----------------------------------------------------------------------------

def test_unsupported_ops_listed_once_with_counts(monkeypatch):
    monkeypatch.delitem(op_layer.SCHEMAS, "NonZero", raising=False)     # an op edge_infer does not run
    m = make_model([
        helper.make_node("NonZero", ["x"], ["n1"]),
        helper.make_node("NonZero", ["x"], ["n2"]),
        helper.make_node("FusedGemm", ["x", "x"], ["f"], domain="com.microsoft"),
        helper.make_node("Relu", ["x"], ["r"]),
    ], [vi("x", [2, 2])], [vi("n1", None, TensorProto.INT64), vi("n2", None, TensorProto.INT64),
                           vi("f", None), vi("r", None)],
        extra_opsets={"com.microsoft": 1})
    with pytest.raises(UnsupportedOpError) as e:
        load_onnx(m)
    msg = str(e.value)
    assert msg.startswith("unsupported ops: NonZero (2), com.microsoft.FusedGemm (1); ")
    assert "onnxruntime contrib ops" in msg          # and what to do about them


def test_subgraph_ops_unsupported():
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "body", [], [vi("o", [1])])
    m = make_model([helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)],
                   [vi("c", [], TensorProto.BOOL), vi("x", [1])], [vi("y", [1])])
    with pytest.raises(UnsupportedOpError, match=r"^unsupported ops: If \(1\)$"):
        load_onnx(m)


# -- malformed files ------------------------------------------------------------------------------

def _good_model_bytes():
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32), "w")
    return make_model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [64])], [vi("y", [64])],
                      initializers=[w]).SerializeToString()


@pytest.mark.parametrize("kind", ["random", "empty", "truncated", "text", "graph_not_model"])
def test_malformed_files(tmp_path, kind):
    data = {
        "random": np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "empty": b"",
        "truncated": _good_model_bytes()[:-40],
        "text": b"hello, this is not a model\n",
        # valid protobuf, but a GraphProto: parses as a ModelProto with no graph
        "graph_not_model": helper.make_graph([], "g", [], []).SerializeToString(),
    }[kind]
    p = tmp_path / "bad.onnx"
    p.write_bytes(data)
    with pytest.raises(ConversionError) as e:
        load_onnx(str(p))
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ConversionError, match="no such file"):
        load_onnx(str(tmp_path / "nope.onnx"))
    with pytest.raises(ConversionError, match="directory"):
        load_onnx(str(tmp_path))


def test_node_names_kept_or_invented():
    m = make_model([helper.make_node("Relu", ["x"], ["a"], name="first"),
                    helper.make_node("Relu", ["a"], ["b"]),
                    helper.make_node("Relu", ["b"], ["c"], name="first"),
                    helper.make_node("Relu", ["c"], ["y"])], [vi("x", [1])], [vi("y", [1])])
    names = [n.name for n in load_onnx(m).nodes]
    assert names[0] == "first" and len(set(names)) == 4 and all(names)


# -- load_model ------------------------------------------------------------------------------------

def test_load_model_dispatch(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(_good_model_bytes())
    assert load_model(str(p)).inputs == ["x"]
    other = tmp_path / "model.bin"
    other.write_bytes(_good_model_bytes())
    assert load_model(other).inputs == ["x"]
    (tmp_path / "m.tflite").write_bytes(b"\x1c\x00\x00\x00TFL3rest")
    with pytest.raises(ConversionError, match="TFLite flatbuffer"):      # dispatched, then refused
        load_model(str(tmp_path / "m.tflite"))
    (tmp_path / "m.model").write_bytes(b"\x1c\x00\x00\x00TFL3rest")
    with pytest.raises(ConversionError, match="TFLite flatbuffer"):
        load_model(str(tmp_path / "m.model"))


# -- end to end ------------------------------------------------------------------------------------

@needs_ort
def test_small_cnn_matches_onnxruntime(rng):
    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
    inits = [init("w", 8, 3, 3, 3), init("cb", 8), init("s", 8), init("b", 8), init("m", 8),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "v"),
             init("fw", 10, 8 * 4 * 4), init("fb", 10)]
    m = make_model([
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ], [vi("x", ["N", 3, 8, 8])], [vi("y", ["N", 10]), vi("logits", ["N", 10])], opset=13,
        initializers=inits)
    g = load_onnx(m)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    ours, ref = run(g, {"x": x}), ort_run(m, {"x": x})
    for k in ("y", "logits"):
        np.testing.assert_allclose(ours[k], ref[k], rtol=1e-5, atol=1e-6)
