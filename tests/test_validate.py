"""Semantic validation at load and at convert (issue #16): the hostile files of the issue,
each written with valid checksums by the writer itself, must be refused with an edge_infer
error naming the node and the attribute, before any kernel (native or numpy) sees them."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge_infer import ops
from edge_infer.artifact import load_artifact, save_artifact
from edge_infer.backends.cpu.registry import KERNELS
from edge_infer.convert import convert
from edge_infer.errors import ArtifactError, ConversionError
from edge_infer.ir import Graph
from edge_infer.runtime import Runtime
from edge_infer.sparse.encodings import encode_csr
from onnx_models import make_model, vi


def refused(graph: Graph, tmp_path, meta=None) -> str:
    path = tmp_path / "hostile.eim"
    save_artifact(path, graph, meta or {})
    with pytest.raises(ArtifactError) as e:
        load_artifact(path)
    with pytest.raises(ArtifactError):
        Runtime(str(path), backend="cpu")
    return str(e.value)


def pool_graph(dtype="float32", **attrs) -> Graph:
    g = Graph("pool")
    g.add_input("x", dtype, (1, 1, 8, 8))
    if dtype == "int8":
        g.tensors["x"].quant = {"scale": [0.1], "zero_point": [0], "axis": None}
    g.add_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], **attrs)
    g.tensors["y"].dtype = dtype
    g.outputs = ["y"]
    return g


def conv_graph(w, b=None, **attrs) -> Graph:
    g = Graph("conv")
    g.add_input("x", "float32", (1, int(w.shape[1]) * int(attrs.get("group", 1)), 8, 8))
    g.add_const("w", w)
    ins = ["x", "w"]
    if b is not None:
        g.add_const("b", b)
        ins.append("b")
    g.add_node("Conv", ins, ["y"], name="conv", **attrs)
    g.outputs = ["y"]
    return g


def test_every_cpu_kernel_op_has_a_schema():
    import edge_infer.backends.cpu.kernels  # noqa: F401  (registers the kernels)
    assert set(KERNELS) <= set(ops.SCHEMAS)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("dil", [-1048576, -1, 0])
def test_maxpool_negative_dilation_refused(tmp_path, dtype, dil):
    msg = refused(pool_graph(dtype, dilations=[dil, 1]), tmp_path)
    assert "'pool'" in msg and "dilations" in msg


def test_conv_negative_dilation_refused(tmp_path):
    w = np.ones((2, 1, 3, 3), np.float32)
    msg = refused(conv_graph(w, dilations=[-4, 1], strides=[8, 1]), tmp_path)
    assert "'conv'" in msg and "dilations" in msg


@pytest.mark.parametrize("attrs, word", [
    (dict(strides=[0, 1]), "strides"), (dict(pads=[-1, 0, 0, 0]), "pads"),
    (dict(kernel_shape=[5, 5]), "kernel_shape"), (dict(group=3), "group"),
    (dict(strides=[1, 1, 1]), "strides"), (dict(group="2"), "group")])
def test_conv_geometry_refused(tmp_path, attrs, word):
    w = np.ones((2, 1, 3, 3), np.float32)
    msg = refused(conv_graph(w, **attrs), tmp_path)
    assert "'conv'" in msg and word in msg


def test_sparse_conv_short_bias_refused(tmp_path):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((16, 8, 1, 1)) * (rng.random((16, 8, 1, 1)) < 0.2)).astype(np.float32)
    g = conv_graph(w, b=np.ones(3, np.float32))
    g.tensors["w"].data = encode_csr(w)       # add_const would densify it
    msg = refused(g, tmp_path)
    assert "'conv'" in msg and "input 2 (B)" in msg


def test_huge_dims_refused(tmp_path):
    g = Graph("huge")
    g.add_input("x", "float32", (1 << 40, 1 << 20))
    g.add_node("Relu", ["x"], ["y"], name="relu")
    g.tensors["y"].shape = (1 << 40, 1 << 20)
    g.outputs = ["y"]
    assert "'x'" in refused(g, tmp_path)


@pytest.mark.parametrize("meta, word", [({"target": "x86"}, "target"),
                                        ({"target": {"threads": "many"}}, "threads"),
                                        ({"target": {"threads": 1.5}}, "threads"),
                                        ({"memory_limit": -3}, "memory_limit")])
def test_bad_meta_refused(tmp_path, meta, word):
    g = Graph("relu")
    g.add_input("x", "float32", (1, 4))
    g.add_node("Relu", ["x"], ["y"], name="relu")
    g.outputs = ["y"]
    assert word in refused(g, tmp_path, meta)


def qdq_graph(zp_input, zp_quant, scale=0.5) -> Graph:
    g = Graph("q")
    g.add_input("x", "float32", (1, 4))
    g.add_const("s", np.float32(scale))
    g.add_const("z", np.int8(zp_input))
    g.add_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant")
    g.tensors["q"].dtype = "int8"
    g.tensors["q"].quant = {"scale": [0.5], "zero_point": [zp_quant], "axis": None}
    g.add_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant")
    g.outputs = ["y"]
    return g


def test_quantize_zero_point_disagreeing_with_quant_params_refused(tmp_path):
    save_artifact(tmp_path / "ok.eim", qdq_graph(3, 3), {})
    y = Runtime(str(tmp_path / "ok.eim"), backend="cpu").run({"x": np.arange(4, dtype=np.float32)[None]})
    assert np.allclose(list(y.values())[0], np.arange(4)[None])
    msg = refused(qdq_graph(3, 7), tmp_path)
    assert "'quant'" in msg and "zero_point" in msg
    assert "scale" in refused(qdq_graph(3, 3, scale=-0.5), tmp_path)
    g = qdq_graph(3, 3)
    g.tensors["q"].quant["zero_point"] = [300]
    assert "zero_point" in refused(g, tmp_path)


def _save(model, tmp_path, name="m.onnx") -> str:
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def test_onnx_negative_dilation_refused_at_convert(tmp_path):
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", dilations=[-4, 1], strides=[8, 1])
    path = _save(make_model([node], [vi("x", [1, 1, 16, 16])], [vi("y", None)], initializers=[w]), tmp_path)
    with pytest.raises(ConversionError, match="dilations"):
        convert(path, str(tmp_path / "m.eim"))


def test_onnx_sparse_initializer_indices_checked(tmp_path):
    def model(indices, dims):
        vals = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
        idx = helper.make_tensor("w_idx", TensorProto.INT64, [2], indices)
        sp = helper.make_sparse_tensor(vals, idx, dims)
        g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "sp", [vi("x", [4])],
                              [vi("y", [4])], sparse_initializer=[sp])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return _save(m, tmp_path)
    with pytest.raises(ConversionError, match="sparse index -3"):
        convert(model([-3, 1], [4]), str(tmp_path / "m.eim"))
    with pytest.raises(ConversionError, match="ascending"):
        convert(model([2, 1], [4]), str(tmp_path / "m.eim"))
    with pytest.raises(ConversionError):
        convert(model([0, 1], [-4]), str(tmp_path / "m.eim"))
    convert(model([0, 3], [4]), str(tmp_path / "m.eim"))      # the valid form still converts


def test_constant_of_shape_bomb_refused_fast_small_memory(tmp_path):
    s = helper.make_tensor("s", TensorProto.INT64, [2], [32768, 32768])
    path = _save(make_model([helper.make_node("ConstantOfShape", ["s"], ["y"])], [],
                            [vi("y", [32768, 32768])], initializers=[s]), tmp_path)
    # under a 1.5 GB address-space cap: refusing must not allocate the 4 GiB tensor
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29)); "
            "import sys; from edge_infer.cli import main; sys.exit(main(sys.argv[1:]))")
    env = dict(os.environ, EDGE_INFER_NO_NATIVE="1")
    r = subprocess.run([sys.executable, "-c", code, "convert", path, "-o", str(tmp_path / "b.eim")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "ConstantOfShape" in r.stderr and "max-bytes" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(ConversionError, match="ConstantOfShape"):
        convert(path, str(tmp_path / "b.eim"), max_bytes="64MB")
