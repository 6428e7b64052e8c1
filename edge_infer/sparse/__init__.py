"""Sparse weights: compact encodings kept in memory, magnitude pruning, sensitivity, report.

``encodings.py`` is the in-memory and on-disk form, ``pruning.py`` the convert-time pruning and
sensitivity analysis, ``report.py`` the compression report. ``prune_model`` runs before
quantization (zeros stay dense arrays); ``encode_model`` is the last step of conversion."""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..ir import Graph
from .encodings import ENCODINGS, SparseArray, encode, validate  # noqa: F401
from .pruning import (PATTERNS, SparsityError, accuracy_drop, check_options, correct_biases,  # noqa: F401
                      encode_graph, evaluator, plan_sparsity, protected_layers, prune_graph, sensitivity_plan)
from .report import compression, format_summary  # noqa: F401


def _feeds(graph: Graph, calib, calib_samples, calib_recipe) -> List[Dict[str, np.ndarray]]:
    from ..quantize.calibration import load_calibration, random_feeds
    if calib is None:
        return random_feeds(graph, int(calib_samples or 16), seed=7)
    return load_calibration(calib, graph, samples=calib_samples or 256, recipe=calib_recipe)


def prune_model(graph: Graph, sparsity: Optional[float] = None, pattern: str = "unstructured",
                layers: Optional[Dict[str, float]] = None, scope: str = "layer",
                max_accuracy_drop: Optional[float] = None, calib=None, calib_samples: Optional[int] = None,
                calib_recipe=None, bias_correction: bool = True, log=None) -> Tuple[Graph, dict]:
    """A copy of ``graph`` with its compute-layer weights magnitude-pruned (see pruning.py),
    and the report: per-layer sparsity, protected layers, the sensitivity analysis under
    ``max_accuracy_drop`` and the accuracy effect (pruned vs dense) on calibration samples."""
    check_options(sparsity, pattern, layers, max_accuracy_drop)
    g = graph.copy()
    plan = plan_sparsity(g, sparsity, layers)
    feeds = _feeds(graph, calib, calib_samples, calib_recipe)
    budget = None
    if max_accuracy_drop is not None and plan:
        free = {k: v for k, v in plan.items() if k not in (layers or {})}
        chosen, budget = sensitivity_plan(g, feeds, free, pattern, float(max_accuracy_drop), log)
        plan = {**chosen, **{k: v for k, v in plan.items() if k in (layers or {})}}
    records = prune_graph(g, plan, pattern, scope)
    run = evaluator(graph, feeds)
    ref = run(graph)
    corrected = []
    if bias_correction and calib is not None:     # real samples only: random inputs mislead it
        plain = g.copy()
        corrected = correct_biases(g, graph, feeds, records)
        if corrected:
            d_plain = accuracy_drop(ref, run(plain))[0]
            if accuracy_drop(ref, run(g))[0] > d_plain:   # kept only where it helps
                g, corrected = plain, []
    got = run(g)
    drop, metric = accuracy_drop(ref, got)
    name = graph.outputs[0]
    a, b = np.asarray(ref[name], np.float64), np.asarray(got[name], np.float64)
    rep = {"sparsity": sparsity, "pattern": pattern, "scope": scope, "layers": records,
           "bias_corrected": corrected,
           "protected": {k: v for k, v in protected_layers(graph).items() if k not in plan},
           "budget": budget,
           "accuracy": {"samples": len(feeds), "drop": drop, "metric": metric,
                        "rel_error": float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30)),
                        "source": calib if isinstance(calib, str) else ("random" if calib is None else
                                                                         type(calib).__name__)}}
    return g, rep


def encode_model(graph: Graph, pattern: Optional[str] = None, verify_samples: int = 2) -> Tuple[Graph, dict]:
    """Encode every weight sparse enough (pruned, or arriving sparse) and verify: each encoding
    decodes to its dense array bit for bit, and the graph run with the sparse kernels matches
    the graph with the dense weights (fp32 within 1e-5 relative, int8 exactly)."""
    from ..backends.cpu.kernels import sparse as sk
    from ..runtime import Runtime
    from ..verify import random_inputs, relative_error
    g = graph.copy()
    names = encode_graph(g, pattern)
    rep = {"compression": compression(g), "encoded": names}
    if not names:
        return g, rep
    worst, exact = 0.0, True
    with sk.forced("always"):
        for seed in range(verify_samples):
            feeds = random_inputs(graph, seed)
            want = Runtime(graph, backend="cpu").run(feeds)
            got = Runtime(g, backend="cpu").run(feeds)
            for k in want:
                if want[k].dtype.kind == "f":
                    worst = max(worst, relative_error(got[k], want[k]))
                elif not np.array_equal(got[k], want[k]):
                    exact = False
    if worst > 1e-5 or not exact:
        raise SparsityError(f"sparse kernels disagree with the dense pruned weights (relative error {worst:.3g}, "
                            f"integer outputs {'equal' if exact else 'differ'})")
    rep["verification"] = {"samples": verify_samples, "max_relative_error": worst, "integer_exact": exact,
                           "summary": f"max relative error {worst:.2e}, integer outputs bit-exact"}
    return g, rep
