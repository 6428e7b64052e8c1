"""int8 on detectors: heterogeneous concats, task-aware metrics, the metric callback, the fast
accuracy budget, and the trained YOLO-style shapes fixture (edge_infer/data/yolo_shapes/).

The fixture's evaluation scenes are drawn deterministically with numpy
(``edge_infer.data.yolo_shapes_scenes``: seeds the detector never trained on); calibration
uses other held-out seeds than the evaluation.
"""
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import make_model, vi  # noqa: E402

from edge_infer.frontends import load_onnx  # noqa: E402
from edge_infer.quantize import quantize_graph  # noqa: E402
from edge_infer.quantize.heterogeneous import find_heterogeneous  # noqa: E402
from edge_infer.quantize.metrics import (detection_f1, f1_counts, guess_task, map_iou,  # noqa: E402
                                         match_count)
from edge_infer.runtime import Runtime  # noqa: E402


# -- a YOLO-like toy head: pixel boxes concatenated to probabilities --------------------------------

def _head_model(anchors=64, classes=3, seed=0):
    """input [N,8,8,8] -> 1x1 conv to 4 box + 3 class channels -> boxes: Sigmoid * 320 (pixels),
    probs: Sigmoid(logits) -> Concat -> Reshape [N, 7, 64]; plus an internal concat."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 1.0, (4 + classes, 8, 1, 1)).astype(np.float32)
    b = np.concatenate([np.zeros(4), np.full(classes, -1.0)]).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array([4, classes], np.int64), "split"),
             numpy_helper.from_array(np.float32(320.0), "px"),
             numpy_helper.from_array(np.array([0, 4 + classes, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("Split", ["h", "split"], ["hb", "hc"], name="split", axis=1),
             helper.make_node("Sigmoid", ["hb"], ["sb"], name="sig_box"),
             helper.make_node("Mul", ["sb", "px"], ["boxes"], name="to_pixels"),
             helper.make_node("Sigmoid", ["hc"], ["probs"], name="sig_cls"),
             helper.make_node("Concat", ["boxes", "probs"], ["cat"], name="out_concat", axis=1),
             helper.make_node("Reshape", ["cat", "shape"], ["out"], name="flatten")]
    return make_model(nodes, [vi("x", ["N", 8, 8, 8])], [vi("out", ["N", 4 + classes, anchors])],
                      opset=13, initializers=inits)


def test_heterogeneous_concat_detected_from_calibration_ranges():
    g = load_onnx(_head_model())
    ranges = {"boxes": (0.0, 320.0), "probs": (0.0, 1.0), "h": (-4.0, 4.0)}
    found = find_heterogeneous(g, ranges)
    assert [h["node"] for h in found] == ["out_concat"]
    h = found[0]
    assert h["output_concat"] is True                      # reaches the output through a Reshape
    levels = {r["tensor"]: r["levels"] for r in h["inputs"]}
    assert levels["probs"] < 1.0 and levels["boxes"] == 255.0
    # ranges close together: nothing to report
    assert find_heterogeneous(g, {"boxes": (0.0, 4.0), "probs": (0.0, 1.0)}) == []


def test_heterogeneous_internal_concat_is_not_an_output_concat():
    m = _head_model()
    # a conv reads the concat: it is internal
    w2 = numpy_helper.from_array(np.ones((2, 7, 1, 1), np.float32), "w2")
    m.graph.initializer.append(w2)
    m.graph.node.insert(6, helper.make_node("Conv", ["cat", "w2"], ["mix"], name="mix", kernel_shape=[1, 1]))
    m.graph.output.append(vi("mix", ["N", 2, 8, 8]))
    g = load_onnx(m)
    found = find_heterogeneous(g, {"boxes": (0.0, 320.0), "probs": (0.0, 1.0)})
    assert len(found) == 1 and found[0]["output_concat"] is False


def test_output_concat_stays_float_after_per_branch_int8():
    g = load_onnx(_head_model(), input_shapes={"x": [1, 8, 8, 8]})
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (1, 8, 8, 8)).astype(np.float32)} for _ in range(20)]
    q, rep = quantize_graph(g, feeds, task="generic")
    h = rep["heterogeneous"][0]
    assert h["node"] == "out_concat" and h["decision"].startswith("float32 concat")
    assert h["drop_float_concat"] < h["drop_int8_concat"]
    ops = {n.name: n for n in q.nodes}
    assert q.tensors[ops["out_concat"].outputs[0]].dtype == "float32"
    assert q.tensors[ops["to_pixels"].outputs[0]].dtype == "int8"          # each branch int8 ...
    assert q.tensors[ops["sig_cls"].outputs[0]].dtype == "int8"
    reasons = {e["node"]: e["reason"] for e in rep["float_nodes"]}
    assert "heterogeneous concat" in reasons["out_concat"]
    # ... at its own scale: the probabilities survive (one scale for both rounds them to 0)
    x = np.concatenate([f["x"] for f in feeds[:4]])
    want = Runtime(g, backend="cpu").run({"x": x[:1]})
    got = Runtime(q, backend="cpu").run({"x": x[:1]})
    probs_ref, probs_q = want["out"][:, 4:], got["out"][:, 4:]
    err = np.abs(probs_ref - probs_q)
    assert err.max() <= 8 / 256 and err.mean() <= 2 / 256         # a few of the Sigmoid's int8 steps
    assert probs_q.max() > 0.3


# -- tasks and metrics ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape,task", [(["N", 10], "classify"), ([1, 1000, 1, 1], "classify"),
                                        (["N", 7, 2100], "detect"), ([1, 8400, 85], "detect"),
                                        ([1, 1, 160, 160], "segment"), (["N", 21, 64, 64], "segment"),
                                        ([1, 5, 7], "generic"), (["N", 1], "generic")])
def test_task_from_output_shapes(shape, task):
    from edge_infer.ir import Graph
    g = Graph("t")
    g.add_tensor("x", "float32", [1, 3])
    g.add_tensor("y", "float32", shape)
    g.inputs, g.outputs = ["x"], ["y"]
    assert guess_task(g) == task


def test_detection_metrics():
    truth = (np.array([[10, 10, 50, 50], [100, 100, 140, 160]], np.float32), np.array([0, 2]))
    # one hit, one box on the right place with the wrong class, one far off
    pred = (np.array([[12, 11, 52, 49], [100, 100, 140, 160], [200, 200, 220, 220]], np.float32),
            np.array([0.9, 0.8, 0.7], np.float32), np.array([0, 1, 2]))
    assert match_count(pred, truth) == 1
    assert f1_counts(1, 3, 2) == pytest.approx((0.4, 1 / 3, 0.5))
    assert f1_counts(0, 0, 0) == (1.0, 1.0, 1.0)
    # the YOLO decode path: a [1, 4 + 2, A] output against itself and against a shifted copy
    out = np.zeros((1, 6, 50), np.float32)
    out[0, :4, :3] = np.array([[30, 30, 20, 20], [100, 60, 40, 30], [200, 200, 50, 50]], np.float32).T
    out[0, 4, 0], out[0, 5, 1], out[0, 4, 2] = 0.9, 0.8, 0.7
    assert detection_f1(out, out)[0] == 1.0
    moved = out.copy()
    moved[0, 0, 2] += 40                           # third box slides off its place: IoU < 0.5
    assert detection_f1(moved, out)[0] == pytest.approx(2 / 3)


def test_map_iou():
    a = np.zeros((1, 1, 8, 8), np.float32)
    a[..., :4, :] = 0.9
    b = a.copy()
    b[..., :2, :] = 0.1
    assert map_iou(a, b) == pytest.approx(0.5)
    logits = np.stack([a[:, 0], 1 - a[:, 0]], 1)
    assert map_iou(logits, logits) == 1.0


def test_metric_callback_drives_report_and_budget():
    from edge_infer.data import digits_model_path, load_digits_samples
    from edge_infer.convert import convert
    import tempfile
    x, _ = load_digits_samples()
    calls = []

    def agreement(ref, cand):
        calls.append((set(ref), len(ref["logits"])))
        return float(np.mean(ref["logits"].argmax(1) == cand["logits"].argmax(1)))
    with tempfile.TemporaryDirectory() as d:
        rep = convert(digits_model_path(), os.path.join(d, "d8.eim"), quantize="int8",
                      calib=[x[:100]], metric=agreement, max_accuracy_drop=0.0)
    q = rep["quantization"]
    assert calls and all(names == {"logits"} and n == 20 for names, n in calls)
    assert q["task"] == "custom" and q["accuracy_drop"] == pytest.approx(1.0 - q["task_score"])
    assert q["budget"]["met"] and q["budget"]["task"] == "custom"


# -- the trained YOLO-style fixture ----------------------------------------------------------------

SHAPE = {"images": [1, 3, 320, 320]}
#: measured on the bundled model (see edge_infer/data/yolo_shapes/README.md), with margin
F1_FP32_MIN = 0.85           # 0.894 on the 40 test scenes, 0.901 on 200
BUDGET_MAX_FLOAT = 3         # 1 (the output concat), found in 1 measurement


def _calib(n=32):
    from edge_infer.data import yolo_shapes_scenes
    x, _ = yolo_shapes_scenes(n, start=100_000)          # held-out seeds, disjoint from the evaluation's
    return [x[i:i + 1] for i in range(n)]


def _outputs(path, x):
    rt = Runtime(path, backend="cpu")
    return np.concatenate([rt.run({"images": x[i:i + 1]})["output0"] for i in range(len(x))])


@pytest.fixture(scope="module")
def yolo_fp32(tmp_path_factory):
    from edge_infer.convert import convert
    from edge_infer.data import yolo_shapes_model_path, yolo_shapes_scenes
    path = str(tmp_path_factory.mktemp("yolo") / "fp32.eim")
    convert(yolo_shapes_model_path(), path, input_shapes=SHAPE)
    x, truth = yolo_shapes_scenes(40)
    return path, x, truth, _outputs(path, x)


def test_yolo_scenes_are_deterministic():
    from edge_infer.data import yolo_shapes_scenes
    a, la = yolo_shapes_scenes(2, start=7)
    b, lb = yolo_shapes_scenes(2, start=7)
    assert a.shape == (2, 3, 320, 320) and a.dtype == np.float32 and 0.0 <= a.min() and a.max() <= 1.0
    assert np.array_equal(a, b) and all(np.array_equal(p[0], q[0]) and np.array_equal(p[1], q[1])
                                        for p, q in zip(la, lb))
    assert all(1 <= len(c) <= 6 and set(c.tolist()) <= {0, 1, 2} for _, c in la)


@pytest.mark.slow
def test_yolo_fixture_fp32_matches_onnxruntime_and_detects(yolo_fp32):
    import onnxruntime as ort
    from edge_infer.data import yolo_shapes_model_path
    path, x, truth, ref = yolo_fp32
    model = onnx.load(yolo_shapes_model_path())
    assert {n.op_type for n in model.graph.node} >= {"Conv", "Sigmoid", "Mul", "Split", "Concat", "Resize",
                                                     "MaxPool", "Softmax", "Reshape", "Transpose"}
    assert sum(t.ByteSize() for t in model.graph.initializer) < 1 << 20
    sess = ort.InferenceSession(yolo_shapes_model_path(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {"images": x[:4]})[0]
    assert theirs.shape == (4, 7, 2100)
    assert np.abs(theirs[:, :4] - ref[:4, :4]).max() < 0.05 and np.abs(theirs[:, 4:] - ref[:4, 4:]).max() < 1e-3
    f1, _, _ = detection_f1(ref, truth)
    assert f1 >= F1_FP32_MIN


@pytest.mark.slow
def test_yolo_fixture_default_int8_keeps_detections(yolo_fp32, tmp_path):
    from edge_infer.convert import convert
    from edge_infer.data import yolo_shapes_model_path
    path, x, truth, ref = yolo_fp32
    out8 = str(tmp_path / "int8.eim")
    rep = convert(yolo_shapes_model_path(), out8, input_shapes=SHAPE, quantize="int8", calib=_calib())["quantization"]
    assert rep["task"] == "detect" and rep["drift"]["findings"] == []     # converts without --allow-drift
    (h,) = [h for h in rep["heterogeneous"] if h["output_concat"]]
    assert h["decision"].startswith("float32 concat") and h["drop_float_concat"] < h["drop_int8_concat"]
    assert rep["nodes"]["int8"] >= 0.9 * rep["nodes"]["total"]
    q = _outputs(out8, x)
    f1, _, _ = detection_f1(q, ref)
    assert f1 >= 0.95                                          # the target, int8 vs fp32
    assert detection_f1(q, truth)[0] >= F1_FP32_MIN - 0.03


@pytest.mark.slow
def test_budget_search_keeps_few_layers_float(yolo_fp32, tmp_path, monkeypatch):
    """With the heterogeneous-concat handling off (one scale for boxes and probabilities, the
    int8 model detects nothing), the budget finds the layer to blame in a few measurements."""
    from edge_infer.convert import convert
    from edge_infer.data import yolo_shapes_model_path
    from edge_infer.quantize import heterogeneous
    monkeypatch.setattr(heterogeneous, "MIN_LEVELS", 0.0)
    path, x, truth, ref = yolo_fp32
    out8 = str(tmp_path / "int8b.eim")
    rep = convert(yolo_shapes_model_path(), out8, input_shapes=SHAPE, quantize="int8", calib=_calib(),
                  max_accuracy_drop=0.05)["quantization"]
    b = rep["budget"]
    assert b["initial_drop"] > 0.5 and b["met"] and b["final_drop"] <= 0.05
    assert 1 <= len(b["kept_float"]) <= BUDGET_MAX_FLOAT
    assert len(b["trials"]) <= 12
    assert len(b["sensitivity"]) > 100 and b["sensitivity"][0]["local_sqnr_db"] <= b["sensitivity"][-1]["local_sqnr_db"]
    assert detection_f1(_outputs(out8, x), ref)[0] >= 0.9


def test_cli_task_flag(tmp_path, capsys):
    from edge_infer.cli import main
    from edge_infer.data import digits_model_path, load_digits_samples
    x, _ = load_digits_samples()
    np.save(tmp_path / "cal.npy", x[:60])
    out = str(tmp_path / "d8.eim")
    assert main(["convert", digits_model_path(), "-o", out, "--quantize", "int8", "--calib",
                 str(tmp_path / "cal.npy"), "--task", "generic"]) == 0
    text = capsys.readouterr().out
    assert "task generic: score" in text and "top-1 agreement" not in text
    assert main(["convert", digits_model_path(), "-o", out, "--quantize", "int8", "--calib",
                 str(tmp_path / "cal.npy")]) == 0
    assert "task classify: score" in capsys.readouterr().out
    assert main(["convert", digits_model_path(), "-o", out, "--task", "detect"]) == 2
    assert "--task" in capsys.readouterr().err
