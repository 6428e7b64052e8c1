"""Convert-time magnitude pruning, the accuracy-budget sensitivity analysis, and encoding.

``prune_graph`` zeroes weights of the compute layers (Conv, Gemm, MatMul and their fused forms)
in place of the dense arrays, so that quantization can follow; ``encode_graph`` turns every
weight that is sparse enough into a ``SparseArray`` (the last step of conversion) and checks
the encoding is lossless. Patterns, on the weight's 2-D view (rows = output channels):

* ``unstructured``: the smallest |w| of the layer (or, ``scope="global"``, of all layers);
* ``block1x4`` / ``block4x1``: whole 1x4 / 4x1 blocks by L1 norm (the block-CSR encoding keeps
  one index per block); layers that do not tile fall back to unstructured;
* ``2:4``: the two smallest of every four consecutive weights in a row (50%, by definition).

Left alone unless named in ``layers``: the first conv, depthwise convs and the classifier (the
last compute layer): they hold few weights and pruning them costs the most accuracy.
``max_accuracy_drop``: per layer, the accuracy drop of pruning it alone at each level in
``LEVELS`` is measured on calibration samples; every layer starts at the highest level whose
own drop stays within half the budget, and while the whole model misses the budget the layer
hurting most is stepped down. ``correct_biases`` then lets each pruned layer's bias absorb the
mean contribution of its removed weights on the calibration samples.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import EdgeInferError
from ..ir import Graph, Node
from .encodings import SparseArray, encode

PATTERNS = ("unstructured", "block1x4", "block4x1", "2:4")
PRUNABLE_OPS = ("Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul")
LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
#: a weight with at least this fraction of zeros arrives "already sparse" and is encoded as-is
DETECT_SPARSITY = 0.5
MIN_SIZE = 64


class SparsityError(EdgeInferError):
    """Bad pruning options or a pruning/encoding result that fails its check."""


def check_options(sparsity, pattern: str, layers: Optional[Dict[str, float]], max_accuracy_drop=None) -> None:
    if pattern not in PATTERNS:
        raise SparsityError(f"sparse_pattern {pattern!r}: one of {', '.join(PATTERNS)}")
    for what, v in [("sparsity", sparsity)] + [(f"sparse layer {k!r}", v) for k, v in (layers or {}).items()]:
        if v is not None and not (isinstance(v, (int, float)) and 0.0 <= float(v) < 1.0):
            raise SparsityError(f"{what} must be a fraction in [0, 1), got {v!r}")
    if max_accuracy_drop is not None and not 0.0 <= float(max_accuracy_drop) <= 1.0:
        raise SparsityError(f"max_accuracy_drop is a fraction in [0, 1], got {max_accuracy_drop}")


def weight_name(node: Node, g: Graph) -> Optional[str]:
    """The constant weight of a compute node (input 1), or None."""
    if node.op not in PRUNABLE_OPS or len(node.inputs) < 2:
        return None
    t = g.tensors.get(node.inputs[1])
    if t is None or not t.is_const or t.data.ndim < 2 or t.dtype not in ("float32", "int8"):
        return None
    return t.name


def prunable_layers(g: Graph) -> List[Tuple[Node, str]]:
    return [(n, w) for n in g.nodes for w in [weight_name(n, g)] if w is not None]


def protected_layers(g: Graph) -> Dict[str, str]:
    """Node name -> why pruning leaves it alone by default."""
    layers = prunable_layers(g)
    out: Dict[str, str] = {}
    convs = [n for n, _ in layers if n.op in ("Conv", "FusedConv")]
    if convs:
        out[convs[0].name] = "first conv"
    for n, w in layers:
        if n.op in ("Conv", "FusedConv") and int(n.attrs.get("group", 1)) > 1 and g.tensors[w].data.shape[1] == 1:
            out[n.name] = "depthwise conv"
    if layers:
        out.setdefault(layers[-1][0].name, "classifier (last layer)")
    for n, w in layers:
        if g.tensors[w].data.size < MIN_SIZE:
            out.setdefault(n.name, f"fewer than {MIN_SIZE} weights")
    return out


def _matrix(w: np.ndarray) -> np.ndarray:
    return w.reshape(w.shape[0], -1)


def prune_array(w: np.ndarray, sparsity: float, pattern: str = "unstructured",
                threshold: Optional[float] = None) -> Tuple[np.ndarray, str]:
    """A copy of ``w`` with the ``sparsity`` fraction of smallest weights (or blocks) zeroed,
    or those below ``threshold`` (global pruning). Returns (pruned, pattern actually used)."""
    m = _matrix(np.array(w, copy=True))
    rows, cols = m.shape
    if pattern == "2:4":
        if cols % 4:
            pattern = "unstructured"
            sparsity = 0.5
        else:
            g4 = m.reshape(rows, cols // 4, 4)
            order = np.argsort(np.abs(g4), axis=2, kind="stable")
            np.put_along_axis(g4, order[:, :, :2], 0, axis=2)
            return m.reshape(w.shape), "2:4"
    block = {"block1x4": (1, 4), "block4x1": (4, 1)}.get(pattern)
    if block and (rows % block[0] or cols % block[1]):
        block, pattern = None, "unstructured"
    if block:
        br, bc = block
        tiles = m.reshape(rows // br, br, cols // bc, bc)
        score = np.abs(tiles).sum(axis=(1, 3)) / (br * bc)           # (RB, CB)
        flat = score.reshape(-1)
        if threshold is not None:
            drop = flat < threshold
        else:
            k = int(np.floor(sparsity * flat.size))
            drop = np.zeros(flat.size, bool)
            if k:
                drop[np.argpartition(flat, k - 1)[:k]] = True
        drop = drop.reshape(score.shape)
        tiles[np.broadcast_to(drop[:, None, :, None], tiles.shape)] = 0
        return m.reshape(w.shape), pattern
    flat = m.reshape(-1)
    if threshold is not None:
        flat[np.abs(flat) < threshold] = 0
    else:
        k = int(np.floor(sparsity * flat.size))
        if k:
            flat[np.argpartition(np.abs(flat), k - 1)[:k]] = 0
    return m.reshape(w.shape), "unstructured"


def sparsity_of(w) -> float:
    if isinstance(w, SparseArray):
        return 1.0 - w.density
    return 1.0 - np.count_nonzero(w) / max(w.size, 1)


def _global_threshold(g: Graph, names: Sequence[str], sparsity: float, pattern: str) -> float:
    scores = []
    for name in names:
        m = _matrix(np.asarray(g.tensors[name].data))
        block = {"block1x4": (1, 4), "block4x1": (4, 1)}.get(pattern)
        if block and m.shape[0] % block[0] == 0 and m.shape[1] % block[1] == 0:
            br, bc = block
            scores.append((np.abs(m.reshape(m.shape[0] // br, br, m.shape[1] // bc, bc)).sum(axis=(1, 3))
                           / (br * bc)).reshape(-1))
        else:
            scores.append(np.abs(m).reshape(-1))
    allv = np.concatenate(scores) if scores else np.zeros(1)
    return float(np.quantile(allv, sparsity))


def plan_sparsity(g: Graph, sparsity: Optional[float], layers: Optional[Dict[str, float]] = None) -> Dict[str, float]:
    """node name -> target sparsity: ``sparsity`` for every unprotected layer, ``layers``
    overriding (naming a protected layer prunes it)."""
    layers = dict(layers or {})
    known = {n.name for n, _ in prunable_layers(g)}
    unknown = sorted(set(layers) - known)
    if unknown:
        raise SparsityError(f"sparse layer(s) {unknown} are not prunable layers; prunable: "
                            + ", ".join(sorted(known)[:30]))
    prot = protected_layers(g)
    plan = {}
    for n, _ in prunable_layers(g):
        if n.name in layers:
            plan[n.name] = float(layers[n.name])
        elif sparsity is not None and n.name not in prot:
            plan[n.name] = float(sparsity)
    return plan


def prune_graph(g: Graph, plan: Dict[str, float], pattern: str = "unstructured", scope: str = "layer"
                ) -> List[dict]:
    """Zero weights of ``g`` in place (new dense arrays) by ``plan``; one record per layer."""
    by_node = {n.name: (n, w) for n, w in prunable_layers(g)}
    names = [by_node[k][1] for k, v in plan.items() if v > 0]
    thr = None
    if scope == "global" and names and pattern != "2:4":
        vals = {v for k, v in plan.items() if v > 0}
        thr = _global_threshold(g, names, max(vals), pattern)
    elif scope not in ("layer", "global"):
        raise SparsityError(f"sparse scope {scope!r}: 'layer' or 'global'")
    done: Dict[str, np.ndarray] = {}
    records = []
    for node_name, s in plan.items():
        node, wname = by_node[node_name]
        t = g.tensors[wname]
        before = sparsity_of(t.data)
        if s <= 0 or before >= s and thr is None:
            records.append({"node": node_name, "weight": wname, "target": s, "before": before,
                            "after": before, "pattern": "none"})
            continue
        if wname not in done:
            done[wname], used = prune_array(np.asarray(t.data), s, pattern, thr)
        t.data = done[wname]
        records.append({"node": node_name, "weight": wname, "target": s, "before": round(before, 4),
                        "after": round(sparsity_of(t.data), 4), "pattern": used})
    return records


def accuracy_drop(ref: Dict[str, np.ndarray], test: Dict[str, np.ndarray]) -> Tuple[float, str]:
    """1 - top-1 agreement on the first output with a class axis, else its relative L2 error."""
    name = next(iter(ref))
    a, b = np.asarray(ref[name], np.float64), np.asarray(test[name], np.float64)
    if a.ndim >= 2 and a.shape[-1] > 1:
        agree = np.mean(a.reshape(-1, a.shape[-1]).argmax(1) == b.reshape(-1, b.shape[-1]).argmax(1))
        return float(1.0 - agree), "1 - top-1 agreement"
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30)), "relative L2 error"


def evaluator(g: Graph, feeds: List[Dict[str, np.ndarray]]) -> Callable[[Graph], Dict[str, np.ndarray]]:
    from ..quantize.quantizer import run_collect
    return lambda graph: run_collect(graph, feeds, list(g.outputs))


def sensitivity_plan(g: Graph, feeds: List[Dict[str, np.ndarray]], plan: Dict[str, float], pattern: str,
                     max_drop: float, log=None) -> Tuple[Dict[str, float], dict]:
    """Per-layer sparsity under the accuracy budget (see module doc); returns (plan, record)."""
    say = log or (lambda s: None)
    run = evaluator(g, feeds)
    ref = run(g)
    by_node = {n.name: w for n, w in prunable_layers(g)}
    sens: Dict[str, Dict[float, float]] = {}
    metric = ""
    for node_name, cap in plan.items():
        levels = [lv for lv in LEVELS if lv <= cap + 1e-9] or [cap]
        if pattern == "2:4":
            levels = [0.5]
        sens[node_name] = {}
        for lv in levels:
            trial = g.copy()
            prune_graph(trial, {node_name: lv}, pattern)
            d, metric = accuracy_drop(ref, run(trial))
            sens[node_name][lv] = d
            if d > max_drop:
                break
    chosen = {}
    for node_name, curve in sens.items():
        ok = [lv for lv, d in curve.items() if d <= max_drop / 2]
        chosen[node_name] = max(ok) if ok else 0.0
    steps = []
    while True:
        trial = g.copy()
        prune_graph(trial, {k: v for k, v in chosen.items() if v > 0}, pattern)
        drop, metric = accuracy_drop(ref, run(trial))
        say(f"sparsity plan {chosen}: drop {drop:.4f}")
        if drop <= max_drop or not any(v > 0 for v in chosen.values()):
            break
        worst = max((k for k, v in chosen.items() if v > 0), key=lambda k: sens[k].get(chosen[k], 1.0))
        lower = [lv for lv in sens[worst] if lv < chosen[worst]]
        steps.append({"node": worst, "from": chosen[worst], "to": max(lower) if lower else 0.0, "drop": drop})
        chosen[worst] = max(lower) if lower else 0.0
    record = {"max_accuracy_drop": max_drop, "metric": metric, "samples": len(feeds),
              "sensitivity": [{"node": k, "weight": by_node[k], "drops": {str(lv): round(d, 4) for lv, d in v.items()}}
                              for k, v in sens.items()],
              "steps_down": steps, "chosen": chosen, "final_drop": drop, "met": drop <= max_drop}
    return {k: v for k, v in chosen.items() if v > 0}, record


def encode_graph(g: Graph, pattern: Optional[str] = None, min_sparsity: float = DETECT_SPARSITY) -> List[str]:
    """Encode every compute-layer weight with at least ``min_sparsity`` zeros whose encoding
    is smaller than dense; each encoding is checked to decode to the same array bit for bit.
    Returns the encoded tensor names."""
    done = []
    for _, wname in prunable_layers(g):
        t = g.tensors[wname]
        if isinstance(t.data, SparseArray) or sparsity_of(t.data) < min_sparsity:
            continue
        dense = np.asarray(t.data)
        enc = encode(dense, pattern)
        if not isinstance(enc, SparseArray):
            continue
        if not np.array_equal(enc.todense(), dense):
            raise SparsityError(f"encoding of {wname!r} ({enc.encoding}) does not round-trip")
        t.data = enc
        done.append(wname)
    return done


def correct_biases(g: Graph, dense: Graph, feeds: List[Dict[str, np.ndarray]], records: List[dict]) -> List[str]:
    """Bias correction after pruning: each pruned layer's bias absorbs the mean of what its
    removed weights contributed on the calibration samples, b += (W - W') E[x] per output
    channel (E[x]: the dense model's mean input per channel; Conv taps and padding are taken
    as seeing the channel mean). Pruning shifts every output's mean less this way. Returns
    the corrected node names; layers without a float32 bias input get one."""
    from ..ops.shapes import channels_last
    from ..quantize.quantizer import run_collect
    pruned = {r["node"] for r in records if r["pattern"] != "none"}
    nodes = [n for n in g.nodes if n.name in pruned and n.op in PRUNABLE_OPS]
    if not nodes or not feeds:
        return []
    x_names = [n.inputs[0] for n in nodes]
    acts = run_collect(dense, feeds, x_names)
    done = []
    for n in nodes:
        if n.op in ("MatMul", "FusedMatMul") or g.tensors[n.inputs[1]].dtype != "float32":
            continue                              # B (K, N) MatMul: left as pruned
        x = np.asarray(acts[n.inputs[0]], np.float64)
        w_new = np.asarray(g.tensors[n.inputs[1]].data, np.float64)
        w_old = np.asarray(dense.tensors[n.inputs[1]].data, np.float64)
        if n.op in ("Conv", "FusedConv"):
            if int(n.attrs.get("group", 1)) != 1:
                continue
            axis = x.ndim - 1 if channels_last(n) else 1
            mean = x.mean(axis=tuple(i for i in range(x.ndim) if i != axis))          # (C,)
            delta = (w_old - w_new).reshape(w_old.shape[0], w_old.shape[1], -1).sum(axis=2) @ mean
        else:                                     # Gemm: y = x' B' + C, B' (K, N) or (N, K) with transB
            if n.attrs.get("transA", 0) or float(n.attrs.get("alpha", 1.0)) != 1.0:
                continue
            mean = x.reshape(-1, x.shape[-1]).mean(axis=0)                             # (K,)
            d = w_old - w_new
            delta = d @ mean if n.attrs.get("transB", 0) else mean @ d
            if float(n.attrs.get("beta", 1.0)) != 1.0:
                continue
        m = delta.shape[0]
        bname = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
        if bname:
            b = g.tensors[bname]
            if not b.is_const or b.dtype != "float32" or b.data.size != m:
                continue
            b.data = (np.asarray(b.data, np.float64).reshape(-1) + delta).astype(np.float32).reshape(b.data.shape)
        else:
            bname = f"{n.name}.sparse_bias"
            g.add_tensor(bname, "float32", (m,), data=delta.astype(np.float32))
            while len(n.inputs) < 2:
                n.inputs.append("")
            n.inputs[2:3] = [bname]
        done.append(n.name)
    return done
