"""``edge-infer demo``: the main job end to end on the bundled digits CNN.

Converts the bundled, trained ONNX model into an artifact, runs it on the
bundled held-out digits, and prints predictions, accuracy, sizes and latency.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np


def _glyph(img: np.ndarray) -> list:
    shades = " .:-=+*#%@"
    return ["".join(shades[min(9, int(v * 10))] for v in row) for row in img]


def run_demo(runs: int = 100, show: int = 6) -> int:
    from .convert import convert
    from .data import digits_model_path, load_digits_samples
    from .runtime import Runtime

    src = digits_model_path()
    x, y = load_digits_samples()
    with tempfile.TemporaryDirectory() as tmp:
        dst = os.path.join(tmp, "digits_cnn.eim")
        t0 = time.perf_counter()
        rep = convert(src, dst)
        t_convert = time.perf_counter() - t0
        print(f"converted {os.path.basename(src)} ({rep['source_bytes']:,} B) -> "
              f"{os.path.basename(dst)} ({rep['artifact_bytes']:,} B, "
              f"{rep['artifact_bytes'] / rep['source_bytes']:.2f}x) in {t_convert:.2f} s; "
              f"nodes {rep['before']['nodes']} -> {rep['after']['nodes']}, "
              f"verified max rel. error {rep['max_relative_error']:.1e}")

        rt = Runtime(dst)
        name = rt.inputs[0].name
        logits = rt.run({name: x})[rt.outputs[0].name]
        pred = logits.argmax(axis=1)
        acc = float((pred == y).mean())

        print(f"\nfirst {show} held-out digits (8x8 images):")
        rows = [_glyph(x[k, 0]) for k in range(show)]
        for r in range(8):
            print("   " + "   ".join(img[r] for img in rows))
        print("   " + "   ".join(f"{'p=' + str(pred[k]):<4}{'y=' + str(y[k]):>4}" for k in range(show)))
        print(f"\naccuracy on {len(y)} held-out digits: {acc:.2%} "
              f"({int((pred == y).sum())}/{len(y)})")

        # int8: calibrate on the first 100 held-out digits, score on the other 350
        dst8 = os.path.join(tmp, "digits_cnn_int8.eim")
        calib = [{name: x[k:k + 1]} for k in range(100)]
        rep8 = convert(src, dst8, quantize="int8", calib=calib)
        rt8 = Runtime(dst8)
        pred8 = rt8.run({name: x[100:]})[rt8.outputs[0].name].argmax(axis=1)
        acc32, acc8 = float((pred[100:] == y[100:]).mean()), float((pred8 == y[100:]).mean())
        print(f"int8 (calibrated on 100 digits, scored on the other {len(y) - 100}): accuracy "
              f"{acc8:.2%} vs fp32 {acc32:.2%}; artifact {rep8['artifact_bytes']:,} B "
              f"({rep8['artifact_bytes'] / rep['source_bytes']:.2f}x the source)")

        one = x[:1]
        for _ in range(10):
            rt.run({name: one})
        lat = []
        for _ in range(runs):
            t = time.perf_counter()
            rt.run({name: one})
            lat.append(time.perf_counter() - t)
        lat_ms = np.array(lat) * 1e3
        print(f"latency (batch 1, backend {rt.backend.name}, {rt.threads} thread(s), {runs} runs): "
              f"median {np.median(lat_ms):.3f} ms, p99 {np.percentile(lat_ms, 99):.3f} ms")
    return 0
