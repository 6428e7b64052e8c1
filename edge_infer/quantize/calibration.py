"""Calibration data: where samples come from and how raw images become model inputs.

``load_calibration(calib, graph, samples=N, recipe=...)`` returns a list of feed dicts, one
sample each (leading batch dim 1). ``calib`` is

* a folder of images (jpg, png, bmp, webp, tif, gif: read with Pillow, or OpenCV when Pillow
  is missing), taken in sorted name order;
* a video file (mp4, avi, mov, mkv, webm, ...: OpenCV, imported only then), frames spread
  evenly over the clip;
* a single image file;
* a ``.npy`` array of samples ``[N, ...]`` (already preprocessed), or an ``.npz`` with one
  such array per model input (or a single array for a one-input model);
* a folder of such ``.npy`` / ``.npz`` files (each one sample or a batch), in name order;
* any Python iterable of arrays (one-input models) or of ``{input name: array}`` dicts; an
  array with the model's rank is a batch and is split into samples;
* ``"random"``: seeded standard-normal inputs (say so explicitly: random data calibrates a
  model only crudely).

Images and video frames go through a preprocessing *recipe*, the same JSON recipes the
stream pipeline runs with (``edge_infer/pipeline/preprocess.py`` defines the format: size,
resize = stretch | letterbox | center_crop, interpolation, color = rgb | bgr | gray, invert,
scale, mean, std, layout NCHW | NHWC), so a model is calibrated on the pixels it will see.
A recipe is a dict, a JSON file, inline JSON, or the name of one bundled in the top-level
``calibration/`` folder (installed as ``edge_infer._calibration``): ``imagenet``,
``imagenet_caffe_bgr``, ``yolo``, ``unit_range`` ([0, 1]), ``symmetric_range`` ([-1, 1]),
``digits``. Keys the recipe leaves open (size, layout, color) come from the model input.
A ``tqdm`` progress bar shows when tqdm is installed (silently none otherwise).
"""
from __future__ import annotations

import glob
import os
import sys
from typing import Dict, Iterable, Iterator, List, Optional, Union

import numpy as np

from ..errors import EdgeInferError
from ..ir import Graph
from ..ir.graph import VERIFY_SHAPES_SEARCHED

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".ppm", ".pgm")
VIDEO_EXTS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv")


class CalibrationError(EdgeInferError):
    """Calibration data or a recipe is missing or unusable."""


# -- recipes ------------------------------------------------------------------------------------

def calibration_dir() -> str:
    """The calibration/ folder: installed as ``edge_infer._calibration``, or the source checkout's."""
    try:
        from .. import _calibration  # type: ignore[attr-defined]
        return os.path.dirname(_calibration.__file__)
    except ImportError:
        return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "calibration")


def sample_images_dir() -> str:
    """The bundled, freely licensed sample images (calibration/images/, see LICENSES.md there)."""
    return os.path.join(calibration_dir(), "images")


def list_recipes() -> List[str]:
    """Names of the bundled preprocessing recipes."""
    d = calibration_dir()
    return sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json")) if os.path.isdir(d) else []


def load_recipe(spec: Union[str, os.PathLike, dict, None]) -> Optional[dict]:
    """A validated recipe (pipeline format) from a dict, inline JSON, a JSON file or a bundled name."""
    if spec is None:
        return None
    from ..pipeline.preprocess import RecipeError
    from ..pipeline.preprocess import load_recipe as _load
    if isinstance(spec, (str, os.PathLike)):
        s = os.fspath(spec)
        bundled = os.path.join(calibration_dir(), s if s.endswith(".json") else s + ".json")
        if not s.lstrip().startswith("{") and not os.path.isfile(s):
            if not os.path.isfile(bundled):
                raise CalibrationError(f"unknown calibration recipe {s!r}: not a JSON file, and the bundled "
                                       f"recipes are {', '.join(list_recipes())}")
            spec = bundled
    try:
        return _load(spec)
    except RecipeError as e:
        raise CalibrationError(str(e)) from None


def _preprocessor(graph: Graph, recipe: Optional[dict]):
    """(input name, callable frame (BGR or gray uint8) -> float32 sample) for image sources.
    The size: the recipe's, else the input's; a dynamic input takes the size the converter
    verified it at when that came from the model or the user (verify_shapes.py)."""
    from ..pipeline.preprocess import RecipeError, preprocess, recipe_for_input, validate_recipe
    r = validate_recipe(dict(recipe or {}))
    name = r.get("input") or graph.inputs[0]
    if name not in graph.inputs:
        raise CalibrationError(f"recipe input {name!r} is not a model input ({graph.inputs})")
    t = graph.tensors[name]
    shape = tuple(t.shape or ())
    if r.get("size") is None and name in (graph.metadata.get("verify_shapes") or {}) and \
            graph.metadata.get("verify_shapes_source") not in (None, VERIFY_SHAPES_SEARCHED):
        # a dynamic input: the size recorded in the model (or given), not one found by search
        shape = tuple(graph.metadata["verify_shapes"][name])
    try:
        full = recipe_for_input(shape, r)
    except RecipeError as e:
        raise CalibrationError(f"calibration images for input {name!r}: {e}") from None
    dtype = np.dtype(t.dtype)

    def pre(frame: np.ndarray) -> np.ndarray:
        x, _ = preprocess(frame, full)
        return np.ascontiguousarray(x, dtype=dtype)
    return name, pre


def _pil():
    try:
        from PIL import Image
        return Image
    except ImportError:
        return None


def _cv2():
    try:
        import cv2
        return cv2
    except ImportError:
        return None


def read_image(path: str) -> np.ndarray:
    """An image file as a uint8 BGR frame (H, W, 3), the pipeline's (OpenCV's) convention."""
    Image = _pil()
    if Image is not None:
        try:
            with Image.open(path) as im:
                return np.ascontiguousarray(np.asarray(im.convert("RGB"), np.uint8)[:, :, ::-1])
        except OSError as e:
            raise CalibrationError(f"{path}: cannot read image ({e})") from None
    cv2 = _cv2()
    if cv2 is None:
        raise CalibrationError("reading images needs Pillow or OpenCV: pip install pillow")
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise CalibrationError(f"{path}: cannot read image")
    return img


# -- sources ---------------------------------------------------------------------------------------

def progress(iterable: Iterable, total: Optional[int] = None, desc: str = "", enabled: bool = True):
    """``tqdm`` over ``iterable`` when installed and enabled; the iterable itself otherwise."""
    if not enabled:
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, total=total, desc=desc, leave=False, file=sys.stderr, unit="sample")


def _image_files(folder: str) -> List[str]:
    files = sorted(f for f in glob.glob(os.path.join(folder, "**", "*"), recursive=True)
                   if os.path.splitext(f)[1].lower() in IMAGE_EXTS and os.path.isfile(f))
    if not files:
        raise CalibrationError(f"calibration folder {folder} holds no images ({', '.join(IMAGE_EXTS)})")
    return files


def _video_frames(path: str, samples: Optional[int]) -> Iterator[np.ndarray]:
    cv2 = _cv2()
    if cv2 is None:
        raise CalibrationError(f"{path}: reading video needs OpenCV: pip install opencv-python-headless")
    cap = cv2.VideoCapture(path)
    if not cap.isOpened():
        raise CalibrationError(f"{path}: OpenCV cannot open this video")
    try:
        total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        want = samples or min(total, 100) or 100
        picks = set(np.linspace(0, max(total - 1, 0), want).astype(int).tolist()) if total else None
        k = 0
        got = 0
        while got < want:
            ok, frame = cap.read()
            if not ok:
                break
            if picks is None or k in picks:
                got += 1
                yield frame
            k += 1
    finally:
        cap.release()


def _split_batch(graph: Graph, feed: Dict[str, np.ndarray]) -> List[Dict[str, np.ndarray]]:
    """A feed whose arrays carry a batch dim -> one feed per sample (batch dim 1)."""
    n = None
    for name, arr in feed.items():
        n = arr.shape[0] if arr.ndim else 1
        break
    if n is None or n <= 1:
        return [feed]
    return [{k: v[i:i + 1] for k, v in feed.items()} for i in range(n)]


def _as_feed(graph: Graph, item) -> Dict[str, np.ndarray]:
    if isinstance(item, dict):
        feed = {k: np.asarray(v) for k, v in item.items()}
    else:
        if len(graph.inputs) != 1:
            raise CalibrationError(f"the model has inputs {graph.inputs}: calibration items must be dicts")
        feed = {graph.inputs[0]: np.asarray(item)}
    out = {}
    for name, arr in feed.items():
        if name not in graph.inputs:
            raise CalibrationError(f"calibration data names {name!r}, not a model input ({graph.inputs})")
        t = graph.tensors[name]
        rank = len(t.shape) if t.shape is not None else arr.ndim
        if arr.ndim == rank - 1:
            arr = arr[None]
        if arr.ndim != rank:
            raise CalibrationError(f"calibration sample for {name!r} has shape {arr.shape}; the model "
                                   f"input is {tuple(t.shape)}")
        out[name] = np.ascontiguousarray(arr, dtype=np.dtype(t.dtype))
    missing = [n for n in graph.inputs if n not in out]
    if missing:
        raise CalibrationError(f"calibration data lacks input(s) {missing}")
    return out


def _array_source(graph: Graph, path: str) -> Iterator[Dict[str, np.ndarray]]:
    from ..npyio import read_array_file
    data = read_array_file(path, CalibrationError)
    if isinstance(data, dict):
        names = list(data)
        if all(n in names for n in graph.inputs):
            arrays = {n: data[n] for n in graph.inputs}
        elif len(graph.inputs) == 1 and len(names) >= 1:
            key = "x" if "x" in names else names[0]
            arrays = {graph.inputs[0]: data[key]}
        else:
            raise CalibrationError(f"{path} holds {names}; the model's inputs are {graph.inputs}")
    else:
        if len(graph.inputs) != 1:
            raise CalibrationError(f"{path}: one array for a model with inputs {graph.inputs}; use .npz")
        arrays = {graph.inputs[0]: data}
    yield from _split_batch(graph, _as_feed(graph, arrays))


def random_feeds(graph: Graph, samples: int, seed: int = 0) -> List[Dict[str, np.ndarray]]:
    """Seeded standard-normal samples (shaped as ``verify.random_inputs`` shapes them)."""
    from ..verify import random_inputs
    return [random_inputs(graph, seed + k) for k in range(samples)]


def load_calibration(calib, graph: Graph, samples: Optional[int] = None,
                     recipe: Union[str, dict, None] = None, seed: int = 0,
                     show_progress: bool = False) -> List[Dict[str, np.ndarray]]:
    """Up to ``samples`` calibration feeds (one sample each) from ``calib`` (see module doc)."""
    if calib is None:
        raise CalibrationError("int8 quantization needs calibration data: calib=PATH|iterable "
                               "(or calib='random' for seeded random inputs)")
    rec = load_recipe(recipe)
    limit = int(samples) if samples else None
    if limit is not None and limit <= 0:
        raise CalibrationError(f"calib_samples must be positive, got {samples}")
    if isinstance(calib, str) and calib == "random":
        return random_feeds(graph, limit or 32, seed)
    if isinstance(calib, (str, os.PathLike)):
        path = os.fspath(calib)
        ext = os.path.splitext(path)[1].lower()
        arrays = sorted(f for f in os.listdir(path) if f.lower().endswith((".npy", ".npz"))) \
            if os.path.isdir(path) else []
        if arrays:        # a folder of arrays: each file one sample or a batch, in name order
            feeds = []
            for f in arrays:
                feeds.extend(_array_source(graph, os.path.join(path, f)))
                if limit and len(feeds) >= limit:
                    break
            return feeds[:limit] if limit else feeds
        if os.path.isdir(path):
            files = _image_files(path)
            if limit:
                files = files[:limit]
            name, pre = _preprocessor(graph, rec)
            return [{name: pre(read_image(f))}
                    for f in progress(files, len(files), "calibration images", show_progress)]
        if not os.path.exists(path):
            raise CalibrationError(f"calibration data not found: {path}")
        if ext in (".npy", ".npz"):
            feeds = list(_array_source(graph, path))
            return feeds[:limit] if limit else feeds
        if ext in IMAGE_EXTS:
            name, pre = _preprocessor(graph, rec)
            return [{name: pre(read_image(path))}]
        if ext in VIDEO_EXTS:
            name, pre = _preprocessor(graph, rec)
            return [{name: pre(fr)}
                    for fr in progress(_video_frames(path, limit), limit, "calibration frames", show_progress)]
        raise CalibrationError(f"{path}: not a folder of images, a video, an image or a .npy/.npz file")
    if isinstance(calib, np.ndarray):
        calib = [calib]
    try:
        it = iter(calib)
    except TypeError:
        raise CalibrationError(f"calib must be a path, 'random' or an iterable, not {type(calib).__name__}") from None
    feeds: List[Dict[str, np.ndarray]] = []
    for item in progress(it, limit, "calibration samples", show_progress):
        feeds.extend(_split_batch(graph, _as_feed(graph, item)))
        if limit and len(feeds) >= limit:
            break
    if not feeds:
        raise CalibrationError("the calibration iterable yielded no samples")
    return feeds[:limit] if limit else feeds
