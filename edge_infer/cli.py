"""The ``edge-infer`` command line."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional

import numpy as np

from .errors import EdgeInferError


class UsageError(EdgeInferError):
    """A command-line argument is wrong."""


def parse_shape_args(items: Optional[List[str]]) -> Dict[str, tuple]:
    """``["x=1,3,224,224"]`` -> ``{"x": (1, 3, 224, 224)}``."""
    shapes = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise UsageError(f"--input-shape wants NAME=D1,D2,...; got {item!r}")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise UsageError(f"--input-shape {item!r}: dims must be integers") from None
        if any(d <= 0 for d in shapes[name]):
            raise UsageError(f"--input-shape {item!r}: dims must be positive")
    return shapes


def load_input_files(items: List[str], input_names: List[str]) -> Dict[str, np.ndarray]:
    """``NAME=FILE.npy`` pairs, a bare ``FILE.npy`` for one-input models, or an ``.npz``."""
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = None, item
        if not os.path.isfile(path):
            raise UsageError(f"input file not found: {path}")
        try:
            data = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise UsageError(f"{path}: not a .npy/.npz array file ({e})") from None
        if isinstance(data, np.lib.npyio.NpzFile):
            feeds.update({k: data[k] for k in data.files})
            continue
        if name is None:
            if len(input_names) != 1:
                raise UsageError(f"model has inputs {input_names}: use --input NAME=FILE.npy")
            name = input_names[0]
        feeds[name] = data
    return feeds


# -- commands -----------------------------------------------------------------

def cmd_convert(args) -> int:
    from .convert import convert
    if not os.path.isfile(args.model):
        raise UsageError(f"model file not found: {args.model}")
    rep = convert(args.model, args.output, input_shapes=parse_shape_args(args.input_shape),
                  opt_level=args.opt_level, disable_passes=args.disable_pass or (),
                  allow_drift=args.allow_drift, target=args.target, layout=args.layout,
                  memory_limit=args.memory_limit, max_bytes=args.max_bytes,
                  **quantize_options(args), **sparse_options(args))
    b, a = rep["before"], rep["after"]
    print(f"converted {args.model} -> {rep['artifact']}")
    print(f"  nodes {b['nodes']} -> {a['nodes']}, parameters {a['parameters']:,}")
    if "flops" in b and "flops" in a:
        print(f"  FLOPs {b['flops']:,} -> {a['flops']:,}, bytes moved {b['bytes_moved']:,} -> {a['bytes_moved']:,}")
    print(f"  size {rep['source_bytes']:,} B (source) -> {rep['artifact_bytes']:,} B "
          f"({rep['artifact_bytes'] / max(rep['source_bytes'], 1):.2f}x)")
    print(f"  verified: max relative error {rep['max_relative_error']:.2e} (tolerance {rep['tolerance']:g})")
    if rep.get("quantization"):
        from .quantize import format_summary
        print(format_summary(rep["quantization"]))
        if args.report:
            print(f"  report: {args.report}")
    if rep.get("sparsity"):
        from .sparse import format_summary as sparse_summary
        print(sparse_summary(rep["sparsity"]))
    return 0


def sparse_options(args) -> dict:
    """convert()'s sparsity keywords from --sparsity / --sparse-pattern / --sparse-layer."""
    layers = {}
    for spec in args.sparse_layer or ():
        name, sep, val = spec.rpartition("=")
        try:
            layers[name] = float(val)
        except ValueError:
            name = ""
        if not sep or not name:
            raise UsageError(f"--sparse-layer {spec!r}: expected NAME=SPARSITY (e.g. conv3=0.9)")
    if args.sparsity is None and not layers:
        if args.sparse_pattern or args.sparse_global:
            raise UsageError("--sparse-pattern / --sparse-global need --sparsity or --sparse-layer")
        return {"sparse_encode": not args.no_sparse}
    for what, v in [("--sparsity", args.sparsity)] + [(f"--sparse-layer {k}", v) for k, v in layers.items()]:
        if v is not None and not 0.0 <= v < 1.0:
            raise UsageError(f"{what}: a fraction in [0, 1), got {v}")
    return {"sparsity": args.sparsity, "sparse_pattern": args.sparse_pattern or "unstructured",
            "sparse_layers": layers, "sparse_scope": "global" if args.sparse_global else "layer",
            "sparse_max_accuracy_drop": args.max_accuracy_drop, "sparse_encode": not args.no_sparse}


def quantize_options(args) -> dict:
    """convert()'s quantization keywords from the --quantize/--calib* flags."""
    if not args.quantize:
        pruning = args.sparsity is not None or bool(args.sparse_layer)
        extra = [f for f, v in (("--calib", None if pruning else args.calib),
                                ("--calib-samples", None if pruning else args.calib_samples),
                                ("--calib-recipe", None if pruning else args.calib_recipe),
                                ("--keep-float", args.keep_float),
                                ("--max-accuracy-drop", None if pruning else args.max_accuracy_drop),
                                ("--report", args.report), ("--task", args.task))
                 if v is not None]
        if extra:
            raise UsageError(f"{', '.join(extra)} need(s) --quantize int8" + ("" if pruning else " (or --sparsity)"))
        if pruning and args.calib and args.calib != "random" and not os.path.exists(args.calib):
            raise UsageError(f"calibration data not found: {args.calib}")
        return {"calib": args.calib, "calib_samples": args.calib_samples, "calib_recipe": args.calib_recipe} \
            if pruning and args.calib else {}
    if not args.calib:
        raise UsageError("--quantize int8 needs calibration data: --calib PATH (a folder of images, a video, "
                         ".npy/.npz), or --calib random to calibrate on seeded random inputs")
    if args.calib != "random" and not os.path.exists(args.calib):
        raise UsageError(f"calibration data not found: {args.calib}")
    if args.calib_samples is not None and args.calib_samples <= 0:
        raise UsageError("--calib-samples must be positive")
    keep = [k.strip() for k in (args.keep_float or "").split(",") if k.strip()]
    return {"quantize": args.quantize, "calib": args.calib, "calib_samples": args.calib_samples,
            "calib_recipe": args.calib_recipe, "calib_method": args.calib_method, "keep_float": keep,
            "max_accuracy_drop": args.max_accuracy_drop, "report": args.report,
            **({"task": args.task} if args.task else {})}


def cmd_export(args) -> int:
    from .artifact import load_artifact
    from .quantize.export_onnx import export_qdq
    graph, _ = load_artifact(args.artifact)
    if args.format == "tflite":
        from .export_tflite import export_tflite
        data = export_tflite(graph, args.output)
        int8 = sum(1 for t in graph.tensors.values() if t.dtype == "int8")
        print(f"exported {args.artifact} -> {args.output} (TFLite flatbuffer): {len(data)} bytes, "
              f"{int8} int8 tensors")
        return 0
    _, counts = export_qdq(graph, args.output)
    int8 = sum(1 for t in graph.tensors.values() if t.dtype == "int8")
    print(f"exported {args.artifact} -> {args.output} (ONNX opset 21, {args.format}): {counts['nodes']} nodes, "
          f"{counts['QuantizeLinear']} QuantizeLinear, {counts['DequantizeLinear']} DequantizeLinear, "
          f"{int8} int8 tensors")
    return 0


def cmd_run(args) -> int:
    from .runtime import Runtime
    rt = Runtime(args.artifact, backend=args.backend, threads=args.threads, memory_limit=args.memory_limit)
    if not args.input:
        raise UsageError("give the inputs: --input NAME=FILE.npy (model inputs: "
                         + ", ".join(f"{i.name} {i.dtype}{list(i.shape)}" for i in rt.inputs) + ")")
    feeds = load_input_files(args.input, [i.name for i in rt.inputs])
    out = rt.run(feeds)
    if getattr(args, "explain", False):
        from .backends.picker import format_report
        print(format_report(rt.backend_report()))
    if args.output:
        np.savez(args.output, **out)
        print(f"saved {len(out)} output(s) to {args.output}")
    for name, arr in out.items():
        desc = f"{name}: {arr.dtype}{list(arr.shape)}"
        if arr.size and arr.dtype.kind in "fiu":
            desc += f" min {arr.min():.4g} max {arr.max():.4g} mean {arr.mean():.4g}"
            if arr.ndim == 2 and arr.shape[1] > 1:
                desc += f" argmax {arr.argmax(axis=1).tolist()[:16]}"
        print(desc)
    return 0


def inspect_artifact(path: str, memory_limit=None) -> dict:
    """Everything ``inspect`` shows, as a dict (the memory plan under ``memory_limit``,
    default: the artifact's recorded limit or its target's budget)."""
    from collections import Counter
    from .artifact import load_artifact
    from .memory.budget import default_memory_limit, parse_size
    graph, meta = load_artifact(path)
    if memory_limit is None and (meta.get("memory_limit") or (meta.get("target") or {}).get("memory_budget_mb")):
        memory_limit = default_memory_limit(meta)[0]
    ops = Counter(n.op for n in graph.nodes)
    consts = [t for t in graph.tensors.values() if t.is_const]

    def info(n):
        t = graph.tensors[n]
        return {"name": n, "dtype": t.dtype, "shape": list(t.shape) if t.shape is not None else None}
    return {
        "path": path, "file_bytes": os.path.getsize(path), "graph": graph.name,
        "memory": memory_plan(graph, memory_limit=parse_size(memory_limit)),
        "inputs": [info(n) for n in graph.inputs], "outputs": [info(n) for n in graph.outputs],
        "nodes": len(graph.nodes), "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
        "constants": len(consts), "parameters": int(sum(t.data.size for t in consts)),
        "weight_bytes": int(sum(t.data.nbytes for t in consts)),
        "tensors": [{"name": t.name, "dtype": t.dtype, "shape": list(t.data.shape), "bytes": int(t.data.nbytes),
                     "encoding": getattr(t.data, "encoding", "raw")}
                    for t in sorted(consts, key=lambda t: -t.data.nbytes)],
        "sparsity": _sparse_compression(graph),
        "provenance": meta.get("provenance", {}), "optimization": meta.get("optimization", {}),
        "target": meta.get("target", {}).get("name"),
    }


def _sparse_compression(graph) -> dict:
    from .sparse import compression
    return compression(graph)


def memory_plan(graph, shapes=None, memory_limit=None) -> dict:
    """Weights, planned activation arena (vs naive sum and lower bound) and workspace,
    for the given input shapes (symbolic dims taken as 1), planned under ``memory_limit``
    (None: unbounded); ``tiled``: the nodes that run in bands to fit it."""
    from .runtime import Runtime
    from .verify import random_inputs
    weights = int(sum(t.data.nbytes for t in graph.tensors.values() if t.is_const))
    try:
        rt = Runtime(graph, backend="cpu", memory_limit=memory_limit)
        feeds = random_inputs(graph, 0, shapes)
        ex = rt.plan({k: v.shape for k, v in feeds.items()})
    except EdgeInferError as e:
        return {"weights_bytes": weights, "error": str(e)}
    plan = ex.arena_plan.summary()
    return {"weights_bytes": weights, "input_shapes": {k: list(v.shape) for k, v in feeds.items()},
            **plan, "workspace_bytes": int(ex.workspace_bytes), "scratch_bytes": dict(ex.scratch_bytes),
            "memory_limit": memory_limit,
            "tiled": {n: t for n, t in ex.notes.items() if " bands of " in t}}


def partition_plan(path: str, backend: str = "auto", input_shapes=None) -> tuple:
    """(choice, partition plan) of an artifact for its default input shapes (symbolic dims 1)."""
    from .backends.picker import partition_for
    from .runtime import Runtime, specialize
    rt = Runtime(path, backend=backend)
    shapes = {**(rt.default_shapes() or {}), **(input_shapes or {})}
    g = specialize(rt.graph, shapes)
    return partition_for(g, backend, (rt.meta.get("target") or {}).get("backends") or (), rt.threads)


def cmd_inspect(args) -> int:
    if getattr(args, "partition", False):
        from .backends.partition import format_plan
        from .backends.picker import format_report
        choice, plan = partition_plan(args.artifact, args.backend or "auto")
        if args.json:
            print(json.dumps({"choice": choice.report, "plan": plan.summary()}, indent=2, default=str))
        else:
            print(format_report(choice.report))
            print(format_plan(plan))
        return 0
    if args.backend:
        raise UsageError("--backend goes with --partition")
    rep = inspect_artifact(args.artifact, args.memory_limit)
    if args.json:
        print(json.dumps(rep, indent=2, default=str))
        return 0
    p = rep["provenance"]
    print(f"{rep['path']}: {rep['file_bytes']:,} bytes, graph {rep['graph']!r}")
    print(f"  source {p.get('source')} sha256 {str(p.get('source_sha256'))[:16]}…, "
          f"{p.get('converter')}, {p.get('created')}")
    for kind in ("inputs", "outputs"):
        for t in rep[kind]:
            print(f"  {kind[:-1]:6} {t['name']}: {t['dtype']}{t['shape']}")
    print(f"  {rep['nodes']} nodes, {rep['parameters']:,} parameters, {rep['weight_bytes']:,} weight bytes")
    print("  ops: " + ", ".join(f"{k} x{v}" for k, v in rep["ops"].items()))
    opt = rep["optimization"]
    if opt.get("passes"):
        print(f"  passes (opt level {opt.get('opt_level')}):")
        for e in opt["passes"]:
            print(f"    {e['pass']:28} round {e['round']}: {e['changes']} change(s), "
                  f"nodes {e['nodes_before']} -> {e['nodes_after']}")
    m = rep["memory"]
    if "error" in m:
        print(f"  memory plan: unavailable ({m['error']})")
    else:
        print(f"  memory (inputs {m['input_shapes']}): weights {m['weights_bytes']:,} B (mmap), "
              f"arena {m['arena_bytes']:,} B (naive {m['naive_bytes']:,}, lower bound {m['lower_bound_bytes']:,}, "
              f"{m['in_place']} in place), workspace {m['workspace_bytes']:,} B"
              + (f", memory limit {m['memory_limit']:,} B" if m.get("memory_limit") else ""))
        roles = ", ".join(f"{k} {v:,} B" for k, v in m.get("scratch_bytes", {}).items() if v)
        print(f"    scratch: {len(m.get('scratch_in_arena', {}))} kernel(s) in arena bytes free during their step"
              + (f"; shared by role: {roles}" if roles else ""))
        for name, note in m.get("tiled", {}).items():
            print(f"    tiled to fit: {name}: {note}")
    if rep.get("sparsity", {}).get("encoded_tensors"):
        from .sparse.report import format_compression
        print(format_compression(rep["sparsity"], limit=8))
    print("  largest tensors:")
    for t in rep["tensors"][:8]:
        print(f"    {t['name']:40} {t['dtype']:8} {str(t['shape']):22} {t['bytes']:>12,} B")
    return 0


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB."""
    try:
        import resource
        import sys as _sys
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if _sys.platform == "darwin" else peak / 2**10
    except ImportError:  # Windows
        import psutil
        return psutil.Process().memory_info().peak_wset / 2**20


def bench_artifact(path: str, runs: int = 50, warmup: int = 5, backend: str = "auto",
                   threads: Optional[int] = None, input_shapes=None, memory_limit=None) -> dict:
    """Time a model: latency percentiles and a per-op time table (under ``memory_limit``)."""
    import time
    from .runtime import Runtime
    from .verify import random_inputs
    rt = Runtime(path, backend=backend, threads=threads, memory_limit=memory_limit)
    feeds = random_inputs(rt.graph, 0, shapes=input_shapes)
    for _ in range(max(warmup, 1)):
        rt.run(feeds)
    lat = []
    for _ in range(runs):
        t0 = time.perf_counter()
        rt.run(feeds)
        lat.append(time.perf_counter() - t0)
    per_node: Dict[str, list] = {}
    prof_runs = max(1, min(runs, 10))
    for _ in range(prof_runs):
        _, times = rt.run_profiled(feeds)
        for name, op, sec in times:
            per_node.setdefault(name, [op, 0.0])[1] += sec / prof_runs
    by_op: Dict[str, list] = {}
    for name, (op, sec) in per_node.items():
        e = by_op.setdefault(op, [0, 0.0])
        e[0] += 1
        e[1] += sec
    lat_ms = np.array(lat) * 1e3
    total = sum(v[1] for v in by_op.values()) or 1.0
    return {
        "artifact": path, "backend": rt.backend.name, "threads": rt.threads, "runs": runs,
        "median_ms": float(np.median(lat_ms)), "p90_ms": float(np.percentile(lat_ms, 90)),
        "p99_ms": float(np.percentile(lat_ms, 99)), "min_ms": float(lat_ms.min()),
        "latencies_ms": lat_ms.tolist(),
        "peak_rss_mb": peak_rss_mb(),
        "memory_limit": rt.memory_limit, "memory_limit_source": rt.memory_limit_source,
        "plan_bytes": rt.memory_stats()["held_bytes"],
        "ops": [{"op": op, "count": c, "ms": s * 1e3, "share": s / total}
                for op, (c, s) in sorted(by_op.items(), key=lambda kv: -kv[1][1])],
        "nodes": [{"name": n, "op": op, "ms": s * 1e3}
                  for n, (op, s) in sorted(per_node.items(), key=lambda kv: -kv[1][1])[:20]],
    }


def bench_backends(path: str, which: str, runs: int, warmup: int, threads=None, input_shapes=None) -> dict:
    """Time each listed (or every available) backend on the model; store the medians in the
    picker's timings cache so that later ``backend="auto"`` picks use them."""
    from .backends import BACKENDS
    from .backends.picker import _instantiate, candidate_names, model_key, record_timing
    from .runtime import Runtime, specialize
    from .verify import random_inputs
    probe_rt = Runtime(path, backend="cpu", threads=threads)
    prefer = (probe_rt.meta.get("target") or {}).get("backends") or ()
    names = candidate_names(prefer) if which == "all" else [n.strip() for n in which.split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKENDS and n != "native"]
    if unknown:
        raise UsageError(f"unknown backend(s) {unknown}; known: {', '.join(sorted(BACKENDS))}")
    feeds = random_inputs(probe_rt.graph, 0, shapes=input_shapes)
    key = model_key(specialize(probe_rt.graph, {k: v.shape for k, v in feeds.items()}), probe_rt.threads)
    results, skipped = [], {}
    for name in dict.fromkeys("cpu" if n == "native" else n for n in names):
        _, ok, why = _instantiate(name)
        if not ok:
            skipped[name] = why
            continue
        try:
            rep = bench_artifact(path, runs, warmup, name, threads, input_shapes)
        except EdgeInferError as e:
            skipped[name] = str(e).splitlines()[0]
            continue
        record_timing(key, rep["backend"], rep["median_ms"], runs)
        results.append({k: rep[k] for k in ("backend", "median_ms", "p90_ms", "min_ms", "peak_rss_mb")})
    if not results:
        raise UsageError("no backend could run the model: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    fastest = min(results, key=lambda r: r["median_ms"])
    choice = Runtime(path, backend="auto", threads=threads).backend_report(
        {k: v.shape for k, v in feeds.items()})
    return {"artifact": path, "model_key": key, "results": results, "skipped": skipped,
            "fastest": fastest["backend"], "choice": choice["choice"], "why": choice["why"]}


def cmd_bench(args) -> int:
    if getattr(args, "backends", None):
        rep = bench_backends(args.artifact, args.backends, args.runs, args.warmup, args.threads,
                             parse_shape_args(args.input_shape))
        if args.json:
            print(json.dumps(rep, indent=2))
            return 0
        best = min(r["median_ms"] for r in rep["results"])
        print(f"{rep['artifact']}: {len(rep['results'])} backend(s), {args.runs} runs each")
        print(f"  {'backend':12} {'median ms':>10} {'p90 ms':>9} {'vs fastest':>10}")
        for r in rep["results"]:
            print(f"  {r['backend']:12} {r['median_ms']:10.3f} {r['p90_ms']:9.3f} {r['median_ms'] / best:9.2f}x")
        for name, why in rep["skipped"].items():
            print(f"  {name:12} skipped: {why}")
        print(f"  timings stored for later picks (model key {rep['model_key']}); "
              f"auto now picks {rep['choice']}: {rep['why']}")
        return 0
    rep = bench_artifact(args.artifact, args.runs, args.warmup, args.backend, args.threads,
                         parse_shape_args(args.input_shape), memory_limit=args.memory_limit)
    latencies = rep.pop("latencies_ms")
    if getattr(args, "plot", None):
        from .monitor.plot import plot_bench
        try:
            plot_bench(rep, latencies, args.plot)
        except ImportError as e:   # matplotlib missing
            raise UsageError(str(e)) from None
        print(f"plot saved to {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(rep, indent=2))
        return 0
    print(f"{rep['artifact']}: backend {rep['backend']}, {rep['threads']} thread(s), {rep['runs']} runs")
    print(f"  latency median {rep['median_ms']:.3f} ms, p90 {rep['p90_ms']:.3f} ms, "
          f"p99 {rep['p99_ms']:.3f} ms; peak RSS {rep['peak_rss_mb']:.1f} MB")
    if rep.get("memory_limit"):
        print(f"  plans hold {rep['plan_bytes']:,} B (arena + workspace) under a memory limit of "
              f"{rep['memory_limit']:,} B ({rep['memory_limit_source']})")
    print(f"  {'op':24} {'count':>5} {'ms':>9} {'share':>6}")
    for e in rep["ops"]:
        print(f"  {e['op']:24} {e['count']:5d} {e['ms']:9.3f} {e['share']:6.1%}")
    return 0


def cmd_ops(args) -> int:
    from .backends import BACKENDS
    table = {}
    for name, factory in BACKENDS.items():
        b = factory()
        ok, why = b.available()
        table[name] = {"available": ok, "why_not": why, "ops": sorted(b.supported_ops()) if ok else []}
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    for name, e in table.items():
        state = "available" if e["available"] else f"unavailable ({e['why_not']})"
        print(f"{name}: {state}, {len(e['ops'])} ops")
        ops = e["ops"]
        for k in range(0, len(ops), 8):
            print("  " + ", ".join(ops[k:k + 8]))
    return 0


def cmd_stream(args) -> int:
    try:
        from .pipeline import run_stream
    except ImportError as e:
        raise UsageError(str(e)) from None
    try:
        stats = run_stream(args.artifact, args.source, sinks=args.sink or ["-"], recipe=args.recipe,
                           postprocess=args.post, labels=args.labels, metrics_port=args.metrics_port,
                           metrics_host=args.metrics_host, metrics_jsonl=args.metrics_jsonl, monitor=args.monitor,
                           max_frames=args.max_frames, backend=args.backend, threads=args.threads,
                           profile_every=args.profile_every)
    except ImportError as e:   # an optional dependency (OpenCV) is missing
        raise UsageError(str(e)) from None
    print("edge-infer: " + json.dumps(stats), file=sys.stderr)
    return 0


def cmd_probe(args) -> int:
    from .probe import format_probe, match_target, probe
    info = probe()
    match = match_target(info)
    if args.json:
        print(json.dumps({**info, "target": {"name": match.name, "reason": match.reason,
                                             "candidates": match.candidates}}, indent=2))
    else:
        print(format_probe(info, match))
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo
    return run_demo(runs=args.runs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edge-infer", description="Convert models on a workstation; run them on the edge.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"edge_infer {__import__('edge_infer').__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("convert", help="convert an ONNX or TFLite model to an .eim artifact")
    c.add_argument("model")
    c.add_argument("-o", "--output", help="artifact path (default: MODEL with .eim)")
    c.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...", help="pin an input's shape")
    c.add_argument("--opt-level", type=int, default=3, choices=range(4), help="0 none .. 3 all passes")
    c.add_argument("--disable-pass", action="append", metavar="NAME", help="skip a pass (debugging)")
    c.add_argument("--allow-drift", action="store_true", help="warn instead of refusing a drifting result")
    c.add_argument("--target", help="device profile (rpi4, rpi5, jetson-nano, ...)")
    c.add_argument("--layout", choices=("auto", "nchw", "nhwc"), default="auto",
                   help="data layout of spatial ops after optimization (level 3); inputs and "
                        "outputs keep theirs (default: the target's or backend's preference)")
    c.add_argument("--quantize", choices=("int8",), help="post-training quantization (after fp32 optimization)")
    c.add_argument("--calib", metavar="PATH", help="calibration data: a folder of images, a video, .npy/.npz, "
                   "or 'random' (seeded random inputs)")
    c.add_argument("--calib-samples", type=int, metavar="N", help="use at most N calibration samples")
    c.add_argument("--calib-recipe", metavar="NAME|FILE", help="preprocessing of calibration images: a JSON "
                   "recipe or a bundled name (imagenet, yolo, unit_range, symmetric_range, digits, ...)")
    c.add_argument("--calib-method", default="minmax", choices=("minmax", "ema", "percentile", "entropy", "mse"),
                   help="activation range observer (default minmax)")
    c.add_argument("--keep-float", metavar="A,B", help="node names that stay float32")
    c.add_argument("--max-accuracy-drop", type=float, metavar="X", help="keep the most damaging layers "
                   "float32 until the drop vs fp32 on held-out samples (of --task's metric) is <= X (a fraction); with "
                   "--sparsity also the pruning budget (per-layer sparsity from a sensitivity analysis)")
    c.add_argument("--report", metavar="FILE.json", help="write the quantization accuracy report")
    c.add_argument("--task", choices=("auto", "classify", "detect", "segment", "generic"),
                   help="what the int8 accuracy report and --max-accuracy-drop measure: top-1, detection F1, "
                        "map IoU or per-output SQNR (default auto: from the output shapes)")
    c.add_argument("--max-bytes", metavar="SIZE", help="refuse a model whose graph would allocate more "
                   "(a tensor, the constants, a ConstantOfShape/Expand/Tile/Range output; default: the "
                   "target's budget or the memory available, 1GB for one generated tensor)")
    c.add_argument("--memory-limit", metavar="SIZE", help="record a memory budget (e.g. 256MB) for "
                   "activations + workspaces that runtimes use by default")
    c.add_argument("--sparsity", type=float, metavar="X", help="magnitude-prune compute layers to this fraction "
                   "of zeros (not the first conv, depthwise convs, the classifier); with --max-accuracy-drop a "
                   "sensitivity analysis on --calib samples picks per-layer sparsity")
    c.add_argument("--sparse-pattern", choices=("unstructured", "block1x4", "block4x1", "2:4"),
                   help="pruning pattern (default unstructured)")
    c.add_argument("--sparse-layer", action="append", metavar="NAME=X", help="per-layer sparsity (repeatable)")
    c.add_argument("--sparse-global", action="store_true", help="one magnitude threshold across layers")
    c.add_argument("--no-sparse", action="store_true", help="never store weights sparse-encoded")
    c.set_defaults(fn=cmd_convert)

    e = sub.add_parser("export", help="export an artifact (fp32 or int8) as ONNX QDQ or TFLite")
    e.add_argument("artifact")
    e.add_argument("--format", default="onnx-qdq", choices=("onnx-qdq", "tflite"), help="output format")
    e.add_argument("-o", "--output", required=True, metavar="FILE.onnx|FILE.tflite")
    e.set_defaults(fn=cmd_export)

    r = sub.add_parser("run", help="run an artifact on .npy inputs")
    r.add_argument("artifact")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    r.add_argument("--output", metavar="OUT.npz")
    r.add_argument("--backend", default="auto")
    r.add_argument("--threads", type=int)
    r.add_argument("--memory-limit", metavar="SIZE", help="e.g. 256MB: bound activations + workspaces "
                   "(kernels tile to fit; a model that cannot fit is refused, naming the least it needs); "
                   "default: the artifact's, its target's, else the available memory")
    r.add_argument("--explain", action="store_true", help="say which backend ran and why")
    r.set_defaults(fn=cmd_run)

    i = sub.add_parser("inspect", help="show an artifact's graph, sizes and provenance")
    i.add_argument("artifact")
    i.add_argument("--memory-limit", metavar="SIZE", help="show the memory plan under this limit")
    i.add_argument("--json", action="store_true")
    i.add_argument("--partition", action="store_true", help="show how the graph splits across backends")
    i.add_argument("--backend", help="with --partition: the backend to partition for (default: the picker's)")
    i.set_defaults(fn=cmd_inspect)

    b = sub.add_parser("bench", help="latency percentiles and per-op times")
    b.add_argument("artifact")
    b.add_argument("--runs", type=int, default=50)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--backend", default="auto")
    b.add_argument("--backends", metavar="all|A,B", help="time each backend (all: every available one) and "
                   "store the timings for later backend=auto picks")
    b.add_argument("--threads", type=int)
    b.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...")
    b.add_argument("--memory-limit", metavar="SIZE", help="bound activations + workspaces, as for run")
    b.add_argument("--json", action="store_true")
    b.add_argument("--plot", metavar="FILE.png", help="latency histogram and per-op times (needs matplotlib)")
    b.set_defaults(fn=cmd_bench)

    o = sub.add_parser("ops", help="supported ops per backend")
    o.add_argument("--json", action="store_true")
    o.set_defaults(fn=cmd_ops)

    d = sub.add_parser("demo", help="convert and run the bundled digits model")
    d.add_argument("--runs", type=int, default=100)
    d.set_defaults(fn=cmd_demo)

    s = sub.add_parser("stream", help="run a camera / video / folder / stream through a model")
    s.add_argument("artifact")
    s.add_argument("--source", required=True, help="camera index (0), picam (Pi camera), video file, folder of "
                   "images, stream URL, or synthetic[:PATTERN[:COUNT[:FPS]]]")
    s.add_argument("--sink", action="append", help="- (JSON lines, default), FILE.jsonl, FILE.mp4, window, null")
    s.add_argument("--recipe", help="preprocessing recipe: JSON file or calibration/ name (default: from the model)")
    s.add_argument("--post", help="classify[:K], yolo, yolov5, yolov8, ssd, segment, raw (default: classify "
                   "for one 2-D output)")
    s.add_argument("--labels", help="labels file (one per line, or JSON)")
    s.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (0: any free port)")
    s.add_argument("--metrics-host", default="127.0.0.1", help="bind address of the metrics endpoint")
    s.add_argument("--metrics-jsonl", metavar="FILE", help="append a metrics snapshot every second")
    s.add_argument("--monitor", action="store_true", help="live metrics line on stderr")
    s.add_argument("--max-frames", type=int)
    s.add_argument("--profile-every", type=int, default=0, metavar="N", help="per-op times every Nth frame")
    s.add_argument("--backend", default="auto")
    s.add_argument("--threads", type=int)
    s.set_defaults(fn=cmd_stream)

    pr = sub.add_parser("probe", help="describe this machine and the target profile that fits it")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(fn=cmd_probe)
    return p


def _check_file(path: str, what: str) -> None:
    if not os.path.isfile(path):
        raise UsageError(f"{what} not found: {path}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help()
        return 2
    try:
        if hasattr(args, "artifact"):
            _check_file(args.artifact, "artifact")
        return args.fn(args)
    except (EdgeInferError, OSError, MemoryError) as e:
        if args.debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"edge-infer: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
