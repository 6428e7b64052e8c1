#!/usr/bin/env python3
"""edge_infer against onnxruntime: same model, same thread count, batch 1, one run.

For each model: median latency of each runtime, their ratio, and the peak RSS of
a process that loads the model and runs it (each runtime in its own process).
Also measures dispatch overhead per op on a model of many tiny ops, and the load
time of a 100 MB artifact.

    python benchmarks/compare.py                      # default model set
    python benchmarks/compare.py --models resnet50 --threads 2 --runs 20 --json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

DEFAULT_MODELS = ["resnet50", "squeezenet", "shufflenet", "inception_v1", "densenet121", "digits"]
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "edge_infer_bench")


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
        libs = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, {i.get('num_threads')} thr)"
                for i in threadpool_info() if i.get("user_api") == "blas"]
        return "; ".join(libs) or "unknown"
    except ImportError:
        return "threadpoolctl not installed"


def model_file(name: str) -> str:
    """An ONNX file for ``name``: a light zoo model with seeded weights, or the digits CNN."""
    if name == "digits":
        from edge_infer.data import digits_model_path
        return digits_model_path()
    import onnx
    from onnx_models import light_model_path, randomize_light_model
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"{name}.onnx")
    if not os.path.exists(path):
        m = randomize_light_model(onnx.load(light_model_path(name)), seed=0)
        onnx.save(m, path)
    return path


def input_feeds(onnx_path: str) -> dict:
    import onnx
    m = onnx.load(onnx_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


# -- child processes: one runtime each, so peak RSS is its own -------------------

def child(kind: str, path: str, onnx_path: str, threads: int, runs: int, warmup: int) -> dict:
    feeds = input_feeds(onnx_path)
    if kind == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        fn = lambda: sess.run(None, feeds)  # noqa: E731
    else:
        from edge_infer import Runtime
        rt = Runtime(path, backend=kind, threads=threads)
        fn = lambda: rt.run(feeds)  # noqa: E731
    for _ in range(warmup):
        fn()
    lat = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    return {"median_ms": float(np.median(lat) * 1e3), "p90_ms": float(np.percentile(lat, 90) * 1e3),
            "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    # VmHWM starts afresh at exec; ru_maxrss would carry the parent's peak over exec.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model", "Hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_child(kind, path, onnx_path, threads, runs, warmup) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--child", kind, path, onnx_path, str(threads),
                          str(runs), str(warmup)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- micro benchmarks ---------------------------------------------------------------

def dispatch_overhead(n_ops: int = 300, runs: int = 200) -> dict:
    """Per-op cost on a chain of tiny element-wise ops (the runtime's own overhead)."""
    from edge_infer import Runtime
    from onnx_models import tiny_chain
    g = tiny_chain(n_ops)
    rt = Runtime(g, backend="cpu")
    x = np.ones((1, 8), np.float32)
    for _ in range(20):
        rt.run(x)
    t0 = time.perf_counter()
    for _ in range(runs):
        rt.run(x)
    per_run = (time.perf_counter() - t0) / runs
    return {"ops": n_ops, "us_per_run": per_run * 1e6, "us_per_op": per_run * 1e6 / n_ops}


def artifact_load_time(mb: int = 100, repeats: int = 5) -> dict:
    """Time Runtime(path) on an artifact with ``mb`` MB of weights (page cache warm)."""
    from edge_infer import Runtime
    from edge_infer.artifact import save_artifact
    from edge_infer.ir import Graph
    n = int(np.sqrt(mb * 2**20 / 4 / 4))
    g = Graph("big")
    g.add_input("x", "float32", (1, n))
    prev = "x"
    for k in range(4):
        g.add_const(f"w{k}", np.random.default_rng(k).standard_normal((n, n), dtype=np.float32))
        g.add_node("MatMul", [prev, f"w{k}"], [f"y{k}"])
        prev = f"y{k}"
    g.outputs = [prev]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big.eim")
        size = save_artifact(path, g, {})
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            Runtime(path, backend="cpu")
            times.append(time.perf_counter() - t0)
    return {"artifact_mb": size / 2**20, "load_ms": float(np.median(times) * 1e3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, path, onnx_path, threads, runs, warmup = args.child
        print(json.dumps(child(kind, path, onnx_path, int(threads), int(runs), int(warmup))))
        return 0

    import edge_infer
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [m for m in args.models.split(",") if m]:
            src = model_file(name)
            feeds = input_feeds(src)
            eim = os.path.join(tmp, name + ".eim")
            t0 = time.perf_counter()
            edge_infer.convert(src, eim, input_shapes={k: v.shape for k, v in feeds.items()},
                               opt_level=args.opt_level)
            conv_s = time.perf_counter() - t0
            ours = run_child(args.backend, eim, src, args.threads, args.runs, args.warmup)
            ort = run_child("ort", src, src, args.threads, args.runs, args.warmup)
            row = {"model": name, "convert_s": conv_s, "edge_infer": ours, "onnxruntime": ort}
            if "error" not in ours and "error" not in ort:
                row["latency_ratio"] = ours["median_ms"] / ort["median_ms"]
                row["rss_ratio"] = ours["peak_rss_mb"] / ort["peak_rss_mb"]
            rows.append(row)
            if not args.json:
                print(f"  measured {name}", file=sys.stderr)
    report = {
        "machine": f"{cpu_model()}, {platform.machine()}, {os.cpu_count()} cores, "
                   f"{__import__('psutil').virtual_memory().total / 2**30:.0f} GiB",
        "python": platform.python_version(), "numpy": np.__version__, "blas": blas_info(),
        "onnxruntime": __import__("onnxruntime").__version__, "edge_infer": edge_infer.__version__,
        "threads": args.threads, "runs": args.runs, "models": rows,
        "dispatch": dispatch_overhead(), "load": artifact_load_time(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"machine: {report['machine']}; python {report['python']}, numpy {report['numpy']}, "
          f"onnxruntime {report['onnxruntime']}; BLAS: {report['blas']}")
    print(f"threads {args.threads}, batch 1, {args.runs} runs, backend {args.backend}, opt level {args.opt_level}\n")
    print("| model | edge_infer ms | onnxruntime ms | ratio | edge_infer peak RSS MB | onnxruntime peak RSS MB | RSS ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        o, e = r["onnxruntime"], r["edge_infer"]
        if "error" in o or "error" in e:
            print(f"| {r['model']} | {e.get('error', '')} | {o.get('error', '')} | | | | |")
            continue
        print(f"| {r['model']} | {e['median_ms']:.2f} | {o['median_ms']:.2f} | {r['latency_ratio']:.2f}x | "
              f"{e['peak_rss_mb']:.0f} | {o['peak_rss_mb']:.0f} | {r['rss_ratio']:.2f}x |")
    d, l = report["dispatch"], report["load"]
    print(f"\ndispatch overhead: {d['us_per_op']:.2f} us/op ({d['ops']} tiny ops, {d['us_per_run']:.0f} us/run)")
    print(f"artifact load: {l['artifact_mb']:.0f} MB in {l['load_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
