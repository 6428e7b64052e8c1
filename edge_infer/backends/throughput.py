"""What a backend sustains on this device, and what a node costs there.

A backend's *throughput profile* comes from a small microbenchmark run through the
public ``Backend.prepare`` / ``Executable.run`` interface (so it measures any backend
the same way, transfers and dispatch included):

============  ================================================  =====================
key           graph timed                                        derived
============  ================================================  =====================
dense         a small CNN: 7x7/2, 3x3, 1x1, 3x3/2 convs (107 MFLOP)  FLOP/s of dense ops
grouped       depthwise Conv 3x3, 64 ch, 56x56 (3.6 MFLOP)       FLOP/s of depthwise conv
group_dense   1x1 Conv, 4 groups, 136->544 ch, 28x28 (58 MFLOP)  FLOP/s of other grouped conv
memory        16 chained Add (scalar) on 2 MiB, minus 1          bytes/s of other ops
op_s          32 chained Add (scalar) on 16 floats, minus 1      seconds per dispatched op
dense_op_s    8 chained 3x3 Convs on 1x8x4x4, minus 1            seconds per dense op
run_s         1 Add on 16 floats, minus one op                   fixed seconds per run
transfer      1 Add on 2 MiB, minus its compute and run_s        host<->device bytes/s
int8_dense    the small CNN quantized to int8                    FLOP/s of int8 dense ops
int8_memory   Conv + 8 MaxPool 3x3 on 8x128x128, int8        bytes/s of int8 others
int8_grouped  the depthwise Conv quantized to int8               FLOP/s of int8 depthwise
============  ================================================  =====================

The conv graphs are timed as the converter leaves them (optimizer level 3: fused ops, NHWC;
the int8 ones quantized), read from artifacts bundled in ``edge_infer/data/microbench``
(built by its ``make_microbench.py``): profiling a device never imports the converter. The
layout transposes the optimizer adds are subtracted at their estimated cost.
A graph the backend does not cover leaves that key out (``estimate`` then uses
the CPU's value). Profiles are cached per device fingerprint in
``<cache dir>/throughput.json`` (see ``picker.cache_dir``), so a device pays
the microbenchmark (well under a second per backend) once.

The estimated time of a node: ``dense_op_s + flops / rate[class]`` for dense and grouped
ops, ``op_s + bytes / memory`` for the rest (they are bandwidth-bound); FLOPs and
bytes come from the op families' costs (``ops/cost.py``); window ops (pools,
reductions) make one pass per window element, so a "memory" op moves at least 8 B per FLOP.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from ..errors import EdgeInferError
from ..ir import Graph, Node
from ..ops.cost import node_flops, tensor_nbytes
from .base import Backend, running_nodes  # noqa: F401  (re-exported: picker, partition)
from .specialize import specialize

#: bump when the microbenchmark changes, so cached profiles are re-measured
MICROBENCH_VERSION = 7      # 7: int8_grouped (int8 depthwise had been costed at the fp32 rate)

DENSE_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedMatMul"})
INT8 = ("int8", "uint8")


def node_class(node: Node, graph: Graph) -> str:
    """Cost class: ``dense``, ``grouped`` (depthwise convolution) or ``memory``, prefixed
    ``int8_`` for int8 inputs."""
    x = graph.tensors.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
    prefix = "int8_" if x is not None and x.dtype in INT8 else ""
    if node.op in DENSE_OPS:
        if "Conv" in node.op and int(node.attrs.get("group", 1)) > 1:
            # depthwise (one input channel per group) is its own kernel; a few wide groups
            # (ShuffleNet's) are a GEMM per group: dense
            w = graph.tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
            shape = None if w is None else (w.data.shape if w.is_const else w.shape)
            if shape is None or len(shape) < 2 or shape[1] == 1:
                return prefix + "grouped"
            return prefix + "group_dense"
        return prefix + "dense"
    return prefix + "memory"


def node_work(node: Node, graph: Graph) -> Dict[str, float]:
    """{"flops", "bytes", "class"} of one node of a shape-inferred graph."""
    try:
        flops = node_flops(node, graph)
    except Exception:  # noqa: BLE001  (an op the counter does not know: count its bytes only)
        flops = 0
    moved = sum(tensor_nbytes(graph, i) for i in node.inputs) + sum(tensor_nbytes(graph, o) for o in node.outputs)
    return {"flops": float(flops), "bytes": float(moved), "class": node_class(node, graph)}


def _rate(profile: Dict[str, float], key: str, fallback: Optional[Dict[str, float]]) -> Optional[float]:
    v = profile.get(key)
    if not v and fallback is not None:
        v = fallback.get(key)
    if not v and key.startswith("int8_"):
        return _rate(profile, key[5:], fallback)
    if not v and key in ("grouped", "group_dense"):
        return _rate(profile, "dense", fallback)
    return v or None


def node_seconds(work: Dict[str, float], profile: Dict[str, float],
                 fallback: Optional[Dict[str, float]] = None) -> float:
    """Estimated seconds of a node (``node_work``) on a backend with this profile."""
    klass = work["class"]
    op_s = profile.get("op_s", 0.0)
    if klass.endswith("dense") or klass.endswith("grouped"):          # dense, group_dense, grouped
        rate = _rate(profile, klass, fallback) or 1e9
        return profile.get("dense_op_s", op_s) + work["flops"] / rate
    rate = _rate(profile, klass, fallback) or 1e9
    # window ops (pools, reductions) make a pass per window element: count 8 B per FLOP
    return op_s + max(work["bytes"], 8 * work["flops"]) / rate


# -- the microbenchmark ----------------------------------------------------------------

def _add_chain(n_ops: int, numel: int) -> Graph:
    """``n_ops`` chained ``x + c_k`` (distinct scalars: no runtime can merge or drop them)."""
    g = Graph("microbench_add")
    g.add_input("x", "float32", (1, numel))
    prev = "x"
    for k in range(n_ops):
        g.add_const(f"c{k}", np.array(0.001 * (k + 1), np.float32))
        g.add_node("Add", [prev, f"c{k}"], [f"a{k}"], name=f"add{k}")
        prev = f"a{k}"
    g.outputs = [prev]
    return g


def _specialized(g: Graph) -> Graph:
    return specialize(g, {n: g.tensors[n].shape for n in g.inputs})


def _bundled(key: str) -> Optional[Graph]:
    """Microbenchmark graph ``key`` as the converter leaves a model (opt level 3: fused ops,
    NHWC convolutions; int8 ones quantized), read from the bundled artifacts
    (edge_infer/data/microbench: measuring a device never imports the converter), specialized;
    None if the file is missing or unreadable."""
    from ..artifact import load_artifact
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "microbench", f"{key}.eim")
    try:
        g, _ = load_artifact(path)
        return _specialized(g)
    except (EdgeInferError, OSError):
        return None


def _rest_seconds(graph: Graph, nodes: List[Node], prof: Dict[str, float]) -> float:
    """Estimated seconds of the running nodes of ``graph`` other than ``nodes`` (layout transposes)."""
    skip = {id(n) for n in nodes}
    return sum(node_seconds(node_work(n, graph), prof) for n in running_nodes(graph) if id(n) not in skip)


def _covered(backend: Backend, g: Graph) -> bool:
    try:
        return all(backend.supports(n, g) for n in running_nodes(g))
    except Exception:  # noqa: BLE001
        return False


def prepared_runner(backend: Backend, graph: Graph, threads: int) -> Callable[[], object]:
    """``graph`` (shapes concrete) prepared on ``backend`` with seeded random inputs and run
    once (the warm-up), as a no-argument call that runs it again; raises what prepare or the
    run raises."""
    ex = backend.prepare(graph, threads=threads)
    feeds = {n: np.random.default_rng(1).standard_normal(graph.tensors[n].shape).astype(graph.tensors[n].dtype)
             for n in graph.inputs}
    ex.run(feeds)
    return lambda: ex.run(feeds)


def time_graph(backend: Backend, graph: Graph, threads: int, reps: int = 15,
               budget_s: float = 0.25) -> Optional[float]:
    """Best-of-``reps`` seconds of one run of ``graph`` (shapes concrete) on ``backend``,
    or None when the backend does not cover it or fails to prepare/run it."""
    if not _covered(backend, graph):
        return None
    try:
        run = prepared_runner(backend, graph, threads)
        best, t_start = float("inf"), time.perf_counter()
        for _ in range(reps):
            t0 = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - t0)
            if time.perf_counter() - t_start > budget_s:
                break
        return best
    except (EdgeInferError, RuntimeError, ValueError, MemoryError, OSError):
        return None


def measure_profile(backend: Backend, threads: int = 1) -> Dict[str, float]:
    """Run the microbenchmark (module doc) on ``backend``; returns the profile."""
    small, big = 16, 2**19                      # floats: 64 B and 2 MiB
    prof: Dict[str, float] = {"version": MICROBENCH_VERSION}
    t_small1 = time_graph(backend, _specialized(_add_chain(1, small)), threads, reps=15)
    t_small32 = time_graph(backend, _specialized(_add_chain(32, small)), threads, reps=9)
    if t_small1 is None or t_small32 is None:
        raise EdgeInferError(f"backend {backend.name!r} cannot run the microbenchmark (Add)")
    op_s = max((t_small32 - t_small1) / 31, 1e-7)
    prof["op_s"] = op_s
    prof["run_s"] = max(t_small1 - op_s, 0.0)
    t_big1 = time_graph(backend, _specialized(_add_chain(1, big)), threads, reps=9)
    t_big16 = time_graph(backend, _specialized(_add_chain(16, big)), threads, reps=9)
    if t_big1 is not None and t_big16 is not None:
        per_op = (t_big16 - t_big1) / 15 - op_s
        if per_op <= 0.02 * t_big1:
            # noise swamped the difference (a loaded machine): charge the single op's whole run
            per_op = max(t_big1 - prof["run_s"] - op_s, 1e-7)
        prof["memory"] = 2 * 4 * big / per_op
        transfer_s = max(t_big1 - per_op - op_s - prof["run_s"], 0.02 * t_big1)
        prof["transfer"] = 2 * 4 * big / transfer_s
    chain1, chain8 = _bundled("conv_chain1"), _bundled("conv_chain8")
    t_conv1 = None if chain1 is None else time_graph(backend, chain1, threads, reps=9)
    t_conv8 = None if chain8 is None else time_graph(backend, chain8, threads, reps=9)
    if t_conv1 is not None and t_conv8 is not None:
        prof["dense_op_s"] = max((t_conv8 - t_conv1) / 7, op_s)
    for key in ("dense", "grouped", "group_dense", "int8_dense", "int8_memory", "int8_grouped"):
        sg = _bundled(key)
        if sg is None:
            continue
        t = time_graph(backend, sg, threads)
        nodes = [n for n in running_nodes(sg) if node_class(n, sg) == key]
        if t is None or not nodes:
            continue
        works = [node_work(n, sg) for n in nodes]
        io = sum(tensor_nbytes(sg, x) for x in list(sg.inputs) + list(sg.outputs))
        per_op = prof.get("dense_op_s", op_s) if key.endswith("dense") or key.endswith("grouped") else op_s
        compute = (t - prof["run_s"] - _rest_seconds(sg, nodes, prof) - len(nodes) * per_op
                   - io / prof.get("transfer", float("inf")))
        amount = sum(w["flops"] if key.endswith("dense") or key.endswith("grouped") else max(w["bytes"], 8 * w["flops"])
                     for w in works)
        prof[key] = amount / max(compute, t * 0.2)
    return prof


def graph_seconds(graph: Graph, profile: Dict[str, float], nodes: Optional[List[Node]] = None,
                  fallback: Optional[Dict[str, float]] = None) -> float:
    """Estimated seconds of one run of ``nodes`` (default: all that run) as one executable."""
    nodes = running_nodes(graph) if nodes is None else nodes
    return profile.get("run_s", 0.0) + sum(node_seconds(node_work(n, graph), profile, fallback) for n in nodes)


ProfileSource = Callable[[str], Optional[Dict[str, float]]]
