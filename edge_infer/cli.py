"""The ``edge-infer`` command line."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional

import numpy as np

from .errors import EdgeInferError, QuantizationDriftError
from .inspection import format_inspect, inspect_artifact, partition_plan
from .npyio import read_array_file

#: exit status of ``convert`` when int8 broke an output (and no --allow-drift); user errors exit 2
EXIT_DRIFT = 3


class UsageError(EdgeInferError):
    """A command-line argument is wrong."""


def parse_shape_args(items: Optional[List[str]], flag: str = "--input-shape") -> Dict[str, tuple]:
    """``["x=1,3,224,224"]`` -> ``{"x": (1, 3, 224, 224)}`` (``flag`` names the option in errors)."""
    shapes = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise UsageError(f"{flag} wants NAME=D1,D2,...; got {item!r}")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise UsageError(f"{flag} {item!r}: dims must be integers") from None
        if any(d <= 0 for d in shapes[name]):
            raise UsageError(f"{flag} {item!r}: dims must be positive")
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
        data = read_array_file(path, UsageError)
        if isinstance(data, dict):
            feeds.update(data)
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
    if args.output:
        _check_output_path(args.output)
    import warnings
    from .errors import QuantizationDriftWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", QuantizationDriftWarning)      # printed below, as the CLI does
        rep = convert(args.model, args.output, input_shapes=parse_shape_args(args.input_shape),
                      verify_shapes=parse_shape_args(args.verify_shape, "--verify-shape"),
                      opt_level=args.opt_level, disable_passes=args.disable_pass or (),
                      allow_drift=args.allow_drift, target=args.target, layout=args.layout,
                      memory_limit=args.memory_limit, max_bytes=args.max_bytes, sign_key=args.sign,
                      strip_names=args.strip_names,
                      **quantize_options(args), **sparse_options(args))
    b, a = rep["before"], rep["after"]
    print(f"converted {args.model} -> {rep['artifact']}")
    print(f"  nodes {b['nodes']} -> {a['nodes']}, parameters {a['parameters']:,}")
    if "flops" in b and "flops" in a:
        print(f"  FLOPs {b['flops']:,} -> {a['flops']:,}, bytes moved {b['bytes_moved']:,} -> {a['bytes_moved']:,}")
    print(f"  size {rep['source_bytes']:,} B (source) -> {rep['artifact_bytes']:,} B "
          f"({rep['artifact_bytes'] / max(rep['source_bytes'], 1):.2f}x)")
    print(f"  verified: max relative error {rep['max_relative_error']:.2e} (tolerance {rep['tolerance']:g})")
    if rep.get("verified_shapes"):
        from .verify_shapes import format_shapes
        print(f"  verified at: {format_shapes(rep['verified_shapes'], rep.get('dynamic_inputs') or {})} "
              f"({rep['verified_shapes_source']})")
    if rep.get("signed_by"):
        print(f"  signed: Ed25519, key id {rep['signed_by']}")
    if rep.get("quantization") and "calibration" not in rep["quantization"]:
        from .quantize.import_qdq import format_import_summary
        print(format_import_summary(rep["quantization"]))      # a pre-quantized model
    elif rep.get("quantization"):
        from .quantize import format_summary
        print(format_summary(rep["quantization"]))
        if args.report:
            print(f"  report: {args.report}")
        drift = rep["quantization"].get("drift") or {}
        if drift.get("findings"):
            from .quantize.drift import format_drift
            print("edge-infer: warning: " + format_drift(drift["findings"], drift["blame"], rep["quantization"])
                  + "\n  written anyway (--allow-drift)", file=sys.stderr)
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
                                ("--report", args.report), ("--task", args.task), ("--requant", args.requant))
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
            **({"task": args.task} if args.task else {}), **({"requant": args.requant} if args.requant else {})}


def cmd_export(args) -> int:
    from .artifact import load_artifact
    from .quantize.export_onnx import export_qdq
    _check_output_path(args.output)
    graph, _ = load_artifact(args.artifact, trusted_keys=trust_from_args(args))
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
    rt = Runtime(args.artifact, backend=args.backend, threads=args.threads, memory_limit=args.memory_limit,
                 trusted_keys=trust_from_args(args))
    if not args.input:
        raise UsageError("give the inputs: --input NAME=FILE.npy (model inputs: "
                         + ", ".join(f"{i.name} {i.dtype}{list(i.shape)}" for i in rt.inputs) + ")")
    feeds = load_input_files(args.input, [i.name for i in rt.inputs])
    out = rt.run(feeds)
    if getattr(args, "explain", False):
        from .backends.picker import format_report
        print(format_report(rt.backend_report()))
    if args.output:
        print(f"saved {len(out)} output(s) to {save_outputs(out, args.output)}")
    for name, arr in out.items():
        desc = f"{name}: {arr.dtype}{list(arr.shape)}"
        if arr.size and arr.dtype.kind in "fiu":
            desc += f" min {arr.min():.4g} max {arr.max():.4g} mean {arr.mean():.4g}"
            if arr.ndim == 2 and arr.shape[1] > 1:
                desc += f" argmax {arr.argmax(axis=1).tolist()[:16]}"
        print(desc)
    return 0


def save_outputs(out: Dict[str, np.ndarray], path: str) -> str:
    """Write a run's outputs; returns where. ``path`` an existing folder (or ending in ``/``):
    one ``NAME.npy`` per output inside it (names made file-safe); otherwise an ``.npz`` at
    exactly ``path`` (numpy would append ``.npz`` to a bare name: not done here), written
    to a temporary file first so that a failed write leaves nothing behind."""
    import re
    from .artifact import _atomic_write
    if os.path.isdir(path) or path.endswith((os.sep, "/")):
        os.makedirs(path, exist_ok=True)
        used = set()
        for name, arr in out.items():
            base = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "output"
            stem, k = base, 1
            while stem in used:
                stem, k = f"{base}_{k}", k + 1
            used.add(stem)
            _atomic_write(os.path.join(path, stem + ".npy"), lambda f, a=arr: np.save(f, a))
        return os.path.join(path, "") + ("{" + ",".join(sorted(used)) + "}.npy")
    _check_output_path(path)
    _atomic_write(path, lambda f: np.savez(f, **out))
    return path


def _check_output_path(path: str) -> None:
    """An output file path must not be a folder, and its folder must exist."""
    if os.path.isdir(path):
        raise UsageError(f"output {path} is a directory: give a file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"output folder not found: {folder}")


def cmd_inspect(args) -> int:
    if getattr(args, "partition", False):
        from .backends.partition import format_plan
        from .backends.picker import format_report
        choice, plan = partition_plan(args.artifact, args.backend or "auto", trusted_keys=trust_from_args(args))
        if args.json:
            print(json.dumps({"choice": choice.report, "plan": plan.summary()}, indent=2, default=str))
        else:
            print(format_report(choice.report))
            print(format_plan(plan))
        return 0
    if args.backend:
        raise UsageError("--backend goes with --partition")
    keys = trust_from_args(args)
    rep = inspect_artifact(args.artifact, args.memory_limit, keys)
    if args.json:
        print(json.dumps(rep, indent=2, default=str))
        return 0
    print(format_inspect(rep, len(keys) if keys else 0))
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
                   threads: Optional[int] = None, input_shapes=None, memory_limit=None,
                   trusted_keys=None) -> dict:
    """Time a model: latency percentiles and a per-op time table (under ``memory_limit``)."""
    import time
    _check_counts(runs, warmup)
    from .runtime import Runtime
    from .verify import random_inputs
    rt = Runtime(path, backend=backend, threads=threads, memory_limit=memory_limit, trusted_keys=trusted_keys)
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


def _check_counts(runs: int, warmup: int) -> None:
    if int(runs) < 1:
        raise UsageError(f"--runs must be at least 1, got {runs}")
    if int(warmup) < 0:
        raise UsageError(f"--warmup must be 0 or more, got {warmup}")


def bench_backends(path: str, which: str, runs: int, warmup: int, threads=None, input_shapes=None,
                   trusted_keys=None) -> dict:
    """Time each listed (or every available) backend on the model; store the medians in the
    picker's timings cache so that later ``backend="auto"`` picks use them."""
    _check_counts(runs, warmup)
    from .backends.picker import candidate_names, model_key, record_timing, usable_backends
    from .runtime import Runtime, specialize
    from .verify import random_inputs
    probe_rt = Runtime(path, backend="cpu", threads=threads, trusted_keys=trusted_keys)
    prefer = (probe_rt.meta.get("target") or {}).get("backends") or ()
    names = candidate_names(prefer) if which == "all" else [n.strip() for n in which.split(",") if n.strip()]
    names, skipped = usable_backends(names)
    feeds = random_inputs(probe_rt.graph, 0, shapes=input_shapes)
    key = model_key(specialize(probe_rt.graph, {k: v.shape for k, v in feeds.items()}), probe_rt.threads)
    results = []
    for name in names:
        try:
            rep = bench_artifact(path, runs, warmup, name, threads, input_shapes, trusted_keys=trusted_keys)
        except EdgeInferError as e:
            skipped[name] = str(e).splitlines()[0]
            continue
        record_timing(key, rep["backend"], rep["median_ms"], runs)
        results.append({k: rep[k] for k in ("backend", "median_ms", "p90_ms", "min_ms", "peak_rss_mb")})
    if not results:
        raise UsageError("no backend could run the model: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    fastest = min(results, key=lambda r: r["median_ms"])
    choice = Runtime(path, backend="auto", threads=threads, trusted_keys=trusted_keys).backend_report(
        {k: v.shape for k, v in feeds.items()})
    return {"artifact": path, "model_key": key, "results": results, "skipped": skipped,
            "fastest": fastest["backend"], "choice": choice["choice"], "why": choice["why"]}


def cmd_bench(args) -> int:
    if getattr(args, "backends", None):
        rep = bench_backends(args.artifact, args.backends, args.runs, args.warmup, args.threads,
                             parse_shape_args(args.input_shape), trust_from_args(args))
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
                         parse_shape_args(args.input_shape), memory_limit=args.memory_limit,
                         trusted_keys=trust_from_args(args))
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


def cmd_verify(args) -> int:
    from .difftest import DEFAULT_TOL_STEPS, format_report, verify_at_scale
    _check_file(args.model, "model")
    if args.samples < 1 or args.batch < 1:
        raise UsageError("--samples and --batch must be at least 1")
    rng = None
    if args.range:
        try:
            lo, hi = (float(v) for v in args.range.split(","))
        except ValueError:
            raise UsageError(f"--range wants LOW,HIGH; got {args.range!r}") from None
        if not lo < hi:
            raise UsageError(f"--range {args.range}: LOW must be below HIGH")
        rng = (lo, hi)
    if args.data and not os.path.exists(args.data):
        raise UsageError(f"data not found: {args.data}")
    backends = [b.strip() for b in args.backend.split(",") if b.strip()] if args.backend else None
    rep = verify_at_scale(args.model, args.artifact, samples=args.samples, backends=backends, data=args.data,
                          batch=args.batch, out_dir=args.out, tol=args.tol,
                          tol_steps=args.tol_steps if args.tol_steps is not None else DEFAULT_TOL_STEPS,
                          seed=args.seed, value_range=rng, recipe=args.recipe, threads=args.threads,
                          trusted_keys=trust_from_args(args))
    print(json.dumps(rep, indent=2, default=str) if args.json else format_report(rep))
    if not rep["passed"]:
        print("edge-infer: verify: outputs differ beyond the tolerance" + (
            f" (worst inputs in {args.out})" if args.out else " (--out DIR saves the worst inputs)"),
            file=sys.stderr)
        return 1
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
    from .frontends.onnx import CONTRIB_LOWERINGS, NORMALIZERS
    lowered = [op for op in ("Attention",) if op in NORMALIZERS] + \
        [f"com.microsoft.{op}" for op in sorted(CONTRIB_LOWERINGS)]
    print("ONNX import lowers into the ops above: " + ", ".join(lowered))
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
                           profile_every=args.profile_every, trusted_keys=trust_from_args(args))
    except ImportError as e:   # an optional dependency (OpenCV) is missing
        raise UsageError(str(e)) from None
    print("edge-infer: " + json.dumps(stats), file=sys.stderr)
    return 0


def _add_trust(parser) -> None:
    parser.add_argument("--trust", action="append", metavar="KEY.pub", help="load only artifacts signed by "
                        "this Ed25519 public key (repeatable: any of them)")


def trust_from_args(args):
    """The ``--trust`` keys of a command as a trusted set (None without any): read and
    checked here, so a bad key file fails before the model is touched."""
    if not getattr(args, "trust", None):
        return None
    from .signing import trusted_set
    return trusted_set(args.trust)


def cmd_keygen(args) -> int:
    from .signing import generate_key
    kid = generate_key(args.output)
    print(f"wrote private key {args.output} (mode 0600: keep it secret) and public key {args.output}.pub")
    print(f"  key id {kid}")
    return 0


def cmd_sign(args) -> int:
    from .signing import sign_artifact
    sig = sign_artifact(args.artifact, args.key)
    print(f"signed {args.artifact} ({sig.signed_length:,} bytes + signature), key id {sig.key_id}")
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


class _Parser(argparse.ArgumentParser):
    """argparse with a user error as one line on stderr and exit status 2 (argparse's own
    printed the whole usage first: 18 lines for a mistyped --calib-method); -h still shows it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help shows the options)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="edge-infer", description="Convert models on a workstation; run them on the edge.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"edge_infer {__import__('edge_infer').__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    c = sub.add_parser("convert", help="convert an ONNX or TFLite model to an .eim artifact")
    c.add_argument("model")
    c.add_argument("-o", "--output", help="artifact path (default: MODEL with .eim)")
    c.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...", help="pin an input's shape "
                   "(the artifact then accepts only that shape)")
    c.add_argument("--verify-shape", action="append", metavar="NAME=D1,D2,...", help="verify (and count the "
                   "cost) at this shape; the artifact stays dynamic (default: a size the model records, the "
                   "target's or --calib-recipe's, else the smallest the graph accepts)")
    c.add_argument("--opt-level", type=int, default=3, choices=range(4), help="0 none .. 3 all passes")
    c.add_argument("--disable-pass", action="append", metavar="NAME", help="skip a pass (debugging)")
    c.add_argument("--allow-drift", action="store_true", help="warn instead of refusing a drifting result "
                   "(an optimization pass that changes the outputs; an int8 output that collapsed: exit 3 without it)")
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
    c.add_argument("--requant", choices=("fp32", "fixed"), help="int8 conv / matmul output requantization: fp32 "
                   "(default: a float32 multiplier, one rounding, as onnxruntime and XNNPACK) or fixed (TFLite's "
                   "reference kernels' fixed point, bit-exact with them)")
    c.add_argument("--task", choices=("auto", "classify", "detect", "segment", "generic"),
                   help="what the int8 accuracy report and --max-accuracy-drop measure: top-1, detection F1, "
                        "map IoU or per-output SQNR (default auto: from the output shapes)")
    c.add_argument("--max-bytes", metavar="SIZE", help="refuse a model whose graph would allocate more "
                   "(a tensor, the constants, a ConstantOfShape/Expand/Tile/Range output; default: the "
                   "target's budget or the memory available, 1GB for one generated tensor)")
    c.add_argument("--memory-limit", metavar="SIZE", help="record a memory budget (e.g. 256MB) for "
                   "activations + workspaces that runtimes use by default")
    c.add_argument("--strip-names", action="store_true", help="leave the original tensor and node names out "
                   "(smallest file; inputs and outputs keep theirs, the rest show as short ids)")
    c.add_argument("--sparsity", type=float, metavar="X", help="magnitude-prune compute layers to this fraction "
                   "of zeros (not the first conv, depthwise convs, the classifier); with --max-accuracy-drop a "
                   "sensitivity analysis on --calib samples picks per-layer sparsity")
    c.add_argument("--sparse-pattern", choices=("unstructured", "block1x4", "block4x1", "2:4"),
                   help="pruning pattern (default unstructured)")
    c.add_argument("--sparse-layer", action="append", metavar="NAME=X", help="per-layer sparsity (repeatable)")
    c.add_argument("--sparse-global", action="store_true", help="one magnitude threshold across layers")
    c.add_argument("--no-sparse", action="store_true", help="never store weights sparse-encoded")
    c.add_argument("--sign", metavar="KEY", help="sign the artifact with this Ed25519 private key (keygen)")
    c.set_defaults(fn=cmd_convert)

    e = sub.add_parser("export", help="export an artifact (fp32 or int8) as ONNX QDQ or TFLite")
    e.add_argument("artifact")
    e.add_argument("--format", default="onnx-qdq", choices=("onnx-qdq", "tflite"), help="output format")
    e.add_argument("-o", "--output", required=True, metavar="FILE.onnx|FILE.tflite")
    _add_trust(e)
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
    _add_trust(r)
    r.set_defaults(fn=cmd_run)

    i = sub.add_parser("inspect", help="show an artifact's graph, sizes and provenance")
    i.add_argument("artifact")
    i.add_argument("--memory-limit", metavar="SIZE", help="show the memory plan under this limit")
    i.add_argument("--json", action="store_true")
    i.add_argument("--partition", action="store_true", help="show how the graph splits across backends")
    i.add_argument("--backend", help="with --partition: the backend to partition for (default: the picker's)")
    _add_trust(i)
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
    _add_trust(b)
    b.set_defaults(fn=cmd_bench)

    v = sub.add_parser("verify", help="differential test: an artifact against its source model on many inputs")
    v.add_argument("model", metavar="MODEL.onnx|MODEL.tflite")
    v.add_argument("artifact", metavar="ARTIFACT.eim")
    v.add_argument("--samples", type=int, default=1000, help="inputs to compare (default 1000)")
    v.add_argument("--backend", help="backends to run the artifact on, A,B (default: every available one)")
    v.add_argument("--data", metavar="DIR|FILE", help="real inputs: a folder of .npy files or images, or an "
                   ".npy/.npz (images preprocessed by --recipe)")
    v.add_argument("--recipe", metavar="NAME|FILE", help="preprocessing recipe: the images of --data, and the "
                   "range of random inputs (default: the artifact's calibration recipe)")
    v.add_argument("--range", metavar="LOW,HIGH", help="random float inputs uniform in this range "
                   "(default: the recipe's range, else standard normal)")
    v.add_argument("--batch", type=int, default=256, help="samples per run where the batch dim is symbolic")
    v.add_argument("--tol", type=float, help="largest relative error (||ours - ref|| / ||ref|| per sample) "
                   "against the source (default 1e-5 for fp32 artifacts; int8: reported only unless given)")
    v.add_argument("--tol-steps", type=float, help="int8 artifacts: largest difference of a backend from the "
                   "CPU backend, in steps of the output's quantization scale (default 2)")
    v.add_argument("--out", metavar="DIR", help="write report.json and each backend's worst input "
                   "(worst_BACKEND.npy, replay with run --input)")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--threads", type=int)
    v.add_argument("--json", action="store_true")
    _add_trust(v)
    v.set_defaults(fn=cmd_verify)

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
    _add_trust(s)
    s.set_defaults(fn=cmd_stream)

    kg = sub.add_parser("keygen", help="make an Ed25519 key pair to sign artifacts with")
    kg.add_argument("-o", "--output", required=True, metavar="KEY", help="private key file (KEY.pub: the public key)")
    kg.set_defaults(fn=cmd_keygen)

    sg = sub.add_parser("sign", help="sign an artifact in place (replacing any signature)")
    sg.add_argument("artifact", metavar="FILE.eim")
    sg.add_argument("--key", required=True, metavar="KEY", help="Ed25519 private key (keygen)")
    sg.set_defaults(fn=cmd_sign)

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
        if getattr(args, "threads", None) is not None and args.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {args.threads}")
        return args.fn(args)
    except QuantizationDriftError as e:
        if args.debug:
            raise
        print(f"edge-infer: error: {e}", file=sys.stderr)          # several lines: what, blame, fixes
        return EXIT_DRIFT
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
