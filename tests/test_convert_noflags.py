"""Converting a model exported with dynamic height and width needs no flags (issue 20): the
converter verifies at shapes the model accepts (``verify_shapes.py``), the artifact stays
dynamic, and it runs at real sizes like onnxruntime does."""
import json
import re

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
    # planned before the first run (backend choice, stream) at the verified shape, not at 1x1
    assert rt.default_shapes() == {"images": (1, 3, 32, 32)} and rt.backend.name
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


# -- int8 that breaks an output: said loudly, nothing written unless --allow-drift -----------------

def _calib(tmp_path, n=20):
    rng = np.random.default_rng(0)
    path = tmp_path / "cal.npy"
    np.save(path, rng.random((n, 3, 64, 64), dtype=np.float32))     # images in [0, 1]
    return str(path)


@pytest.fixture
def crushed_concat(monkeypatch):
    """The heterogeneous-concat handling off: boxes (0..640) and probabilities (0..1) share one
    int8 scale, and every probability rounds to one level."""
    from edge_infer.quantize import heterogeneous
    monkeypatch.setattr(heterogeneous, "MIN_LEVELS", 0.0)


def test_default_int8_of_dynamic_detector_is_fine(tmp_path):
    src = save(yolo_style(), tmp_path / "yolo.onnx")
    rep = convert(src, str(tmp_path / "y8.eim"), quantize="int8", calib=_calib(tmp_path))["quantization"]
    assert rep["task"] == "detect"                       # guessed at the calibration size, not [batch, 7, anchors]
    assert rep["drift"] == {"findings": [], "blame": []} and rep["accuracy_drop"] < 0.5
    assert (tmp_path / "y8.eim").exists()


def test_collapsed_output_raises_naming_output_layers_and_fixes(tmp_path, crushed_concat):
    from edge_infer.errors import QuantizationDriftError
    src = save(yolo_style(), tmp_path / "yolo.onnx")
    out = tmp_path / "y8.eim"
    with pytest.raises(QuantizationDriftError) as ei:
        convert(src, str(out), quantize="int8", calib=_calib(tmp_path))
    assert isinstance(ei.value, ConversionError) and not out.exists()
    msg = str(ei.value)
    assert msg.startswith("int8 quantization broke output 'output0': task detect score 0.000 vs fp32")
    assert "channel(s) 4, 5, 6 of 7 along axis 1 quantize to one level" in msg
    assert "accuracy drop 1.000 >= 0.5" in msg                           # detection F1 0 vs fp32
    assert "/model.22/Concat_out (Concat, int8, writes output 'output0')" in msg
    assert "--keep-float /model.22/Concat_out," in msg and "--max-accuracy-drop" in msg and "--allow-drift" in msg
    findings = ei.value.report["drift"]["findings"]
    assert {f["output"] for f in findings} == {"output0"} and len(findings) == 2
    # the named fix works: that concat kept float32, nothing collapses
    rep = convert(src, str(out), quantize="int8", calib=_calib(tmp_path), keep_float=["/model.22/Concat_out"])
    assert rep["quantization"]["drift"]["findings"] == [] and out.exists()


def test_allow_drift_writes_and_warns(tmp_path, crushed_concat):
    from edge_infer.errors import QuantizationDriftWarning
    src = save(yolo_style(), tmp_path / "yolo.onnx")
    out = tmp_path / "y8.eim"
    with pytest.warns(QuantizationDriftWarning, match="output 'output0'"):
        rep = convert(src, str(out), quantize="int8", calib=_calib(tmp_path), allow_drift=True)
    assert rep["quantization"]["drift"]["findings"] and out.exists()
    probs = Runtime(str(out)).run({"images": np.random.default_rng(1).random((1, 3, 64, 64), dtype=np.float32)})
    assert np.ptp(probs["output0"][:, 4:]) == 0.0                      # what the warning said


def test_cli_exit_3_and_allow_drift(tmp_path, capsys, crushed_concat):
    src = save(yolo_style(), tmp_path / "yolo.onnx")
    out = tmp_path / "y8.eim"
    argv = ["convert", src, "-o", str(out), "--quantize", "int8", "--calib", _calib(tmp_path),
            "--report", str(tmp_path / "r.json")]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert err.startswith("edge-infer: error: int8 quantization broke output 'output0': ")
    assert "layers to blame: /model.22/Concat_out" in err and "try: --keep-float" in err
    assert "nothing written" in err and not out.exists()
    assert json.load(open(tmp_path / "r.json"))["drift"]["findings"]          # the report is there to read
    assert main(argv + ["--allow-drift"]) == 0
    cap = capsys.readouterr()
    assert "edge-infer: warning: int8 quantization broke output 'output0'" in cap.err and "written anyway" in cap.err
    assert out.exists() and "converted" in cap.out


def _internal_heterogeneous_concat(path):
    """Scores (x 1000) and sigmoid probabilities concatenated, then a Relu: the concat feeds a
    computing op, so it stays int8 (one scale) and the probabilities collapse, no patching."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
             helper.make_node("Split", ["h", "sp"], ["a", "b"], axis=1, name="split"),
             helper.make_node("Mul", ["a", "k"], ["big"], name="scale"),
             helper.make_node("Sigmoid", ["b"], ["p"], name="prob"),
             helper.make_node("Concat", ["big", "p"], ["c"], axis=1, name="cat"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    inits = [w, numpy_helper.from_array(np.array([4, 4], np.int64), "sp"),
             numpy_helper.from_array(np.float32(1000.0), "k")]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


def test_model_whose_output_collapses_without_patching(tmp_path):
    from edge_infer.errors import QuantizationDriftError
    src = _internal_heterogeneous_concat(tmp_path / "m.onnx")
    x = np.random.default_rng(0).standard_normal((40, 16)).astype(np.float32)
    with pytest.raises(QuantizationDriftError, match=r"channel\(s\) 4, 5, 6, 7 of 8 along axis 1") as ei:
        convert(src, str(tmp_path / "m.eim"), quantize="int8", calib=[x])
    assert not (tmp_path / "m.eim").exists()
    # the suggested --keep-float works: no drift, the artifact is written
    keep = re.search(r"--keep-float (\S+);", str(ei.value)).group(1).split(",")
    assert keep[:2] == ["cat", "relu"]
    rep = convert(src, str(tmp_path / "m.eim"), quantize="int8", calib=[x], keep_float=keep)["quantization"]
    assert rep["drift"]["findings"] == [] and (tmp_path / "m.eim").exists()


def test_collapsed_slices_and_sqnr_threshold():
    from edge_infer.quantize.drift import MIN_OUTPUT_SQNR_DB, collapsed_slices, find_drift
    rng = np.random.default_rng(0)
    ref = rng.random((4, 7, 50)).astype(np.float32) * np.array([640] * 4 + [1] * 3, np.float32)[None, :, None]
    test = ref.copy()
    assert collapsed_slices(ref, test) is None
    test[:, 4:] = 0.0
    assert collapsed_slices(ref, test) == {"axis": 1, "indices": [4, 5, 6], "of": 7}
    assert collapsed_slices(ref, np.full_like(ref, 3.0)) == {"axis": None, "indices": [], "of": 1}
    # a slice that barely varies in fp32 (< 10% of its magnitude) carries no information to lose
    flat = ref.copy()
    flat[:, 6] = 5.0 + 0.01 * rng.random((4, 50))
    test2 = flat.copy()
    test2[:, 6] = 5.0
    assert collapsed_slices(flat, test2) is None
    rep = {"accuracy_drop": 0.1, "outputs": {"y": {"sqnr_db": MIN_OUTPUT_SQNR_DB - 1, "rel_l2_error": 0.6}}}
    assert [f["output"] for f in find_drift(rep)] == ["y"]
    rep["outputs"]["y"]["sqnr_db"] = MIN_OUTPUT_SQNR_DB + 1
    assert find_drift(rep) == []


def test_calibration_images_take_the_recorded_size(tmp_path):
    """Images calibrate a dynamic model at the size it records; with none recorded, the
    recipe's size is asked for (a size found by search is no calibration size)."""
    cv2 = pytest.importorskip("cv2")
    from edge_infer.quantize import CalibrationError
    from edge_infer.quantize.calibration import load_calibration
    (tmp_path / "img").mkdir()
    rng = np.random.default_rng(0)
    for k in range(6):
        cv2.imwrite(str(tmp_path / "img" / f"{k}.png"), rng.integers(0, 255, (120, 90, 3), dtype=np.uint8))
    src = save(yolo_style(metadata={"imgsz": "[96, 128]"}), tmp_path / "yolo.onnx")
    rep = convert(src, str(tmp_path / "y8.eim"), quantize="int8", calib=str(tmp_path / "img"))
    assert rep["quantization"]["calibration"]["samples"] + rep["quantization"]["calibration"]["held_out_samples"] == 6
    g = load_model(src)
    g.metadata.update(verify_shapes={"images": [1, 3, 96, 128]}, verify_shapes_source="model metadata imgsz")
    assert load_calibration(str(tmp_path / "img"), g)[0]["images"].shape == (1, 3, 96, 128)
    with pytest.raises(CalibrationError, match="symbolic spatial dims"):
        convert(save(yolo_style(), tmp_path / "plain.onnx"), str(tmp_path / "p8.eim"), quantize="int8",
                calib=str(tmp_path / "img"))
