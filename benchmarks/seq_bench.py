#!/usr/bin/env python3
"""Transformer and recurrent models: ours (native recurrence), ours with the numpy kernels
only, and onnxruntime, same thread count, batch 1, median of N runs, in one process.

Models (tests/seq_model_builders.py, seeded random weights): the ViT-style stack, and CRNN
text recognizers with a bidirectional LSTM or GRU over ``--width / 2`` time steps. Ours is
the converted artifact (optimizer, layout pass); onnxruntime runs the ONNX file with its
default graph optimizations.

    python benchmarks/seq_bench.py
    python benchmarks/seq_bench.py --threads 2 --runs 50 --width 512 --json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))


def median_ms(fn, runs: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def models(width: int, hidden: int):
    from seq_model_builders import crnn_model, vit_model
    crnn = [(f"crnn_{rnn.lower()}_{width // 2}steps_h{hidden}", crnn_model(rnn, width=width, hidden=hidden),
             (1, 1, 32, width)) for rnn in ("LSTM", "GRU")]
    return [("vit", vit_model(), (1, 3, 32, 32))] + crnn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--width", type=int, default=256, help="CRNN input width (time steps = width / 2)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort

    import edge_infer
    from edge_infer.backends.cpu import native
    from edge_infer.runtime import Runtime

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, model, shape in models(args.width, args.hidden):
            src, dst = os.path.join(d, f"{name}.onnx"), os.path.join(d, f"{name}.eim")
            onnx.save(model, src)
            edge_infer.convert(src, dst)
            x = {"image": np.random.default_rng(0).random(shape, dtype=np.float32)}
            rt = Runtime(dst, backend="cpu", threads=args.threads)
            ours = median_ms(lambda: rt.run(x), args.runs)
            lib, native.lib = native.lib, None          # plans built now use the numpy kernels
            try:
                rt_np = Runtime(dst, backend="cpu", threads=args.threads)
                numpy_only = median_ms(lambda: rt_np.run(x), args.runs)
            finally:
                native.lib = lib
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
            ref = median_ms(lambda: sess.run(None, x), args.runs)
            rows.append({"model": name, "ours_ms": ours, "ours_numpy_ms": numpy_only, "onnxruntime_ms": ref})
    if args.json:
        print(json.dumps({"threads": args.threads, "runs": args.runs, "rows": rows}, indent=2))
        return 0
    print(f"threads {args.threads}, batch 1, median of {args.runs} runs")
    print("| model | ours ms | ours, numpy kernels only | onnxruntime ms | ours / onnxruntime |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['ours_ms']:.2f} | {r['ours_numpy_ms']:.2f} | {r['onnxruntime_ms']:.2f} | "
              f"{r['ours_ms'] / r['onnxruntime_ms']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
