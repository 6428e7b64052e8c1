"""Per-frame pipeline metrics keep capture-to-result latency, queue wait and inference apart
(issue 20): on a file source, where frames queue up behind a slower model, latency grows frame
after frame while the model's own time does not."""
import json

import numpy as np
import pytest

import edge_infer
from edge_infer.data import digits_model_path
from edge_infer.monitor.prometheus import render
from edge_infer.monitor.registry import Registry
from edge_infer.pipeline import Pipeline

cv2 = pytest.importorskip("cv2")
from test_pipeline import DIGITS_RECIPE, SlowModel, _write_video  # noqa: E402

DELAY = 0.03          # seconds per model run: slower than decoding and preprocessing a frame


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics")
    edge_infer.convert(digits_model_path(), str(d / "digits.eim"))
    slow = SlowModel(edge_infer.Runtime(str(d / "digits.eim")), DELAY)
    _write_video(d / "digits.avi", 24)
    reg = Registry()
    stats = Pipeline(slow, str(d / "digits.avi"), preprocess=DIGITS_RECIPE, postprocess="classify:1",
                     sinks=[str(d / "out.jsonl")], registry=reg).run()
    recs = [json.loads(line) for line in (d / "out.jsonl").read_text().splitlines()]
    return stats, recs, reg


def test_json_lines_separate_latency_queue_wait_and_inference(slow_run):
    stats, recs, _ = slow_run
    assert stats["frames_out"] == len(recs) == 24 and stats["dropped"] == 0
    for r in recs:
        assert {"latency_ms", "queue_wait_ms", "inference_ms", "preprocess_ms", "postprocess_ms"} <= set(r)
        # the model's own time: the sleep plus a tiny run, never the time spent queued
        assert DELAY * 1e3 <= r["inference_ms"] < r["latency_ms"]
        # capture to result = waits + this frame's own work (the infer stage wraps the model run)
        own = r["preprocess_ms"] + r["inference_ms"] + r["postprocess_ms"]
        assert own + r["queue_wait_ms"] <= r["latency_ms"] * 1.001 + 0.05
        assert r["latency_ms"] - (own + r["queue_wait_ms"]) < 0.2 * r["latency_ms"] + 2.0


def test_latency_grows_inference_does_not(slow_run):
    _, recs, _ = slow_run
    lat = np.array([r["latency_ms"] for r in recs])
    inf = np.array([r["inference_ms"] for r in recs])
    wait = np.array([r["queue_wait_ms"] for r in recs])
    # the file is read as fast as it decodes: later frames wait behind the ones ahead (queues of 3)
    assert lat.max() > lat[0] + 3 * DELAY * 1e3
    assert np.median(wait[-6:]) > 3 * DELAY * 1e3 > wait[0]
    # ... while each model run takes what it takes (the first one also plans the model)
    assert np.median(inf[-6:]) < 1.5 * np.median(inf[1:7])


def test_prometheus_and_stats_carry_the_three(slow_run):
    stats, recs, reg = slow_run
    text = render(reg)
    for name in ("edge_infer_latency_seconds", "edge_infer_inference_seconds", "edge_infer_queue_wait_seconds"):
        assert f"# TYPE {name} summary" in text and f"{name}_count 24" in text
    inf_sum = float(next(line for line in text.splitlines()
                         if line.startswith("edge_infer_inference_seconds_sum")).split()[1])
    assert inf_sum * 1e3 == pytest.approx(sum(r["inference_ms"] for r in recs), rel=1e-3, abs=0.1)
    assert stats["inference_ms"]["p50"] == pytest.approx(np.median([r["inference_ms"] for r in recs]), rel=0.25)
    assert stats["queue_wait_ms"]["p90"] > stats["inference_ms"]["p90"]
    assert stats["latency_ms"]["p50"] > stats["inference_ms"]["p50"]
