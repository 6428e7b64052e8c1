"""Sparse weights: size, kernel speed vs the dense kernels, the crossover, and accuracy vs sparsity.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/sparse_bench.py \
        [--quick] [--plot sparse_accuracy.png] [--json out.json]

1. Weight size at 75% sparsity (unstructured magnitude pruning) of MobileNet-v2's 1x1 convs:
   encoded fp32 vs dense fp32 (target >= 3.5x) and encoded int8 vs dense fp32 (>= 10x).
2. 1x1 conv on MobileNet-v2 layer shapes at 80% and 90%: our dense kernel vs the sparse
   kernel on the same pruned weights, one thread, fp32 and int8, NHWC (what the converter
   emits for the CPU backend) and NCHW (target 1.3-2.4x, XNNPACK's published range).
3. Crossover: the lowest sparsity from which the sparse kernel wins, per dtype and path
   (native / numpy): the numbers for targets/*.json "sparse_crossover".
4. Accuracy of the trained digits fixture (held-out split) against sparsity 0/50/70/80/90%,
   fp32 and int8, as a table and (--plot, needs matplotlib) a PNG.
5. A whole MobileNet-v2 (random weights): latency and weight bytes, dense vs 80% / 90%.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from edge_infer.backends.cpu import CpuBackend  # noqa: E402
from edge_infer.backends.cpu.kernels import sparse as sk  # noqa: E402
from edge_infer.ir import Graph, Node  # noqa: E402
from edge_infer.sparse.encodings import encode  # noqa: E402
from edge_infer.sparse.pruning import prune_array  # noqa: E402

#: (C_in, C_out, H=W) of MobileNet-v2's pointwise convs (expansion and projection), 224x224 input
MBV2_1X1 = [(32, 16, 112), (16, 96, 112), (96, 24, 56), (24, 144, 56), (144, 24, 56), (144, 32, 28),
            (32, 192, 28), (192, 32, 28), (192, 64, 14), (64, 384, 14), (384, 64, 14), (384, 96, 14),
            (96, 576, 14), (576, 96, 14), (576, 160, 7), (160, 960, 7), (960, 160, 7), (960, 320, 7),
            (320, 1280, 7)]


def q(scale, zp=0, axis=None):
    s = np.atleast_1d(np.asarray(scale, np.float32)).tolist()
    return {"scale": s, "zero_point": [int(zp)] * len(s), "axis": axis}


def quantize_w(w):
    """Symmetric per-output-channel int8 (zeros stay zeros)."""
    m = w.reshape(w.shape[0], -1)
    s = np.maximum(np.abs(m).max(axis=1), 1e-8) / 127
    return np.clip(np.round(m / s[:, None]), -127, 127).astype(np.int8).reshape(w.shape), s.astype(np.float32)


def conv_graph(c, m, hw, w, last, int8=False, scales=None):
    g = Graph("pw")
    xs = (1, hw, hw, c) if last else (1, c, hw, hw)
    ys = (1, hw, hw, m) if last else (1, m, hw, hw)
    dt = "int8" if int8 else "float32"
    g.add_tensor("x", dt, xs, quant=q(0.05, 3) if int8 else None)
    g.add_tensor("w", w.dtype.name, w.shape, data=w, quant=q(scales, 0, 0) if int8 else None)
    g.add_tensor("y", dt, ys, quant=q(0.2, -4) if int8 else None)
    attrs = {"kernel_shape": [1, 1]}
    if last:
        attrs["data_layout"] = "NHWC"
    g.nodes.append(Node("Conv", ["x", "w"], ["y"], attrs, "pw"))
    g.inputs, g.outputs = ["x"], ["y"]
    return g, xs


def best_time(ex, feeds, runs):
    ex.run(feeds)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ex.run(feeds)
        ts.append(time.perf_counter() - t0)
    return min(ts)


def layer_times(c, m, hw, sparsity, last, int8, runs, rng, numpy_only=False):
    w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
    w, _ = prune_array(w, sparsity)
    scales = None
    if int8:
        w, scales = quantize_w(w)
    g, xs = conv_graph(c, m, hw, w, last, int8, scales)
    feeds = {"x": (rng.integers(-128, 128, xs).astype(np.int8) if int8 else rng.standard_normal(xs).astype(np.float32))}
    dense = best_time(CpuBackend().prepare(g, threads=1), feeds, runs)
    gs = g.copy()
    gs.tensors["w"].data = encode(w)
    saved = sk._native
    if numpy_only:
        sk._native = lambda: None
    try:
        with sk.forced("always"):
            ex = CpuBackend().prepare(gs, threads=1)
        sparse = best_time(ex, feeds, runs)
    finally:
        sk._native = saved
    return dense, sparse


def section_size(rng):
    print("\n== 1. weight size at 75% sparsity, MobileNet-v2 1x1 convs (unstructured magnitude pruning) ==")
    dense = enc32 = enc8 = 0
    kinds = {}
    for c, m, _ in MBV2_1X1:
        w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
        w, _ = prune_array(w, 0.75)
        e = encode(w)
        e8 = encode(quantize_w(w)[0])
        dense += w.nbytes
        enc32 += e.nbytes
        enc8 += e8.nbytes
        kinds[e.encoding] = kinds.get(e.encoding, 0) + 1
    print(f"  dense fp32 {dense:,} B -> sparse fp32 {enc32:,} B ({dense / enc32:.2f}x, target >= 3.5x; "
          f"encodings {kinds})")
    print(f"  dense fp32 {dense:,} B -> sparse int8 {enc8:,} B ({dense / enc8:.2f}x, target >= 10x)")
    return {"dense_fp32": dense, "sparse_fp32": enc32, "sparse_int8": enc8,
            "ratio_fp32": dense / enc32, "ratio_int8": dense / enc8}


def section_speed(rng, runs, quick):
    print("\n== 2. 1x1 conv, MobileNet-v2 layer shapes: dense kernel / sparse kernel time (1 thread) ==")
    native = sk._native() is not None
    print(f"  sparse path: {'native C (ei_sparse_mm)' if native else 'numpy (native library not loaded)'}")
    shapes = MBV2_1X1[2::3] if quick else MBV2_1X1
    out = {}
    for sparsity in (0.8, 0.9):
        for int8 in (False, True):
            for last in (True, False):
                key = f"{int(sparsity * 100)}% {'int8' if int8 else 'fp32'} {'NHWC' if last else 'NCHW'}"
                ratios = []
                for c, m, hw in shapes:
                    d, s = layer_times(c, m, hw, sparsity, last, int8, runs, rng)
                    ratios.append(d / s)
                gm = float(np.exp(np.mean(np.log(ratios))))
                # what the runtime's per-layer choice gives: dense where K < min_k or the
                # sparsity is under the profile's crossover
                ctx = None
                cut = sk.crossover(ctx, int8, native)
                min_k = sk.crossover(ctx, int8, native, "min_k")
                chosen = [r if (c >= min_k and sparsity >= cut) else 1.0 for r, (c, _, _) in zip(ratios, shapes)]
                gc = float(np.exp(np.mean(np.log(chosen))))
                out[key] = {"geomean": gm, "min": min(ratios), "max": max(ratios), "as_chosen": gc,
                            "per_layer": [round(r, 2) for r in ratios]}
                print(f"  {key:16} speed-up geomean {gm:.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}); "
                      f"with the per-layer choice {gc:.2f}x; per layer {' '.join(f'{r:.2f}' for r in ratios)}")
    return out


def section_crossover(rng, runs):
    print("\n== 3. crossover sparsity (sparse kernel faster from here; median over layer shapes) ==")
    shapes = [(96, 24, 56), (144, 32, 28), (384, 64, 14), (576, 160, 7), (960, 320, 7)]
    levels = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
    res = {}
    for path in (["native"] if sk._native() is not None else []) + ["numpy"]:
        for int8 in (False, True):
            firsts = []
            for c, m, hw in shapes:
                first = 1.0
                for lv in levels:
                    d, s = layer_times(c, m, hw, lv, True, int8, max(3, runs // 2), rng, numpy_only=path == "numpy")
                    if s < d:
                        first = lv
                        break
                firsts.append(first)
            key = ("int8" if int8 else "fp32") + ("" if path == "native" else "_numpy")
            res[key] = float(np.median(firsts))
            print(f"  {key:12} {res[key]:.2f} (per shape {firsts})")
    print(f'  targets/*.json: "sparse_crossover": {json.dumps(res)}')
    return res


def digits_accuracy(path):
    from edge_infer.data import load_digits_samples
    from edge_infer.runtime import Runtime
    x, y = load_digits_samples()
    rt = Runtime(path)
    name = rt.inputs[0].name
    out = np.concatenate([rt.run({name: x[i:i + 50]})[rt.outputs[0].name] for i in range(0, len(x), 50)])
    return float((out.argmax(1) == y).mean())


def weight_bytes(path):
    """Bytes of an artifact's constants as loaded (encoded where sparse)."""
    from edge_infer.artifact import load_artifact
    g, _ = load_artifact(path)
    return int(sum(t.data.nbytes for t in g.tensors.values() if t.is_const))


def section_accuracy(plot):
    from edge_infer.convert import convert
    from edge_infer.data import digits_model_path
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from test_sparse_convert import digits_calibration
    calib = digits_calibration()
    print("\n== 4. digits fixture: held-out accuracy against sparsity (conv2 + pw pruned; conv1, depthwise, "
          "classifier kept) ==")
    rows = []
    tmp = tempfile.mkdtemp()
    print(f"  {'sparsity':>8} {'fp32 acc':>9} {'drop':>7} {'int8 acc':>9} {'drop':>7} {'weights B':>10} {'int8 B':>8}")
    base = base8 = None
    for s in (0.0, 0.5, 0.7, 0.8, 0.9):
        kw = {"sparsity": s} if s else {}
        r32 = convert(digits_model_path(), os.path.join(tmp, f"f{s}.eim"), calib=calib if s else None, **kw)
        r8 = convert(digits_model_path(), os.path.join(tmp, f"q{s}.eim"), quantize="int8", calib=calib, **kw)
        a32, a8 = digits_accuracy(r32["artifact"]), digits_accuracy(r8["artifact"])
        base = a32 if base is None else base
        base8 = a8 if base8 is None else base8
        w32, w8 = weight_bytes(r32["artifact"]), weight_bytes(r8["artifact"])
        rows.append({"sparsity": s, "fp32_accuracy": a32, "fp32_drop": base - a32, "int8_accuracy": a8,
                     "int8_drop": base - a8, "fp32_weight_bytes": w32, "int8_weight_bytes": w8})
        print(f"  {s:>8.0%} {a32:>9.4f} {base - a32:>7.4f} {a8:>9.4f} {base - a8:>7.4f} {w32:>10,} {w8:>8,}")
    r = convert(digits_model_path(), os.path.join(tmp, "budget.eim"), sparsity=0.9, sparse_max_accuracy_drop=0.02,
                calib=calib)
    b = r["sparsity"]["pruning"]["budget"]
    ab = digits_accuracy(r["artifact"])
    print(f"  --sparsity 0.9 --max-accuracy-drop 0.02: per-layer {b['chosen']}, held-out accuracy {ab:.4f} "
          f"(drop {base - ab:.4f}), weights {weight_bytes(r['artifact']):,} B")
    if plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("  (matplotlib not installed: no plot)")
        else:
            fig, ax = plt.subplots(figsize=(5, 3.5))
            xs = [100 * e["sparsity"] for e in rows]
            ax.plot(xs, [e["fp32_accuracy"] for e in rows], "o-", label="fp32")
            ax.plot(xs, [e["int8_accuracy"] for e in rows], "s--", label="int8")
            ax.set_xlabel("sparsity of the pruned layers (%)")
            ax.set_ylabel("held-out accuracy")
            ax.set_title("digits fixture: magnitude pruning, no fine-tuning")
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            fig.savefig(plot, dpi=120)
            print(f"  plot: {plot}")
    return {"levels": rows, "budget": {"chosen": b["chosen"], "accuracy": ab}}


def mobilenet_v2_onnx(path, size=224, seed=0):
    """A MobileNet-v2 (width 1.0) ONNX with random He-scaled weights and BN folded in: the
    layer shapes that matter for speed, no trained accuracy."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    k = [0]

    def conv(x, cin, cout, ks=1, stride=1, group=1, act=True):
        k[0] += 1
        w = (rng.standard_normal((cout, cin // group, ks, ks)) * np.sqrt(2.0 / (cin // group * ks * ks))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        wn, bn, y = f"w{k[0]}", f"b{k[0]}", f"c{k[0]}"
        inits.extend([numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)])
        nodes.append(helper.make_node("Conv", [x, wn, bn], [y], kernel_shape=[ks, ks], strides=[stride, stride],
                                      pads=[ks // 2] * 4, group=group))
        if not act:
            return y
        nodes.append(helper.make_node("Clip", [y, "lo", "hi"], [y + "r"]))
        return y + "r"
    inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")]
    x = conv("input", 3, 32, 3, 2)
    cin = 32
    for t, c, n, st in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                        (6, 320, 1, 1)]:
        for i in range(n):
            stride = st if i == 0 else 1
            h = conv(x, cin, cin * t, 1) if t != 1 else x
            h = conv(h, cin * t, cin * t, 3, stride, group=cin * t)
            h = conv(h, cin * t, c, 1, act=False)
            if stride == 1 and cin == c:
                nodes.append(helper.make_node("Add", [x, h], [h + "a"]))
                h = h + "a"
            x, cin = h, c
    x = conv(x, cin, 1280, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    wfc = (rng.standard_normal((1000, 1280)) * 0.03).astype(np.float32)
    inits += [numpy_helper.from_array(wfc, "wfc"), numpy_helper.from_array(np.zeros(1000, np.float32), "bfc")]
    nodes.append(helper.make_node("Gemm", ["flat", "wfc", "bfc"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "mobilenet_v2", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                    [1, 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def section_model(runs):
    from edge_infer.convert import convert
    from edge_infer.runtime import Runtime
    print("\n== 5. whole MobileNet-v2 (224x224, random weights, 1 thread): dense vs pruned 1x1 convs ==")
    tmp = tempfile.mkdtemp()
    src = os.path.join(tmp, "mbv2.onnx")
    mobilenet_v2_onnx(src)
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    res = {}
    for s in (None, 0.8, 0.9):
        path = os.path.join(tmp, f"m{s}.eim")
        convert(src, path, **({"sparsity": s} if s else {}))
        rt = Runtime(path, backend="cpu", threads=1)
        t = best_time(rt, {"input": x}, runs)
        ex = rt.plan({"input": x.shape})
        n_sparse = sum("sparse" in v and "densified" not in v for v in ex.notes.values())
        res[str(s)] = {"ms": t * 1e3, "weight_bytes": weight_bytes(path), "sparse_kernels": n_sparse}
        base = res["None"]["ms"]
        print(f"  {'dense' if s is None else f'{s:.0%} (1x1 convs but the first/last layers)':40} {t * 1e3:7.2f} ms "
              f"({base / (t * 1e3):.2f}x), weights {weight_bytes(path):>11,} B, {n_sparse} sparse kernel(s)")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and runs")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--plot", metavar="FILE.png")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: size,speed,crossover,accuracy,model")
    args = ap.parse_args(argv)
    runs = args.runs or (5 if args.quick else 15)
    skip = set(filter(None, args.skip.split(",")))
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
        blas = [f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads)" for i in threadpool_info()]
        limiter = threadpool_limits(1)
    except ImportError:
        blas, limiter = ["unknown (no threadpoolctl)"], None
    print(f"BLAS: {', '.join(blas)}; measured with 1 thread; os.cpu_count() = {os.cpu_count()}")
    rng = np.random.default_rng(0)
    res = {}
    if "size" not in skip:
        res["size"] = section_size(rng)
    if "speed" not in skip:
        res["speed"] = section_speed(rng, runs, args.quick)
    if "crossover" not in skip:
        res["crossover"] = section_crossover(rng, runs)
    if "accuracy" not in skip:
        res["accuracy"] = section_accuracy(args.plot)
    if "model" not in skip:
        res["model"] = section_model(max(3, runs // 2))
    if limiter is not None:
        limiter.unregister() if hasattr(limiter, "unregister") else None
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
