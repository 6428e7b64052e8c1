#!/usr/bin/env python3
"""Imported float .tflite models: edge_infer's latency against LiteRT's on the same file.

Per model: the ONNX zoo model (seeded weights, tests/onnx_models.py) or the MobileNet-v2 of
benchmarks/layout_nchw_vs_nhwc.py is exported to .tflite with ``export_tflite``; that file
is then what both sides get: LiteRT's ``Interpreter(model_path=...)`` (default kernels,
XNNPACK) and ``edge-infer convert FILE.tflite`` (import, optimize, verify) -> ``Runtime``.
Both run batch 1 with the same thread count, interleaved (ours, LiteRT, ours, ...) so that
load from other processes hits both alike; median and minimum per side, ratio = ours / LiteRT.
Outputs are compared first (relative L2). The source graph run directly by edge_infer (the
ONNX / IR path) is timed in the same rounds: it shows what the import costs, if anything.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/tflite_compare.py
    ... --models mobilenetv2,resnet50,squeezenet,shufflenet,digits --threads 2 --runs 20
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.insert(0, HERE)

DEFAULT_MODELS = ("mobilenetv2", "resnet50", "squeezenet", "shufflenet", "digits")


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
        return "; ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, "
                         f"{i.get('num_threads')} thr)" for i in threadpool_info() if i.get("user_api") == "blas")
    except ImportError:
        return "threadpoolctl not installed"


def source_graph(name: str):
    from edge_infer.frontends import load_model
    if name == "mobilenetv2":
        from layout_nchw_vs_nhwc import mobilenet_v2
        return mobilenet_v2()
    if name == "digits":
        from edge_infer.data import digits_model_path
        return load_model(digits_model_path())
    from onnx_models import randomized_light_model_path
    return load_model(randomized_light_model_path(name))


def make_tflite(name: str, out_dir: str):
    """(the model as a float .tflite file written by our exporter, the optimized source graph)."""
    from edge_infer.export_tflite import export_tflite
    from edge_infer.passes import optimize
    g = source_graph(name)
    g.validate()
    g.metadata["preferred_layout"] = "NHWC"
    optimize(g, 3)
    path = os.path.join(out_dir, f"{name}.tflite")
    export_tflite(g, path)
    return path, g


def bench(name: str, tfl: str, source, out_dir: str, threads: int, runs: int, warmup: int) -> dict:
    import edge_infer
    from ai_edge_litert.interpreter import Interpreter
    eim = os.path.join(out_dir, f"{name}_from_tflite.eim")
    t0 = time.perf_counter()
    edge_infer.convert(tfl, eim)
    convert_s = time.perf_counter() - t0
    rt = edge_infer.Runtime(eim, backend="cpu", threads=threads)
    src = edge_infer.Runtime(source, backend="cpu", threads=threads)
    it = Interpreter(model_path=tfl, num_threads=threads)
    it.allocate_tensors()
    ind, outd = it.get_input_details()[0], it.get_output_details()[0]
    x = np.random.default_rng(0).standard_normal(tuple(ind["shape"])).astype(np.float32)
    feed = {rt.inputs[0].name: x}
    out_name = rt.outputs[0].name
    src_feed = {src.inputs[0].name: x}

    def direct():
        return src.run(src_feed)[src.outputs[0].name]

    def ours():
        return rt.run(feed)[out_name]

    def lite():
        it.set_tensor(ind["index"], x)
        it.invoke()
        return it.get_tensor(outd["index"])
    a, b = ours(), lite()
    err = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
    for _ in range(warmup):
        ours(), lite(), direct()
    t_ours, t_lite, t_src = [], [], []
    for _ in range(runs):
        for fn, acc in ((ours, t_ours), (lite, t_lite), (direct, t_src)):
            t = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t)
    med_o, med_l = float(np.median(t_ours)) * 1e3, float(np.median(t_lite)) * 1e3
    return {"model": name, "tflite_bytes": os.path.getsize(tfl), "convert_s": convert_s, "rel_err": err,
            "ours_ms": med_o, "ours_min_ms": min(t_ours) * 1e3, "litert_ms": med_l,
            "litert_min_ms": min(t_lite) * 1e3, "ratio": med_o / med_l,
            "ratio_min": min(t_ours) / min(t_lite), "source_ms": float(np.median(t_src)) * 1e3,
            "source_min_ms": min(t_src) * 1e3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    import platform
    import ai_edge_litert
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; python {platform.python_version()}, "
          f"numpy {np.__version__}, ai-edge-litert {getattr(ai_edge_litert, '__version__', '?')}; "
          f"BLAS: {blas_info()}")
    print(f"threads {args.threads}, batch 1, {args.runs} interleaved runs, median (min) ms; "
          "the .tflite files are written by edge_infer's exporter, imported back by edge-infer convert\n")
    print("| model | .tflite MB | edge_infer on the .tflite ms | LiteRT ms | ratio (ours / LiteRT) | "
          "edge_infer on the source graph ms | rel. L2 diff |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for name in [m for m in args.models.split(",") if m]:
            tfl, source = make_tflite(name, d)
            r = bench(name, tfl, source, d, args.threads, args.runs, args.warmup)
            print(f"| {name} | {r['tflite_bytes'] / 1e6:.1f} | {r['ours_ms']:.2f} ({r['ours_min_ms']:.2f}) | "
                  f"{r['litert_ms']:.2f} ({r['litert_min_ms']:.2f}) | {r['ratio']:.2f}x ({r['ratio_min']:.2f}x) | "
                  f"{r['source_ms']:.2f} ({r['source_min_ms']:.2f}) | {r['rel_err']:.1e} |", flush=True)
            os.remove(tfl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
