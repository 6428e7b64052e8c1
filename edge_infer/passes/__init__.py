"""Graph passes and the pass manager.

Each pass is a function ``pass_fn(graph) -> int`` in a module of its own that
rewrites the graph in place and returns how many changes it made (0 = nothing
to do). Passes are grouped by optimisation level; ``optimize`` runs the passes
of every level up to the requested one, repeatedly, until none changes anything.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Iterable, List, Optional

from ..ir import Graph
from .cancel_transposes import cancel_transposes
from .convert_layout import convert_layout
from .eliminate_common_subexpressions import eliminate_common_subexpressions
from .eliminate_dead_code import eliminate_dead_code
from .eliminate_identity import eliminate_identity
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .fold_scale_bias import fold_scale_bias
from .fuse_conv_activation import fuse_conv_activation
from .fuse_residual_add import fuse_residual_add
from .recognize_activations import recognize_activations
from .recognize_layer_norm import recognize_layer_norm

PassFn = Callable[[Graph], int]

#: level -> passes added at that level (a level also runs every lower level's passes).
#: 1 cleanup: nothing changes numerically but the graph gets smaller.
#: 2 fusion: weights absorb BatchNorm and constant scales/offsets, decomposed activations
#:   and LayerNorm chains become single ops, then conv/gemm/matmul + residual + activation
#:   fuse (cost-gated: passes/cost_model.py). Order matters within a round: folding first (so a conv's
#:   output feeds the activation directly), residual fusion before activation fusion (so
#:   Conv+Add+Relu becomes one node, not Conv+Relu next to an Add).
#: 3 layout.
LEVELS: Dict[int, List[PassFn]] = {
    0: [],
    1: [fold_constants, eliminate_identity, eliminate_common_subexpressions, cancel_transposes,
        eliminate_dead_code],
    2: [fold_batchnorm, recognize_activations, recognize_layer_norm, fold_scale_bias, fuse_residual_add,
        fuse_conv_activation],
    3: [convert_layout],
}

ALL_PASSES: Dict[str, PassFn] = {fn.__name__: fn for fns in LEVELS.values() for fn in fns}


def passes_for_level(level: int, disabled: Iterable[str] = ()) -> List[PassFn]:
    disabled = set(disabled)
    unknown = disabled - set(ALL_PASSES)
    if unknown:
        from ..errors import EdgeInferError
        raise EdgeInferError(f"unknown pass(es) {sorted(unknown)}; known: {sorted(ALL_PASSES)}")
    return [fn for lv in sorted(LEVELS) if lv <= level for fn in LEVELS[lv] if fn.__name__ not in disabled]


def optimize(graph: Graph, level: int = 3, disabled: Iterable[str] = (), max_rounds: int = 20,
             check: Optional[Callable[[Graph, str], None]] = None) -> List[dict]:
    """Run the passes of ``level`` to a fixed point. Returns a report: one entry per
    pass application that changed something. ``check(graph, pass_name)`` (optional)
    runs after each changing pass, e.g. the validator or an equivalence check."""
    report = []
    passes = passes_for_level(level, disabled)
    for rnd in range(max_rounds):
        changed = 0
        for fn in passes:
            before = len(graph.nodes)
            t0 = time.perf_counter()
            n = fn(graph)
            if n:
                changed += n
                report.append({"pass": fn.__name__, "round": rnd, "changes": n,
                               "nodes_before": before, "nodes_after": len(graph.nodes),
                               "seconds": round(time.perf_counter() - t0, 4)})
                if check is not None:
                    check(graph, fn.__name__)
        if not changed:
            break
    return report
