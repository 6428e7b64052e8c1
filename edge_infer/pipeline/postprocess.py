"""Postprocessing: model outputs -> results (plain dicts, JSON-able but for masks).

* :class:`Classify`: top-k classes with labels.
* :class:`Detect`: SSD-style (box deltas against anchors, or decoded boxes; per-class scores
  with a background class) and YOLO-style (v5: ``cx, cy, w, h, objectness, classes...``;
  v8: ``cx, cy, w, h, classes...``, usually transposed) box decoding, then class-aware NMS;
  boxes come back in frame pixels (letterbox/crop undone).
* :class:`Segment`: per-pixel class masks at frame resolution.

A postprocessor is any callable ``post(outputs: {name: array}, meta) -> dict`` where ``meta`` is
what preprocessing returned (``frame_size``, ``input_size``, ``scale``, ``offset``).
Only the first item of a batch is decoded (the pipeline runs batch 1).
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import EdgeInferError
from .preprocess import to_frame_coords

__all__ = ["box_iou", "nms", "batched_nms", "decode_yolo", "decode_ssd", "softmax", "Classify",
           "Detect", "Segment", "Raw", "make_postprocess", "load_labels", "result_to_json"]


class PostprocessError(EdgeInferError, ValueError):
    """Model outputs do not fit the chosen postprocessing."""


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = np.asarray(x, np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float32)))


def load_labels(spec: Union[str, Sequence[str], Dict, None]) -> Optional[List[str]]:
    """Labels from a list, a ``{index: label}`` dict, a text file (one per line) or a JSON file."""
    if spec is None:
        return None
    if isinstance(spec, dict):
        n = max(int(k) for k in spec) + 1
        return [str(spec.get(i, spec.get(str(i), i))) for i in range(n)]
    if not isinstance(spec, (str, os.PathLike)):
        return [str(s) for s in spec]
    path = os.fspath(spec)
    if not os.path.isfile(path):
        raise PostprocessError(f"labels file not found: {path}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return load_labels(json.loads(text))
    return [line.strip() for line in text.splitlines() if line.strip()]


def _label(labels, k: int) -> str:
    return labels[k] if labels is not None and 0 <= k < len(labels) else str(k)


# -- boxes -----------------------------------------------------------------------

def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` [N,4] with every box in ``b`` [M,4] (x1, y1, x2, y2)."""
    a = np.asarray(a, np.float32).reshape(-1, 4)
    b = np.asarray(b, np.float32).reshape(-1, 4)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0).astype(np.float32)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float = 0.45,
        max_detections: Optional[int] = None) -> np.ndarray:
    """Greedy non-maximum suppression. Indices of kept boxes, highest score first; a box is
    suppressed when its IoU with a kept, higher-scoring box exceeds ``iou_threshold``
    (equal scores: the lower index wins)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    scores = np.asarray(scores, np.float32).reshape(-1)
    order = np.argsort(-scores, kind="stable")
    keep: List[int] = []
    limit = len(order) if max_detections is None else max_detections
    while order.size and len(keep) < limit:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        if not rest.size:
            break
        order = rest[box_iou(boxes[i:i + 1], boxes[rest])[0] <= iou_threshold]
    return np.asarray(keep, np.int64)


def batched_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float = 0.45,
                max_detections: Optional[int] = None) -> np.ndarray:
    """NMS within each class (boxes of different classes never suppress each other)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    if not len(boxes):
        return np.zeros(0, np.int64)
    # shift each class into its own region of the plane: one NMS call for all classes
    span = float(max(np.abs(boxes).max(), 1.0)) * 2 + 1
    shifted = boxes + (np.asarray(classes, np.float32) * span)[:, None]
    return nms(shifted, scores, iou_threshold, max_detections)


def _cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    out = np.empty_like(b, dtype=np.float32)
    out[:, 0] = b[:, 0] - b[:, 2] / 2
    out[:, 1] = b[:, 1] - b[:, 3] / 2
    out[:, 2] = b[:, 0] + b[:, 2] / 2
    out[:, 3] = b[:, 1] + b[:, 3] / 2
    return out


def _first(x: np.ndarray, rank: int) -> np.ndarray:
    x = np.asarray(x)
    return x[0] if x.ndim == rank + 1 else x


def decode_yolo(pred: np.ndarray, conf_threshold: float = 0.25, iou_threshold: float = 0.45,
                max_detections: int = 100, version: Optional[str] = None, num_classes: Optional[int] = None,
                class_agnostic: bool = False, transposed: Optional[bool] = None
                ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """YOLO output -> ``(boxes xyxy, scores, classes)`` after NMS, boxes in the units of the
    model output (input-tensor pixels for standard exports).

    ``pred``: ``[1, A, K]`` or ``[1, K, A]`` (``transposed``; default: the longer axis is taken
    to be the A candidates, or the axis of length 4/5 + ``num_classes`` when that is given). ``version`` ``"v5"``: ``K = 5 + classes`` (cx, cy, w, h, objectness,
    class scores; score = objectness x class score); ``"v8"``: ``K = 4 + classes`` (no
    objectness). Default: from ``num_classes`` when given, else v8 for transposed outputs
    (as YOLOv8/v11 export them) and v5 otherwise.
    """
    p = np.asarray(_first(pred, 2), np.float32)
    if p.ndim != 2:
        raise PostprocessError(f"YOLO output wants [1, A, K] or [1, K, A], got {np.shape(pred)}")
    if transposed is None:
        transposed = p.shape[0] < p.shape[1]
        if num_classes is not None:
            fits = (4 + num_classes, 5 + num_classes)
            if p.shape[0] in fits and p.shape[1] not in fits:
                transposed = True
            elif p.shape[1] in fits and p.shape[0] not in fits:
                transposed = False
    if transposed:
        p = p.T
    k = p.shape[1]
    if version is None:
        if num_classes is not None:
            version = "v5" if k == 5 + num_classes else "v8" if k == 4 + num_classes else None
            if version is None:
                raise PostprocessError(f"YOLO output has {k} values per box; {num_classes} classes "
                                       f"fit neither v5 ({5 + num_classes}) nor v8 ({4 + num_classes})")
        else:
            version = "v8" if transposed else "v5"
    version = version.lower().lstrip("yolo")
    if not version.startswith("v"):
        version = "v" + version
    if version == "v5":
        if k < 6:
            raise PostprocessError(f"YOLOv5 output wants >= 6 values per box, got {k}")
        cls = p[:, 5:] * p[:, 4:5]
    else:
        if k < 5:
            raise PostprocessError(f"YOLOv8 output wants >= 5 values per box, got {k}")
        cls = p[:, 4:]
    classes = cls.argmax(axis=1)
    scores = cls[np.arange(len(cls)), classes]
    sel = scores >= conf_threshold
    boxes = _cxcywh_to_xyxy(p[sel, :4])
    scores, classes = scores[sel], classes[sel]
    keep = (nms(boxes, scores, iou_threshold, max_detections) if class_agnostic
            else batched_nms(boxes, scores, classes, iou_threshold, max_detections))
    return boxes[keep], scores[keep], classes[keep]


def decode_ssd(boxes: np.ndarray, scores: np.ndarray, anchors: Optional[np.ndarray] = None,
               variances: Sequence[float] = (0.1, 0.1, 0.2, 0.2), score_threshold: float = 0.3,
               iou_threshold: float = 0.45, max_detections: int = 100, background_class: Optional[int] = 0,
               score_activation: str = "softmax", box_order: str = "xyxy",
               class_agnostic: bool = False) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SSD outputs -> ``(boxes xyxy, scores, classes)`` after per-class NMS, boxes in the units
    of the anchors (normalised [0, 1] for standard SSDs).

    ``boxes`` ``[1, A, 4]``: with ``anchors`` ``[A, 4]`` as ``(cx, cy, w, h)``, offsets
    ``(dx, dy, dw, dh)`` decoded as ``cx = acx + dx * v0 * aw``, ``w = aw * exp(dw * v2)`` (Caffe /
    torchvision SSD); without anchors, already-decoded corners in ``box_order`` (``"xyxy"`` or
    ``"yxyx"``, the TensorFlow order). ``scores`` ``[1, A, C]`` logits (``score_activation``
    ``"softmax"`` or ``"sigmoid"``) or probabilities (``"none"``). Class ``background_class``
    (None: none) is never reported; class ids are indices into the score columns.
    """
    b = np.asarray(_first(boxes, 2), np.float32)
    s = np.asarray(_first(scores, 2), np.float32)
    if b.ndim != 2 or b.shape[1] != 4 or s.ndim != 2 or s.shape[0] != b.shape[0]:
        raise PostprocessError(f"SSD outputs want boxes [1, A, 4] and scores [1, A, C]; "
                               f"got {np.shape(boxes)} and {np.shape(scores)}")
    if anchors is not None:
        a = np.asarray(anchors, np.float32).reshape(-1, 4)
        if len(a) != len(b):
            raise PostprocessError(f"{len(a)} anchors for {len(b)} boxes")
        v = np.asarray(variances, np.float32)
        cx = a[:, 0] + b[:, 0] * v[0] * a[:, 2]
        cy = a[:, 1] + b[:, 1] * v[1] * a[:, 3]
        w = a[:, 2] * np.exp(b[:, 2] * v[2])
        h = a[:, 3] * np.exp(b[:, 3] * v[3])
        xyxy = _cxcywh_to_xyxy(np.stack([cx, cy, w, h], axis=1))
    elif box_order == "yxyx":
        xyxy = b[:, [1, 0, 3, 2]]
    elif box_order == "xyxy":
        xyxy = b
    else:
        raise PostprocessError(f"box_order {box_order!r}: choose xyxy or yxyx")
    if score_activation == "softmax":
        s = softmax(s, axis=1)
    elif score_activation == "sigmoid":
        s = _sigmoid(s)
    elif score_activation != "none":
        raise PostprocessError(f"score_activation {score_activation!r}: choose softmax, sigmoid or none")
    s = s.copy()
    if background_class is not None and 0 <= background_class < s.shape[1]:
        s[:, background_class] = -np.inf
    idx, cls = np.nonzero(s >= score_threshold)          # every (anchor, class) pair above threshold
    cand_boxes, cand_scores = xyxy[idx], s[idx, cls]
    keep = (nms(cand_boxes, cand_scores, iou_threshold, max_detections) if class_agnostic
            else batched_nms(cand_boxes, cand_scores, cls, iou_threshold, max_detections))
    return cand_boxes[keep], cand_scores[keep], cls[keep].astype(np.int64)


# -- postprocessors ----------------------------------------------------------------

def _pick(outputs: Dict[str, np.ndarray], name: Optional[str]) -> Tuple[str, np.ndarray]:
    if name is not None:
        if name not in outputs:
            raise PostprocessError(f"model has no output {name!r} (outputs: {list(outputs)})")
        return name, outputs[name]
    name = next(iter(outputs))
    return name, outputs[name]


class Classify:
    """Top-k classes. Logits get a softmax unless they already look like probabilities
    (``activation="auto"``); ``"softmax"``, ``"sigmoid"`` or ``"none"`` force it."""

    def __init__(self, top_k: int = 5, labels=None, output: Optional[str] = None, activation: str = "auto"):
        self.top_k, self.labels, self.output, self.activation = top_k, load_labels(labels), output, activation

    def __call__(self, outputs: Dict[str, np.ndarray], meta: Optional[Dict] = None) -> Dict[str, Any]:
        _, y = _pick(outputs, self.output)
        y = np.asarray(y, np.float32)
        y = y.reshape(y.shape[0], -1)[0] if y.ndim > 1 else y
        act = self.activation
        if act == "auto":
            looks_prob = y.min() >= 0 and y.max() <= 1 and abs(float(y.sum()) - 1) < 1e-3
            act = "none" if looks_prob else "softmax"
        p = softmax(y) if act == "softmax" else _sigmoid(y) if act == "sigmoid" else y
        k = min(self.top_k, len(p))
        idx = np.argsort(-p, kind="stable")[:k]
        return {"type": "classification",
                "top": [{"index": int(i), "label": _label(self.labels, int(i)), "score": round(float(p[i]), 6)}
                        for i in idx]}


class Detect:
    """Boxes in frame pixels: ``{"type": "detection", "detections": [{"box": [x1, y1, x2, y2],
    "score", "class", "label"}]}``.

    ``kind``: ``"yolo"`` (``"yolov5"``/``"yolov8"`` pin the version) or ``"ssd"``.
    ``normalized``: the decoded boxes are fractions of the input size (default: True for SSD,
    False for YOLO). ``anchors`` (SSD): an array ``[A, 4]`` or a ``.npy`` path. Other keyword
    arguments go to :func:`decode_yolo` / :func:`decode_ssd`.
    """

    def __init__(self, kind: str = "yolo", labels=None, conf_threshold: float = 0.25, iou_threshold: float = 0.45,
                 max_detections: int = 100, normalized: Optional[bool] = None, output: Optional[str] = None,
                 boxes_output: Optional[str] = None, scores_output: Optional[str] = None, anchors=None, **decoder):
        kind = kind.lower()
        if kind not in ("yolo", "yolov5", "yolov8", "ssd"):
            raise PostprocessError(f"detector kind {kind!r}: choose yolo, yolov5, yolov8 or ssd")
        self.kind = "ssd" if kind == "ssd" else "yolo"
        if kind in ("yolov5", "yolov8"):
            decoder.setdefault("version", kind[4:])
        self.labels = load_labels(labels)
        self.conf, self.iou, self.max_det = conf_threshold, iou_threshold, max_detections
        self.normalized = (self.kind == "ssd") if normalized is None else normalized
        self.output, self.boxes_output, self.scores_output = output, boxes_output, scores_output
        if isinstance(anchors, (str, os.PathLike)):
            anchors = np.load(anchors, allow_pickle=False)
        self.anchors = anchors
        self.decoder = decoder

    def decode(self, outputs: Dict[str, np.ndarray]):
        if self.kind == "yolo":
            _, pred = _pick(outputs, self.output)
            return decode_yolo(pred, self.conf, self.iou, self.max_det, **self.decoder)
        names = list(outputs)
        bname = self.boxes_output or next((n for n in names if np.shape(outputs[n])[-1] == 4), None)
        sname = self.scores_output or next((n for n in names if n != bname), None)
        if bname is None or sname is None:
            raise PostprocessError(f"SSD wants a boxes output [1, A, 4] and a scores output; outputs: "
                                   f"{ {n: list(np.shape(v)) for n, v in outputs.items()} }")
        return decode_ssd(outputs[bname], outputs[sname], self.anchors, score_threshold=self.conf,
                          iou_threshold=self.iou, max_detections=self.max_det, **self.decoder)

    def __call__(self, outputs: Dict[str, np.ndarray], meta: Optional[Dict] = None) -> Dict[str, Any]:
        boxes, scores, classes = self.decode(outputs)
        if meta is not None and len(boxes):
            if self.normalized:
                H, W = meta["input_size"]
                boxes = boxes * np.array([W, H, W, H], np.float32)
            boxes = to_frame_coords(boxes, meta)
        return {"type": "detection",
                "detections": [{"box": [round(float(v), 2) for v in b], "score": round(float(s), 5),
                                "class": int(c), "label": _label(self.labels, int(c))}
                               for b, s, c in zip(boxes, scores, classes)]}


class Segment:
    """Per-pixel classes at frame resolution: ``{"type": "segmentation", "mask": HxW uint8/int32,
    "classes": {label: fraction of the frame}}``; pixels outside the model's view (center crop)
    are 255. Outputs ``[1, C, h, w]`` (``layout="NCHW"``), ``[1, h, w, C]`` (``"NHWC"``) or
    ``[1, h, w]`` class ids."""

    def __init__(self, labels=None, output: Optional[str] = None, layout: str = "NCHW"):
        self.labels, self.output, self.layout = load_labels(labels), output, layout.upper()

    def __call__(self, outputs: Dict[str, np.ndarray], meta: Optional[Dict] = None) -> Dict[str, Any]:
        _, y = _pick(outputs, self.output)
        y = np.asarray(y)
        if y.ndim == 4:
            y = y[0]
        if y.ndim == 3 and y.dtype.kind in "iu" and y.shape[0] == 1:   # [1, h, w] class ids
            ids = y[0]
        elif y.ndim == 3:                                               # scores per class
            ids = y.argmax(axis=0 if self.layout == "NCHW" else -1)
        elif y.ndim == 2:
            ids = y
        else:
            raise PostprocessError(f"segmentation output wants [1, C, h, w], [1, h, w, C] or [1, h, w]; "
                                   f"got {np.shape(outputs[_pick(outputs, self.output)[0]])}")
        oh, ow = ids.shape
        if meta is not None:
            fh, fw = meta["frame_size"]
            H, W = meta["input_size"]
            sy, sx = meta["scale"]
            oy, ox = meta["offset"]
            iy = ((np.arange(fh) + 0.5) * sy + oy) * (oh / H)     # frame row -> output row
            ix = ((np.arange(fw) + 0.5) * sx + ox) * (ow / W)
            ry, rx = np.floor(iy).astype(np.int64), np.floor(ix).astype(np.int64)
            vy, vx = (ry >= 0) & (ry < oh), (rx >= 0) & (rx < ow)
            mask = ids[np.clip(ry, 0, oh - 1)][:, np.clip(rx, 0, ow - 1)]
            dtype = np.uint8 if ids.max(initial=0) < 255 else np.int32
            mask = mask.astype(dtype)
            if not (vy.all() and vx.all()):
                mask[~vy, :] = 255
                mask[:, ~vx] = 255
        else:
            mask = ids.astype(np.uint8 if ids.max(initial=0) < 255 else np.int32)
        vals, counts = np.unique(mask, return_counts=True)
        total = mask.size or 1
        classes = {_label(self.labels, int(v)): round(c / total, 5) for v, c in zip(vals, counts) if v != 255}
        return {"type": "segmentation", "mask": mask, "classes": classes}


class Raw:
    """No decoding: output shapes and, for small outputs, the values (for JSON)."""

    def __call__(self, outputs: Dict[str, np.ndarray], meta: Optional[Dict] = None) -> Dict[str, Any]:
        return {"type": "raw", "outputs": {n: {"shape": list(np.shape(v)),
                                               **({"values": np.asarray(v).ravel().tolist()}
                                                  if np.size(v) <= 64 else {})}
                                           for n, v in outputs.items()}}


def make_postprocess(spec: Union[str, Callable, None] = None, labels=None, model=None, **kwargs) -> Callable:
    """A postprocessor from ``"classify[:K]"``, ``"yolo"``, ``"yolov5"``, ``"yolov8"``, ``"ssd"``,
    ``"segment"``, ``"raw"``, a callable (returned as is), or None: classification when the
    model has one output of rank 2, else raw."""
    if callable(spec):
        return spec
    if spec is None or spec == "auto":
        outs = list(getattr(model, "outputs", []) or [])
        if len(outs) == 1 and outs[0].shape is not None and len(outs[0].shape) == 2:
            return Classify(labels=labels, **kwargs)
        return Raw()
    name, _, arg = str(spec).partition(":")
    name = name.lower()
    if name in ("classify", "classification", "topk"):
        if arg:
            kwargs["top_k"] = int(arg)
        return Classify(labels=labels, **kwargs)
    if name in ("yolo", "yolov5", "yolov8", "ssd", "detect"):
        return Detect("yolo" if name == "detect" else name, labels=labels, **kwargs)
    if name in ("segment", "segmentation"):
        return Segment(labels=labels, **kwargs)
    if name in ("raw", "none"):
        return Raw()
    raise PostprocessError(f"postprocessing {spec!r}: choose classify[:K], yolo, yolov5, yolov8, ssd, segment, raw")


def result_to_json(result: Any) -> Any:
    """A JSON-able copy: arrays become shape summaries (masks) or lists (small arrays)."""
    if isinstance(result, dict):
        return {k: result_to_json(v) for k, v in result.items()}
    if isinstance(result, (list, tuple)):
        return [result_to_json(v) for v in result]
    if isinstance(result, np.ndarray):
        return {"shape": list(result.shape), "dtype": str(result.dtype)} if result.size > 64 else result.tolist()
    if isinstance(result, np.generic):
        return result.item()
    return result
