#!/usr/bin/env python3
"""edge_infer fp32 against onnxruntime fp32: same model, same thread count, batch 1, one run.

Models (``--models``, names and groups of benchmarks/_common.py): by default ``core,families``,
ResNet-50, MobileNet-v2 and SqueezeNet (seeded random weights) and the families users deploy
(tests/family_models.py): a MobileNetV3-small classifier (224x224) and the 48x192 text-direction
classifier, a DB text detector at 640x640, YOLOv8n at 320 and 640. ``--families`` times the
families alone; ``--models zoo`` the older zoo set (ShuffleNet, Inception-v1, DenseNet-121, digits).

Each model is converted with ``edge_infer.convert`` (opt level 3, an .eim) and, per thread count,
timed in this process against an onnxruntime session of the ONNX source (ORT_ENABLE_ALL, the same
intra-op threads), interleaved (_common.interleaved: per round a block of back-to-back runs per
engine, the first of each block not counted), so load from other processes hits both alike. Min
and median ms per engine and the ratios edge_infer / onnxruntime are printed, with the outputs'
agreement (max |ours - ort| / max |ort|) and the BLAS threadpoolctl finds.

``--contention N``: a second pass with N busy processes (``while 1: pass`` at nice 10, as a camera
pipeline or other services keep a Raspberry Pi's cores busy) running while both engines are
timed; prints the contended medians, their ratio, and contended / quiet per engine, and which
models miss issue 17's targets (quiet min ratio <= 1.0; contended median ratio <= 1.5; ours
contended / quiet <= 3).

``--int8`` (on by default with ``--contention``; ``--no-int8`` leaves it out): the int8 engines
join the same interleaved rounds: ours int8 (the opt-level-3 graph quantized with minmax on 4
seeded calibration inputs of the model's recipe, as native_bench.py does), onnxruntime's static
int8 QDQ of the same model on the same inputs, and LiteRT int8 (XNNPACK) on our own int8
``.tflite`` export where ai-edge-litert is installed; a second table prints their medians,
ours int8 / each peer quiet and contended, and contended / quiet per engine, with issue 17's
int8 contention targets (ours int8 within 1.5x onnxruntime int8 under the same contention, and
within 3x its own quiet latency).

``--rss``: also the peak RSS of a process that loads and runs each model (each runtime in its own
process, VmHWM) -- the older table. Also measured: dispatch overhead per op on a model of many
tiny ops, and the load time of a 100 MB artifact (``--no-micro`` skips both).

The quiet table (README), then the contended one, on an otherwise idle machine:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/compare.py --threads 1,2 --rounds 10
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/compare.py --threads 1,2 --rounds 10 \
        --contention 2 --no-micro
    python benchmarks/compare.py --families --threads 2 --rounds 2 --no-micro     # a quick look
    python benchmarks/compare.py --models resnet50 --threads 2 --rss --json
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
from typing import Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import (ROOT, blas_info, cpu_model, expand_models, load_line, max_rel_err,  # noqa: E402,F401
                     model_inputs, model_path, ort_session, quiet_and_contended)

DEFAULT_MODELS = "core,families"
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "edge_infer_bench")


def model_file(name: str) -> str:
    """An ONNX file for ``name`` (_common.model_path; built models cached in ``CACHE``)."""
    return model_path(name, CACHE)


def input_feeds(onnx_path: str) -> dict:
    """Seeded standard-normal feeds for every input of ``onnx_path`` (the RSS children)."""
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


INT8_ENGINES = ("ours int8", "onnxruntime int8", "LiteRT int8")


def int8_engines(name: str, src: str, threads: int, tmp: str, graphs: dict) -> Tuple[dict, list]:
    """({engine: fn(x)}, notes) for ours int8, onnxruntime int8 QDQ and LiteRT int8 (XNNPACK) on
    model ``name``; ``graphs`` caches the int8 graph and the QDQ file across thread counts."""
    from native_bench import litert_runner, ort_int8
    from edge_infer import Runtime
    in_name, xs = model_inputs(name, src, 4, seed=7)     # calibration: not the timed input
    notes = []
    if name not in graphs:
        from edge_infer.convert import optimize_verified
        from edge_infer.frontends import load_model
        from edge_infer.quantize import quantize_model
        g = load_model(src)
        g.validate()
        g3, _ = optimize_verified(g, 3, samples=1)
        q, _ = quantize_model(g3, [{in_name: x} for x in xs])
        try:
            qdq = ort_int8(src, os.path.join(tmp, name + "_qdq.onnx"), in_name, xs)
        except Exception as e:  # noqa: BLE001 (reported, the others still run)
            qdq = f"{type(e).__name__}: {str(e)[:80]}"
        graphs[name] = (q, qdq)
    q, qdq = graphs[name]
    rt8 = Runtime(q, backend="cpu", threads=threads)
    engines = {"ours int8": lambda x: rt8.run({in_name: x})}
    if qdq.endswith(".onnx"):
        s8 = ort_session(qdq, threads)
        engines["onnxruntime int8"] = lambda x: s8.run(None, {in_name: x})
    else:
        notes.append(f"onnxruntime int8: n/a ({qdq})")
    run, note = litert_runner(q, threads)
    if run is not None:
        engines["LiteRT int8"] = run
    notes.append(f"LiteRT int8: {note}" if run is not None else f"LiteRT int8: n/a ({note})")
    return engines, notes


def time_model(name: str, src: str, eim: str, threads: int, args, tmp: str = "", graphs=None) -> dict:
    """Quiet (and contended) timings of the .eim against onnxruntime on ``src`` at ``threads``
    (with ``args.int8``, the int8 engines in the same rounds)."""
    from edge_infer import Runtime
    in_name, xs = model_inputs(name, src, 1)
    rt = Runtime(eim, backend=args.backend, threads=threads)
    sess = ort_session(src, threads)
    out0 = sess.get_outputs()[0].name
    err = max_rel_err(rt.run({in_name: xs[0]})[out0], sess.run([out0], {in_name: xs[0]})[0])
    engines = {"edge_infer": lambda x: rt.run({in_name: x}), "onnxruntime": lambda x: sess.run(None, {in_name: x})}
    notes = []
    if args.int8:
        more, notes = int8_engines(name, src, threads, tmp, graphs if graphs is not None else {})
        engines.update(more)
    quiet, busy = quiet_and_contended(engines, xs[0], args.rounds, args.contention)
    row = {"model": name, "threads": threads, "max_rel_err": err, "notes": notes,
           "quiet": {k: {"min_ms": v[0], "median_ms": v[1]} for k, v in quiet.items()},
           "ratio_min": quiet["edge_infer"][0] / quiet["onnxruntime"][0],
           "ratio_median": quiet["edge_infer"][1] / quiet["onnxruntime"][1]}
    if busy:
        row["contended"] = {k: {"min_ms": v[0], "median_ms": v[1], "vs_quiet": v[1] / quiet[k][1]}
                            for k, v in busy.items()}
        row["contended_ratio_median"] = busy["edge_infer"][1] / busy["onnxruntime"][1]
    return row


def int8_rows(rows: list, contended: bool) -> list:
    """Markdown rows of the int8 table: medians, ours int8 / each peer, contended / quiet."""
    peers = ("onnxruntime int8", "LiteRT int8")
    head = "| model | threads | " + " | ".join(f"{k} median ms" for k in INT8_ENGINES)
    head += " | " + " | ".join(f"ours / {p}" for p in peers)
    if contended:
        head += " | contended: " + " | ".join(f"{k} median ms" for k in INT8_ENGINES)
        head += " | " + " | ".join(f"ours / {p}" for p in peers)
        head += " | " + " | ".join(f"{k} contended / quiet" for k in INT8_ENGINES)
    out = [head + " |", "|---|" + "---:|" * (head.count("|") - 1)]
    fmt = lambda d, k, f="{:.2f}": f.format(d[k]["median_ms"]) if k in d else "n/a"  # noqa: E731
    ratio = lambda d, p: (f"{d['ours int8']['median_ms'] / d[p]['median_ms']:.2f}x"  # noqa: E731
                          if p in d and "ours int8" in d else "n/a")
    for r in rows:
        q = r["quiet"]
        if "ours int8" not in q:
            continue
        cells = [r["model"], str(r["threads"])] + [fmt(q, k) for k in INT8_ENGINES] + [ratio(q, p) for p in peers]
        if contended:
            b = r["contended"]
            cells += [fmt(b, k) for k in INT8_ENGINES] + [ratio(b, p) for p in peers]
            cells += [f"{b[k]['vs_quiet']:.2f}x" if k in b else "n/a" for k in INT8_ENGINES]
        out.append("| " + " | ".join(cells) + " |")
    return out


def misses_targets(r: dict) -> list:
    """Issue 17's targets this row misses."""
    out = []
    if r["ratio_min"] > 1.0:
        out.append(f"quiet {r['ratio_min']:.2f}x > 1.0x")
    if "contended" in r:
        if r["contended_ratio_median"] > 1.5:
            out.append(f"contended {r['contended_ratio_median']:.2f}x > 1.5x")
        if r["contended"]["edge_infer"]["vs_quiet"] > 3:
            out.append(f"ours contended/quiet {r['contended']['edge_infer']['vs_quiet']:.1f}x > 3x")
        b = r["contended"]
        if "ours int8" in b and "onnxruntime int8" in b:
            v = b["ours int8"]["median_ms"] / b["onnxruntime int8"]["median_ms"]
            if v > 1.5:
                out.append(f"int8 contended {v:.2f}x onnxruntime int8 > 1.5x")
        if "ours int8" in b and b["ours int8"]["vs_quiet"] > 3:
            out.append(f"ours int8 contended/quiet {b['ours int8']['vs_quiet']:.1f}x > 3x")
    return out


def print_report(report: dict, args) -> None:
    print(f"machine: {report['machine']}; python {report['python']}, numpy {report['numpy']}, "
          f"onnxruntime {report['onnxruntime']}, edge_infer {report['edge_infer']}")
    print(f"BLAS: {report['blas']}; {report['load_before']}")
    print(f"batch 1, {args.rounds} interleaved rounds of 3 timed runs per engine, backend {args.backend}, "
          f"opt level {args.opt_level}\n")
    rows = [r for r in report["models"] if "error" not in r]
    print("| model | threads | edge_infer min ms | median | onnxruntime min ms | median | ratio (min) | "
          "ratio (median) | max rel err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        e, o = r["quiet"]["edge_infer"], r["quiet"]["onnxruntime"]
        print(f"| {r['model']} | {r['threads']} | {e['min_ms']:.2f} | {e['median_ms']:.2f} | {o['min_ms']:.2f} | "
              f"{o['median_ms']:.2f} | {r['ratio_min']:.2f}x | {r['ratio_median']:.2f}x | {r['max_rel_err']:.1e} |")
    for r in report["models"]:
        if "error" in r:
            print(f"\n{r['model']}: {r['error']}")
    if args.contention:
        print(f"\nunder contention: {args.contention} busy processes at nice 10\n")
        print("| model | threads | edge_infer median ms | onnxruntime median ms | ratio | "
              "edge_infer contended / quiet | onnxruntime contended / quiet |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            e, o = r["contended"]["edge_infer"], r["contended"]["onnxruntime"]
            print(f"| {r['model']} | {r['threads']} | {e['median_ms']:.2f} | {o['median_ms']:.2f} | "
                  f"{r['contended_ratio_median']:.2f}x | {e['vs_quiet']:.2f}x | {o['vs_quiet']:.2f}x |")
    if any("ours int8" in r["quiet"] for r in rows):
        print("\nint8 (same interleaved rounds; onnxruntime int8: its static QDQ of the same model; "
              "LiteRT int8: XNNPACK on our own int8 .tflite export)\n")
        print("\n".join(int8_rows(rows, bool(args.contention))))
        for r in rows:
            for note in r.get("notes", []):
                print(f"- {r['model']}, {r['threads']} thread(s): {note}")
    missed = [(r, m) for r in rows for m in [misses_targets(r)] if m]
    print("\nissue 17 targets: " + ("all met" if not missed else "missed by"))
    for r, m in missed:
        print(f"- {r['model']}, {r['threads']} thread(s): {', '.join(m)}")
    if report.get("rss"):
        print("\n| model | edge_infer peak RSS MB | onnxruntime peak RSS MB | RSS ratio |")
        print("|---|---:|---:|---:|")
        for name, (e, o) in report["rss"].items():
            if "error" in e or "error" in o:
                print(f"| {name} | {e.get('error', '')} | {o.get('error', '')} | |")
            else:
                print(f"| {name} | {e['peak_rss_mb']:.0f} | {o['peak_rss_mb']:.0f} | "
                      f"{e['peak_rss_mb'] / o['peak_rss_mb']:.2f}x |")
    if "dispatch" in report:
        d, ld = report["dispatch"], report["load"]
        print(f"\ndispatch overhead: {d['us_per_op']:.2f} us/op ({d['ops']} tiny ops, {d['us_per_run']:.0f} us/run)")
        print(f"artifact load: {ld['artifact_mb']:.0f} MB in {ld['load_ms']:.1f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS, help="names and groups (core, families, zoo)")
    ap.add_argument("--families", action="store_true", help="the model families only (--models families)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--contention", type=int, default=0, metavar="N",
                    help="a second pass with N busy nice-10 processes")
    ap.add_argument("--int8", action=argparse.BooleanOptionalAction, default=None,
                    help="also ours int8, onnxruntime int8 QDQ and LiteRT int8 (default: on with --contention)")
    ap.add_argument("--rss", action="store_true", help="also peak RSS, each runtime in its own process")
    ap.add_argument("--runs", type=int, default=20, help="runs of each --rss child")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up runs of each --rss child")
    ap.add_argument("--no-micro", action="store_true", help="skip the dispatch and artifact-load measurements")
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
    if args.int8 is None:
        args.int8 = bool(args.contention)
    threads = [int(t) for t in args.threads.split(",") if t]
    report = {
        "machine": f"{cpu_model()}, {platform.machine()}, {os.cpu_count()} cores, "
                   f"{__import__('psutil').virtual_memory().total / 2**30:.0f} GiB",
        "python": platform.python_version(), "numpy": np.__version__,
        "onnxruntime": __import__("onnxruntime").__version__, "edge_infer": edge_infer.__version__,
        "load_before": load_line(), "threads": threads, "rounds": args.rounds, "contention": args.contention,
        "models": [], "rss": {},
    }
    graphs: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in expand_models("families" if args.families else args.models):
            src = model_file(name)
            in_name, xs = model_inputs(name, src, 1)
            eim = os.path.join(tmp, name + ".eim")
            t0 = time.perf_counter()
            try:
                edge_infer.convert(src, eim, input_shapes={in_name: xs[0].shape}, opt_level=args.opt_level)
            except Exception as e:      # noqa: BLE001 (one model's failure is reported, not fatal)
                report["models"].append({"model": name, "error": f"convert: {type(e).__name__}: {str(e)[:120]}"})
                continue
            conv_s = time.perf_counter() - t0
            for t in threads:
                row = time_model(name, src, eim, t, args, tmp, graphs)
                row["convert_s"] = conv_s
                report["models"].append(row)
                if not args.json:
                    print(f"  measured {name} at {t} thread(s)", file=sys.stderr)
            if args.rss:
                report["rss"][name] = [run_child(args.backend, eim, src, threads[-1], args.runs, args.warmup),
                                       run_child("ort", src, src, threads[-1], args.runs, args.warmup)]
    report["blas"] = blas_info()
    if not args.no_micro:
        report["dispatch"], report["load"] = dispatch_overhead(), artifact_load_time()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
