#!/usr/bin/env python3
"""The CUDA backend against onnxruntime's CUDA provider, and the transfer share of a camera frame.

For each model (batch 1, fp32; int8 for ours alone): median end-to-end latency of our CUDA
backend (host frame in, host outputs out) and of onnxruntime with CUDAExecutionProvider on
the same model, their ratio, and where a frame's time goes on our side:

* serial: one synchronous frame split into host write (frame into the pinned/mapped input),
  upload, compute, download; transfer share = (write + upload + download) / frame;
* pipelined: frames through ``run_async`` with two in flight (upload of frame n+1 on a second
  stream while frame n computes; on Jetson-class devices no copy at all); exposed transfer
  share = 1 - compute / frame period. Design target: 30% -> 5%.

Parity with the CPU backend is checked on the way (relative L2; int8 bit-exact).

    python benchmarks/cuda_vs_ort.py                                   # default set, on the GPU
    python benchmarks/cuda_vs_ort.py --models squeezenet,resnet50 --runs 100 --json out.json
    python benchmarks/cuda_vs_ort.py --emulate --models digits --runs 3  # plumbing only, no GPU
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

#: the deployed families (tests/family_models.py): name -> (builder, input size)
FAMILIES = {"mnv3": ("mobilenetv3_classifier", (224, 224)), "db640": ("db_text_detector", (640, 640)),
            "yolo320": ("yolo_detector", 320), "yolo640": ("yolo_detector", 640)}
DEFAULT_MODELS = ["digits", "squeezenet", "resnet50", "inception_v1", "shufflenet", "densenet121"]


def load(name: str):
    """(onnx bytes, IR graph, input name, input array) for a model name."""
    import onnx
    from edge_infer.frontends.onnx import load_onnx
    if name == "digits":
        from edge_infer.data import digits_model_path, load_digits_samples
        model = onnx.load(digits_model_path())
        x = load_digits_samples()[0][:1]
    elif name in FAMILIES:
        import family_models
        fn, size = FAMILIES[name]
        model = getattr(family_models, fn)(size)
        hw = model.graph.input[0].type.tensor_type.shape.dim
        x = np.random.default_rng(1234).random([d.dim_value for d in hw], dtype=np.float32)
    else:
        from onnx_models import randomized_light_model_path
        model = onnx.load(randomized_light_model_path("light_" + name if not name.startswith("light_") else name))
        x = np.random.default_rng(1234).standard_normal((1, 3, 224, 224), dtype=np.float32)
    g = load_onnx(model)
    return model.SerializeToString(), g, g.inputs[0], x


def median_ms(fn, runs: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts) * 1e3)


def ort_cuda(data: bytes, name: str, x: np.ndarray, runs: int):
    """Median ms of onnxruntime with the CUDA provider, or (None, why)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime not installed"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return None, f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (pip install onnxruntime-gpu)"
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(data, so, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    if sess.get_providers()[0] != "CUDAExecutionProvider":
        return None, "onnxruntime fell back to the CPU provider"
    return median_ms(lambda: sess.run(None, {name: x}), runs), ""


def measure(exe, name: str, x: np.ndarray, runs: int) -> dict:
    feeds = {name: x}
    e2e = median_ms(lambda: exe.run(feeds), runs)
    phases = [exe.timed_run(feeds) for _ in range(max(3, runs // 2))]
    med = {k: float(np.median([p[k] for p in phases]) * 1e3) for k in ("host_write", "h2d", "compute", "d2h")}
    frame = sum(med.values())
    transfer = med["host_write"] + med["h2d"] + med["d2h"]
    # pipelined: two frames in flight
    frames = [x + np.float32(k * 1e-3) for k in range(4)]
    pending = []
    for k in range(4):
        pending.append(exe.run_async({name: frames[k % 4]}))
    for p in pending:
        p.result()
    t0 = time.perf_counter()
    pending = []
    for k in range(runs):
        pending.append(exe.run_async({name: frames[k % 4]}))
        if len(pending) > 2:
            pending.pop(0).result()
    for p in pending:
        p.result()
    period = (time.perf_counter() - t0) / runs * 1e3
    return {"e2e_ms": e2e, **{f"{k}_ms": v for k, v in med.items()},
            "serial_transfer_share": transfer / frame if frame else 0.0,
            "pipelined_period_ms": period,
            "pipelined_exposed_transfer_share": max(0.0, 1.0 - med["compute"] / period) if period else 0.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--layout", default="nchw", choices=["nchw", "nhwc"])
    ap.add_argument("--no-int8", action="store_true")
    ap.add_argument("--emulate", action="store_true", help="the CPU emulator of the kernels (plumbing check)")
    ap.add_argument("--zero-copy", choices=["auto", "on", "off"], default="auto",
                    help="graph I/O in mapped host memory: auto = on integrated (Jetson) devices only")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    from edge_infer.backends.cpu import CpuBackend
    from edge_infer.backends.cuda import CudaBackend, cupy_status, default_device
    from edge_infer.convert import optimize_verified
    from edge_infer.quantize import quantize_model
    from edge_infer.runtime import specialize
    if args.emulate:
        from edge_infer.backends.cuda.emulator import EmulatedDevice
        dev = EmulatedDevice()
    else:
        ok, why = cupy_status()
        if not ok:
            print(f"CUDA backend not runnable here: {why}")
            return 2
        if args.zero_copy == "auto":
            dev = default_device()
        else:
            from edge_infer.backends.cuda.device import CupyDevice
            dev = CupyDevice(0, zero_copy=args.zero_copy == "on")
    cp_ver = ""
    try:
        import cupy
        cp_ver = f", cupy {cupy.__version__}"
    except ImportError:
        pass
    head = (f"device: {dev.describe()}; {platform.machine()}, python {platform.python_version()}, "
            f"numpy {np.__version__}{cp_ver}; layout {args.layout}, batch 1, {args.runs} runs")
    print(head)
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        data, g, inp, x = load(name)
        g.metadata["preferred_layout"] = args.layout
        opt, _ = optimize_verified(g, 3, samples=1)
        variants = [("fp32", opt)]
        if not args.no_int8:
            cal = [{inp: (x + np.float32(0.01 * k)).astype(np.float32)} for k in range(4)]
            variants.append(("int8", quantize_model(opt, cal)[0]))
        for prec, graph in variants:
            sp = specialize(graph, {inp: x.shape})
            exe = CudaBackend(dev).prepare(sp)
            ref = CpuBackend().prepare(sp).run({inp: x})
            out = exe.run({inp: x})
            prod = {o: n.op for n in sp.nodes for o in n.outputs}
            exact = [k for k in ref if prec == "int8" and (sp.tensors[k].dtype == "int8"
                                                           or prod.get(k) == "DequantizeLinear")]
            floats = [k for k in ref if k not in exact]
            parity = ("bit-exact" if all(np.array_equal(out[k], ref[k]) for k in exact) else "DIFFERS") \
                if exact else ""
            if floats:
                err = max(np.linalg.norm(out[k] - ref[k]) / (np.linalg.norm(ref[k]) or 1) for k in floats)
                parity += (", " if parity else "") + f"{err:.1e}"
            row = {"model": name, "precision": prec, "parity_vs_cpu": parity, **measure(exe, inp, x, args.runs)}
            if prec == "fp32":
                ort_ms, why = (None, "emulated run: no timing comparison") if args.emulate else \
                    ort_cuda(data, inp, x, args.runs)
                row["ort_cuda_ms"], row["ort_note"] = ort_ms, why
                row["ratio_vs_ort"] = row["e2e_ms"] / ort_ms if ort_ms else None
            row["launch"] = exe.launch_mode
            rows.append(row)
            print(f"  {name} {prec}: {row['e2e_ms']:.3f} ms ({parity}); {exe.launch_mode}", flush=True)
    print()
    print("| model | prec | ours ms | ORT CUDA ms | ratio | compute ms | upload ms | download ms | host write ms "
          "| serial transfer share | pipelined period ms | exposed transfer share | parity vs CPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        ort_ms = f"{r['ort_cuda_ms']:.3f}" if r.get("ort_cuda_ms") else "n/a"
        ratio = f"{r['ratio_vs_ort']:.2f}x" if r.get("ratio_vs_ort") else "n/a"
        print(f"| {r['model']} | {r['precision']} | {r['e2e_ms']:.3f} | {ort_ms} | {ratio} | {r['compute_ms']:.3f} | "
              f"{r['h2d_ms']:.3f} | {r['d2h_ms']:.3f} | {r['host_write_ms']:.3f} | "
              f"{100 * r['serial_transfer_share']:.1f}% | {r['pipelined_period_ms']:.3f} | "
              f"{100 * r['pipelined_exposed_transfer_share']:.1f}% | {r['parity_vs_cpu']} |")
    notes = sorted({r["ort_note"] for r in rows if r.get("ort_note")})
    for n in notes:
        print(f"ORT: {n}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": head, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
