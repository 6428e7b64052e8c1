#!/usr/bin/env python3
"""OpenCL backend against the CPU backend: same artifact, same inputs, batch 1, each backend in
its own process.

For each model: parity first (fp32: max |cpu - opencl| / max |cpu| over the outputs and the
softmax inputs; int8 models: every int8 activation bit for bit), then the median latency of
each backend and the ratio OpenCL / CPU. On PoCL (a CPU OpenCL driver) the ratio measures the
plumbing, not a GPU; on a real GPU it is the number that matters.

    python benchmarks/opencl_vs_cpu.py                         # default model set
    python benchmarks/opencl_vs_cpu.py --models resnet50,squeezenet:int8 --runs 5
    python benchmarks/opencl_vs_cpu.py --all                   # + alexnet, zfnet512, vgg19
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

DEFAULT = ["digits", "digits:int8", "squeezenet", "shufflenet", "inception_v1", "inception_v2",
           "densenet121", "resnet50", "squeezenet:int8", "shufflenet:int8"]
EXTRA = ["bvlc_alexnet", "zfnet512", "vgg19"]


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
        return "; ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, "
                         f"{i.get('num_threads')} thr)" for i in threadpool_info()
                         if i.get("user_api") == "blas") or "unknown"
    except ImportError:
        return "threadpoolctl not installed"


def convert(name: str, out_dir: str) -> str:
    import edge_infer
    from edge_infer.data import digits_model_path, load_digits_samples
    import onnx_models as M
    base, _, kind = name.partition(":")
    path = os.path.join(out_dir, name.replace(":", "_") + ".eim")
    kw = {}
    if kind == "int8":
        kw = dict(quantize="int8", calib=load_digits_samples()[0][:64] if base == "digits" else "random",
                  calib_samples=None if base == "digits" else 2)
    src = digits_model_path() if base == "digits" else M.randomized_light_model_path(base)
    edge_infer.convert(src, path, **kw)
    return path


def median_ms(ex, feeds, runs: int, warmup: int) -> float:
    for _ in range(warmup):
        ex.run(feeds)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ex.run(feeds)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def probe_graph(path: str, int8: bool):
    """The specialized graph (batch 1) with the softmax inputs and, for int8, every int8
    activation as extra outputs, and its seeded inputs."""
    from edge_infer.artifact import load_artifact
    from edge_infer.runtime import specialize
    g, _ = load_artifact(path)
    shapes = {i: tuple(d if isinstance(d, int) else 1 for d in g.tensors[i].shape) for i in g.inputs}
    sg = specialize(g, shapes)
    probes = [n.inputs[0] for n in sg.nodes if n.op == "Softmax"]
    if int8:
        probes += [n.outputs[0] for n in sg.nodes if sg.tensors[n.outputs[0]].dtype == "int8"
                   and not sg.tensors[n.outputs[0]].is_const]
    sg.outputs = list(dict.fromkeys(list(sg.outputs) + probes))
    feeds = {i: np.random.default_rng(0).standard_normal(s).astype(np.float32) for i, s in shapes.items()}
    return sg, feeds


def child(backend: str, path: str, int8: bool, runs: int, warmup: int, threads: int, out: str) -> None:
    """One backend in its own process (PoCL's worker threads never compete with BLAS's)."""
    from edge_infer.backends import BACKENDS
    from edge_infer.runtime import _limit_blas_threads
    _limit_blas_threads(threads)
    sg, feeds = probe_graph(path, int8)
    t0 = time.perf_counter()
    ex = BACKENDS[backend]().prepare(sg, threads=threads)
    prep = time.perf_counter() - t0
    outs = ex.run(feeds)
    ms = median_ms(ex, feeds, runs, warmup)
    np.savez(out, **{f"o{k}": v for k, v in enumerate(outs[n] for n in sg.outputs)})
    print(json.dumps(dict(ms=ms, prep_s=prep, nodes=len(ex.nodes), kernels=len(getattr(ex, "steps", [])))))


def bench(name: str, path: str, runs: int, warmup: int, threads: int, tmp: str) -> dict:
    int8 = name.endswith(":int8")
    res, outs = {}, {}
    for backend in ("cpu", "opencl"):
        out = os.path.join(tmp, f"{backend}.npz")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", backend, path, str(int(int8)), str(runs),
               str(warmup), str(threads), out]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"{name} on {backend} failed:\n{p.stderr[-2000:]}")
        res[backend] = json.loads(p.stdout.strip().splitlines()[-1])
        with np.load(out) as z:
            outs[backend] = [z[f"o{k}"] for k in range(len(z.files))]
    err, exact = 0.0, True
    for a, b in zip(outs["cpu"], outs["opencl"]):
        if a.dtype == np.int8:
            exact &= bool(np.array_equal(a, b))
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            err = max(err, float(np.abs(a64 - b64).max() / max(np.abs(a64).max(), 1e-30)))
    return dict(model=name, nodes=res["opencl"]["nodes"], kernels=res["opencl"]["kernels"],
                prep_s=res["opencl"]["prep_s"], cpu_ms=res["cpu"]["ms"], ocl_ms=res["opencl"]["ms"],
                err=err, exact=exact if int8 else None)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        b, path, int8, runs, warmup, threads, out = sys.argv[2:9]
        child(b, path, bool(int(int8)), int(runs), int(warmup), int(threads), out)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--all", action="store_true", help="also " + ", ".join(EXTRA))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    from edge_infer.backends.opencl import OpenCLBackend
    from edge_infer.runtime import _limit_blas_threads
    ok, why = OpenCLBackend().available()
    if not ok:
        print(f"OpenCL backend unavailable: {why}", file=sys.stderr)
        return 2
    _limit_blas_threads(args.threads)
    models = [m for m in args.models.split(",") if m] + (EXTRA if args.all else [])
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; python "
          f"{platform.python_version()}, numpy {np.__version__}; BLAS: {blas_info()}")
    print(f"OpenCL device: {why}; CPU backend threads {args.threads}; batch 1, {args.runs} runs (median)\n")
    print("| model | nodes | kernels | OpenCL prepare s | CPU ms | OpenCL ms | OpenCL / CPU | parity |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            r = bench(name, convert(name, tmp), args.runs, args.warmup, args.threads, tmp)
            if r["exact"] is not None:
                parity = "int8 bit-exact" if r["exact"] else "int8 DIFFERS"
                parity += f", fp32 tail {r['err']:.1e}" if r["err"] else ""
                failed += not r["exact"] or r["err"] > 1e-4
            else:
                parity = f"max rel {r['err']:.1e}"
                failed += r["err"] > 1e-4
            print(f"| {name} | {r['nodes']} | {r['kernels']} | {r['prep_s']:.2f} | {r['cpu_ms']:.2f} | "
                  f"{r['ocl_ms']:.2f} | {r['ocl_ms'] / r['cpu_ms']:.2f}x | {parity} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
