"""Result sinks: JSON lines, annotated video files, an OpenCV window, callbacks.

A sink has ``write(frame, result)`` (``frame`` a :class:`~edge_infer.pipeline.pipeline.FrameItem`
with ``index``, ``image``, ``info``, ``latency``) and ``close()``. A sink may set
``stop_requested`` (the window sink does when the user presses q or Esc).
"""
from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from ..errors import EdgeInferError
from ._cv import require_cv2
from .postprocess import result_to_json

__all__ = ["Sink", "JsonLinesSink", "VideoFileSink", "WindowSink", "CollectSink", "CallbackSink",
           "NullSink", "open_sink", "annotate", "display_available"]


class SinkError(EdgeInferError):
    """A sink cannot be opened."""


class Sink:
    stop_requested = False

    def write(self, frame, result) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


#: per-frame stage times in a JSON line: (key, FrameItem.times key)
_TIMES = (("preprocess_ms", "preprocess"), ("postprocess_ms", "postprocess"))


def _record(frame, result) -> Dict[str, Any]:
    rec = {"frame": frame.index, "time": round(frame.wall_time, 6)}
    if frame.latency is not None:
        rec["latency_ms"] = round(frame.latency * 1e3, 3)             # capture to result
        rec["queue_wait_ms"] = round(getattr(frame, "queue_wait", 0.0) * 1e3, 3)
    if getattr(frame, "inference", None) is not None:
        rec["inference_ms"] = round(frame.inference * 1e3, 3)        # the model run alone
    times = getattr(frame, "times", None) or {}
    for key, stage in _TIMES:
        if stage in times:
            rec[key] = round(times[stage] * 1e3, 3)
    if frame.info:
        rec["info"] = result_to_json(frame.info)
    rec["result"] = result_to_json(result)
    return rec


class JsonLinesSink(Sink):
    """One JSON object per frame: ``{"frame", "time", "latency_ms", "queue_wait_ms", "inference_ms",
    "preprocess_ms", "postprocess_ms", "info", "result"}``; ``path`` ``"-"`` is stdout.
    ``latency_ms``: capture to result (grows while frames queue up behind a slower stage);
    ``queue_wait_ms``: the part of it spent waiting in queues; ``inference_ms``: the model run
    alone; ``preprocess_ms`` / ``postprocess_ms``: this frame's own work in those stages."""

    def __init__(self, path: str = "-", flush_every: int = 1):
        self.path = path
        self._own = path not in ("-", "stdout")
        self._f = open(path, "w", encoding="utf-8") if self._own else sys.stdout
        self.flush_every, self._n = max(1, flush_every), 0

    def write(self, frame, result) -> None:
        self._f.write(json.dumps(_record(frame, result), separators=(",", ":")) + "\n")
        self._n += 1
        if self._n % self.flush_every == 0:
            self._f.flush()

    def close(self) -> None:
        if self._own:
            self._f.close()
        else:
            self._f.flush()


_PALETTE = np.array([[0, 0, 0], [56, 56, 255], [151, 157, 255], [31, 112, 255], [29, 178, 255], [49, 210, 207],
                     [10, 249, 72], [23, 204, 146], [134, 219, 61], [52, 147, 26], [187, 212, 0], [168, 153, 44],
                     [255, 194, 0], [147, 69, 52], [255, 115, 100], [236, 24, 0], [255, 56, 132],
                     [133, 0, 82], [255, 56, 203], [200, 149, 255]], np.uint8)


def annotate(image: np.ndarray, result: Dict[str, Any], latency: Optional[float] = None) -> np.ndarray:
    """A copy of ``image`` (BGR) with the result drawn: boxes and labels, top-k text, mask overlay."""
    cv2 = require_cv2("drawing annotations")
    img = np.ascontiguousarray(image if image.ndim == 3 else np.repeat(image[:, :, None], 3, axis=2)).copy()
    kind = result.get("type") if isinstance(result, dict) else None
    font = cv2.FONT_HERSHEY_SIMPLEX
    if kind == "segmentation" and isinstance(result.get("mask"), np.ndarray):
        mask = result["mask"]
        color = _PALETTE[mask.astype(np.int64) % len(_PALETTE)]
        color[mask == 0] = img[mask == 0]
        color[mask == 255] = img[mask == 255]
        img = cv2.addWeighted(img, 0.5, color, 0.5, 0)
    elif kind == "detection":
        for d in result["detections"]:
            x1, y1, x2, y2 = (int(round(v)) for v in d["box"])
            c = tuple(int(v) for v in _PALETTE[1 + d["class"] % (len(_PALETTE) - 1)])
            cv2.rectangle(img, (x1, y1), (x2, y2), c, 2)
            text = f"{d['label']} {d['score']:.2f}"
            cv2.putText(img, text, (x1, max(12, y1 - 4)), font, 0.45, c, 1, cv2.LINE_AA)
    elif kind == "classification":
        for k, t in enumerate(result["top"][:3]):
            cv2.putText(img, f"{t['label']} {t['score']:.2f}", (8, 22 + 20 * k), font, 0.6,
                        (0, 255, 0) if k == 0 else (200, 200, 200), 2 if k == 0 else 1, cv2.LINE_AA)
    if latency is not None:
        h = img.shape[0]
        cv2.putText(img, f"e2e {latency * 1e3:.1f} ms", (8, h - 8), font, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
    return img


class VideoFileSink(Sink):
    """Annotated frames into a video file (``.mp4``: mp4v, ``.avi``: MJPG, ``.mkv``: XVID);
    the size is taken from the first frame."""

    _CODECS = {".mp4": "mp4v", ".m4v": "mp4v", ".avi": "MJPG", ".mkv": "XVID", ".mov": "mp4v"}

    def __init__(self, path: str, fps: float = 25.0, fourcc: Optional[str] = None, draw: bool = True):
        self.cv2 = require_cv2("writing video files")
        ext = os.path.splitext(path)[1].lower()
        self.fourcc = fourcc or self._CODECS.get(ext)
        if self.fourcc is None:
            raise SinkError(f"video sink {path}: unknown extension {ext!r} (use .mp4, .avi or .mkv, or give fourcc)")
        self.path, self.fps, self.draw = path, float(fps or 25.0), draw
        self._w = None
        self.frames = 0

    def write(self, frame, result) -> None:
        img = annotate(frame.image, result, frame.latency) if self.draw else frame.image
        if self._w is None:
            h, w = img.shape[:2]
            self._w = self.cv2.VideoWriter(self.path, self.cv2.VideoWriter_fourcc(*self.fourcc), self.fps, (w, h))
            if not self._w.isOpened():
                raise SinkError(f"cannot write video {self.path} with codec {self.fourcc}")
        self._w.write(img)
        self.frames += 1

    def close(self) -> None:
        if self._w is not None:
            self._w.release()
            self._w = None


def display_available() -> bool:
    """A graphical display to open a window on (X11 or Wayland)."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform in ("win32", "darwin")


class WindowSink(Sink):
    """An OpenCV window (needs a display and a GUI build of OpenCV: ``opencv-python``, not
    ``-headless``). Press q or Esc to stop the pipeline."""

    def __init__(self, title: str = "edge-infer"):
        self.cv2 = require_cv2("showing a window")
        if not display_available():
            raise SinkError("no display for a window sink (DISPLAY / WAYLAND_DISPLAY unset); "
                            "use --sink out.mp4 or --sink - instead")
        self.title = title
        self.stop_requested = False

    def write(self, frame, result) -> None:
        try:
            self.cv2.imshow(self.title, annotate(frame.image, result, frame.latency))
            key = self.cv2.waitKey(1) & 0xFF
        except self.cv2.error as e:
            raise SinkError(f"cannot show a window ({str(e).strip().splitlines()[-1]}); the headless OpenCV "
                            f"build has no GUI: pip install opencv-python") from None
        if key in (ord("q"), 27):
            self.stop_requested = True

    def close(self) -> None:
        try:
            self.cv2.destroyWindow(self.title)
        except Exception:  # noqa: BLE001  (window never opened)
            pass


class CollectSink(Sink):
    """Keeps ``(frame index, info, result)`` tuples in ``items`` (tests, notebooks)."""

    def __init__(self, keep_images: bool = False):
        self.items: List[tuple] = []
        self.keep_images = keep_images
        self.images: List[np.ndarray] = []
        self._lock = threading.Lock()

    def write(self, frame, result) -> None:
        with self._lock:
            self.items.append((frame.index, frame.info, result))
            if self.keep_images:
                self.images.append(frame.image)

    @property
    def indices(self) -> List[int]:
        return [i for i, _, _ in self.items]


class CallbackSink(Sink):
    """Calls ``fn(frame, result)`` for every frame."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def write(self, frame, result) -> None:
        self.fn(frame, result)


class NullSink(Sink):
    def write(self, frame, result) -> None:
        pass


def open_sink(spec, fps: Optional[float] = None) -> Sink:
    """A sink from ``"-"``/``"stdout"`` (JSON lines), ``FILE.jsonl``, ``FILE.mp4|.avi|.mkv``
    (annotated video), ``"window"``, ``"null"``; a Sink instance is returned as is."""
    if isinstance(spec, Sink):
        return spec
    if callable(spec):
        return CallbackSink(spec)
    s = os.fspath(spec)
    low = s.lower()
    if low in ("-", "stdout", "json", "jsonl"):
        return JsonLinesSink("-")
    if low in ("window", "display", "show"):
        return WindowSink()
    if low in ("null", "none"):
        return NullSink()
    if low.endswith((".jsonl", ".json", ".ndjson", ".txt", ".log")):
        return JsonLinesSink(s)
    if low.endswith(tuple(VideoFileSink._CODECS)):
        return VideoFileSink(s, fps=fps or 25.0)
    raise SinkError(f"sink {spec!r}: use - (JSON lines on stdout), FILE.jsonl, FILE.mp4/.avi/.mkv, window or null")

