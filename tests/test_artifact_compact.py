"""The compact graph encoding of .eim 1.2 (edge_infer/artifact_compact.py, issue #19 item 5):
sizes against the ONNX sources, the name side table (kept, stripped, shown by inspect, used by
error messages) and the compact quantization parameters."""
from __future__ import annotations

import json
import os
import zlib

import numpy as np
import pytest

from edge_infer.artifact import load_artifact, read_info, save_artifact
from edge_infer.artifact_compact import read_side_table, short_id
from edge_infer.cli import main
from edge_infer.convert import convert
from edge_infer.data import digits_model_path, load_digits_samples
from edge_infer.errors import ArtifactError
from edge_infer.ir.graph import Graph
from edge_infer.runtime import Runtime


def graph_doc(path) -> dict:
    """The compact GRPH document of an artifact, read by the spec (docs/format.md)."""
    import struct
    raw = open(path, "rb").read()
    count = struct.unpack_from("<I", raw, 24)[0]
    for k in range(count):
        kind, flags, off, length, _, _ = struct.unpack_from("<4sIQQII", raw, 64 + 32 * k)
        if kind == b"GRPH":
            payload = raw[off:off + length]
            return json.loads(zlib.decompress(payload) if flags & 2 else payload)
    raise AssertionError("no GRPH")


# -- sizes (deterministic: asserted, not timed) -------------------------------------------------

def test_int8_digits_artifact_is_under_0_4x_its_onnx(tmp_path):
    x, y = load_digits_samples()
    np.save(tmp_path / "calib.npy", x[:64])
    out = tmp_path / "digits.eim"
    rep = convert(digits_model_path(), out, quantize="int8", calib=str(tmp_path / "calib.npy"))
    ratio = rep["artifact_bytes"] / rep["source_bytes"]
    assert ratio <= 0.4, ratio                     # 0.76x in format 1.1
    logits = Runtime(str(out), backend="cpu").run({"input": x[64:]})["logits"]
    assert (logits.argmax(1) == y[64:]).mean() >= 0.9


def test_int8_1m_parameter_detector_is_under_0_27x_its_onnx(tmp_path):
    import onnx
    from detector_net import text_detector
    from onnx_models import ort_run
    model = text_detector()
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert 0.9e6 < params < 1.2e6
    src = tmp_path / "det.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "det.eim"
    rep = convert(src, out, quantize="int8", calib="random", calib_samples=4)
    ratio = rep["artifact_bytes"] / rep["source_bytes"]
    assert ratio <= 0.27, ratio                    # 0.39x in format 1.1; the int8 weights alone are 0.25x
    weights = read_info(out).weights_nbytes
    assert rep["artifact_bytes"] - weights < 0.02 * rep["source_bytes"]
    # and it is the detector: close to onnxruntime on the fp32 source (the mean over four inputs:
    # one input's error ranged 0.041-0.058 with either requantization mode)
    rt = Runtime(str(out), backend="cpu")
    errs = []
    for seed in (3, 4, 5, 6):
        feed = np.random.default_rng(seed).standard_normal((1, 3, 64, 64)).astype(np.float32)
        ref = ort_run(str(src), {"x": feed})["maps"]
        got = rt.run({"x": feed})["maps"]
        assert got.shape == ref.shape
        errs.append(float(np.abs(got - ref).mean()))
    assert np.mean(errs) < 0.055, errs


def test_sections_compressed_only_where_it_pays(tmp_path):
    g = Graph("g")
    g.add_input("x", "float32", (1, 4))
    g.add_node("Relu", ["x"], ["y"])
    g.outputs = ["y"]
    save_artifact(tmp_path / "a.eim", g, {})
    flags = {s.kind: s.flags for s in read_info(tmp_path / "a.eim").sections}
    assert flags == {b"META": 0, b"GRPH": 2, b"WGHT": 0}   # "{}" does not shrink
    assert load_artifact(tmp_path / "a.eim")[1] == {}


# -- names --------------------------------------------------------------------------------------

def conv_net(strides=(1, 1)) -> Graph:
    """A conv -> relu -> gemm net with long, converter-style names."""
    rng = np.random.default_rng(0)
    g = Graph("net")
    g.add_input("image", "float32", (1, 2, 6, 6))
    g.add_const("backbone/conv_stem.weight_folded_folded_int8", rng.standard_normal((4, 2, 3, 3)).astype(np.float32))
    g.add_const("backbone/conv_stem.bias_folded", rng.standard_normal(4).astype(np.float32))
    g.add_node("Conv", ["image", "backbone/conv_stem.weight_folded_folded_int8", "backbone/conv_stem.bias_folded"],
               ["backbone/conv_stem/output_0"], name="backbone/conv_stem", kernel_shape=[3, 3], strides=list(strides),
               pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    g.add_node("Relu", ["backbone/conv_stem/output_0"], ["backbone/relu/output_0"], name="backbone/relu")
    g.add_const("head/shape", np.array([1, -1], np.int64))
    g.add_node("Reshape", ["backbone/relu/output_0", "head/shape"], ["head/flat"], name="head/flatten")
    g.add_const("head/fc.weight", rng.standard_normal((144, 3)).astype(np.float32))
    g.add_node("Gemm", ["head/flat", "head/fc.weight"], ["1"], name="head/fc")   # output "1": a short id too
    g.outputs = ["1"]
    return g


def test_names_round_trip_and_strip(tmp_path):
    g = conv_net()
    feed = {"image": np.random.default_rng(1).standard_normal((1, 2, 6, 6)).astype(np.float32)}
    want = Runtime(g, backend="cpu").run(feed)["1"]
    named, stripped = tmp_path / "named.eim", tmp_path / "stripped.eim"
    save_artifact(named, g)
    save_artifact(stripped, g, strip_names=True)
    assert os.path.getsize(stripped) < os.path.getsize(named)
    # the file refers to tensors by index; the names live once, in the side table
    doc = graph_doc(named)
    assert doc["tensor_names"] == list(g.tensors) and doc["node_names"] == [n.name for n in g.nodes]
    assert all(type(i) is int for rec in doc["nodes"] for i in rec[1] + rec[2])
    assert read_side_table(named) == {"tensors": list(g.tensors), "nodes": [n.name for n in g.nodes]}

    g1, _ = load_artifact(named)
    assert list(g1.tensors) == list(g.tensors) and [n.name for n in g1.nodes] == [n.name for n in g.nodes]
    g2, _ = load_artifact(stripped)
    names = list(g2.tensors)
    assert names[0] == "image" and g2.inputs == ["image"] and g2.outputs == ["1"]   # never renamed
    # tensor 1's id would be "1", the output's name: it keeps another one
    io = {"image", "1"}
    assert names == [n if n in io else short_id(k) + "_" * (short_id(k) in io) for k, n in enumerate(g.tensors)]
    assert names[1] == "1_"
    assert [n.name for n in g2.nodes] == [short_id(k) for k in range(len(g.nodes))]
    assert len(set(names)) == len(names) == len(g.tensors)
    side = read_side_table(stripped)
    assert side["nodes"] == [None] * len(g.nodes)
    assert [n for n in side["tensors"] if n is not None] == ["image", "1_", "1"]
    for path in (named, stripped):
        np.testing.assert_array_equal(Runtime(str(path), backend="cpu").run(feed)["1"], want)


def test_validation_errors_name_the_node_as_the_user_knows_it(tmp_path):
    g = conv_net(strides=(0, 1))           # refused by the Conv schema at load, not by the writer
    save_artifact(tmp_path / "bad.eim", g)
    with pytest.raises(ArtifactError, match="backbone/conv_stem"):
        load_artifact(tmp_path / "bad.eim")
    save_artifact(tmp_path / "bad_stripped.eim", g, strip_names=True)
    with pytest.raises(ArtifactError, match=r"node '0'.*strides"):
        load_artifact(tmp_path / "bad_stripped.eim")


def test_inspect_shows_original_names_and_ids(tmp_path, capsys):
    out = tmp_path / "digits.eim"
    assert main(["convert", digits_model_path(), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "1.2" and info["names"]["storage"] == "side table"
    assert info["names"]["tensors_named"] == info["names"]["tensors"] > 10
    g, _ = load_artifact(out)
    order = list(g.tensors)
    for t in info["tensors"]:                      # each tensor: its original name and its id in the file
        assert t["name"] in g.tensors and t["id"] == short_id(order.index(t["name"]))
    assert any(t["name"].startswith("conv1.weight") for t in info["tensors"])
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "format 1.2" in text and "side table" in text and "conv1.weight" in text

    assert main(["convert", digits_model_path(), "-o", str(tmp_path / "s.eim"), "--strip-names"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "s.eim"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["names"]["tensors_named"] == 2 and info["names"]["nodes_named"] == 0   # input, logits
    assert info["inputs"][0]["name"] == "input" and info["outputs"][0]["name"] == "logits"
    assert all(t["name"] == t["id"] for t in info["tensors"])
    assert info["provenance"]["options"]["strip_names"] is True


# -- quantization parameters --------------------------------------------------------------------

def quant_graph() -> Graph:
    g = Graph("q")
    g.add_input("x", "float32", (1, 3, 4, 4))
    g.add_const("s", np.float32(0.05))
    g.add_const("z", np.int8(3))
    g.add_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant")
    s_in = float(np.float32(0.05))
    g.tensors["xq"].dtype = "int8"
    g.tensors["xq"].quant = {"scale": [s_in], "zero_point": [3], "axis": None}
    sw = (np.arange(1, 5, dtype=np.float32) / np.float32(127)).astype(np.float32)
    g.add_const("w", np.ones((4, 3, 1, 1), np.int8))
    g.tensors["w"].quant = {"scale": sw.tolist(), "zero_point": [0] * 4, "axis": 0}
    g.add_const("b", np.arange(4, dtype=np.int32))                       # s_in * sw, in float32
    g.tensors["b"].quant = {"scale": (np.float32(s_in) * sw).astype(np.float32).tolist(),
                            "zero_point": [0] * 4, "axis": 0}
    g.add_const("b2", np.arange(4, dtype=np.int32))                      # near the product, not it
    g.tensors["b2"].quant = {"scale": [v * (1 + 1e-12) for v in g.tensors["b"].quant["scale"]],
                             "zero_point": [0, 1, 0, 0], "axis": 0}
    g.add_const("c", np.ones(4, np.int8))
    g.tensors["c"].quant = {"scale": [0.1, 0.2, 0.3, 0.4], "zero_point": [0] * 4, "axis": 0, "note": "free"}
    g.add_node("Custom", ["xq", "w", "b"], ["y"], name="conv")
    g.add_node("Custom", ["xq", "w", "b2", "c"], ["y2"], name="conv2")
    g.outputs = ["y", "y2"]
    return g


def test_quant_params_are_compact_and_exact(tmp_path):
    g = quant_graph()
    save_artifact(tmp_path / "q.eim", g)
    doc = graph_doc(tmp_path / "q.eim")
    rec = {name: doc["tensors"][k] for k, name in enumerate(doc["tensor_names"])}
    idx = doc["tensor_names"].index
    assert isinstance(rec["w"][2][0], str) and rec["w"][2][1:] == [0, 0]       # float32 bytes, one zero point
    assert rec["b"][2][0] == {"mul": [idx("xq"), idx("w")]}
    assert isinstance(rec["b2"][2][0], list) and rec["b2"][2][1] == [0, 1, 0, 0]   # not exactly float32
    assert rec["c"][2] == g.tensors["c"].quant                                # free-form: as 1.1 stored it
    assert isinstance(rec["s"][3], str) and "xq" not in [n for n in doc["tensor_names"] if len(rec[n]) > 3]
    loaded, _ = load_artifact(tmp_path / "q.eim")
    for name, t in g.tensors.items():
        assert loaded.tensors[name].quant == t.quant, name
        if t.data is not None:
            np.testing.assert_array_equal(loaded.tensors[name].data, t.data)
            assert loaded.tensors[name].data.dtype == t.data.dtype
