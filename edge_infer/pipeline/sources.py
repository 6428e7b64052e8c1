"""Frame sources: cameras, video files, network streams, image folders, synthetic frames.

A source has ``open()``, ``read()`` and ``close()``. ``read()`` returns the next frame (an
``H x W x 3`` uint8 BGR array, as OpenCV delivers), optionally as ``(frame, info_dict)``, or
``None`` when there is no frame: the end of a file, or a failure of a live source (a camera
unplugged, a stream dropped). ``live`` says which: the pipeline reopens a live source with
backoff and ends on a file; a live source that has really ended sets ``finished``. ``open()`` raises :class:`SourceError` when the device or file
cannot be opened.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import EdgeInferError
from ._cv import require_cv2

__all__ = ["SourceError", "Source", "VideoSource", "Picamera2Source", "ImageFolderSource", "SyntheticSource",
           "open_source", "IMAGE_EXTENSIONS"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".npy")
STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")


class SourceError(EdgeInferError, IOError):
    """A frame source cannot be opened."""


class Source:
    """Base class. Subclasses implement ``read``; ``open``/``close`` are optional."""

    live = False       #: a camera or stream: may fail and come back; frames may be dropped
    finished = False   #: set by a source that has no more frames, ever (a live one is then not reopened)
    fps: Optional[float] = None
    name = "source"

    def open(self) -> None:
        pass

    def read(self):
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        while True:
            item = self.read()
            if item is None:
                return
            yield item

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"


class VideoSource(Source):
    """OpenCV ``VideoCapture``: a camera index (``0``), a video file, or a stream URL
    (``rtsp://``, ``http://``...). Cameras and URLs are live; files are not."""

    def __init__(self, spec: Union[int, str], width: Optional[int] = None, height: Optional[int] = None,
                 fps: Optional[float] = None, live: Optional[bool] = None,
                 open_timeout_ms: int = 10000, read_timeout_ms: int = 5000):
        if isinstance(spec, str) and spec.isdigit():
            spec = int(spec)
        self.spec = spec
        self.name = str(spec)
        self.is_camera = isinstance(spec, int)
        self.is_stream = isinstance(spec, str) and spec.lower().startswith(STREAM_SCHEMES)
        self.live = (self.is_camera or self.is_stream) if live is None else bool(live)
        self.width, self.height, self.want_fps = width, height, fps
        self.open_timeout_ms, self.read_timeout_ms = open_timeout_ms, read_timeout_ms
        self.cap = None
        self.fps = fps
        self.frame_count: Optional[int] = None
        if not self.is_camera and not self.is_stream and not os.path.exists(spec):
            raise SourceError(f"video file not found: {spec}")

    def open(self) -> None:
        cv2 = require_cv2("reading cameras, video files and streams")
        self.close()
        if self.is_stream:
            params = []
            for prop, val in (("CAP_PROP_OPEN_TIMEOUT_MSEC", self.open_timeout_ms),
                              ("CAP_PROP_READ_TIMEOUT_MSEC", self.read_timeout_ms)):
                if hasattr(cv2, prop):
                    params += [getattr(cv2, prop), int(val)]
            cap = cv2.VideoCapture(self.spec, cv2.CAP_ANY, params) if params else cv2.VideoCapture(self.spec)
        else:
            cap = cv2.VideoCapture(self.spec)
        if not cap.isOpened():
            cap.release()
            what = "camera" if self.is_camera else "stream" if self.is_stream else "video file"
            raise SourceError(f"cannot open {what} {self.spec!r}")
        if self.is_camera:
            if self.width:
                cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
            if self.height:
                cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
            if self.want_fps:
                cap.set(cv2.CAP_PROP_FPS, self.want_fps)
            cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # the freshest frame, not a stale backlog
        fps = cap.get(cv2.CAP_PROP_FPS)
        self.fps = self.want_fps or (fps if fps and fps > 0 else None)
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        self.frame_count = n if n > 0 and not self.live else None
        self.cap = cap

    def read(self):
        if self.cap is None:
            return None
        ok, frame = self.cap.read()
        return frame if ok and frame is not None else None

    def close(self) -> None:
        if self.cap is not None:
            self.cap.release()
            self.cap = None


class Picamera2Source(Source):
    """A Raspberry Pi CSI camera through Picamera2 (libcamera), which OpenCV's V4L2 capture
    cannot drive on current Raspberry Pi OS. Needs ``sudo apt install python3-picamera2`` and
    a virtual environment made with ``--system-site-packages``. Live. Frames are BGR
    (Picamera2's ``RGB888`` is B, G, R in memory, as OpenCV expects)."""

    live = True

    def __init__(self, camera: int = 0, width: int = 640, height: int = 480, fps: Optional[float] = None):
        self.camera, self.size, self.fps = int(camera), (int(width), int(height)), fps
        self.name = f"picamera2:{camera}"
        self.cam = None

    def open(self) -> None:
        try:
            from picamera2 import Picamera2
        except ImportError:
            raise SourceError("the Pi camera source needs Picamera2: sudo apt install python3-picamera2, and a venv "
                              "made with --system-site-packages") from None
        self.close()
        try:
            cam = Picamera2(self.camera)
            controls = {"FrameRate": float(self.fps)} if self.fps else {}
            cam.configure(cam.create_video_configuration(main={"size": self.size, "format": "RGB888"},
                                                         controls=controls))
            cam.start()
        except Exception as e:  # noqa: BLE001  (no camera, camera busy)
            raise SourceError(f"cannot open Pi camera {self.camera}: {e}") from None
        self.cam = cam

    def read(self):
        if self.cam is None:
            return None
        try:
            return np.ascontiguousarray(self.cam.capture_array("main")[:, :, :3])
        except Exception:  # noqa: BLE001  (camera gone: the pipeline reopens it)
            return None

    def close(self) -> None:
        if self.cam is not None:
            try:
                self.cam.stop()
                self.cam.close()
            except Exception:  # noqa: BLE001
                pass
            self.cam = None


class ImageFolderSource(Source):
    """The images of a folder (or a list of files), in name order; ``.npy`` arrays need no OpenCV."""

    def __init__(self, path: Union[str, Sequence[str]], loop: bool = False,
                 extensions: Sequence[str] = IMAGE_EXTENSIONS):
        if isinstance(path, (str, os.PathLike)):
            path = os.fspath(path)
            if os.path.isdir(path):
                files = sorted(os.path.join(path, f) for f in os.listdir(path)
                               if f.lower().endswith(tuple(extensions)))
            elif os.path.isfile(path):
                files = [path]
            else:
                raise SourceError(f"image folder not found: {path}")
            self.name = path
        else:
            files = [os.fspath(p) for p in path]
            self.name = f"{len(files)} files"
        if not files:
            raise SourceError(f"no images ({', '.join(extensions)}) in {self.name}")
        self.files: List[str] = files
        self.loop = loop
        self._i = 0

    def open(self) -> None:
        self._i = 0

    def read(self):
        while True:
            if self._i >= len(self.files):
                if not self.loop:
                    return None
                self._i = 0
            path = self.files[self._i]
            self._i += 1
            if path.lower().endswith(".npy"):
                img = np.load(path, allow_pickle=False)
            else:
                img = require_cv2("reading image files").imread(path, 1)  # IMREAD_COLOR
            if img is None:   # unreadable file: skip it
                continue
            return img, {"file": os.path.basename(path)}

    @property
    def frame_count(self) -> int:
        return len(self.files)


class SyntheticSource(Source):
    """Frames made up in memory, for tests and demos; needs nothing but numpy.

    ``pattern``:
      * ``"digits"``: the bundled held-out 8x8 digits, drawn as white ink on black, centred in
        the frame (info: ``label``) -- the bundled digits CNN classifies them;
      * ``"squares"``: bright squares moving over a dark background (info: ``boxes`` as
        ``[x1, y1, x2, y2]``) -- for detector demos;
      * ``"noise"``: uniform noise; ``"gradient"``: a moving gradient.

    ``count`` frames (None: endless). With ``fps`` the frames are paced in real time and the
    source is live, like a camera (frames may be dropped when inference falls behind).
    """

    def __init__(self, pattern: str = "digits", count: Optional[int] = 100, size: Tuple[int, int] = (240, 320),
                 fps: Optional[float] = None, live: Optional[bool] = None, seed: int = 0, squares: int = 2):
        if pattern not in ("digits", "squares", "noise", "gradient"):
            raise SourceError(f"synthetic pattern {pattern!r}: choose digits, squares, noise or gradient")
        self.pattern, self.count, self.size = pattern, count, (int(size[0]), int(size[1]))
        self.fps = fps
        self.live = (fps is not None) if live is None else bool(live)
        self.seed, self.n_squares = seed, squares
        self.name = f"synthetic:{pattern}"
        self._digits = None
        self.open()

    def open(self) -> None:
        self._i = 0
        self.finished = False
        self._rng = np.random.default_rng(self.seed)
        self._t0 = time.perf_counter()

    @property
    def frame_count(self) -> Optional[int]:
        return self.count

    def _digit(self, i: int):
        if self._digits is None:
            from ..data import load_digits_samples
            self._digits = load_digits_samples()
        x, y = self._digits
        k = i % len(y)
        h, w = self.size
        cell = max(1, min(h, w) // 8)
        img = np.repeat(np.repeat(x[k, 0], cell, axis=0), cell, axis=1)
        frame = np.zeros((h, w, 3), np.uint8)
        top, left = (h - 8 * cell) // 2, (w - 8 * cell) // 2
        frame[top:top + 8 * cell, left:left + 8 * cell] = np.rint(img * 255).astype(np.uint8)[:, :, None]
        return frame, {"label": int(y[k]), "sample": int(k)}

    def _squares(self, i: int):
        h, w = self.size
        frame = np.full((h, w, 3), 20, np.uint8)
        side = max(4, min(h, w) // 5)
        boxes = []
        for s in range(self.n_squares):
            # each square bounces along its own diagonal
            px = (37 * s + 3 * i * (s + 1)) % (2 * (w - side))
            py = (53 * s + 2 * i * (s + 2)) % (2 * (h - side))
            x0 = px if px < w - side else 2 * (w - side) - px
            y0 = py if py < h - side else 2 * (h - side) - py
            frame[y0:y0 + side, x0:x0 + side] = 235
            boxes.append([int(x0), int(y0), int(x0 + side), int(y0 + side)])
        return frame, {"boxes": boxes}

    def read(self):
        if self.count is not None and self._i >= self.count:
            self.finished = True
            return None
        i = self._i
        self._i += 1
        if self.fps:
            due = self._t0 + i / self.fps
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        h, w = self.size
        if self.pattern == "digits":
            return self._digit(i)
        if self.pattern == "squares":
            return self._squares(i)
        if self.pattern == "noise":
            return self._rng.integers(0, 256, (h, w, 3), dtype=np.uint8), {}
        ramp = (np.arange(w)[None, :] + 4 * i + np.arange(h)[:, None]) % 256
        return np.repeat(ramp.astype(np.uint8)[:, :, None], 3, axis=2), {}


def _parse_synthetic(spec: str, **kw) -> SyntheticSource:
    # synthetic[:PATTERN[:COUNT[:FPS]]]
    parts = spec.split(":")[1:]
    args: Dict[str, Any] = {}
    if parts and parts[0]:
        args["pattern"] = parts[0]
    if len(parts) > 1 and parts[1]:
        args["count"] = None if parts[1] in ("inf", "0") else int(parts[1])
    if len(parts) > 2 and parts[2]:
        args["fps"] = float(parts[2])
    args.update(kw)
    return SyntheticSource(**args)


def open_source(spec: Union[Source, int, str, os.PathLike], **kwargs) -> Source:
    """A source from a command-line style spec:

    ``0`` / ``"0"``: camera index (V4L2: USB webcams); ``picam[:N]``: a Raspberry Pi CSI camera
    via Picamera2; ``rtsp://...``, ``http://...``: a stream; a folder: its images;
    a video file; an image file; ``synthetic[:PATTERN[:COUNT[:FPS]]]`` (e.g. ``synthetic:digits:200``).
    Keyword arguments go to the source class.
    """
    if isinstance(spec, Source):
        return spec
    if isinstance(spec, int):
        return VideoSource(spec, **kwargs)
    spec = os.fspath(spec)
    if spec.isdigit():
        return VideoSource(int(spec), **kwargs)
    if spec in ("picam", "picamera2") or spec.startswith(("picam:", "picamera2:")):
        _, _, num = spec.partition(":")
        return Picamera2Source(int(num or 0), **kwargs)
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return _parse_synthetic(spec, **kwargs)
    if spec.lower().startswith(STREAM_SCHEMES):
        return VideoSource(spec, **kwargs)
    if os.path.isdir(spec):
        return ImageFolderSource(spec, **kwargs)
    if os.path.isfile(spec):
        if spec.lower().endswith(IMAGE_EXTENSIONS):
            return ImageFolderSource(spec, **kwargs)
        return VideoSource(spec, **kwargs)
    if spec.startswith("/dev/video") and os.path.exists(spec):
        return VideoSource(spec, live=True, **kwargs)
    raise SourceError(f"source not found: {spec!r} (a camera index, picam, a video file, a folder of images, "
                      f"a stream URL or synthetic[:PATTERN[:COUNT[:FPS]]])")
