"""int8 on a text detector: the trained DB-style fixture, its text map against fp32 and the peers'.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/int8_text.py [--eval 100] [--size 320]

* converts ``edge_infer/data/db_text/db_text.onnx`` to fp32 and (default options) int8,
  calibrated on ``--calib`` held-out scenes (seeds disjoint from the evaluation's);
* the same model through onnxruntime fp32 and onnxruntime's static int8 (QDQ, per-channel,
  the same calibration scenes), and LiteRT (XNNPACK) int8 on our TFLite export of our int8 graph;
* on ``--eval`` held-out scenes: the text-map IoU of each int8 against its own fp32 (binarized
  at DB's 0.3 and at 0.5; the issue's target: >= 0.95), and each map against the ground truth.

Prints one markdown table; numbers from one run.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _common import blas_info, load_line  # noqa: E402
from native_bench import litert_runner, ort_int8  # noqa: E402
from edge_infer.convert import convert  # noqa: E402
from edge_infer.data import db_text_model_path, db_text_scenes  # noqa: E402
from edge_infer.quantize.metrics import map_iou  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402

THRESHOLDS = (0.3, 0.5)


def nchw(y: np.ndarray) -> np.ndarray:
    """A one-channel map [1, 1, H, W] from an export that writes NCHW or NHWC."""
    return y if y.shape[1] == 1 else np.moveaxis(y, -1, 1)


def each(fn, x: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(fn(x[i:i + 1])).reshape(1, 1, *x.shape[2:]) for i in range(len(x))])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval", type=int, default=100)
    ap.add_argument("--calib", type=int, default=32)
    ap.add_argument("--size", type=int, default=320)
    ap.add_argument("--model", default=None, help="another DB-style ONNX model (input x, output maps)")
    args = ap.parse_args(argv)
    print(f"BLAS: {blas_info()}; {load_line()}")
    x, truth = db_text_scenes(args.eval, size=args.size)
    cal, _ = db_text_scenes(args.calib, start=100_000, size=args.size)
    calib = [cal[i:i + 1] for i in range(len(cal))]
    src = args.model or db_text_model_path()
    shape = {"x": [1, 3, args.size, args.size]}
    maps = {}
    with tempfile.TemporaryDirectory() as d:
        fp, q8 = os.path.join(d, "fp32.eim"), os.path.join(d, "int8.eim")
        convert(src, fp, input_shapes=shape)
        rep = convert(src, q8, input_shapes=shape, quantize="int8", calib=calib)["quantization"]
        for name, path in (("ours fp32", fp), ("ours int8", q8)):
            rt = Runtime(path, backend="cpu")           # ours (auto might time LiteRT faster)
            maps[name] = each(lambda v: rt.run({"x": v})["maps"], x)
        float_nodes = f"{rep['nodes']['float32']}/{rep['nodes']['total']}"
        try:
            import onnxruntime as ort
            sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
            maps["onnxruntime fp32"] = each(lambda v: sess.run(None, {"x": v})[0], x)
            qpath = ort_int8(src, os.path.join(d, "ort_int8.onnx"), "x", calib)
            qs = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
            maps["onnxruntime int8"] = each(lambda v: qs.run(None, {"x": v})[0], x)
        except ImportError as e:
            print(f"onnxruntime: {e}")
        run, note = litert_runner(Runtime(q8).graph, 1)
        if run is not None:
            maps["LiteRT int8"] = each(lambda v: nchw(run(v)), x)
        else:
            print(f"LiteRT int8: {note}")
    print(f"\nDB-style text fixture, {args.size}x{args.size}, {args.eval} held-out scenes, calibration "
          f"{args.calib} scenes; ours int8: {float_nodes} nodes float32\n")
    head = " | ".join(f"IoU vs fp32 @{t}" for t in THRESHOLDS) + " | " + " | ".join(f"IoU vs truth @{t}" for t in THRESHOLDS)
    print(f"| engine | {head} |")
    print("|---" + "|---:" * (2 * len(THRESHOLDS)) + "|")
    for name, m in maps.items():
        ref = maps["onnxruntime fp32" if name.startswith(("onnxruntime", "LiteRT")) and "onnxruntime fp32" in maps
                   else "ours fp32"]
        vs = " | ".join(f"{map_iou(ref, m, threshold=t):.4f}" if "int8" in name else "" for t in THRESHOLDS)
        gt = " | ".join(f"{map_iou(truth, m, threshold=t):.4f}" for t in THRESHOLDS)
        print(f"| {name} | {vs} | {gt} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
