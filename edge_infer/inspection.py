"""What ``edge-infer inspect`` reports about an artifact: ``inspect_artifact`` (a dict: graph,
signature, weights, the memory plan, quantization, sparsity, names), ``memory_plan`` (arena,
workspace, scratch and the kernels tiled to fit a memory limit, as a CPU plan declares them)
and ``partition_plan``; ``format_inspect`` renders the dict as the command prints it."""
from __future__ import annotations

import os
from typing import List

from .errors import EdgeInferError


def inspect_artifact(path: str, memory_limit=None, trusted_keys=None) -> dict:
    """Everything ``inspect`` shows, as a dict (the memory plan under ``memory_limit``,
    default: the artifact's recorded limit or its target's budget). With ``trusted_keys``
    the artifact loads only if signed by one of them (``signature.verified`` is then true)."""
    from collections import Counter
    from .artifact import load_artifact, read_info
    from .artifact_compact import read_side_table, short_id
    from .memory.budget import default_memory_limit, parse_size
    from .sparse.encodings import SparseArray
    graph, meta = load_artifact(path, trusted_keys=trusted_keys)
    sig = read_info(path).signature
    side = read_side_table(path)
    ids = {name: short_id(k) for k, name in enumerate(graph.tensors)} if side else {}
    if memory_limit is None and (meta.get("memory_limit") or (meta.get("target") or {}).get("memory_budget_mb")):
        memory_limit = default_memory_limit(meta)[0]
    ops = Counter(n.op for n in graph.nodes)
    consts = [t for t in graph.tensors.values() if t.is_const]

    def info(n):
        t = graph.tensors[n]
        return {"name": n, "dtype": t.dtype, "shape": list(t.shape) if t.shape is not None else None}
    return {
        "path": path, "file_bytes": os.path.getsize(path), "graph": graph.name,
        "signature": {"signed": sig is not None, "key_id": sig.key_id if sig else None,
                      "verified": sig is not None and trusted_keys is not None},
        "memory": memory_plan(graph, memory_limit=parse_size(memory_limit)),
        "inputs": [info(n) for n in graph.inputs], "outputs": [info(n) for n in graph.outputs],
        "nodes": len(graph.nodes), "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
        "constants": len(consts), "parameters": int(sum(t.data.size for t in consts)),
        "weight_bytes": int(sum(t.data.nbytes for t in consts)),
        "tensors": [{"name": t.name, "dtype": t.dtype, "shape": list(t.data.shape), "bytes": int(t.data.nbytes),
                     "encoding": t.data.encoding if isinstance(t.data, SparseArray) else "raw", **({"id": ids[t.name]} if ids else {})}
                    for t in sorted(consts, key=lambda t: -t.data.nbytes)],
        "format": "%d.%d" % read_info(path).version, "names": _names_summary(side),
        "sparsity": _sparse_compression(graph),
        "provenance": meta.get("provenance", {}), "optimization": meta.get("optimization", {}),
        "target": meta.get("target", {}).get("name"),
        "int8_nodes": sum(1 for n in graph.nodes if any(o and graph.tensors[o].dtype == "int8" for o in n.outputs)),
        "quantization": meta.get("quantization", {}),
        "requant": _requant_counts(graph),
    }


def _requant_counts(graph) -> dict:
    """{mode: nodes} of the int8 nodes whose output requantization has a mode (ops/qmath.py)."""
    from .ops.qmath import REQUANT_OPS
    counts = {}
    for n in graph.nodes:
        if n.op in REQUANT_OPS and any(o and graph.tensors[o].dtype == "int8" for o in n.outputs):
            mode = str(n.attrs.get("requant", "fixed"))
            counts[mode] = counts.get(mode, 0) + 1
    return counts


def _names_summary(side) -> dict:
    """How the artifact stores names: in place (format 1.1), or as short ids with the original
    names in a side table (1.2), some or all of them stripped (``convert --strip-names``)."""
    if side is None:
        return {"storage": "in place"}
    kept = {k: sum(1 for n in v if n is not None) for k, v in side.items()}
    return {"storage": "side table", "tensors_named": kept["tensors"], "tensors": len(side["tensors"]),
            "nodes_named": kept["nodes"], "nodes": len(side["nodes"])}


def _sparse_compression(graph) -> dict:
    from .sparse import compression
    return compression(graph)


def _some(names, n: int = 6) -> str:
    """The first ``n`` of ``names`` joined, and how many more."""
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def memory_plan(graph, shapes=None, memory_limit=None) -> dict:
    """Weights, planned activation arena (vs naive sum and lower bound) and workspace,
    for the given input shapes (default: the shapes a dynamic model was verified at, else
    symbolic dims 1), planned under ``memory_limit`` (None: unbounded); ``tiled``: the nodes
    that run in bands to fit it."""
    from .runtime import Runtime
    from .verify import random_inputs
    weights = int(sum(t.data.nbytes for t in graph.tensors.values() if t.is_const))
    try:
        rt = Runtime(graph, backend="cpu", memory_limit=memory_limit)
        feeds = random_inputs(graph, 0, shapes)
        ex = rt.plan({k: v.shape for k, v in feeds.items()})
    except EdgeInferError as e:
        return {"weights_bytes": weights, "error": str(e)}
    from .ops.dynamic import data_dependent_tensors
    plan = ex.arena_plan.summary()
    # a staged plan (run-time shapes) has no steps fixed up front
    steps = ex.step_summary() or {"steps": 0, "native_steps": 0, "numpy_steps": []}
    return {"weights_bytes": weights, "input_shapes": {k: list(v.shape) for k, v in feeds.items()},
            **plan, "workspace_bytes": int(ex.workspace_bytes), "scratch_bytes": dict(ex.scratch_bytes),
            "memory_limit": memory_limit, **steps, "tiled": dict(ex.tiled),
            # 3x3 stride-1 fp32 convs: those on Winograd (either form), and why the others are not
            "winograd": sorted(n for n, why in ex.winograd.items() if why is None),
            "not_winograd": {n: why for n, why in ex.winograd.items() if why is not None},
            # shapes decided at run time: the arena above is the static head's (backends/cpu/staged.py)
            "data_dependent": data_dependent_tensors(ex.graph)}


def partition_plan(path: str, backend: str = "auto", input_shapes=None, trusted_keys=None) -> tuple:
    """(choice, partition plan) of an artifact for its default input shapes (``Runtime.default_shapes``)."""
    from .backends.picker import partition_for
    from .runtime import Runtime, specialize
    rt = Runtime(path, backend=backend, trusted_keys=trusted_keys)
    shapes = {**(rt.default_shapes() or {}), **(input_shapes or {})}
    g = specialize(rt.graph, shapes)
    return partition_for(g, backend, (rt.meta.get("target") or {}).get("backends") or (), rt.threads)


def format_inspect(rep: dict, n_keys: int = 0) -> str:
    """The text ``edge-infer inspect`` prints for ``inspect_artifact``'s dict (``n_keys``: how
    many --trust keys the signature was checked against)."""
    lines: List[str] = []
    out = lines.append
    p = rep["provenance"]
    out(f"{rep['path']}: {rep['file_bytes']:,} bytes, format {rep['format']}, graph {rep['graph']!r}")
    sig = rep["signature"]
    if not sig["signed"]:
        out("  signature: none (unsigned)")
    else:
        state = (f"verified against --trust ({n_keys} key(s))" if sig["verified"]
                 else "not verified (no --trust KEY.pub given)")
        out(f"  signature: Ed25519 by key {sig['key_id']}, {state}")
    out(f"  source {p.get('source')} sha256 {str(p.get('source_sha256'))[:16]}…, "
          f"{p.get('converter')}, {p.get('created')}")
    for kind in ("inputs", "outputs"):
        for t in rep[kind]:
            out(f"  {kind[:-1]:6} {t['name']}: {t['dtype']}{t['shape']}")
    out(f"  {rep['nodes']} nodes, {rep['parameters']:,} parameters, {rep['weight_bytes']:,} weight bytes")
    out("  ops: " + ", ".join(f"{k} x{v}" for k, v in rep["ops"].items()))
    q = rep.get("quantization") or {}
    if rep.get("int8_nodes") or q:
        floats = q.get("float_nodes") or {}
        out(f"  int8: {rep.get('int8_nodes', 0)} of {rep['nodes']} nodes"
              + (f" ({q['source']})" if q.get("source") else "")
              + ("; float32: " + "; ".join(f"{k} ({v})" for k, v in list(floats.items())[:6])
                 if isinstance(floats, dict) and floats else ""))
        rq = rep.get("requant") or {}
        if rq:
            out("  requantization: " + ", ".join(
                f"{v} {k} ({'float32 multiplier, one rounding' if k == 'fp32' else 'TFLite fixed point'})"
                for k, v in sorted(rq.items())))
    opt = rep["optimization"]
    if opt.get("passes"):
        out(f"  passes (opt level {opt.get('opt_level')}):")
        for e in opt["passes"]:
            out(f"    {e['pass']:28} round {e['round']}: {e['changes']} change(s), "
                  f"nodes {e['nodes_before']} -> {e['nodes_after']}")
    m = rep["memory"]
    if "error" in m:
        out(f"  memory plan: unavailable ({m['error']})")
    else:
        out(f"  memory (inputs {m['input_shapes']}): weights {m['weights_bytes']:,} B (mmap), "
              f"arena {m['arena_bytes']:,} B (naive {m['naive_bytes']:,}, lower bound {m['lower_bound_bytes']:,}, "
              f"{m['in_place']} in place, {m.get('views', 0)} placed inside another: no copy), "
              f"workspace {m['workspace_bytes']:,} B"
              + (f", memory limit {m['memory_limit']:,} B" if m.get("memory_limit") else ""))
        out(f"  kernels: {m['native_steps']} of {m['steps']} steps native"
              + (f" (numpy: {', '.join(m['numpy_steps'])})" if m["numpy_steps"] else ""))
        for name, why in list(m.get("numpy_notes", {}).items())[:20]:
            out(f"    not native: {name} ({why})")
        fused = m.get("fused_activations") or {}
        if fused:
            out(f"    int8 activations fused into their conv's epilogue (a 256-entry table): {len(fused)}: "
                + _some([f"{c} + {a}" for a, c in fused.items()]))
        blocks = m.get("fused_squeeze_excite") or {}
        if blocks:
            out(f"    int8 squeeze-excite blocks run as one step: {len(blocks)}: "
                + _some([f"{' -> '.join(v)} -> {k}" for k, v in blocks.items()]))
        folded = m.get("fused_inputs") or {}
        if folded:
            out("    int8 input quantized in the stem conv's line buffers (no int8 input copies): "
                + _some([f"{a} -> {c}" for a, c in folded.items()]))
        roles = ", ".join(f"{k} {v:,} B" for k, v in m.get("scratch_bytes", {}).items() if v)
        out(f"    scratch: {len(m.get('scratch_in_arena', {}))} kernel(s) in arena bytes free during their step"
              + (f"; shared by role: {roles}" if roles else ""))
        for name, note in m.get("tiled", {}).items():
            out(f"    tiled to fit: {name}: {note}")
        wino, skip = m.get("winograd") or [], m.get("not_winograd") or {}
        if wino or skip:
            out(f"    Winograd (F(4x4,3x3) or F(2x2,3x3): each conv's plan note says which): {len(wino)} of {len(wino) + len(skip)} 3x3 stride-1 conv(s)"
                + (f": {_some(wino)}" if wino else "")
                + (f"; not: {_some([f'{n} ({why})' for n, why in skip.items()])}" if skip else ""))
        if m.get("data_dependent"):
            out("  shapes decided at run time (CPU, planned in stages; the arena above is the static head's):")
            for name, why in m["data_dependent"].items():
                out(f"    {name}: {why}")
    if rep.get("sparsity", {}).get("encoded_tensors"):
        from .sparse.report import format_compression
        out(format_compression(rep["sparsity"], limit=8))
    nm = rep["names"]
    if nm["storage"] == "side table":
        out(f"  names: short ids in the graph; original names of {nm['tensors_named']}/{nm['tensors']} tensors "
              f"and {nm['nodes_named']}/{nm['nodes']} nodes in the side table"
              + ("" if nm["tensors_named"] == nm["tensors"] else " (the others were stripped: shown by id)"))
    out("  largest tensors:" + ("  (id: the tensor's short id in the file)" if nm["storage"] == "side table" else ""))
    for t in rep["tensors"][:8]:
        out(f"    {t.get('id', ''):>4} {t['name']:40} {t['dtype']:8} {str(t['shape']):22} {t['bytes']:>12,} B")
    return "\n".join(lines)
