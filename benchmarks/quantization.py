"""Int8 quantization: accuracy per calibration method, artifact sizes, fp32 vs int8 latency.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/quantization.py [--no-resnet]

* digits (the bundled trained CNN): calibrated on 200 images of scikit-learn's digits training
  split (disjoint from the bundled 450 held-out images; the first 100 held-out images when
  scikit-learn is missing), accuracy on the held-out images, for every calibration method;
* ResNet-50 (onnx's light model with seeded random weights, tests/onnx_models.py), calibrated
  on seeded random inputs: sizes, agreement with fp32, latency.

Prints markdown tables.
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

from edge_infer.artifact import load_artifact  # noqa: E402
from edge_infer.convert import convert  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402

METHODS = ("minmax", "ema", "percentile", "entropy", "mse")


def latency_pair(a: Runtime, b: Runtime, feeds, runs: int, warmup: int = 3):
    """Interleaved timings of two runtimes (so load changes hit both): (median, min) ms each."""
    for _ in range(warmup):
        a.run(feeds)
        b.run(feeds)
    ts = {0: [], 1: []}
    for _ in range(runs):
        for k, rt in ((0, a), (1, b)):
            t0 = time.perf_counter()
            rt.run(feeds)
            ts[k].append(time.perf_counter() - t0)
    return [(float(np.median(v) * 1e3), float(np.min(v) * 1e3)) for v in (ts[0], ts[1])]


def weight_bytes(path: str) -> int:
    g, _ = load_artifact(path)
    return int(sum(t.data.nbytes for t in g.tensors.values() if t.is_const))


def digits_calibration():
    from edge_infer.data import load_digits_samples
    x, y = load_digits_samples()
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        return x[:100], x[100:], y[100:], "held-out 0..99 (evaluated on 100..449)"
    d = load_digits()
    xtr = train_test_split(d.images.astype(np.float32) / 16, d.target, test_size=0.25, random_state=0,
                           stratify=d.target)[0]
    return xtr[:200, None], x, y, "200 images of the sklearn training split (evaluated on all 450 held-out)"


def bench_digits(tmp: str, threads: int = 1) -> None:
    from edge_infer.data import digits_model_path
    src = digits_model_path()
    cal, xe, ye, desc = digits_calibration()
    np.save(os.path.join(tmp, "cal.npy"), cal)
    f32 = os.path.join(tmp, "digits_fp32.eim")
    convert(src, f32)
    acc = lambda p: float((Runtime(p, backend="cpu", threads=threads).run({"input": xe})["logits"].argmax(1) == ye).mean())
    a32 = acc(f32)
    print(f"\n### digits CNN: accuracy on {len(ye)} held-out images; calibration: {desc}\n")
    print("| calibration | int8 accuracy | fp32 accuracy | drop | top-1 agreement (held-out calib.) | output SQNR dB |")
    print("|---|---|---|---|---|---|")
    paths = {}
    for m in METHODS:
        p = os.path.join(tmp, f"digits_int8_{m}.eim")
        rep = convert(src, p, quantize="int8", calib=os.path.join(tmp, "cal.npy"), calib_method=m)["quantization"]
        a8 = acc(p)
        o = rep["outputs"]["logits"]
        print(f"| {m} | {a8:.2%} ({round(a8 * len(ye))}/{len(ye)}) | {a32:.2%} | {a32 - a8:+.2%} | "
              f"{o['top1_agreement']:.2%} | {o['sqnr_db']:.1f} |")
        paths[m] = p
    p8 = paths["minmax"]
    print("\n| digits file | bytes | weight bytes |")
    print("|---|---|---|")
    print(f"| source ONNX | {os.path.getsize(src):,} | |")
    print(f"| fp32 .eim | {os.path.getsize(f32):,} | {weight_bytes(f32):,} |")
    print(f"| int8 .eim (minmax) | {os.path.getsize(p8):,} ({os.path.getsize(p8) / os.path.getsize(src):.2f}x "
          f"ONNX) | {weight_bytes(p8):,} ({weight_bytes(p8) / weight_bytes(f32):.2f}x) |")
    print(f"\n| digits latency ({threads} thread) | fp32 median (min) ms | int8 median (min) ms |")
    print("|---|---|---|")
    r32, r8 = Runtime(f32, backend="cpu", threads=threads), Runtime(p8, backend="cpu", threads=threads)
    for bs, runs in ((1, 500), (len(ye), 40)):
        feeds = {"input": xe[:bs]}
        (m32, n32), (m8, n8) = latency_pair(r32, r8, feeds, runs)
        print(f"| batch {bs} | {m32:.3f} ({n32:.3f}) | {m8:.3f} ({n8:.3f}) |")


def bench_resnet(tmp: str, samples: int = 8) -> None:
    from onnx_models import randomized_light_model_path
    from edge_infer.quantize.report import output_metrics
    src = randomized_light_model_path("resnet50")
    f32, i8 = os.path.join(tmp, "r50_fp32.eim"), os.path.join(tmp, "r50_int8.eim")
    t0 = time.perf_counter()
    convert(src, f32)
    t32 = time.perf_counter() - t0
    t0 = time.perf_counter()
    rep = convert(src, i8, quantize="int8", calib="random", calib_samples=samples)["quantization"]
    t8 = time.perf_counter() - t0
    g32 = load_artifact(f32)[0]
    name = g32.inputs[0]
    shape = tuple(d if isinstance(d, int) else 1 for d in g32.tensors[name].shape)
    x = np.random.default_rng(123).standard_normal((8,) + shape[1:]).astype(np.float32)
    r32, r8 = Runtime(f32, backend="cpu"), Runtime(i8, backend="cpu")
    out = g32.outputs[0]
    o32 = np.concatenate([r32.run({name: x[i:i + 1]})[out] for i in range(len(x))])
    o8 = np.concatenate([r8.run({name: x[i:i + 1]})[out] for i in range(len(x))])
    m = output_metrics(o32, o8)
    # the logits (the Softmax's input) in both graphs
    g8 = load_artifact(i8)[0]
    sm32 = next(n for n in g32.nodes if n.op == "Softmax").inputs[0]
    sm8 = next(n for n in g8.nodes if n.op == "Softmax").inputs[0]
    g32.outputs, g8.outputs = [sm32], [sm8]
    l32 = np.concatenate([Runtime(g32, backend="cpu").run({name: x[i:i + 1]})[sm32] for i in range(len(x))])
    l8 = np.concatenate([Runtime(g8, backend="cpu").run({name: x[i:i + 1]})[sm8] for i in range(len(x))])
    ml = output_metrics(l32, l8)
    top2 = np.sort(l32, axis=1)[:, -2:]
    print(f"\n### ResNet-50 (random weights), calibrated on {samples} seeded random inputs\n")
    print(f"int8: {rep['nodes']['int8']} int8 nodes, fp32: {', '.join(e['node'] + ' (' + e['op'] + ')' for e in rep['float_nodes'])}; "
          f"convert {t32:.1f} s fp32, {t8:.1f} s int8")
    print(f"on 8 fresh random inputs: top-1 agreement {m['top1_agreement']:.0%}; softmax output SQNR "
          f"{m['sqnr_db']:.1f} dB, cosine {m['cosine']:.4f}; logits SQNR {ml['sqnr_db']:.1f} dB, cosine "
          f"{ml['cosine']:.4f}, max |error| {ml['max_abs_error']:.3f} (fp32 logits std {l32.std():.2f}, "
          f"median top-1/top-2 margin {np.median(top2[:, 1] - top2[:, 0]):.3f})\n")
    print("| ResNet-50 file | bytes | weight bytes |")
    print("|---|---|---|")
    print(f"| source ONNX | {os.path.getsize(src):,} | |")
    print(f"| fp32 .eim | {os.path.getsize(f32):,} | {weight_bytes(f32):,} |")
    print(f"| int8 .eim | {os.path.getsize(i8):,} ({os.path.getsize(i8) / os.path.getsize(src):.2f}x ONNX) | "
          f"{weight_bytes(i8):,} ({weight_bytes(i8) / weight_bytes(f32):.2f}x) |")
    feeds = {name: x[:1]}
    print(f"\n| ResNet-50 latency, batch 1 ({r32.threads} threads) | fp32 median (min) ms | int8 median (min) ms |")
    print("|---|---|---|")
    (m32, n32), (m8, n8) = latency_pair(r32, r8, feeds, 20)
    print(f"| batch 1 | {m32:.1f} ({n32:.1f}) | {m8:.1f} ({n8:.1f}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-resnet", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench_digits(tmp)
        if not args.no_resnet:
            bench_resnet(tmp)


if __name__ == "__main__":
    main()
