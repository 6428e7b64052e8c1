"""When is a fused kernel cheaper? The cost model behind the fusion passes.

The fused CPU kernels (``backends/cpu/kernels/fused.py``) run the base op (Conv,
Gemm, MatMul: it writes the output buffer, bias included), then the epilogue
*in place on that buffer*: ``out += z`` for a residual, then the activation.
Compared with the unfused graph this

* saves one intermediate tensor per fused op (the arena holds fewer live buffers),
  its write and re-read through a separate kernel, and one dispatch per fused op;
* runs the epilogue while the output is still hot in cache: the base op has just
  written it, so the epilogue's passes over it hit the cache *if the epilogue's
  working set fits*.

Activations that are one in-place ufunc chain on the output (Relu, Clip/ReLU6,
Sigmoid, Tanh, HardSigmoid) and the bias/residual adds need no scratch: the
fused epilogue makes exactly the passes the separate kernels would, minus the
intermediate buffer and the dispatch, so these fusions are always profitable.

Activations that must read x again after starting to write y (LeakyRelu,
HardSwish, SiLU, tanh-Gelu) need one scratch buffer the size of the output, and
the erf Gelu four (``make_erf``'s float32 workspaces). That scratch is owned by
the fused node for the life of the plan (kernel workspaces are not shared
through the arena, unlike the intermediate tensor of the unfused graph), and
each of its passes streams output + scratch. Such a fusion pays only while the
whole epilogue working set

    working_set = output bytes + residual bytes + temporaries x output bytes

fits in the per-core L2 cache of the target (``profile["cache"]["l2_kb"]``,
the generic-x86_64 profile when the graph carries none): then the extra passes
stay in cache and the fused node saves the DRAM round trip of the intermediate.
Beyond it every pass goes to DRAM with a larger footprint than the unfused
pair, so the activation stays a separate node.

Sizes use the graph's inferred shapes with symbolic dims counted as 1 (the
batch-1 case edge targets run); an unknown shape counts as 0 bytes (fits).

The native C kernels (``backends/cpu/native``) apply every activation of
``EPILOGUE_TEMPS`` in registers, or in place on the rows they have just
stored, with no scratch at all: for them the fusion only saves (the
intermediate, its round trip, a step), whatever the output's size. That is the
runtime an artifact meets on every target with a C compiler, so it is the
default: ``profile["fusion"]["epilogue"] = "native"``. ``"numpy"`` (a target
that runs the numpy kernels) applies the working-set rule above. Keeping a
SiLU apart from a large conv had cost the YOLO-style detector four separate
steps, 0.5 of its 14 ms (fp32, 1 thread).

``profile["fusion"]`` may override: ``{"policy": "auto" | "always" | "never",
"epilogue": "native" | "numpy", "cache_fraction": 1.0}`` (the share of L2 the
epilogue may use).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional, Tuple

import numpy as np

from ..ir import Graph, Node

DEFAULT_TARGET = "generic-x86_64"
DEFAULT_L2_KB = 1024

#: scratch buffers (each the size of the output) the in-place epilogue of an activation needs
EPILOGUE_TEMPS = {"": 0, "Relu": 0, "Clip": 0, "Sigmoid": 0, "Tanh": 0, "HardSigmoid": 0,
                  "LeakyRelu": 1, "HardSwish": 1, "SiLU": 1, "GeluTanh": 1, "Gelu": 4}


@lru_cache(maxsize=1)
def _default_profile() -> dict:
    try:
        from ..targets import load_target
        return load_target(DEFAULT_TARGET)
    except Exception:                      # a broken install still optimizes
        return {"name": DEFAULT_TARGET, "cache": {"l2_kb": DEFAULT_L2_KB}}


def target_profile(graph: Graph) -> dict:
    """The profile the passes optimize for: graph.metadata["target"], else generic-x86_64."""
    prof = graph.metadata.get("target")
    return prof if isinstance(prof, dict) and prof else _default_profile()


def cache_budget(profile: Optional[dict]) -> int:
    """Bytes of cache an epilogue may use: L2 per core times the cache fraction."""
    prof = profile or _default_profile()
    cache = prof.get("cache") or {}
    l2 = cache.get("l2_kb") or _default_profile().get("cache", {}).get("l2_kb") or DEFAULT_L2_KB
    frac = float((prof.get("fusion") or {}).get("cache_fraction", 1.0))
    return int(float(l2) * 1024 * frac)


def tensor_bytes(graph: Graph, name: str) -> int:
    """Bytes of tensor ``name`` with symbolic dims as 1 (0 when the shape is unknown)."""
    t = graph.tensors.get(name) if name else None
    if t is None or t.shape is None:
        return 0
    n = 1
    for d in t.shape:
        n *= int(d) if isinstance(d, (int, np.integer)) else 1
    return n * np.dtype(t.dtype).itemsize


def fusion_is_profitable(node: Node, graph: Graph, profile: Optional[dict] = None) -> Tuple[bool, str]:
    """Is the proposed fused ``node`` (FusedConv / FusedGemm / FusedMatMul, not yet in
    the graph; its output tensor is) cheaper than the ops it replaces? (bool, reason)."""
    prof = profile if profile is not None else target_profile(graph)
    policy = str((prof.get("fusion") or {}).get("policy", "auto"))
    act = str(node.attrs.get("activation", "") or "")
    out = tensor_bytes(graph, node.outputs[0])
    z = tensor_bytes(graph, node.inputs[3]) if node.op == "FusedConv" and len(node.inputs) > 3 else 0
    if act not in EPILOGUE_TEMPS:
        return False, f"no in-place epilogue for activation {act!r}"
    temps = EPILOGUE_TEMPS[act]
    ws = out + z + temps * out
    budget = cache_budget(prof)
    if policy == "never":
        return False, "fusion disabled by the target profile (policy never)"
    if policy == "always":
        return True, f"forced by the target profile (working set {ws:,} B, cache budget {budget:,} B)"
    if temps == 0:
        return True, (f"in-place epilogue without scratch: saves the {out:,} B intermediate's "
                      f"round trip and a dispatch (working set {ws:,} B)")
    if str((prof.get("fusion") or {}).get("epilogue", "native")) == "native":
        return True, (f"the native kernels apply {act} in registers, no scratch: saves the "
                      f"{out:,} B intermediate's round trip and a step")
    if ws <= budget:
        return True, (f"epilogue working set {ws:,} B (output {out:,} + residual {z:,} + "
                      f"{temps} temp x {out:,}) fits the L2 budget {budget:,} B")
    return False, (f"epilogue working set {ws:,} B (output {out:,} + residual {z:,} + "
                   f"{temps} temp x {out:,}) exceeds the L2 budget {budget:,} B: "
                   f"{act} stays a separate op")


def decision(node: Node, pattern: str, fused: bool, reason: str, graph: Graph,
             profile: Optional[dict] = None) -> dict:
    """One entry of graph.metadata["fusion_decisions"]."""
    prof = profile if profile is not None else target_profile(graph)
    act = str(node.attrs.get("activation", "") or "")
    out = tensor_bytes(graph, node.outputs[0])
    z = tensor_bytes(graph, node.inputs[3]) if node.op == "FusedConv" and len(node.inputs) > 3 else 0
    return {"node": node.name, "pattern": pattern, "fused": bool(fused), "reason": reason,
            "working_set_bytes": out + z + EPILOGUE_TEMPS.get(act, 0) * out,
            "budget_bytes": cache_budget(prof), "target": prof.get("name", "")}
