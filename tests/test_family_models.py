"""The benchmark family builders (tests/family_models.py) stay valid: each, built narrow and
small, passes onnx.checker, converts with edge_infer (opt level 3, an .eim on disk) and runs
within 1e-4 relative (max abs error / max abs value) of onnxruntime; the weight scaling keeps
activations informative (a YOLO output with probabilities spread over 0..1, a DB map that is
not flat)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import family_models as F  # noqa: E402
from onnx_models import ort_run  # noqa: E402

SMALL = {
    "mobilenetv3": lambda: F.mobilenetv3_classifier((64, 64), width=0.5, classes=10),
    "text_direction": lambda: F.text_direction_classifier((48, 96)),
    "db": lambda: F.db_text_detector((64, 64), width=0.35, fpn=32),
    "yolo": lambda: F.yolo_detector(64, width=0.125, classes=5),
}
REL_TOL = 1e-4


@pytest.mark.parametrize("name", sorted(SMALL))
def test_family_model_converts_and_matches_onnxruntime(name, tmp_path):
    from edge_infer import convert
    from edge_infer.runtime import Runtime
    model = SMALL[name]()
    onnx.checker.check_model(model, full_check=True)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    ref = ort_run(model, {inp.name: x})
    src, dst = tmp_path / f"{name}.onnx", tmp_path / f"{name}.eim"
    onnx.save(model, src)
    convert(src, dst, input_shapes={inp.name: shape})
    ours = Runtime(str(dst), backend="cpu").run({inp.name: x})
    for out, r in ref.items():
        assert ours[out].shape == r.shape
        err = float(np.abs(ours[out] - r).max() / np.abs(r).max())
        assert err <= REL_TOL, f"{name} {out}: max |ours - ort| / max |ort| = {err:.2e}"
        assert float(np.std(r)) > 1e-3, f"{name} {out}: flat output, weights badly scaled"


def test_yolo_output_is_exporter_layout():
    """[1, 4 + nc, anchors]: pixel boxes, then sigmoid probabilities, mostly near 0 (the class
    prior bias) with some far above it."""
    model = SMALL["yolo"]()
    anchors = sum((64 // s) ** 2 for s in (8, 16, 32))
    x = np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float32)
    out = ort_run(model, {"images": x})["output0"]
    assert out.shape == (1, 4 + 5, anchors)
    probs, wh = out[0, 4:], out[0, 2:4]
    assert probs.min() >= 0 and probs.max() <= 1 and probs.max() > 100 * np.median(probs)
    assert wh.min() >= 0 and wh.max() > 8          # widths/heights in pixels (at least one stride)
