"""Converting a model exported with dynamic height and width needs no flags (issue 20): the
converter verifies at shapes the model accepts (``verify_shapes.py``), the artifact stays
dynamic, and it runs at real sizes like onnxruntime does."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dynamic_models import recognizer_style, save, yolo_style
from edge_infer.cli import main
from edge_infer.convert import convert
from edge_infer.errors import ConversionError
from edge_infer.frontends import load_model
from edge_infer.runtime import Runtime
from edge_infer.verify_shapes import choose_verify_shapes

ort = pytest.importorskip("onnxruntime")


def _ort(path, name, x):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, {name: x})[0]


def _check_at_sizes(src, eim, name, sizes, tol=1e-4):
    rt = Runtime(eim)
    assert all(isinstance(d, str) for d in rt.inputs[0].shape[2:])          # H and W stay symbolic
    rng = np.random.default_rng(5)
    for h, w in sizes:
        x = rng.random((1, 3, h, w), dtype=np.float32)
        ours, theirs = rt.run({name: x}), _ort(src, name, x)
        out = next(iter(ours.values()))
        assert out.shape == theirs.shape
        np.testing.assert_allclose(out, theirs, rtol=tol, atol=tol)


def test_yolo_style_dynamic_converts_without_flags(tmp_path, capsys):
    src = save(yolo_style(), tmp_path / "yolo.onnx")
    out = str(tmp_path / "yolo.eim")
    assert main(["convert", src, "-o", out]) == 0
    text = capsys.readouterr().out
    assert "verified at: images [1, 3, 32, 32] (dynamic: batch, height, width)" in text
    assert "smallest size shape inference accepts" in text
    rt = Runtime(out)
    assert rt.inputs[0].shape == ("batch", 3, "height", "width")
    _check_at_sizes(src, out, "images", [(64, 96), (160, 128)])


def test_recognizer_with_pool_after_downsampling_converts(tmp_path):
    src = save(recognizer_style(), tmp_path / "rec.onnx")
    rep = convert(src, str(tmp_path / "rec.eim"))
    # the 3x3 pool after stride 16 needs H/16 >= 3: 32 is refused, 64 is the smallest multiple of 32
    assert rep["verified_shapes"] == {"x": [1, 3, 64, 64]}
    assert rep["dynamic_inputs"] == {"x": ["N", 3, "H", "W"]}
    _check_at_sizes(src, str(tmp_path / "rec.eim"), "x", [(48, 320), (64, 96)])


def test_cost_report_counts_at_verified_shapes(tmp_path):
    src = save(yolo_style(), tmp_path / "yolo.onnx")
    small = convert(src, str(tmp_path / "a.eim"))
    big = convert(src, str(tmp_path / "b.eim"), verify_shapes={"images": (1, 3, 64, 64)})
    assert big["verified_shapes"] == {"images": [1, 3, 64, 64]} and big["verified_shapes_source"] == "--verify-shape"
    # convolutions dominate: 4x the pixels, close to 4x the FLOPs
    assert 3.5 < big["after"]["flops"] / small["after"]["flops"] <= 4.0
    assert Runtime(str(tmp_path / "b.eim")).inputs[0].shape == ("batch", 3, "height", "width")


def test_size_recorded_in_the_model_wins(tmp_path):
    src = save(yolo_style(metadata={"imgsz": "[96, 128]", "stride": "32"}), tmp_path / "yolo.onnx")
    rep = convert(src, str(tmp_path / "y.eim"))
    assert rep["verified_shapes"] == {"images": [1, 3, 96, 128]}
    assert rep["verified_shapes_source"] == "model metadata imgsz=[96, 128]"
    m = yolo_style()
    m.doc_string = "exported by a tool; input_size: 64x160"
    rep = convert(save(m, tmp_path / "doc.onnx"), str(tmp_path / "d.eim"))
    assert rep["verified_shapes"] == {"images": [1, 3, 64, 160]}
    # a recorded size the graph refuses (not a multiple of 32) is skipped, not trusted
    rep = convert(save(yolo_style(metadata={"imgsz": "100"}), tmp_path / "bad.onnx"), str(tmp_path / "b.eim"))
    assert rep["verified_shapes"] == {"images": [1, 3, 32, 32]}


def test_recipe_size_then_smallest(tmp_path):
    g = load_model(save(yolo_style(), tmp_path / "yolo.onnx"))
    assert choose_verify_shapes(g, recipe="yolo") == ({"images": (1, 3, 640, 640)}, "calibration recipe yolo size")
    assert choose_verify_shapes(g, profile={"name": "cam", "input_size": [128, 96]}) == \
        ({"images": (1, 3, 128, 96)}, "target cam input_size")


def test_static_models_and_pinned_shapes_are_unchanged(tmp_path):
    from edge_infer.data import digits_model_path
    rep = convert(digits_model_path(), str(tmp_path / "d.eim"))
    assert rep["verified_shapes_source"] == "batch dims as 1" and rep["dynamic_inputs"] == {"input": ["N", 1, 8, 8]}
    src = save(yolo_style(), tmp_path / "yolo.onnx")
    rep = convert(src, str(tmp_path / "p.eim"), input_shapes={"images": (1, 3, 64, 64)})
    assert rep["verified_shapes"] == {"images": [1, 3, 64, 64]} and rep["dynamic_inputs"] == {}
    assert Runtime(str(tmp_path / "p.eim")).inputs[0].shape == (1, 3, 64, 64)


def _unverifiable(path):
    """H and W symbolic, but a Concat with a [1, 3, 5, 6] constant needs H=5, W=6: no square size."""
    c = numpy_helper.from_array(np.ones((1, 3, 5, 6), np.float32), "c")
    g = helper.make_graph([helper.make_node("Concat", ["x", "c"], ["y"], axis=1, name="cat")], "u",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, "H", "W"])], [c])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


def test_no_shape_works_one_clear_line(tmp_path, capsys):
    src = _unverifiable(tmp_path / "u.onnx")
    assert main(["convert", src, "-o", str(tmp_path / "u.eim")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("edge-infer: error:")
    assert "symbolic input(s) x [N, 3, H, W]" in err[0] and "--input-shape x=1,3,H,W" in err[0]
    # ... and the suggestion works
    assert main(["convert", src, "-o", str(tmp_path / "u.eim"), "--input-shape", "x=1,3,5,6"]) == 0
    # --verify-shape keeps it dynamic
    assert main(["convert", src, "-o", str(tmp_path / "v.eim"), "--verify-shape", "x=1,3,5,6"]) == 0
    assert Runtime(str(tmp_path / "v.eim")).inputs[0].shape == ("N", 3, "H", "W")


@pytest.mark.parametrize("spec, needle", [
    ("y=1,3,64,64", "no input 'y'"),
    ("images=1,3,64", "rank 4"),
    ("images=1,4,64,64", "fixed dim 3"),
    ("images=1,3,48,64", "does not accept"),
])
def test_bad_verify_shape(tmp_path, capsys, spec, needle):
    src = save(yolo_style(), tmp_path / "yolo.onnx")
    assert main(["convert", src, "-o", str(tmp_path / "y.eim"), "--verify-shape", spec]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_inspect_records_verified_shapes(tmp_path, capsys):
    src = save(recognizer_style(), tmp_path / "rec.onnx")
    out = str(tmp_path / "rec.eim")
    assert main(["convert", src, "-o", out]) == 0
    capsys.readouterr()
    assert main(["inspect", out, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["optimization"]["verified_shapes"] == {"x": [1, 3, 64, 64]}
    assert info["memory"]["input_shapes"] == {"x": [1, 3, 64, 64]}          # planned where it runs
