"""Telling the user when int8 broke the model, instead of writing it with exit status 0.

A quantization can be fine on average and still destroy what the model is for: a YOLO export
whose class probabilities share one int8 scale with box coordinates in pixels detects nothing
(every probability rounds to 0) while its output's SQNR, dominated by the boxes, looks good.
``find_drift(report)`` reads the accuracy report (``report.py``) and returns one finding per
broken output when

* the task metric's accuracy drop is at least ``COLLAPSE_DROP`` (half the fp32 top-1 agreement,
  detection F1 or map IoU gone), or, with an accuracy budget ``X`` that was not met, above
  ``X + FAR_OVER_BUDGET``;
* an output's SQNR against fp32 is under ``MIN_OUTPUT_SQNR_DB`` (noise power above a quarter
  of the signal's: relative L2 error over 0.5);
* an output, or a slice of it along its channel axis (YOLO's probability rows, a class
  column), takes one value in int8 where fp32 varies by at least ``VARIES`` of its magnitude
  (``collapsed_slices``, computed with the report's output metrics).

``blame`` names the int8 layers with the lowest SQNR (the budget's per-layer local SQNR when it
ran, else the report's end-to-end SQNR) and heterogeneous concats left int8; ``format_drift``
is the warning the CLI prints, with the fixes to try. ``convert`` raises
``QuantizationDriftError`` on a finding unless ``allow_drift`` (CLI: exit 3 unless
``--allow-drift``).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..ops.int8 import SAME_PARAM_OPS

#: task accuracy drop at or above which the int8 model no longer does the model's job
COLLAPSE_DROP = 0.5
#: with --max-accuracy-drop X not met: a drop above X + this is far over the budget
FAR_OVER_BUDGET = 0.25
#: an output's SQNR (dB) under this is noise, not a quantized copy of the fp32 output
MIN_OUTPUT_SQNR_DB = 6.0
#: a slice that varies by this fraction of its own magnitude in fp32 carries information
VARIES = 0.1
#: layers named in the warning
BLAME_LAYERS = 3


def _channel_axis(shape) -> int:
    """The axis whose slices are an output's channels: rows of a transposed YOLO output and of
    NCHW maps (axis 1), else the last axis (classes, a [N, A, 4 + C] YOLO output)."""
    from .metrics import yolo_layout
    if len(shape) == 3 and yolo_layout(shape) is False:
        return 2
    return 1 if len(shape) >= 3 else len(shape) - 1


def collapsed_slices(ref: np.ndarray, test: np.ndarray) -> Optional[dict]:
    """{"axis": a, "indices": [...], "of": n} of the slices along the channel axis that are
    constant in ``test`` while ``ref`` varies (see the module docstring); the whole output is
    axis None. None when nothing collapsed."""
    ref = np.asarray(ref, np.float64)
    test = np.asarray(test, np.float64)
    if ref.size < 2 or ref.shape != test.shape:
        return None

    def varies(r):
        ptp = float(r.max() - r.min())
        return ptp > 0 and ptp >= VARIES * float(np.abs(r).max())
    if varies(ref) and float(test.max() - test.min()) == 0.0:
        return {"axis": None, "indices": [], "of": 1}
    if ref.ndim < 2:
        return None
    ax = _channel_axis(ref.shape)
    r = np.moveaxis(ref, ax, 0).reshape(ref.shape[ax], -1)
    t = np.moveaxis(test, ax, 0).reshape(ref.shape[ax], -1)
    if r.shape[1] < 2:
        return None
    rptp, tptp = np.ptp(r, axis=1), np.ptp(t, axis=1)
    mag = np.abs(r).max(axis=1)
    idx = np.nonzero((rptp > 0) & (rptp >= VARIES * mag) & (tptp == 0))[0]
    return {"axis": int(ax), "indices": [int(i) for i in idx], "of": int(r.shape[0])} if len(idx) else None


def find_drift(rep: dict) -> List[dict]:
    """Findings ({"output", "reason"}) of outputs that int8 broke, from a quantization report."""
    found = []
    drop = float(rep.get("accuracy_drop", 0.0))
    budget = rep.get("budget") or {}
    limit = COLLAPSE_DROP
    if budget and not budget.get("met", True):
        limit = min(limit, float(budget["max_accuracy_drop"]) + FAR_OVER_BUDGET)
    first = next(iter(rep["outputs"]), None)
    task = rep.get("task", "")
    if drop >= limit and first is not None:
        what = f"task {task} score {rep.get('task_score', 1.0 - drop):.3f} vs fp32 " if task else ""
        found.append({"output": first, "reason": f"{what}(accuracy drop {drop:.3f} >= {limit:g}: "
                      f"{rep.get('accuracy_drop_metric', '')})"})
    for name, m in rep["outputs"].items():
        c = m.get("collapsed")
        if c:
            where = "all its values" if c["axis"] is None else (
                f"channel(s) {', '.join(map(str, c['indices'][:8]))}"
                + (" ..." if len(c["indices"]) > 8 else "") + f" of {c['of']} along axis {c['axis']}")
            found.append({"output": name, "reason": f"{where} quantize to one level (fp32 varies)"})
        if m.get("sqnr_db", 100.0) < MIN_OUTPUT_SQNR_DB:
            found.append({"output": name, "reason": f"SQNR {m['sqnr_db']:.2f} dB < {MIN_OUTPUT_SQNR_DB:g} dB "
                          f"(relative error {m.get('rel_l2_error', float('nan')):.3f})"})
    return found


def blame(rep: dict, findings: List[dict], n: int = BLAME_LAYERS) -> List[dict]:
    """The layers to blame ({"node", "op", "sqnr_db", "kind"}): heterogeneous concats left
    int8, the int8 node that writes a collapsed output (its requantization lost a slice), then
    the int8 layers that compute with the lowest SQNR (data movement repeats its input's)."""
    layers = rep.get("layers", [])
    out = [{"node": h["node"], "op": "Concat", "sqnr_db": None,
            "kind": f"heterogeneous concat (an input gets {h['min_levels']:.1f} of 256 levels)"}
           for h in rep.get("heterogeneous", []) if str(h.get("decision", "")).startswith("int8")]
    broken = {f["output"] for f in findings if "one level" in f["reason"]}
    out += [{"node": e["node"], "op": e["op"], "sqnr_db": None, "kind": f"int8, writes output {e['output']!r}"}
            for e in layers if e.get("output") in broken and e.get("precision") == "int8"]
    sens = (rep.get("budget") or {}).get("sensitivity") or []
    if sens:
        ranked = [{"node": e["node"], "op": e["op"], "sqnr_db": e["local_sqnr_db"], "kind": "local SQNR"}
                  for e in sens]
    else:
        ranked = [{"node": e["node"], "op": e["op"], "sqnr_db": e["sqnr_db"], "kind": "SQNR"}
                  for e in sorted((e for e in layers if e.get("precision") == "int8" and "sqnr_db" in e
                                   and e["op"] not in SAME_PARAM_OPS), key=lambda e: e["sqnr_db"])]
    seen = {e["node"] for e in out}
    for e in ranked:
        if len(out) >= n:
            break
        if e["node"] not in seen:
            out.append(e)
            seen.add(e["node"])
    return out


def format_drift(findings: List[dict], layers: List[dict], rep: dict) -> str:
    """The warning: what broke, the layers to blame, the fixes to try (several lines)."""
    by_output: dict = {}
    for f in findings:
        by_output.setdefault(f["output"], []).append(f["reason"])
    lines = [f"int8 quantization broke output {o!r}: " + "; ".join(r) for o, r in by_output.items()]
    lines[1:] = ["  " + line for line in lines[1:]]
    if layers:
        lines.append("  layers to blame: " + ", ".join(
            f"{e['node']} ({e['op']}" + (f", {e['kind']} {e['sqnr_db']:.2f} dB)" if e["sqnr_db"] is not None
                                         else f", {e['kind']})") for e in layers))
    fixes = []
    if layers:
        fixes.append("--keep-float " + ",".join(e["node"] for e in layers))
    budget = rep.get("budget")
    if not budget:
        fixes.append("--max-accuracy-drop 0.05 (keeps the most damaging layers float32 until the drop holds)")
    else:
        fixes.append(f"a larger --max-accuracy-drop than {budget['max_accuracy_drop']:g}")
    if str((rep.get("calibration") or {}).get("source")) == "random":
        fixes.append("--calib with real samples instead of random inputs")
    lines.append("  try: " + "; or ".join(fixes) + ". --allow-drift writes the artifact anyway")
    return "\n".join(lines)
