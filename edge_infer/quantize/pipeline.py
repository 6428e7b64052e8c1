"""The whole quantization flow (``quantize_graph``): calibrate, plan, rewrite (``quantizer.py``),
measure on held-out feeds (``report.py``), keep the most sensitive layers float32 under an
accuracy budget (``budget.py``), decide heterogeneous concats (``heterogeneous.py``) and look
for drift (``drift.py``). It sits above all of them; ``quantize/__init__`` re-exports it."""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..ir import Graph
from ..ir.shape_inference import infer_shapes
from ..ops.int8 import ANCHOR_OPS, BINARY_OPS, CLAMP_OPS, CONCAT_OPS, LUT_OPS
from .budget import layer_sensitivity, search
from .drift import blame, find_drift
from .heterogeneous import describe, find_heterogeneous
from .metrics import TASKS, guess_task
from .quantizer import QuantizationError, build_int8_graph, calibrate, make_plan, split_activations
from .requant_mode import check_requant, set_requant
from .report import FloatReference, build_report, evaluate

# -- the whole flow -----------------------------------------------------------------------------------

def _split(feeds: List[dict], held_out: Optional[float]) -> Tuple[List[dict], List[dict]]:
    n = len(feeds)
    frac = 0.2 if held_out is None else float(held_out)
    k = int(round(n * frac))
    if n >= 2:
        k = min(max(k, 1), n - 1)
    else:
        k = 0
    if k == 0:
        return feeds, feeds
    return feeds[:n - k], feeds[n - k:]


def quantize_graph(graph: Graph, feeds: List[Dict[str, np.ndarray]], method: str = "minmax",
                   keep_float: Sequence[str] = (), max_accuracy_drop: Optional[float] = None,
                   percentile: float = 99.99, held_out: Optional[float] = None,
                   eval_feeds: Optional[List[Dict[str, np.ndarray]]] = None,
                   show_progress: bool = False, log: Optional[Callable[[str], None]] = None,
                   task: Optional[str] = None, metric: Optional[Callable] = None,
                   requant: str = "fp32") -> Tuple[Graph, dict]:
    """Quantize an (optimized, fp32) graph to int8 with ``feeds`` as calibration data.

    A ``held_out`` fraction of the feeds (default 0.2, at least one sample when there are two
    or more) is kept out of calibration and used to measure the result (``eval_feeds``
    replaces it). ``task`` (auto = None, classify, detect, segment, generic: ``metrics.py``)
    picks the accuracy metric; ``metric(reference, candidate)`` (higher is better) replaces it. Concats whose
    inputs' ranges are far apart and that feed an output stay float32 after per-branch int8
    when the held-out metric says so (``heterogeneous.py``). Returns (int8 graph, report dict;
    see ``report.py``). ``requant``: the Conv / Gemm / MatMul / Mul requantization, "fp32" (one
    rounding, onnxruntime's and XNNPACK's) or "fixed" (TFLite's reference kernels, bit-exact with
    them): ``requant_mode.py``.
    """
    t0 = time.perf_counter()
    say = log or (lambda s: None)
    if not feeds:
        raise QuantizationError("no calibration samples")
    check_requant(requant)
    if task is not None and task not in TASKS:
        raise QuantizationError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    g = split_activations(graph)
    infer_shapes(g)
    unknown = sorted(set(keep_float) - {n.name for n in g.nodes})
    if unknown:
        raise QuantizationError(f"keep_float names unknown node(s) {unknown}; nodes are: "
                                + ", ".join(n.name for n in g.nodes[:30]) + (" ..." if len(g.nodes) > 30 else ""))
    if task is None or task == "auto":
        # output shapes at a real input size: a dynamic YOLO export's [batch, 7, anchors] is a detector
        from ..backends.specialize import specialize
        task = guess_task(specialize(g, {k: np.shape(v) for k, v in feeds[0].items() if k in g.inputs}))
    calib, held = _split(feeds, held_out)
    if eval_feeds:
        calib, held = list(feeds), list(eval_feeds)
    say(f"calibrating on {len(calib)} sample(s) with {method}; {len(held)} held out")
    ranges = calibrate(g, calib, method, percentile, show_progress)
    t_cal = time.perf_counter() - t0
    ref = FloatReference(g, held)
    forced: Dict[str, str] = {}

    def attempt(keep, only=None):
        plan = make_plan(g, ranges, keep, only, forced)
        q, names, nqdq = build_int8_graph(g, plan)
        set_requant(q, requant)
        return plan, q, names, nqdq

    def judge(q, names, plan, per_layer=True):
        return evaluate(q, g, ref, names, plan, per_layer=per_layer, task=task, metric=metric)

    keep = list(keep_float)
    hetero = find_heterogeneous(g, ranges)
    out_concats = {h["node"]: describe(h) for h in hetero if h["output_concat"] and h["node"] not in keep}
    plan, q, names, nqdq = attempt(keep)
    ev = judge(q, names, plan, per_layer=not out_concats)
    if out_concats:
        # the verifier decides: per-branch int8 with the concat in float32, or the int8 concat
        forced.update(out_concats)
        plan_f, q_f, names_f, nqdq_f = attempt(keep)
        ev_f = judge(q_f, names_f, plan_f, per_layer=False)
        kept = ev_f["accuracy_drop"] <= ev["accuracy_drop"]
        for h in hetero:
            if h["node"] in out_concats:
                h.update({"decision": "float32 concat after per-branch int8" if kept else "int8 concat",
                          "drop_int8_concat": ev["accuracy_drop"], "drop_float_concat": ev_f["accuracy_drop"]})
        say("heterogeneous output concat(s) " + ", ".join(out_concats) + ": drop "
            f"{ev['accuracy_drop']:.4f} int8 vs {ev_f['accuracy_drop']:.4f} float32 after per-branch int8"
            + ("" if kept else " (int8 kept)"))
        if kept:
            plan, q, names, nqdq = plan_f, q_f, names_f, nqdq_f
        else:
            forced.clear()
        ev = judge(q, names, plan)                        # with the per-layer numbers
    for h in hetero:
        if not h["output_concat"]:
            h["decision"] = "int8 (internal concat: per-channel-group scales would need int8 kernels that have none)"
    budget = None
    if max_accuracy_drop is not None:
        budget = {"max_accuracy_drop": float(max_accuracy_drop), "initial_drop": ev["accuracy_drop"],
                  "metric": ev["drop_metric"], "task": ev.get("task"), "sensitivity": [], "kept_float": [],
                  "method": "one-pass local SQNR ranking, then bisection on the task metric"}
        if ev["accuracy_drop"] > max_accuracy_drop:
            ts = time.perf_counter()
            say(f"accuracy drop {ev['accuracy_drop']:.4f} > budget {max_accuracy_drop}: sensitivity analysis")
            # every int8 layer that computes (data movement and pools carry no error of their own)
            cands = [n for n in plan.int8 if g_node_op(g, n) in ANCHOR_OPS + BINARY_OPS + CONCAT_OPS + LUT_OPS
                     + CLAMP_OPS]
            sens = layer_sensitivity(g, plan, cands, ref.batches)
            budget["sensitivity"] = sens
            budget["seconds_sensitivity"] = round(time.perf_counter() - ts, 3)

            def drop_of(kept):
                p1, q1, n1, _ = attempt(keep + kept)
                return judge(q1, n1, p1, per_layer=False)["accuracy_drop"]
            found = search([e["node"] for e in sens], drop_of, float(max_accuracy_drop), log=say)
            budget["kept_float"] = found["kept"]
            budget["trials"] = found["trials"]
            keep = keep + found["kept"]
            plan, q, names, nqdq = attempt(keep)
            ev = judge(q, names, plan)                    # per-layer numbers of the final graph
            budget["seconds"] = round(time.perf_counter() - ts, 3)
        budget["final_drop"] = ev["accuracy_drop"]
        budget["met"] = ev["accuracy_drop"] <= max_accuracy_drop
    report = build_report(graph, g, q, plan, ranges, ev, method=method, percentile=percentile,
                          calib_samples=len(calib), held_out_samples=len(held), keep_float=list(keep_float),
                          budget=budget, qdq_nodes=nqdq, seconds={"calibration": round(t_cal, 3),
                                                                   "total": round(time.perf_counter() - t0, 3)})
    if hetero:
        report["heterogeneous"] = hetero
    findings = find_drift(report)
    report["drift"] = {"findings": findings, "blame": blame(report, findings) if findings else []}
    q.metadata["quantization"] = {"scheme": "int8 (TFLite): asymmetric per-tensor activations, symmetric "
                                            "per-channel weights, int32 bias",
                                  "calib_method": method, "float_nodes": sorted(plan.float_reasons),
                                  "requant": requant,
                                  "requant_fp32_nodes": sum(n.attrs.get("requant") == "fp32" for n in q.nodes)}
    report["requant"] = q.metadata["quantization"]["requant"]
    return q, report


def g_node_op(g: Graph, name: str) -> str:
    for n in g.nodes:
        if n.name == name:
            return n.op
    return ""
