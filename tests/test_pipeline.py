"""The streaming pipeline: sources, preprocessing, box/mask decoding, sinks, threads and queues.

End to end on a real encoded video file (written with OpenCV here), the drop policy under an
artificially slow model, camera reconnect with a source that fails and comes back, clean stop
on SIGTERM; detector decoding and NMS against straightforward reference implementations.
"""
import json
import os
import signal
import threading
import time

import numpy as np
import pytest

import edge_infer
from edge_infer.data import digits_model_path, load_digits_samples
from edge_infer.pipeline import (CollectSink, Classify, Detect, JsonLinesSink, Pipeline, Segment, Source,
                                 SyntheticSource, VideoFileSink, batched_nms, box_iou, decode_ssd, decode_yolo,
                                 load_recipe, nms, open_sink, open_source, preprocess, recipe_for_input,
                                 to_frame_coords)
from edge_infer.pipeline import _cv
from edge_infer.pipeline.preprocess import RecipeError, _np_resize, resize_image
from edge_infer.pipeline.sinks import SinkError, WindowSink
from edge_infer.pipeline.sources import SourceError, VideoSource

cv2 = pytest.importorskip("cv2")

DIGITS_RECIPE = {"resize": "center_crop", "interpolation": "area"}


@pytest.fixture(scope="module")
def digits_rt(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipe") / "digits.eim"
    edge_infer.convert(digits_model_path(), str(out))
    return edge_infer.Runtime(str(out))


class SlowModel:
    """Wraps a runtime; every run takes at least ``delay`` seconds (an overloaded device)."""

    def __init__(self, rt, delay):
        self.rt, self.delay = rt, delay
        self.inputs, self.outputs = rt.inputs, rt.outputs
        self.calls = 0

    def run(self, feeds):
        self.calls += 1
        time.sleep(self.delay)
        return self.rt.run(feeds)


def _write_video(path, n, size=(240, 320)):
    src = SyntheticSource("digits", count=n, size=size)
    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (size[1], size[0]))
    assert w.isOpened()
    labels = []
    for img, info in src:
        w.write(img)
        labels.append(info["label"])
    w.release()
    return labels


# -- end to end ----------------------------------------------------------------------------

def test_video_file_end_to_end_no_frame_lost(digits_rt, tmp_path):
    video = tmp_path / "digits.avi"
    labels = _write_video(video, 90)
    cap = cv2.VideoCapture(str(video))
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 90
    cap.release()

    collect = CollectSink()
    jsonl, out_video = tmp_path / "out.jsonl", tmp_path / "annotated.avi"
    pipe = Pipeline(digits_rt, str(video), preprocess=DIGITS_RECIPE, postprocess="classify:3",
                    sinks=[collect, str(jsonl), str(out_video)])
    assert not pipe.live
    stats = pipe.run()
    assert stats["frames_in"] == stats["frames_out"] == 90
    assert stats["dropped"] == 0 and stats["errors"] == 0
    assert collect.indices == list(range(90))                        # in order, none lost
    pred = [r["top"][0]["index"] for _, _, r in collect.items]
    assert np.mean(np.array(pred) == np.array(labels)) >= 0.9        # MJPG artefacts cost little
    lines = jsonl.read_text().splitlines()
    assert len(lines) == 90
    rec = json.loads(lines[5])
    assert rec["frame"] == 5 and rec["result"]["type"] == "classification" and len(rec["result"]["top"]) == 3
    assert rec["latency_ms"] > 0
    cap = cv2.VideoCapture(str(out_video))
    n = 0
    while cap.read()[0]:
        n += 1
    assert n == 90
    assert all(v is not None for v in stats["stage_ms"].values())


def test_image_folder_source(digits_rt, tmp_path):
    src = SyntheticSource("digits", count=6)
    labels = []
    for k, (img, info) in enumerate(src):
        cv2.imwrite(str(tmp_path / f"{k:03d}.png"), img)
        labels.append(info["label"])
    np.save(tmp_path / "006.npy", src._digit(6)[0])   # .npy frames need no OpenCV
    labels.append(src._digit(6)[1]["label"])
    collect = CollectSink()
    stats = Pipeline(digits_rt, str(tmp_path), preprocess=DIGITS_RECIPE, sinks=[collect]).run()
    assert stats["frames_out"] == 7
    assert [info["file"] for _, info, _ in collect.items][:2] == ["000.png", "001.png"]
    assert [r["top"][0]["index"] for _, _, r in collect.items] == labels


# -- drop policy ---------------------------------------------------------------------------

def test_live_source_drops_oldest_under_slow_model(digits_rt):
    slow = SlowModel(digits_rt, 0.02)                 # 50 fps max
    src = SyntheticSource("digits", count=120, fps=400)   # a 400 fps "camera"
    assert src.live
    collect = CollectSink()
    stats = Pipeline(slow, src, preprocess=DIGITS_RECIPE, sinks=[collect]).run()
    assert stats["frames_in"] == 120
    assert stats["dropped"] > 0
    assert stats["frames_out"] + stats["dropped"] == 120              # every frame accounted for
    assert stats["frames_out"] == slow.calls < 120
    idx = collect.indices
    assert idx == sorted(idx) and len(set(idx)) == len(idx)
    assert idx[-1] == 119                                             # the newest survives, old ones go
    # no stale backlog: a frame waits at most for the frames ahead of it in the (depth-3) queues
    assert stats["latency_ms"]["p50"] < 0.02 * 1e3 * 10


def test_file_source_drops_nothing_under_slow_model(digits_rt):
    slow = SlowModel(digits_rt, 0.01)
    src = SyntheticSource("digits", count=40)          # finite, unpaced: a file
    assert not src.live
    collect = CollectSink()
    stats = Pipeline(slow, src, preprocess=DIGITS_RECIPE, sinks=[collect]).run()
    assert stats["dropped"] == 0 and stats["frames_out"] == 40 and collect.indices == list(range(40))


def test_stages_overlap(digits_rt):
    """Three stages of ~10 ms each: the pipeline runs near 1 / 10 ms, not 1 / 30 ms."""
    def slow_pre(img):
        time.sleep(0.01)
        return preprocess(img, recipe_for_input((1, 1, 8, 8), DIGITS_RECIPE))

    def slow_post(outputs, meta):
        time.sleep(0.01)
        return Classify()(outputs, meta)
    stats = Pipeline(SlowModel(digits_rt, 0.01), SyntheticSource("digits", count=60), preprocess=slow_pre,
                     postprocess=slow_post).run()
    assert stats["frames_out"] == 60
    assert stats["elapsed_s"] < 60 * 0.03 * 0.6            # sequential would take >= 1.8 s


# -- reconnect -----------------------------------------------------------------------------

class FlakyCamera(Source):
    """A live camera that delivers ``first`` frames, dies, refuses to open ``refusals`` times,
    then comes back."""
    live = True
    name = "flaky"

    def __init__(self, first=10, refusals=2):
        self.first, self.refusals = first, refusals
        self.opens = self.failed_opens = self.served = 0
        self.broken = False
        self.opened_at = []

    def open(self):
        self.opens += 1
        if self.broken and self.failed_opens < self.refusals:
            self.failed_opens += 1
            raise SourceError("camera not found")
        self.broken = False
        self.opened_at.append(self.served)

    def read(self):
        if self.broken:
            return None
        if self.served == self.first and len(self.opened_at) == 1:
            self.broken = True                       # unplugged
            return None
        time.sleep(0.003)
        img = np.full((32, 32, 3), self.served % 256, np.uint8)
        self.served += 1
        return img


def test_camera_reconnects_with_backoff(digits_rt):
    cam = FlakyCamera(first=10, refusals=2)
    collect = CollectSink()
    t0 = time.perf_counter()
    pipe = Pipeline(digits_rt, cam, preprocess={"resize": "stretch"}, sinks=[collect], max_frames=25,
                    reconnect_backoff=(0.05, 1.0))
    stats = pipe.run()
    took = time.perf_counter() - t0
    assert stats["reconnects"] == 1
    assert cam.failed_opens == 2 and cam.opens == 1 + 3           # initial + 2 refused + 1 good
    assert cam.opened_at == [0, 10]
    assert stats["frames_in"] == 25                               # the pipeline went on
    assert stats["frames_out"] + stats["dropped"] == 25
    assert took >= 0.05 + 0.1 + 0.2 - 0.02                        # backoff: 0.05, 0.1, 0.2 s
    assert stats["frames_out"] >= 20


def test_stop_on_sigterm_is_clean(digits_rt, tmp_path):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals need the main thread")
    out = tmp_path / "live.avi"
    pipe = Pipeline(digits_rt, SyntheticSource("digits", count=None, fps=100), preprocess=DIGITS_RECIPE,
                    sinks=[str(out)])
    timer = threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    before = signal.getsignal(signal.SIGTERM)
    stats = pipe.run()
    timer.join()
    assert signal.getsignal(signal.SIGTERM) is before           # handler restored
    assert stats["frames_out"] > 5 and not pipe.running
    assert stats["frames_out"] + stats["dropped"] == stats["frames_in"]
    cap = cv2.VideoCapture(str(out))                             # the file was finalised
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == stats["frames_out"]


def test_failing_stage_stops_pipeline_with_error(digits_rt):
    def broken(outputs, meta):
        raise ValueError("bad postprocessing")
    pipe = Pipeline(digits_rt, SyntheticSource("digits", count=50), preprocess=DIGITS_RECIPE,
                    postprocess=broken, max_consecutive_errors=3)
    with pytest.raises(ValueError, match="bad postprocessing"):
        pipe.run()
    assert pipe.counts["errors"] >= 3 and not pipe.running


def test_single_bad_frame_is_skipped(digits_rt):
    def sometimes(outputs, meta):
        sometimes.n += 1
        if sometimes.n == 3:
            raise ValueError("one bad frame")
        return Classify()(outputs, meta)
    sometimes.n = 0
    stats = Pipeline(digits_rt, SyntheticSource("digits", count=10), preprocess=DIGITS_RECIPE,
                     postprocess=sometimes).run()
    assert stats["errors"] == 1 and stats["frames_out"] == 9 and "one bad frame" in stats["last_error"]


# -- sources and sinks -------------------------------------------------------------------

def test_open_source_specs(tmp_path):
    assert isinstance(open_source("synthetic:squares:7"), SyntheticSource)
    s = open_source("synthetic:digits:5:30")
    assert s.count == 5 and s.fps == 30 and s.live
    assert open_source("rtsp://127.0.0.1:1/none").live
    assert open_source(0).live and open_source("0").is_camera
    with pytest.raises(SourceError):
        open_source(str(tmp_path / "missing.mp4"))
    with pytest.raises(SourceError, match="cannot open"):
        VideoSource("rtsp://127.0.0.1:1/none", open_timeout_ms=500).open()


def test_missing_opencv_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(_cv, "_cv2", None)
    monkeypatch.setattr(_cv, "_tried", True)
    f = tmp_path / "v.mp4"
    f.write_bytes(b"x")
    with pytest.raises(ImportError, match=r"edge-infer\[vision\]"):
        VideoSource(str(f)).open()
    with pytest.raises(ImportError, match="OpenCV"):
        open_sink(str(tmp_path / "o.mp4"))
    # preprocessing falls back to numpy
    img = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    x, _ = preprocess(img, recipe_for_input((1, 3, 20, 30), {}))
    assert x.shape == (1, 3, 20, 30)


def test_sink_specs(tmp_path, monkeypatch):
    assert isinstance(open_sink(str(tmp_path / "a.jsonl")), JsonLinesSink)
    assert isinstance(open_sink(str(tmp_path / "a.mp4")), VideoFileSink)
    with pytest.raises(SinkError):
        open_sink("out.xyz")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    if os.name == "posix" and not os.uname().sysname == "Darwin":
        with pytest.raises(SinkError, match="no display"):
            WindowSink()


# -- preprocessing -------------------------------------------------------------------------

def test_recipe_validation_and_loading(tmp_path):
    with pytest.raises(RecipeError, match="unknown recipe key"):
        load_recipe({"resise": "stretch"})
    with pytest.raises(RecipeError, match="resize"):
        load_recipe({"resize": "zoom"})
    with pytest.raises(RecipeError, match="std"):
        load_recipe({"std": [1, 0, 1]})
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"description": "calibration set", "preprocess": {"resize": "letterbox", "size": 64}}))
    r = load_recipe(str(p))
    assert r["resize"] == "letterbox" and r["size"] == [64, 64]
    assert load_recipe('{"layout": "nhwc"}')["layout"] == "NHWC"
    with pytest.raises(RecipeError, match="not found"):
        load_recipe("no-such-recipe")
    r = recipe_for_input((1, 224, 224, 3), {})
    assert r["layout"] == "NHWC" and r["size"] == [224, 224] and r["color"] == "rgb"
    with pytest.raises(RecipeError, match="3-channel"):
        recipe_for_input((1, 3, 8, 8), {"color": "gray"})


def test_preprocess_normalize_layout_color():
    img = np.zeros((4, 4, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 10, 20, 30              # B, G, R
    r = recipe_for_input((1, 3, 4, 4), {"mean": [0.1, 0.2, 0.3], "std": [0.5, 0.5, 0.5]})
    x, meta = preprocess(img, r)
    assert x.shape == (1, 3, 4, 4) and x.dtype == np.float32
    np.testing.assert_allclose(x[0, :, 0, 0], (np.array([30, 20, 10]) / 255 - [0.1, 0.2, 0.3]) / 0.5, rtol=1e-5)
    x, _ = preprocess(img, recipe_for_input((1, 4, 4, 3), {"color": "bgr", "dtype": "uint8"}))
    assert x.dtype == np.uint8 and x.shape == (1, 4, 4, 3) and list(x[0, 0, 0]) == [10, 20, 30]
    x, _ = preprocess(img, recipe_for_input((1, 1, 4, 4), {"invert": True}))
    assert x.shape == (1, 1, 4, 4) and abs(x[0, 0, 0, 0] - (255 - 21) / 255) < 0.01


@pytest.mark.parametrize("mode", ["stretch", "letterbox", "center_crop"])
def test_box_mapping_back_to_frame(mode):
    frame = np.zeros((240, 320, 3), np.uint8)
    frame[60:120, 100:180] = 255
    r = recipe_for_input((1, 3, 64, 64), {"resize": mode, "pad_value": 0, "interpolation": "nearest"})
    x, meta = preprocess(frame, r)
    ys, xs = np.nonzero(x[0, 0] > 0.5)
    box_in = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    back = to_frame_coords(box_in, meta)[0]
    np.testing.assert_allclose(back, [100, 60, 180, 120], atol=320 / 64 + 1)


def test_numpy_resize_matches_opencv():
    img = np.random.default_rng(1).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    for interp, flag in (("linear", cv2.INTER_LINEAR), ("nearest", cv2.INTER_NEAREST)):
        ours = _np_resize(img, 20, 31, interp).astype(int)
        ref = cv2.resize(img, (31, 20), interpolation=flag).astype(int)
        assert np.abs(ours - ref).max() <= (1 if interp == "linear" else 255)
        if interp == "linear":
            assert np.abs(ours - ref).mean() < 0.6
    big = np.kron(np.arange(16, dtype=np.uint8).reshape(4, 4), np.ones((5, 5), np.uint8))
    np.testing.assert_array_equal(_np_resize(big, 4, 4, "area"), np.arange(16).reshape(4, 4))
    assert resize_image(img, (10, 10)).shape == (10, 10, 3)


# -- postprocessing: decoding and NMS against references -----------------------------------

def _iou(a, b):
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def ref_nms(boxes, scores, thr):
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    keep = []
    for i in order:
        if all(_iou(boxes[i], boxes[k]) <= thr for k in keep):
            keep.append(i)
    return keep


def ref_multiclass(boxes, scores, classes, thr, max_det):
    kept = []
    for c in sorted(set(classes)):
        idx = [i for i in range(len(classes)) if classes[i] == c]
        kept += [idx[k] for k in ref_nms([boxes[i] for i in idx], [scores[i] for i in idx], thr)]
    return sorted(kept, key=lambda i: (-scores[i], i))[:max_det]


def _clusters(rng, n_obj=6, per=8, ncls=5, span=320.0):
    """Ground-truth boxes, and jittered candidates around each (cx, cy, w, h), classes."""
    cands, cls, gt = [], [], []
    for _ in range(n_obj):
        cx, cy = rng.uniform(40, span - 40, 2)
        w, h = rng.uniform(20, 60, 2)
        c = int(rng.integers(ncls))
        gt.append((cx, cy, w, h, c))
        for _ in range(per):
            cands.append([cx + rng.normal(0, 3), cy + rng.normal(0, 3), w * rng.uniform(0.9, 1.1),
                          h * rng.uniform(0.9, 1.1)])
            cls.append(c)
    return np.array(cands, np.float32), np.array(cls), gt


def test_box_iou_and_nms_match_reference():
    rng = np.random.default_rng(0)
    for trial in range(20):
        xy = rng.uniform(0, 100, (40, 2))
        wh = rng.uniform(5, 40, (40, 2))
        boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
        scores = rng.uniform(0, 1, 40).astype(np.float32)
        if trial % 4 == 0:
            scores[5:10] = scores[4]                                  # ties: lower index first
        ious = box_iou(boxes, boxes)
        assert abs(ious[3, 7] - _iou(boxes[3], boxes[7])) < 1e-5
        for thr in (0.3, 0.5):
            assert nms(boxes, scores, thr).tolist() == ref_nms(boxes.tolist(), scores.tolist(), thr)
        classes = rng.integers(0, 3, 40)
        got = batched_nms(boxes, scores, classes, 0.4, 15).tolist()
        assert got == ref_multiclass(boxes.tolist(), scores.tolist(), classes.tolist(), 0.4, 15)
    assert nms(np.zeros((0, 4)), np.zeros(0)).tolist() == []


def _ref_yolo(rows, version, conf, iou, max_det):
    boxes, scores, classes = [], [], []
    for r in rows:
        cls = r[5:] * r[4] if version == "v5" else r[4:]
        c = int(np.argmax(cls))
        if cls[c] >= conf:
            cx, cy, w, h = r[:4]
            boxes.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
            scores.append(float(cls[c]))
            classes.append(c)
    keep = ref_multiclass(boxes, scores, classes, iou, max_det)
    return [boxes[i] for i in keep], [scores[i] for i in keep], [classes[i] for i in keep]


@pytest.mark.parametrize("version", ["v5", "v8"])
def test_decode_yolo_matches_reference(version):
    rng = np.random.default_rng(3)
    ncls = 5
    cands, cls, gt = _clusters(rng, ncls=ncls)
    n_noise = 300
    noise = np.concatenate([rng.uniform(0, 320, (n_noise, 2)), rng.uniform(5, 50, (n_noise, 2))], 1)
    xywh = np.concatenate([cands, noise]).astype(np.float32)
    A = len(xywh)
    probs = rng.uniform(0, 0.15, (A, ncls)).astype(np.float32)
    probs[np.arange(len(cands)), cls] = rng.uniform(0.5, 0.99, len(cands))
    if version == "v5":
        obj = np.concatenate([rng.uniform(0.7, 1, len(cands)), rng.uniform(0, 0.3, n_noise)])[:, None]
        rows = np.concatenate([xywh, obj, probs], 1).astype(np.float32)
        raw = rows[None]                                  # [1, A, 5 + C]
    else:
        rows = np.concatenate([xywh, probs], 1).astype(np.float32)
        raw = rows.T[None]                                # [1, 4 + C, A]: as YOLOv8 exports
    boxes, scores, classes = decode_yolo(raw, conf_threshold=0.25, iou_threshold=0.45, max_detections=50)
    rb, rs, rc = _ref_yolo(rows, version, 0.25, 0.45, 50)
    np.testing.assert_allclose(boxes, np.array(rb, np.float32).reshape(-1, 4), atol=1e-4)
    np.testing.assert_allclose(scores, rs, rtol=1e-6)
    assert classes.tolist() == rc
    # and it found each object once, where it is
    assert len(boxes) >= len(gt)
    for cx, cy, w, h, c in gt:
        g = np.array([[cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]])
        hit = box_iou(g, boxes[classes == c])
        assert hit.max() > 0.5


def test_decode_ssd_with_anchors_matches_reference():
    rng = np.random.default_rng(5)
    g = 8
    cy, cx = np.meshgrid((np.arange(g) + 0.5) / g, (np.arange(g) + 0.5) / g, indexing="ij")
    anchors = np.concatenate([np.stack([cx.ravel(), cy.ravel(), np.full(g * g, s), np.full(g * g, s)], 1)
                              for s in (0.15, 0.3)]).astype(np.float32)                 # [128, 4]
    A, ncls, var = len(anchors), 4, (0.1, 0.1, 0.2, 0.2)
    # encode two true boxes on their best anchors, random small deltas elsewhere
    truth = [(0.31, 0.42, 0.2, 0.26, 1), (0.7, 0.65, 0.33, 0.3, 3)]
    deltas = rng.normal(0, 0.5, (A, 4)).astype(np.float32)
    logits = rng.normal(0, 1, (A, ncls)).astype(np.float32)
    logits[:, 0] += 4                                                                 # background
    for bx, by, bw, bh, c in truth:
        d = np.abs(anchors[:, 0] - bx) + np.abs(anchors[:, 1] - by) + np.abs(anchors[:, 2] - bw)
        for a in np.argsort(d)[:3]:
            ax, ay, aw, ah = anchors[a]
            deltas[a] = [(bx - ax) / (var[0] * aw), (by - ay) / (var[1] * ah), np.log(bw / aw) / var[2],
                         np.log(bh / ah) / var[3]]
            logits[a] = -2
            logits[a, c] = 6
    boxes, scores, classes = decode_ssd(deltas[None], logits[None], anchors, score_threshold=0.5,
                                        iou_threshold=0.45)
    # reference: decode every anchor in a loop, softmax, every (anchor, class) above threshold
    rb, rs, rcl = [], [], []
    for a in range(A):
        ax, ay, aw, ah = anchors[a]
        dx, dy, dw, dh = deltas[a]
        x, y = ax + dx * var[0] * aw, ay + dy * var[1] * ah
        w, h = aw * np.exp(dw * var[2]), ah * np.exp(dh * var[3])
        p = np.exp(logits[a] - logits[a].max())
        p /= p.sum()
        for c in range(1, ncls):
            if p[c] >= 0.5:
                rb.append([x - w / 2, y - h / 2, x + w / 2, y + h / 2])
                rs.append(float(p[c]))
                rcl.append(c)
    keep = ref_multiclass(rb, rs, rcl, 0.45, 100)
    np.testing.assert_allclose(boxes, np.array([rb[i] for i in keep]), atol=1e-5)
    assert classes.tolist() == [rcl[i] for i in keep]
    for bx, by, bw, bh, c in truth:
        exact = np.array([[bx - bw / 2, by - bh / 2, bx + bw / 2, by + bh / 2]])
        assert box_iou(exact, boxes[classes == c]).max() > 0.99
    # already-decoded TF-style boxes (ymin, xmin, ymax, xmax), probabilities
    tf_boxes = np.array([[[0.1, 0.2, 0.5, 0.6], [0.11, 0.21, 0.5, 0.6], [0.6, 0.6, 0.9, 0.9]]], np.float32)
    probs = np.array([[[0.1, 0.9], [0.2, 0.8], [0.3, 0.7]]], np.float32)
    b, s, c = decode_ssd(tf_boxes, probs, None, score_threshold=0.5, box_order="yxyx", score_activation="none")
    np.testing.assert_allclose(b, [[0.2, 0.1, 0.6, 0.5], [0.6, 0.6, 0.9, 0.9]])
    assert c.tolist() == [1, 1]


def test_detect_maps_boxes_to_the_frame():
    meta = {"frame_size": (240, 320), "input_size": (64, 64), "scale": (0.2, 0.2), "offset": (8.0, 0.0)}
    pred = np.zeros((1, 10, 6), np.float32)           # v5: cx, cy, w, h, obj, cls
    pred[0, 0] = [32, 32, 10, 10, 0.9, 1.0]
    out = Detect("yolov5", labels=["thing"])({"out": pred}, meta)
    d = out["detections"]
    assert len(d) == 1 and d[0]["label"] == "thing"
    np.testing.assert_allclose(d[0]["box"], [135, 95, 185, 145], atol=0.01)
    ssd = Detect("ssd", conf_threshold=0.5)
    out = ssd({"boxes": np.array([[[0.25, 0.25, 0.75, 0.75]]], np.float32),
               "scores": np.array([[[-5.0, 5.0]]], np.float32)}, meta)
    np.testing.assert_allclose(out["detections"][0]["box"], [80, 40, 240, 200], atol=0.01)


def test_segment_mask_at_frame_resolution():
    meta = {"frame_size": (240, 320), "input_size": (64, 64), "scale": (0.2, 0.2), "offset": (8.0, 0.0)}
    logits = np.zeros((1, 3, 32, 32), np.float32)     # output at half the input resolution
    logits[0, 0] = 1
    logits[0, 2, 12:20, 0:16] = 5                      # input rows 24..40, cols 0..32
    out = Segment(labels=["bg", "a", "b"])({"seg": logits}, meta)
    mask = out["mask"]
    assert mask.shape == (240, 320)
    ys, xs = np.nonzero(mask == 2)
    assert abs(ys.min() - (24 - 8) / 0.2) <= 5 and abs(ys.max() + 1 - (40 - 8) / 0.2) <= 5
    assert xs.min() == 0 and abs(xs.max() + 1 - 32 / 0.2) <= 5
    assert set(out["classes"]) == {"bg", "b"} and abs(sum(out["classes"].values()) - 1) < 1e-3


def test_classify_topk_labels_and_probabilities():
    out = Classify(top_k=2, labels=["a", "b", "c"])({"y": np.array([[1.0, 3.0, 2.0]], np.float32)}, None)
    assert [t["label"] for t in out["top"]] == ["b", "c"]
    p = np.exp([1.0, 3.0, 2.0]) / np.exp([1.0, 3.0, 2.0]).sum()
    assert abs(out["top"][0]["score"] - p[1]) < 1e-5
    probs = Classify(top_k=1)({"y": np.array([[0.2, 0.8]], np.float32)}, None)   # already probabilities
    assert probs["top"][0]["score"] == pytest.approx(0.8)


def test_detector_pipeline_end_to_end_on_squares(tmp_path):
    """A hand-built YOLO-shaped model through conversion, the pipeline, decoding and NMS."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "raspberrypi"))
    from demo_detector import build_demo_detector
    onnx_path = build_demo_detector(str(tmp_path / "det.onnx"))
    edge_infer.convert(onnx_path, str(tmp_path / "det.eim"))
    rt = edge_infer.Runtime(str(tmp_path / "det.eim"))
    collect = CollectSink()
    stats = Pipeline(rt, SyntheticSource("squares", count=40), preprocess={"resize": "letterbox", "pad_value": 0},
                     postprocess=Detect("yolo", conf_threshold=0.5, iou_threshold=0.3), sinks=[collect]).run()
    assert stats["frames_out"] == 40
    hits = []
    for _, info, r in collect.items:
        det = np.array([d["box"] for d in r["detections"]], np.float32).reshape(-1, 4)
        for g in info["boxes"]:
            hits.append(box_iou(np.array([g], np.float32), det).max() if len(det) else 0.0)
    assert np.mean(np.array(hits) > 0.5) > 0.8


def test_cli_stream(digits_rt, tmp_path, capsys):
    from edge_infer.cli import main
    art = tmp_path / "d.eim"
    edge_infer.convert(digits_model_path(), str(art))
    out = tmp_path / "r.jsonl"
    assert main(["stream", str(art), "--source", "synthetic:digits:12", "--recipe", json.dumps(DIGITS_RECIPE),
                 "--sink", str(out), "--metrics-port", "0"]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 12
    _, y = load_digits_samples()
    assert np.mean([json.loads(l)["result"]["top"][0]["index"] == y[k] for k, l in enumerate(lines)]) > 0.9
    err = capsys.readouterr().err
    assert "metrics at http://127.0.0.1:" in err and '"frames_out": 12' in err
    assert main(["stream", str(art), "--source", str(tmp_path / "nope.mp4")]) == 2
    assert "source not found" in capsys.readouterr().err


# -- the Raspberry Pi examples run here on a video file and on the synthetic source ----------

def _example(name):
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "raspberrypi",
                        name + ".py")
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, path


def test_examples_use_only_the_public_api():
    import re as _re
    for name in ("camera_classify", "camera_detect", "demo_detector"):
        _, path = _example(name)
        src = open(path).read()
        imports = _re.findall(r"^\s*(?:from|import) (edge_infer[\w.]*)", src, _re.M)
        assert (imports or name == "demo_detector") and all(m in ("edge_infer", "edge_infer.pipeline", "edge_infer.monitor", "edge_infer.data")
                               for m in imports), imports
        assert "._" not in "".join(_re.findall(r"edge_infer[\w.]*", src))


def test_camera_classify_example_on_a_video_file(tmp_path, capsys):
    video = tmp_path / "digits.avi"
    labels = _write_video(video, 15)
    art = tmp_path / "digits.eim"
    edge_infer.convert(digits_model_path(), str(art))
    mod, _ = _example("camera_classify")
    assert mod.main(["--model", str(art), "--source", str(video), "--recipe", json.dumps(DIGITS_RECIPE),
                     "--top-k", "2"]) == 0
    out = capsys.readouterr()
    lines = [l for l in out.out.splitlines() if l.startswith("frame")]
    assert len(lines) == 15
    assert sum(l.split()[2] == str(y) for l, y in zip(lines, labels)) >= 13
    assert '"frames_out": 15' in out.err


def test_camera_detect_example_demo(tmp_path, capsys):
    mod, _ = _example("camera_detect")
    out_video = tmp_path / "det.avi"
    assert mod.main(["--demo", "--source", "synthetic:squares:12", "--sink", str(out_video),
                     "--sink", str(tmp_path / "det.jsonl")]) == 0
    recs = [json.loads(l) for l in (tmp_path / "det.jsonl").read_text().splitlines()]
    assert len(recs) == 12 and all(r["result"]["type"] == "detection" for r in recs)
    assert np.mean([len(r["result"]["detections"]) for r in recs]) >= 1.5      # two squares per frame
    cap = cv2.VideoCapture(str(out_video))
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 12


def test_static_model_is_planned_before_the_first_frame(tmp_path):
    """start() plans a fixed-shape model, so frame 1 pays for inference only."""
    out = tmp_path / "digits.eim"
    edge_infer.convert(digits_model_path(), str(out))
    rt = edge_infer.Runtime(str(out))
    assert rt.memory_stats()["plans"] == []
    gate = threading.Event()

    class GatedSource(SyntheticSource):
        def read(self):
            gate.wait(10)
            return super().read()

    collect = CollectSink()
    pipe = Pipeline(rt, GatedSource("digits", count=2), preprocess=DIGITS_RECIPE, sinks=[collect]).start()
    try:
        assert len(rt.memory_stats()["plans"]) == 1   # planned while no frame has been read
    finally:
        gate.set()
    stats = pipe.wait(30)
    assert stats["frames_out"] == 2 and len(collect.items) == 2
    assert len(rt.memory_stats()["plans"]) == 1       # the frames ran on that plan
