"""The accuracy budget: which layers stay float32 so that the int8 model's drop is within X.

1. Sensitivity in one pass (``layer_sensitivity``): one graph holds the float model and, for
   every int8 layer that computes, an isolated int8 copy fed by the float model's own (then
   quantized) inputs, dequantized at its output. One run per held-out batch gives every
   layer's local SQNR (float output vs its int8 copy's): its own quantization error,
   independent of the layers before it. Cost: about one float and one int8 model run, instead
   of one whole-model evaluation per layer.
2. Search (``search``): layers ranked from the lowest SQNR; keeping the k most sensitive in
   float32 is measured with the task metric on the whole model for k = 1, 2, 4, ... until the
   budget holds, then the smallest such k is found by bisection, and (for a short list) each
   kept layer is tried back in int8, least sensitive first, kept there when the budget still
   holds: the fewest float layers the measurements allow, every candidate re-verified.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..ir import Graph, Node
from .quantizer import Plan, _Builder
from .report import dequantize, sqnr_cosine_of_sums

#: kept lists up to this long are pruned one layer at a time after the bisection
PRUNE_MAX = 12


def _probe_graph(g: Graph, plan, cands: Sequence[str]):
    """The float graph plus an int8 copy of each candidate node (see the module docstring);
    returns (graph, [(node, float tensor, probe int8 tensor)])."""
    gp = g.copy()
    params = dict(plan.params)
    clones, pairs = [], []
    want = set(cands)
    for n in g.nodes:
        if n.name not in want or not n.outputs or not n.outputs[0]:
            continue
        outs = []
        for o in n.outputs:
            if not o:
                outs.append(o)
                continue
            po = gp.unique_name(o + "__probe")
            t = g.tensors[o]
            gp.add_tensor(po, t.dtype, t.shape)
            params[po] = params[o]
            outs.append(po)
        clones.append(Node(n.op, list(n.inputs), outs, dict(n.attrs), n.name + "/probe"))
        pairs.append((n.name, n.outputs[0], outs[0]))
    b = _Builder(gp, Plan(int8=list(cands), params=params))
    for name in g.inputs:
        t = g.tensors[name]
        b.q.add_tensor(name, t.dtype, t.shape)
        b.float_name[name] = name
    for n in g.nodes:
        b.float_node(n)
    for c in clones:
        b.int8_node(c)
    q = b.q
    q.nodes = b.nodes
    q.outputs = list(dict.fromkeys(list(g.outputs) + [p[1] for p in pairs] + [p[2] for p in pairs]))
    q.toposort()
    q.validate()
    return q, pairs


def layer_sensitivity(g: Graph, plan, cands: Sequence[str], feeds_batches: List[dict]) -> List[dict]:
    """Local SQNR (dB) of each candidate layer quantized alone on float inputs, lowest first:
    ``[{"node", "op", "local_sqnr_db", "local_cosine"}]``."""
    from ..runtime import Runtime
    if not cands:
        return []
    q, pairs = _probe_graph(g, plan, cands)
    rt = Runtime(q, backend="cpu")
    nodes = {n.name: n for n in g.nodes}
    # a Concat's error is measured per input segment (the worst counts): one SQNR over boxes
    # in pixels and probabilities together would hide probabilities rounded to 0
    segs = {name: _segments(g, nodes[name]) for name, _, _ in pairs}
    sums = {p[0]: np.zeros((len(segs[p[0]]), 4)) for p in pairs}
    for b in feeds_batches:
        out = rt.run(b)
        for name, ft, pt in pairs:
            r_all = out[ft]
            x_all = dequantize(out[pt], q.tensors[pt].quant)
            for k, sl in enumerate(segs[name]):
                r = r_all[sl].astype(np.float64).reshape(-1)
                x = x_all[sl].astype(np.float64).reshape(-1)
                d = r - x
                sums[name][k] += (r @ r, d @ d, r @ x, x @ x)
    rows = []
    for name, per in sums.items():
        worst = min(sqnr_cosine_of_sums(*row) for row in per)
        rows.append({"node": name, "op": nodes[name].op, "local_sqnr_db": round(float(worst[0]), 3),
                     "local_cosine": round(float(worst[1]), 6)})
    rows.sort(key=lambda e: e["local_sqnr_db"])
    return rows


def _segments(g: Graph, node: Node) -> list:
    """Index tuples of a node's output to measure separately: one per Concat input, else all."""
    if node.op != "Concat":
        return [Ellipsis]
    shape = g.tensors[node.outputs[0]].shape
    ins = [i for i in node.inputs if i]
    sizes = [g.tensors[i].shape[int(node.attrs.get("axis", 0)) % len(shape)] if g.tensors[i].shape else None
             for i in ins]
    if shape is None or any(not isinstance(s, int) for s in sizes):
        return [Ellipsis]
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    out, start = [], 0
    for s in sizes:
        out.append(tuple([slice(None)] * axis + [slice(start, start + s)]))
        start += s
    return out


def search(order: Sequence[str], drop_of: Callable[[List[str]], float], budget: float,
           log: Optional[Callable[[str], None]] = None, prune_max: int = PRUNE_MAX) -> dict:
    """The fewest layers of ``order`` (most sensitive first) to keep float32 so that
    ``drop_of(kept) <= budget`` (see the module docstring). Returns {"kept", "drop", "trials"}."""
    say = log or (lambda s: None)
    trials = []
    cache: Dict[tuple, float] = {}

    def measure(kept: List[str]) -> float:
        key = tuple(sorted(kept))
        if key not in cache:
            t0 = time.perf_counter()
            cache[key] = float(drop_of(list(kept)))
            trials.append({"float_layers": len(kept), "drop": cache[key],
                           "seconds": round(time.perf_counter() - t0, 3)})
            say(f"  {len(kept)} layer(s) kept float32: drop {cache[key]:.4f}")
        return cache[key]

    n = len(order)
    lo, hi = 0, None                  # lo: a count known to fail (0: the all-int8 model did)
    k = 1
    while k <= n:
        if measure(list(order[:k])) <= budget:
            hi = k
            break
        lo = k
        k = k * 2 if k * 2 <= n or k == n else n
    if hi is None:
        return {"kept": list(order), "drop": measure(list(order)), "trials": trials, "met": False}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if measure(list(order[:mid])) <= budget:
            hi = mid
        else:
            lo = mid
    kept = list(order[:hi])
    if len(kept) <= prune_max:
        for name in reversed(list(kept)):
            if len(kept) == 1:
                break
            trial = [x for x in kept if x != name]
            if measure(trial) <= budget:
                kept = trial
    return {"kept": kept, "drop": measure(kept), "trials": trials, "met": True}
