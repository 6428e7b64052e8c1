"""Task-aware accuracy metrics for the int8 accuracy report and budget.

A quantized model is judged against its float model on held-out samples by what the model is
for, not by one number that fits classifiers only:

* ``classify``: top-1 agreement with fp32 (argmax over the class axis);
* ``detect``: YOLO-style outputs (``[N, 4 + C, A]`` or ``[N, A, 4 + C]``, v8; or v5 with an
  objectness column) decoded (``pipeline.postprocess.decode_yolo``: confidence 0.25, class-aware
  NMS at IoU 0.45), the fp32 detections taken as the truth, int8 detections matched to them by
  class at IoU >= 0.5 (greedy, highest score first): F1;
* ``segment``: dense maps ``[N, C, H, W]``: IoU of the thresholded maps (one channel: > 0.5 for
  probabilities, > 0 for logits; several: the argmax class maps, mean IoU over the classes
  either map has);
* ``generic``: per-output SQNR; the score is 1 - the worst output's relative L2 error.

``guess_task(graph)`` picks the task from the output shapes. The score is in [0, 1], 1 for a
perfect match; the accuracy drop the budget checks is 1 - score. A user ``metric(reference,
candidate)`` (dicts {output name: array over all held-out samples}) replaces it; its drop is
``metric(reference, reference) - metric(reference, candidate)``.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

TASKS = ("auto", "classify", "detect", "segment", "generic")
#: a YOLO row holds 4 box values (+ objectness) + classes; more than this many is not YOLO
MAX_YOLO_ROW = 4 + 1 + 1000

Detections = Tuple[np.ndarray, np.ndarray, np.ndarray]      # boxes xyxy [n, 4], scores [n], classes [n]


def _static(shape) -> Optional[List[Optional[int]]]:
    if shape is None:
        return None
    return [d if isinstance(d, int) else None for d in shape]


def yolo_layout(shape: Sequence) -> Optional[bool]:
    """For a rank-3 output shape: True if it is YOLO ``[N, K, A]`` (transposed, as v8 exports),
    False for ``[N, A, K]``, None if it does not look like YOLO boxes at all."""
    s = _static(shape)
    if s is None or len(s) != 3 or s[1] is None or s[2] is None:
        return None
    k, a = s[1], s[2]
    if 5 <= k <= MAX_YOLO_ROW and a >= 4 * k:
        return True
    if 5 <= a <= MAX_YOLO_ROW and k >= 4 * a:
        return False
    return None


def guess_task(graph) -> str:
    """The task of a graph from its first output's shape (see the module docstring)."""
    if not graph.outputs:
        return "generic"
    s = _static(graph.tensors[graph.outputs[0]].shape)
    if s is None:
        return "generic"
    if len(s) == 2 and (s[1] or 0) > 1:
        return "classify"
    if len(s) == 4 and s[2] == 1 and s[3] == 1 and (s[1] or 0) > 1:
        return "classify"
    if len(s) == 3 and yolo_layout(s) is not None:
        return "detect"
    if len(s) == 4 and (s[2] or 0) >= 4 and (s[3] or 0) >= 4:
        return "segment"
    return "generic"


# -- detection ---------------------------------------------------------------------------------

def decode(out: np.ndarray, conf_threshold: float = 0.25, iou_threshold: float = 0.45,
           transposed: Optional[bool] = None) -> List[Detections]:
    """Per sample of a YOLO output batch: (boxes xyxy, scores, classes) after class-aware NMS."""
    from ..pipeline.postprocess import decode_yolo
    out = np.asarray(out, np.float32)
    if transposed is None:
        transposed = yolo_layout(out.shape)
    return [decode_yolo(out[i:i + 1], conf_threshold=conf_threshold, iou_threshold=iou_threshold,
                        max_detections=300, transposed=transposed, version="v8")
            for i in range(out.shape[0])]


def match_count(pred: Detections, truth: Tuple[np.ndarray, np.ndarray], iou_threshold: float = 0.5) -> int:
    """True positives: predictions (highest score first) matched one-to-one to truth boxes of
    the same class with IoU >= ``iou_threshold``."""
    from ..pipeline.postprocess import box_iou
    pb, ps, pc = pred
    tb, tc = truth
    if not len(pb) or not len(tb):
        return 0
    iou = box_iou(pb, tb)
    iou[np.asarray(pc)[:, None] != np.asarray(tc)[None, :]] = 0.0
    used = np.zeros(len(tb), bool)
    tp = 0
    for i in np.argsort(-np.asarray(ps), kind="stable"):
        cand = np.where(used, 0.0, iou[i])
        j = int(cand.argmax())
        if cand[j] >= iou_threshold:
            used[j] = True
            tp += 1
    return tp


def f1_counts(tp: int, n_pred: int, n_truth: int) -> Tuple[float, float, float]:
    """(F1, precision, recall); both sides empty counts as perfect agreement."""
    if n_pred == 0 and n_truth == 0:
        return 1.0, 1.0, 1.0
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_truth if n_truth else 0.0
    return (2 * p * r / (p + r) if p + r else 0.0), p, r


def detection_f1(out: np.ndarray, truth, iou_threshold: float = 0.5, conf_threshold: float = 0.25
                 ) -> Tuple[float, float, float]:
    """(F1, precision, recall) of YOLO output ``out`` [N, ...] against ``truth``: a list of
    (boxes xyxy, classes) per sample (ground truth), or another YOLO output batch (e.g. fp32's)."""
    pred = decode(out, conf_threshold)
    if isinstance(truth, np.ndarray):
        truth = [(b, c) for b, _, c in decode(truth, conf_threshold)]
    tp = sum(match_count(p, t, iou_threshold) for p, t in zip(pred, truth))
    return f1_counts(tp, sum(len(p[0]) for p in pred), sum(len(t[0]) for t in truth))


# -- segmentation, classification, generic -----------------------------------------------------------

def map_iou(ref: np.ndarray, test: np.ndarray, threshold: Optional[float] = None) -> float:
    """IoU of dense maps [N, C, H, W] (see the module docstring for the thresholds)."""
    ref, test = np.asarray(ref, np.float32), np.asarray(test, np.float32)
    if ref.ndim == 4 and ref.shape[1] > 1:
        a, b = ref.argmax(1), test.argmax(1)
        ious = []
        for c in range(ref.shape[1]):
            inter = np.sum((a == c) & (b == c))
            union = np.sum((a == c) | (b == c))
            if union:
                ious.append(inter / union)
        return float(np.mean(ious)) if ious else 1.0
    if threshold is None:
        threshold = 0.5 if ref.min() >= 0.0 and ref.max() <= 1.0 else 0.0
    a, b = ref > threshold, test > threshold
    union = int(np.sum(a | b))
    return float(np.sum(a & b) / union) if union else 1.0


def top1_agreement(ref: np.ndarray, test: np.ndarray) -> float:
    ref, test = np.asarray(ref), np.asarray(test)
    if ref.ndim == 4:
        ref, test = ref.reshape(ref.shape[:2]), test.reshape(test.shape[:2])
    return float(np.mean(ref.reshape(-1, ref.shape[-1]).argmax(1) == test.reshape(-1, test.shape[-1]).argmax(1)))


def rel_l2(ref: np.ndarray, test: np.ndarray) -> float:
    ref, test = np.asarray(ref, np.float64), np.asarray(test, np.float64)
    return float(np.linalg.norm(ref - test) / max(np.linalg.norm(ref), 1e-30))


METRIC_NAMES = {"classify": "1 - top-1 agreement with fp32",
                "detect": "1 - detection F1 vs fp32 (class-matched, IoU 0.5)",
                "segment": "1 - IoU of the thresholded maps vs fp32",
                "generic": "relative L2 error of the worst output",
                "custom": "metric(fp32, fp32) - metric(fp32, int8)"}


def task_score(task: str, ref: Dict[str, np.ndarray], test: Dict[str, np.ndarray],
               outputs: Sequence[str]) -> float:
    """Score in [0, 1] of ``test`` against ``ref`` (both {output: array over all samples})."""
    first = outputs[0]
    if task == "classify":
        return top1_agreement(ref[first], test[first])
    if task == "detect":
        return detection_f1(test[first], ref[first])[0]
    if task == "segment":
        return map_iou(ref[first], test[first])
    return max(0.0, 1.0 - max(rel_l2(ref[o], test[o]) for o in outputs))


def accuracy_drop(task: str, ref: Dict[str, np.ndarray], test: Dict[str, np.ndarray], outputs: Sequence[str],
                  metric: Optional[Callable] = None) -> Tuple[float, float]:
    """(drop, score): the budget's accuracy drop of ``test`` against ``ref`` under ``task`` or a
    user ``metric`` (higher is better)."""
    if metric is not None:
        best = float(metric(ref, ref))
        got = float(metric(ref, test))
        return best - got, got
    if task == "generic":
        e = max(rel_l2(ref[o], test[o]) for o in outputs)
        return e, max(0.0, 1.0 - e)
    s = task_score(task, ref, test, outputs)
    return 1.0 - s, s
