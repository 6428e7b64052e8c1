#!/usr/bin/env python3
"""Python-side overhead per inference, with and without the native kernels' compiled
execution loop (consecutive native ops in one C call), and its effect on whole models.

1. The 300-op model of compare.py's dispatch measurement (Add / Mul / Relu on (1, 8)):
   per-run and per-op time of ``Runtime.run``; "before" is the numpy kernels
   (EDGE_INFER_NO_NATIVE=1, in a child process); "after" also splits the run into the time
   spent in the C kernels (the loop timed 50 times over inside one C call) and the rest,
   which is the Python side (input checks, plan lookup, feeding, the ctypes call, outputs).
2. End-to-end median latency on squeezenet / shufflenet / digits: ours (native), ours (numpy
   only) and onnxruntime, same thread count, each in its own process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/overhead_bench.py
    python benchmarks/overhead_bench.py --models digits --runs 50 --json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare import blas_info, cpu_model, input_feeds, model_file, run_child  # noqa: E402

N_OPS = 300


def tiny_graph(n_ops: int = N_OPS):
    """compare.py's dispatch model: a chain of tiny Add / Mul / Relu ops."""
    from onnx_models import tiny_chain
    return tiny_chain(n_ops)


def _per_call(fn, runs: int) -> float:
    """Best of 5 means of ``runs`` calls, seconds (the minimum is the least disturbed by the
    other processes of a shared machine)."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(runs):
            fn()
        best = min(best, (time.perf_counter() - t0) / runs)
    return best


def tiny_overhead(runs: int = 2000) -> dict:
    """Per-run times of the 300-op model in this process (native on unless disabled)."""
    from edge_infer import Runtime
    from edge_infer.backends.cpu import native
    rt = Runtime(tiny_graph(), backend="cpu", threads=1)
    x = np.ones((1, 8), np.float32)
    for _ in range(50):
        rt.run(x)
    total = _per_call(lambda: rt.run(x), runs)
    ex = rt.plan({"x": (1, 8)})
    out = {"native": native.lib is not None, "ops": N_OPS, "steps": len(ex.steps),
           "calls_per_run": len(ex.run_steps), "us_per_run": total * 1e6, "us_per_op": total * 1e6 / N_OPS}
    if native.lib is not None and all(getattr(s, "native_step", None) for s in ex.steps):
        reps = 50
        loop = native.run_steps_call(list(ex.steps) * reps)
        c_time = _per_call(loop, max(1, runs // reps)) / reps
        out["us_in_c_kernels"] = c_time * 1e6
        out["us_python_side"] = (total - c_time) * 1e6
    return out


def tiny_overhead_child(no_native: bool) -> dict:
    env = dict(os.environ)
    if no_native:
        env["EDGE_INFER_NO_NATIVE"] = "1"
    proc = subprocess.run([sys.executable, "-W", "ignore", __file__, "--tiny-child"], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def model_latency(names, threads: int, runs: int, warmup: int) -> list:
    import edge_infer
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            src = model_file(name)
            feeds = input_feeds(src)
            eim = os.path.join(tmp, name + ".eim")
            edge_infer.convert(src, eim, input_shapes={k: v.shape for k, v in feeds.items()})
            ours = run_child("cpu", eim, src, threads, runs, warmup)
            old = os.environ.get("EDGE_INFER_NO_NATIVE")
            os.environ["EDGE_INFER_NO_NATIVE"] = "1"
            try:
                numpy_only = run_child("cpu", eim, src, threads, runs, warmup)
            finally:
                if old is None:
                    os.environ.pop("EDGE_INFER_NO_NATIVE")
                else:
                    os.environ["EDGE_INFER_NO_NATIVE"] = old
            ort = run_child("ort", src, src, threads, runs, warmup)
            rows.append({"model": name, "native": ours, "numpy_only": numpy_only, "onnxruntime": ort})
            print(f"  measured {name}", file=sys.stderr)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="squeezenet,shufflenet,digits")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tiny-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tiny_child:
        print(json.dumps(tiny_overhead()))
        return 0

    from edge_infer.backends.cpu import native
    before, after = tiny_overhead_child(True), tiny_overhead_child(False)
    rows = model_latency([m for m in args.models.split(",") if m], args.threads, args.runs, args.warmup)
    report = {"machine": f"{cpu_model()}, {os.cpu_count()} cores", "blas": blas_info(),
              "native_features": native.features(), "threads": args.threads, "runs": args.runs,
              "tiny_before": before, "tiny_after": after, "models": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    feats = ",".join(k for k, v in report["native_features"].items() if v) or "scalar"
    print(f"machine: {report['machine']}; BLAS: {report['blas']}; native ISA: {feats}")
    print(f"\n{N_OPS}-op model (compare.py's dispatch chain), per inference, best of 5:")
    print("| | us/run | us/op | C calls/run | in C kernels us | Python side us |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in (("numpy kernels (EDGE_INFER_NO_NATIVE=1)", before), ("native loop", after)):
        if "error" in r:
            print(f"| {label} | {r['error']} | | | | |")
            continue
        c = r.get("us_in_c_kernels")
        p = r.get("us_python_side", r["us_per_run"])
        print(f"| {label} | {r['us_per_run']:.1f} | {r['us_per_op']:.3f} | {r['calls_per_run']} | "
              f"{'' if c is None else f'{c:.1f}'} | {p:.1f} |")
    if "error" not in before and "error" not in after:
        print(f"speed-up per run: {before['us_per_run'] / after['us_per_run']:.0f}x")
    print(f"\nend to end, threads {args.threads}, batch 1, {args.runs} runs (median ms):")
    print("| model | native | numpy only | onnxruntime | native / numpy | native / onnxruntime |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        n, p, o = r["native"], r["numpy_only"], r["onnxruntime"]
        if any("error" in v for v in (n, p, o)):
            print(f"| {r['model']} | {n.get('error', '')} | {p.get('error', '')} | {o.get('error', '')} | | |")
            continue
        print(f"| {r['model']} | {n['median_ms']:.3f} | {p['median_ms']:.3f} | {o['median_ms']:.3f} | "
              f"{n['median_ms'] / p['median_ms']:.2f}x | {n['median_ms'] / o['median_ms']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
