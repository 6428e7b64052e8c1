#!/usr/bin/env python3
"""NCHW vs NHWC for the numpy CPU kernels: which layout should the layout pass pick?

Per layer (batch 1, ResNet-50 and MobileNet-v2 shapes): the CPU backend's Conv,
MaxPool, AveragePool and GlobalAveragePool kernels prepared once in each layout
(``data_layout`` attribute), then timed interleaved (NCHW run, NHWC run, NCHW
run, ...) so that load from other processes hits both alike; the minimum over
the rounds is reported (the median too, to show the noise). Outputs are checked
against each other first.

* NCHW conv: the current kernel: 1x1 as ``W (M,C) @ X (C,P)``; depthwise as
  per-channel shifted multiply-adds over (C, OH, OW) views; im2col with cols
  (C*k, P) copied from an ``as_strided`` window view, ``W @ cols``.
* NHWC conv: 1x1 as ``X (P,C) @ W^T (C,M)``; depthwise over (OH, OW, C) views
  (inner loop over contiguous channels); im2col with cols (P, k*C) copied from a
  C-contiguous strided view, ``cols @ W (k*C, M)`` writing NHWC output directly.
  Weights stay OIHW in the graph and are packed at prepare.

Whole models (``--models``): the same graph optimized to level 2, then run as is
(NCHW) and after ``convert_layout`` + ``cancel_transposes`` (NHWC, with the
boundary transposes), interleaved the same way.

Run it with the BLAS settings of a plain install (this project's CI exports
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, which change OpenBLAS's kernels)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/layout_nchw_vs_nhwc.py
    ... --threads 1 --rounds 40 --models resnet50,mobilenetv2,squeezenet --json out.json
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

from edge_infer.backends.cpu.executor import PrepareContext  # noqa: E402
from edge_infer.backends.cpu.registry import KERNELS  # noqa: E402
from edge_infer.ir import Graph, infer_shapes  # noqa: E402

#: (name, op, H=W, C, M, kernel, stride, pad, group); op Conv/MaxPool/AveragePool/GlobalAveragePool
LAYERS = [
    ("r50 stem 7x7/2 3->64 @224", "Conv", 224, 3, 64, 7, 2, 3, 1),
    ("r50 maxpool 3x3/2 64 @112", "MaxPool", 112, 64, 64, 3, 2, 1, 1),
    ("r50 1x1 64->64 @56", "Conv", 56, 64, 64, 1, 1, 0, 1),
    ("r50 3x3 64->64 @56", "Conv", 56, 64, 64, 3, 1, 1, 1),
    ("r50 1x1 64->256 @56", "Conv", 56, 64, 256, 1, 1, 0, 1),
    ("r50 1x1 256->64 @56", "Conv", 56, 256, 64, 1, 1, 0, 1),
    ("r50 1x1/2 256->512 @56", "Conv", 56, 256, 512, 1, 2, 0, 1),
    ("r50 3x3/2 128->128 @56", "Conv", 56, 128, 128, 3, 2, 1, 1),
    ("r50 3x3 128->128 @28", "Conv", 28, 128, 128, 3, 1, 1, 1),
    ("r50 1x1 512->128 @28", "Conv", 28, 512, 128, 1, 1, 0, 1),
    ("r50 3x3 256->256 @14", "Conv", 14, 256, 256, 3, 1, 1, 1),
    ("r50 1x1 1024->256 @14", "Conv", 14, 1024, 256, 1, 1, 0, 1),
    ("r50 3x3 512->512 @7", "Conv", 7, 512, 512, 3, 1, 1, 1),
    ("r50 1x1 512->2048 @7", "Conv", 7, 512, 2048, 1, 1, 0, 1),
    ("r50 GAP 2048 @7", "GlobalAveragePool", 7, 2048, 2048, 7, 1, 0, 1),
    ("mv2 stem 3x3/2 3->32 @224", "Conv", 224, 3, 32, 3, 2, 1, 1),
    ("mv2 dw3x3 32 @112", "Conv", 112, 32, 32, 3, 1, 1, 32),
    ("mv2 1x1 32->16 @112", "Conv", 112, 32, 16, 1, 1, 0, 1),
    ("mv2 1x1 16->96 @112", "Conv", 112, 16, 96, 1, 1, 0, 1),
    ("mv2 dw3x3/2 96 @112", "Conv", 112, 96, 96, 3, 2, 1, 96),
    ("mv2 1x1 96->24 @56", "Conv", 56, 96, 24, 1, 1, 0, 1),
    ("mv2 1x1 24->144 @56", "Conv", 56, 24, 144, 1, 1, 0, 1),
    ("mv2 dw3x3 144 @56", "Conv", 56, 144, 144, 3, 1, 1, 144),
    ("mv2 dw3x3/2 144 @56", "Conv", 56, 144, 144, 3, 2, 1, 144),
    ("mv2 dw3x3 192 @28", "Conv", 28, 192, 192, 3, 1, 1, 192),
    ("mv2 1x1 192->64 @14", "Conv", 14, 192, 64, 1, 1, 0, 1),
    ("mv2 dw3x3 384 @14", "Conv", 14, 384, 384, 3, 1, 1, 384),
    ("mv2 dw3x3/2 576 @14", "Conv", 14, 576, 576, 3, 2, 1, 576),
    ("mv2 dw3x3 960 @7", "Conv", 7, 960, 960, 3, 1, 1, 960),
    ("mv2 1x1 960->320 @7", "Conv", 7, 960, 320, 1, 1, 0, 1),
    ("mv2 1x1 320->1280 @7", "Conv", 7, 320, 1280, 1, 1, 0, 1),
    ("mv2 GAP 1280 @7", "GlobalAveragePool", 7, 1280, 1280, 7, 1, 0, 1),
    ("inc avgpool 3x3/1 192 @28", "AveragePool", 28, 192, 192, 3, 1, 1, 1),
    ("inc maxpool 3x3/2 480 @28", "MaxPool", 28, 480, 480, 3, 2, 1, 1),
]


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    libs = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, "
            f"{i.get('num_threads')} threads)" for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(libs) or "unknown"


def prepare(op: str, hw: int, c: int, m: int, k: int, s: int, p: int, g: int, layout: str, rng):
    """(eval step, input buffer, output buffer) of one kernel in ``layout``."""
    xshape = (1, c, hw, hw) if layout == "NCHW" else (1, hw, hw, c)
    gr = Graph("bench")
    gr.add_input("x", "float32", xshape)
    ins, attrs = ["x"], {"data_layout": layout}
    if op == "Conv":
        w = np.random.default_rng(1).standard_normal((m, c // g, k, k)).astype(np.float32) * 0.1
        gr.add_const("w", w)
        gr.add_const("b", np.random.default_rng(2).standard_normal(m).astype(np.float32))
        ins += ["w", "b"]
        attrs.update(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=g)
    elif op in ("MaxPool", "AveragePool"):
        attrs.update(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    node = gr.add_node(op, ins, ["y"], **attrs)
    infer_shapes(gr)
    bufs = {"x": rng.standard_normal(xshape).astype(np.float32),
            "y": np.empty(gr.tensors["y"].shape, np.float32)}
    ctx = PrepareContext(gr, bufs, threads=1)
    step = KERNELS[op](node, ctx)
    return step, bufs, ctx.notes.get(node.name, "")


def interleaved(a, b, rounds: int, min_seconds: float):
    """(min, median) seconds of ``a`` and of ``b``, timed alternately."""
    a(), b()
    t0 = time.perf_counter()
    a(), b()
    one = time.perf_counter() - t0
    reps = max(rounds, min(2000, int(min_seconds / max(one, 1e-7))))
    ta, tb = [], []
    for r in range(reps):
        first, second, lf, ls = (a, b, ta, tb) if r % 2 == 0 else (b, a, tb, ta)
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        lf.append(t1 - t0)
        ls.append(t2 - t1)
    return (min(ta), float(np.median(ta))), (min(tb), float(np.median(tb)))


def bench_layers(names, rounds: int, min_seconds: float, repeat: int = 1):
    """Each layer is timed in ``repeat`` sweeps over the whole list (the minimum of
    them is kept), so a burst of load from another process spoils one sweep only."""
    rng = np.random.default_rng(0)
    cases = []
    for (name, op, hw, c, m, k, s, p, g) in LAYERS:
        if names and not any(n in name for n in names):
            continue
        fa, ba, na = prepare(op, hw, c, m, k, s, p, g, "NCHW", rng)
        fb, bb, nb = prepare(op, hw, c, m, k, s, p, g, "NHWC", rng)
        np.copyto(bb["x"], ba["x"].transpose(0, 2, 3, 1))
        fa(), fb()
        err = float(np.abs(ba["y"].transpose(0, 2, 3, 1) - bb["y"]).max() / (np.abs(ba["y"]).max() or 1))
        cases.append((name, op, fa, fb, na, nb, err))
    best = {}
    for sweep in range(repeat):
        for (name, op, fa, fb, na, nb, err) in cases:
            (amin, amed), (bmin, bmed) = interleaved(fa, fb, rounds, min_seconds)
            if name in best:
                pa, pma, pb, pmb = best[name]
                amin, bmin, amed, bmed = min(amin, pa), min(bmin, pb), min(amed, pma), min(bmed, pmb)
            best[name] = (amin, amed, bmin, bmed)
        print(f"sweep {sweep + 1}/{repeat} done", flush=True)
    rows = []
    for (name, op, fa, fb, na, nb, err) in cases:
        amin, amed, bmin, bmed = best[name]
        rows.append({"layer": name, "op": op, "nchw_ms": amin * 1e3, "nhwc_ms": bmin * 1e3,
                     "nchw_median_ms": amed * 1e3, "nhwc_median_ms": bmed * 1e3,
                     "speedup": amin / bmin, "rel_err": err, "nchw_algo": na, "nhwc_algo": nb})
        print(f"{name:30} NCHW {amin * 1e3:8.3f} ms (med {amed * 1e3:8.3f})  NHWC {bmin * 1e3:8.3f} ms "
              f"(med {bmed * 1e3:8.3f})  NCHW/NHWC {amin / bmin:5.2f}  err {err:.1e}", flush=True)
    return rows


# -- whole models -------------------------------------------------------------------------

def mobilenet_v2(width: float = 1.0, hw: int = 224) -> Graph:
    """MobileNet-v2 (torchvision layout: conv+BN folded into biased convs, ReLU6 as Clip),
    random He weights; batch 1."""
    rng = np.random.default_rng(0)
    g = Graph("mobilenet_v2")
    g.add_input("input", "float32", (1, 3, hw, hw))
    state = {"t": "input", "c": 3, "i": 0}
    g.add_const("six", np.float32(6.0))
    g.add_const("zero", np.float32(0.0))

    def conv(cin, cout, k, s, group=1, act=True):
        i = state["i"] = state["i"] + 1
        w = (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k)))
        g.add_const(f"w{i}", w.astype(np.float32))
        g.add_const(f"b{i}", (rng.standard_normal(cout) * 0.01).astype(np.float32))
        out = f"c{i}"
        g.add_node("Conv", [state["t"], f"w{i}", f"b{i}"], [out], kernel_shape=[k, k], strides=[s, s],
                   pads=[k // 2] * 4, group=group, dilations=[1, 1])
        if act:
            g.add_node("Clip", [out, "zero", "six"], [out + "_r"])
            out = out + "_r"
        state["t"], state["c"] = out, cout

    def ch(v):
        return max(8, int(v * width + 4) // 8 * 8)

    conv(3, ch(32), 3, 2)
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
           (6, 320, 1, 1)]
    for t, c, n, s in cfg:
        for j in range(n):
            cin, src = state["c"], state["t"]
            hid = cin * t
            if t != 1:
                conv(cin, hid, 1, 1)
            conv(hid, hid, 3, s if j == 0 else 1, group=hid)
            conv(hid, ch(c), 1, 1, act=False)
            if (s if j == 0 else 1) == 1 and cin == ch(c):
                out = f"add{state['i']}"
                g.add_node("Add", [src, state["t"]], [out])
                state["t"] = out
    conv(state["c"], 1280, 1, 1)
    g.add_node("GlobalAveragePool", [state["t"]], ["gap"])
    g.add_node("Flatten", ["gap"], ["flat"], axis=1)
    g.add_const("fc_w", (rng.standard_normal((1000, 1280)) * 0.01).astype(np.float32))
    g.add_const("fc_b", np.zeros(1000, np.float32))
    g.add_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)
    g.outputs = ["logits"]
    infer_shapes(g)
    return g


def load_graph(name: str) -> Graph:
    if name == "mobilenetv2":
        return mobilenet_v2()
    from edge_infer.frontends import load_model
    if name == "digits":
        from edge_infer.data import digits_model_path
        return load_model(digits_model_path())
    from onnx_models import randomized_light_model_path
    return load_model(randomized_light_model_path(name))


def bench_models(names, rounds: int, min_seconds: float, threads: int):
    from edge_infer.passes import optimize
    from edge_infer.passes.cancel_transposes import cancel_transposes
    from edge_infer.passes.convert_layout import convert_layout
    from edge_infer.passes.eliminate_dead_code import eliminate_dead_code
    from edge_infer.runtime import Runtime
    from edge_infer.verify import random_inputs, relative_error
    rows = []
    for name in names:
        g = load_graph(name)
        optimize(g, level=2)
        h = g.copy()
        h.metadata["preferred_layout"] = "NHWC"
        convert_layout(h)
        while cancel_transposes(h) + eliminate_dead_code(h):
            pass
        h.validate()
        ra, rb = Runtime(g, backend="cpu", threads=threads), Runtime(h, backend="cpu", threads=threads)
        feeds = random_inputs(g, 0)
        oa, ob = ra.run(feeds), rb.run(feeds)
        err = max(relative_error(ob[k], oa[k]) for k in oa)
        (amin, amed), (bmin, bmed) = interleaved(lambda: ra.run(feeds), lambda: rb.run(feeds),
                                                 rounds, min_seconds)
        ntr = sum(n.op == "Transpose" for n in h.nodes)
        rows.append({"model": name, "nchw_ms": amin * 1e3, "nhwc_ms": bmin * 1e3,
                     "nchw_median_ms": amed * 1e3, "nhwc_median_ms": bmed * 1e3,
                     "speedup": amin / bmin, "rel_err": err, "transposes": ntr})
        print(f"model {name:14} NCHW {amin * 1e3:9.2f} ms (med {amed * 1e3:9.2f})  NHWC {bmin * 1e3:9.2f} ms "
              f"(med {bmed * 1e3:9.2f})  NCHW/NHWC {amin / bmin:5.2f}  transposes {ntr}  err {err:.1e}",
              flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=20, help="minimum interleaved rounds per case")
    ap.add_argument("--min-seconds", type=float, default=0.5, help="minimum time per case")
    ap.add_argument("--layers", default="", help="comma-separated substrings of layer names (default all)")
    ap.add_argument("--no-layers", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="sweeps over the layer list (minimum kept)")
    ap.add_argument("--models", default="", help="e.g. resnet50,mobilenetv2,squeezenet,shufflenet")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    try:
        from threadpoolctl import threadpool_limits
        limiter = threadpool_limits(limits=args.threads, user_api="blas")  # noqa: F841
    except ImportError:
        pass
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")
           if k in os.environ}
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"BLAS: {blas_info()}")
    if env:
        print(f"WARNING: BLAS environment overrides in effect: {env} (unset them for a plain-install result)")
    out = {"blas": blas_info(), "env": env, "threads": args.threads, "numpy": np.__version__,
           "machine": platform.machine(), "cpus": os.cpu_count()}
    if not args.no_layers:
        out["layers"] = bench_layers([s for s in args.layers.split(",") if s], args.rounds, args.min_seconds,
                                     args.repeat)
        tot_a = sum(r["nchw_ms"] for r in out["layers"])
        tot_b = sum(r["nhwc_ms"] for r in out["layers"])
        print(f"sum over layers: NCHW {tot_a:.2f} ms, NHWC {tot_b:.2f} ms ({tot_a / tot_b:.2f}x)")
    if args.models:
        out["models"] = bench_models([m for m in args.models.split(",") if m], args.rounds,
                                     args.min_seconds, args.threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
