"""The accuracy report of an int8 quantization: what ran int8, what stayed fp32 and why, and
how far the int8 model is from the float model on held-out calibration samples.

Per layer (the output of every node of the float graph): SQNR in dB
(10 log10(sum ref^2 / sum (ref - int8)^2)) and cosine similarity between the float model's
value and the int8 model's (dequantized) value at the same point. Errors accumulate along the
network, so these are end-to-end numbers up to that layer; the sensitivity analysis of the
accuracy budget measures each layer quantized alone.

Per model output: top-1 agreement (argmax over the last axis), max and mean absolute error,
relative L2 error, SQNR, and the max difference in output quantization steps. The
``accuracy_drop`` the budget checks comes from the task (``metrics.py``: top-1 for
classifiers, detection F1 for YOLO-style outputs, map IoU for dense maps, relative L2 error
otherwise), or from a user metric; ``task`` and ``task_score`` say which and how much.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import numpy as np

from ..ir import Graph
from .drift import collapsed_slices
from .quantizer import _batch_size, batches, float_tensors

SQNR_CAP = 200.0


def sqnr_db(ref: np.ndarray, test: np.ndarray) -> float:
    ref = np.asarray(ref, np.float64).reshape(-1)
    test = np.asarray(test, np.float64).reshape(-1)
    noise = float(np.sum((ref - test) ** 2))
    sig = float(np.sum(ref * ref))
    if noise == 0.0:
        return SQNR_CAP
    if sig == 0.0:
        return -SQNR_CAP
    return float(min(SQNR_CAP, 10.0 * math.log10(sig / noise)))


def cosine(ref: np.ndarray, test: np.ndarray) -> float:
    a = np.asarray(ref, np.float64).reshape(-1)
    b = np.asarray(test, np.float64).reshape(-1)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def sqnr_cosine_of_sums(rr: float, dd: float, rx: float, xx: float):
    """(SQNR dB, cosine) from streamed sums: sum r^2, sum (r - x)^2, sum r x, sum x^2."""
    sq = SQNR_CAP if dd == 0 else (-SQNR_CAP if rr == 0 else min(SQNR_CAP, 10 * math.log10(rr / dd)))
    cos = 1.0 if rr == 0 and xx == 0 else (0.0 if rr == 0 or xx == 0 else rx / math.sqrt(rr * xx))
    return sq, cos


def dequantize(arr: np.ndarray, quant: dict) -> np.ndarray:
    s = np.asarray(quant["scale"], np.float32)
    zp = np.asarray(quant["zero_point"], np.int64)
    if s.size == 1:
        return (arr.astype(np.int64) - int(zp.reshape(-1)[0])).astype(np.float32) * s.reshape(())
    shape = [1] * arr.ndim
    shape[quant["axis"]] = s.size
    return (arr.astype(np.int64) - zp.reshape(shape)).astype(np.float32) * s.reshape(shape)


def top1(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).reshape(-1, a.shape[-1]).argmax(axis=1)


def output_metrics(ref: np.ndarray, test: np.ndarray, step: Optional[float] = None) -> dict:
    ref = np.asarray(ref, np.float32)
    test = np.asarray(test, np.float32)
    d = np.abs(ref.astype(np.float64) - test)
    m = {"max_abs_error": float(d.max()) if d.size else 0.0,
         "mean_abs_error": float(d.mean()) if d.size else 0.0,
         "rel_l2_error": float(np.linalg.norm(ref - test) / max(np.linalg.norm(ref), 1e-30)),
         "sqnr_db": sqnr_db(ref, test), "cosine": cosine(ref, test)}
    if ref.ndim >= 2 and ref.shape[-1] > 1:
        m["top1_agreement"] = float(np.mean(top1(ref) == top1(test)))
    if step:
        m["max_error_steps"] = float(d.max() / step) if d.size else 0.0
    collapsed = collapsed_slices(ref, test)
    if collapsed:
        m["collapsed"] = collapsed
    return m


class FloatReference:
    """The float graph's values (every float activation) on the held-out feeds, batch by batch;
    kept in memory while they fit ``cache_bytes``, recomputed otherwise."""

    def __init__(self, g: Graph, feeds: List[dict], cache_bytes: int = 256 << 20):
        from ..runtime import Runtime
        self.g = g
        self.names = float_tensors(g)
        gg = g.copy()
        gg.outputs = list(dict.fromkeys(list(g.outputs) + self.names))
        self.rt = Runtime(gg, backend="cpu")
        self.batches = batches(g, feeds, _batch_size(g))
        self.cache: Dict[int, dict] = {}
        self.budget = cache_bytes
        self.used = 0

    def get(self, k: int) -> dict:
        if k in self.cache:
            return self.cache[k]
        out = self.rt.run(self.batches[k])
        size = sum(v.nbytes for v in out.values())
        if self.used + size <= self.budget:
            self.cache[k] = out
            self.used += size
        return out


def evaluate(q: Graph, g: Graph, ref: FloatReference, names: Dict[str, str], plan,
             per_layer: bool = True, task: Optional[str] = None, metric=None) -> dict:
    """Run the int8 graph ``q`` on the reference's held-out batches and compare with the float
    graph: per-layer SQNR / cosine (streamed sums) and the model outputs' metrics.

    ``task`` (classify, detect, segment, generic; see ``metrics.py``) or a user ``metric``
    decides the accuracy drop; without either, the drop is 1 - top-1 agreement for outputs
    with a class axis, else the first output's relative L2 error."""
    from ..runtime import Runtime
    want = list(q.outputs)
    pairs = []                                  # (float tensor, q tensor, quant or None)
    if per_layer:
        for t in ref.names:
            if t in names:
                pairs.append((t, names[t], q.tensors[names[t]].quant))
            elif t in q.tensors and q.tensors[t].dtype == "float32" and not q.tensors[t].is_const:
                pairs.append((t, t, None))
        want += [p[1] for p in pairs]
    qq = q.copy()
    qq.outputs = list(dict.fromkeys(want))
    rt = Runtime(qq, backend="cpu")
    sums = {t: np.zeros(4) for t, _, _ in pairs}          # sum r^2, sum (r - x)^2, sum r x, sum x^2
    outs_ref: Dict[str, list] = {o: [] for o in g.outputs}
    outs_q: Dict[str, list] = {o: [] for o in g.outputs}
    for k, b in enumerate(ref.batches):
        r = ref.get(k)
        o = rt.run(b)
        for name in g.outputs:
            outs_ref[name].append(r[name])
            outs_q[name].append(o[name])
        for t, qn, quant in pairs:
            rv = r[t].astype(np.float64).reshape(-1)
            xv = (dequantize(o[qn], quant) if quant is not None else o[qn]).astype(np.float64).reshape(-1)
            d = rv - xv
            sums[t] += (rv @ rv, d @ d, rv @ xv, xv @ xv)
    layers = {}
    for t, qn, quant in pairs:
        sq, cos = sqnr_cosine_of_sums(*sums[t])
        layers[t] = {"sqnr_db": round(float(sq), 3), "cosine": round(float(cos), 6),
                     "value": "int8" if quant is not None else "float32"}
    outputs = {}
    for name in g.outputs:
        step = plan.params[name][0] if name in plan.params else None
        outputs[name] = output_metrics(np.concatenate(outs_ref[name]), np.concatenate(outs_q[name]), step)
    first = outputs[g.outputs[0]]
    if task is not None or metric is not None:
        from .metrics import METRIC_NAMES, accuracy_drop
        full_ref = {k: np.concatenate(v) for k, v in outs_ref.items()}
        full_q = {k: np.concatenate(v) for k, v in outs_q.items()}
        drop, score = accuracy_drop(task or "generic", full_ref, full_q, list(g.outputs), metric)
        key = "custom" if metric is not None else task
        return {"layers": layers, "outputs": outputs, "accuracy_drop": float(drop), "drop_metric": METRIC_NAMES[key],
                "task": key, "task_score": float(score),
                "output_sqnr_db": first["sqnr_db"], "output_rel_error": first["rel_l2_error"]}
    if "top1_agreement" in first:
        drop, metric = 1.0 - first["top1_agreement"], "1 - top-1 agreement with fp32"
    else:
        drop, metric = first["rel_l2_error"], "relative L2 error of the output"
    return {"layers": layers, "outputs": outputs, "accuracy_drop": float(drop), "drop_metric": metric,
            "output_sqnr_db": first["sqnr_db"], "output_rel_error": first["rel_l2_error"]}


def _weight_bytes(g: Graph) -> int:
    return int(sum(t.data.nbytes for t in g.tensors.values() if t.is_const))


def build_report(source: Graph, g: Graph, q: Graph, plan, ranges, ev: dict, *, method: str,
                 percentile: float, calib_samples: int, held_out_samples: int, keep_float: list,
                 budget: Optional[dict], qdq_nodes: int, seconds: dict) -> dict:
    """The report dict (JSON-serialisable)."""
    int8 = set(plan.int8)
    layers = []
    for n in g.nodes:
        t = n.outputs[0] if n.outputs else ""
        e = {"node": n.name, "op": n.op, "precision": "int8" if n.name in int8 else "float32", "output": t}
        if n.name not in int8:
            e["reason"] = plan.float_reasons.get(n.name, "")
        if t in plan.params and n.name in int8:
            e["scale"], e["zero_point"] = float(plan.params[t][0]), int(plan.params[t][1])
        if t in ranges:
            e["calibrated_range"] = [float(ranges[t][0]), float(ranges[t][1])]
        if t in ev["layers"]:
            e.update({k: v for k, v in ev["layers"][t].items() if k != "value"})
        layers.append(e)
    float_nodes = [{"node": n.name, "op": n.op, "reason": plan.float_reasons[n.name]}
                   for n in g.nodes if n.name in plan.float_reasons]
    from collections import Counter
    ops_int8 = Counter(n.op for n in g.nodes if n.name in int8)
    ops_float = Counter(n.op for n in g.nodes if n.name not in int8)
    wb_f, wb_q = _weight_bytes(source), _weight_bytes(q)
    rep = {
        "scheme": "int8, TFLite spec: activations asymmetric per tensor (zero point in [-128, 127]), "
                  "weights symmetric per output channel ([-127, 127], zero point 0), bias int32 at "
                  "s_in * s_w[c]; requantization with int32 multiplier and shift (TFLite reference rounding)",
        "calibration": {"method": method, "samples": calib_samples, "held_out_samples": held_out_samples,
                        **({"percentile": percentile} if method == "percentile" else {})},
        "nodes": {"total": len(g.nodes), "int8": len(int8), "float32": len(g.nodes) - len(int8),
                  "quantize_dequantize_inserted": qdq_nodes},
        "ops_int8": dict(ops_int8), "ops_float32": dict(ops_float),
        "float_nodes": float_nodes,
        "keep_float": keep_float,
        "outputs": ev["outputs"],
        "accuracy_drop": ev["accuracy_drop"], "accuracy_drop_metric": ev["drop_metric"],
        **({"task": ev["task"], "task_score": ev["task_score"]} if "task" in ev else {}),
        "weights": {"float_bytes": wb_f, "int8_graph_bytes": wb_q,
                    "ratio": round(wb_q / max(wb_f, 1), 4)},
        "layers": layers,
        "seconds": seconds,
    }
    if budget is not None:
        rep["budget"] = budget
    return rep


def format_summary(rep: dict, max_layers: int = 12) -> str:
    """A readable summary of a report (what the CLI prints after convert)."""
    lines = []
    c = rep["calibration"]
    nd = rep["nodes"]
    lines.append(f"int8 quantization ({c['method']} calibration on {c['samples']} sample(s), "
                 f"{c['held_out_samples']} held out)")
    lines.append(f"  nodes: {nd['int8']} int8, {nd['float32']} float32, "
                 f"{nd['quantize_dequantize_inserted']} Quantize/DequantizeLinear inserted")
    w = rep["weights"]
    lines.append(f"  weights: {w['float_bytes']:,} B fp32 -> {w['int8_graph_bytes']:,} B ({w['ratio']:.2f}x)")
    if "task" in rep:
        lines.append(f"  task {rep['task']}: score {rep['task_score']:.4f} vs fp32 "
                     f"(accuracy drop {rep['accuracy_drop']:.4f} = {rep['accuracy_drop_metric']})")
    for h in rep.get("heterogeneous", []):
        lines.append(f"  heterogeneous concat {h['node']} (an input gets {h['min_levels']:.1f} of 256 levels): "
                     f"{h.get('decision', '')}")
    for name, m in rep["outputs"].items():
        s = f"  output {name}: "
        if "top1_agreement" in m and rep.get("task", "classify") == "classify":
            s += f"top-1 agreement {m['top1_agreement']:.2%}, "
        s += f"SQNR {m['sqnr_db']:.1f} dB, max |err| {m['max_abs_error']:.4g}"
        if "max_error_steps" in m:
            s += f" ({m['max_error_steps']:.1f} steps)"
        s += f", cosine {m['cosine']:.5f}"
        lines.append(s)
    if rep.get("float_nodes"):
        lines.append("  stayed float32:")
        for e in rep["float_nodes"][:max_layers]:
            lines.append(f"    {e['node']} ({e['op']}): {e['reason']}")
        if len(rep["float_nodes"]) > max_layers:
            lines.append(f"    ... {len(rep['float_nodes']) - max_layers} more (see the report)")
    layers = [e for e in rep["layers"] if "sqnr_db" in e and e["precision"] == "int8"]
    if layers:
        worst = sorted(layers, key=lambda e: e["sqnr_db"])[:min(5, len(layers))]
        lines.append("  lowest per-layer SQNR (float vs int8 model at that layer):")
        for e in worst:
            lines.append(f"    {e['node']:28} {e['op']:18} {e['sqnr_db']:7.2f} dB  cos {e['cosine']:.5f}")
    b = rep.get("budget")
    if b:
        state = "met" if b.get("met") else "NOT met"
        lines.append(f"  accuracy budget {b['max_accuracy_drop']:g} ({b['metric']}): {state}; drop "
                     f"{b['initial_drop']:.4f} -> {b['final_drop']:.4f}"
                     + (f", kept fp32 ({len(b['kept_float'])}): {', '.join(b['kept_float'])}" if b['kept_float'] else "")
                     + (f" ({b['seconds']:.1f} s)" if "seconds" in b else ""))
    return "\n".join(lines)
