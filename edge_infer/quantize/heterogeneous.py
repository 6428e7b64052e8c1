"""Heterogeneous concatenations: inputs whose calibrated ranges are far apart.

One int8 scale per tensor spreads 256 levels over the whole range of a Concat's output. When
the inputs' ranges differ by orders of magnitude, the narrow input gets a handful of levels or
none: a YOLO export concatenates box coordinates in pixels (0..640) with class probabilities
(0..1), and with one scale every probability rounds to 0 (the model detects nothing).

``find_heterogeneous(g, ranges)`` reads the calibration ranges of each Concat's inputs: input
``i`` of width ``w_i`` gets ``255 * w_i / W`` levels under the output's range ``W``; a Concat
where one gets fewer than ``MIN_LEVELS`` is heterogeneous. When its output reaches a graph
output through data movement only (an *output concat*), nothing after it needs int8: it can
stay float32 with each input branch int8 at its own scale, dequantized just before the concat
(the quantizer tries both and keeps the one the held-out metric prefers). An internal
heterogeneous concat (one feeding a convolution) is reported; per-channel-group activation
scales would be its fix, which the int8 kernels (one scale per tensor, TFLite's scheme) do
not have.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..ir import Graph

#: an input with fewer int8 levels than this under the concat's common scale is crushed
MIN_LEVELS = 16.0
#: ops through which a concat's output may reach a graph output and still be an output concat
TO_OUTPUT_OPS = frozenset(("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Concat"))


def _reaches_output(g: Graph, tensor: str, cons) -> bool:
    """Whether ``tensor`` is a graph output or flows into one through data movement only."""
    seen, todo = set(), [tensor]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in g.outputs:
            return True
        for c in cons.get(t, []):
            if c.op not in TO_OUTPUT_OPS:
                return False
            todo.extend(o for o in c.outputs if o)
    return False


def find_heterogeneous(g: Graph, ranges: Dict[str, Tuple[float, float]],
                       min_levels: Optional[float] = None) -> List[dict]:
    """Concat nodes of ``g`` whose inputs' calibrated ranges are far apart (module docstring):
    ``[{"node", "inputs": [{"tensor", "range", "levels"}], "min_levels", "output_concat"}]``."""
    if min_levels is None:
        min_levels = MIN_LEVELS
    cons = g.consumers()
    found = []
    for n in g.nodes:
        if n.op != "Concat":
            continue
        ins = [i for i in n.inputs if i and not g.tensors[i].is_const and i in ranges]
        if len(ins) < 2:
            continue
        lo = min(min(ranges[i][0], 0.0) for i in ins)
        hi = max(max(ranges[i][1], 0.0) for i in ins)
        width = hi - lo
        if width <= 0:
            continue
        rows = []
        for i in ins:
            a, b = min(ranges[i][0], 0.0), max(ranges[i][1], 0.0)
            rows.append({"tensor": i, "range": [float(ranges[i][0]), float(ranges[i][1])],
                         "levels": round(255.0 * (b - a) / width, 2)})
        least = min(r["levels"] for r in rows)
        if least < min_levels:
            found.append({"node": n.name, "inputs": rows, "min_levels": least,
                          "output_concat": _reaches_output(g, n.outputs[0], cons)})
    return found


def describe(h: dict) -> str:
    """One line for the report / a float reason."""
    worst = min(h["inputs"], key=lambda r: r["levels"])
    span = max(h["inputs"], key=lambda r: r["range"][1] - r["range"][0])
    return (f"heterogeneous concat: input {worst['tensor']!r} (range {worst['range'][0]:.3g}..{worst['range'][1]:.3g}) "
            f"would get {worst['levels']:.1f} of 256 int8 levels next to {span['tensor']!r} "
            f"({span['range'][0]:.3g}..{span['range'][1]:.3g}); kept float32 after per-branch int8")
