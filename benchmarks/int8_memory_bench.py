#!/usr/bin/env python3
"""int8 vs fp32 memory: planned arena + workspaces of each model's int8 plan against its fp32
plan (target: int8 <= fp32 on every model), and the peak RSS of a runtime-only process against
onnxruntime's on the 640x640 DB text detector and YOLOv8n of tests/family_models.py, fp32 and
int8 (target <= 0.5x; the table of benchmarks/memory_bench.py, section "families").

Models: the onnx "light" zoo with seeded weights (tests/onnx_models.py), the int8 op families
(tests/int8_op_graphs.py: MobileNetV3 block, DB head, YOLO head), the trained YOLO-style shapes
fixture (edge_infer/data/yolo_shapes/) and the DB head at 640x640 (16 channels). Each is converted
once at opt level 3, fp32 and int8 (4 random calibration samples: the bytes do not depend on the
calibration), cached under ~/.cache/edge_infer_bench. Bytes are deterministic; RSS is measured
in child processes that load only the runtime (VmHWM).

    python benchmarks/int8_memory_bench.py [--models db640,resnet50] [--skip rss]
"""
from __future__ import annotations

import argparse
import os
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)
from _common import stale  # noqa: E402

ZOO = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
       "squeezenet", "vgg19", "zfnet512"]
FAMILIES = ["mnv3", "db", "yolo"]
MODELS = ZOO + FAMILIES + ["yolo_shapes", "db640"]
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "edge_infer_bench")


def source_model(name: str) -> str:
    """Path of the ONNX model ``name`` (made and cached once for the generated graphs)."""
    if name in ZOO:
        from onnx_models import randomized_light_model_path
        return randomized_light_model_path(name)
    if name == "yolo_shapes":
        return os.path.join(ROOT, "edge_infer", "data", "yolo_shapes", "yolo_shapes.onnx")
    import onnx
    import int8_op_graphs
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"{name}_family.onnx")
    if not os.path.exists(path):
        model = db_detector() if name == "db640" else int8_op_graphs.FAMILIES[name]()
        onnx.save(model, path)
    return path


def db_detector(hw: int = 640, seed: int = 3):
    """A DB-style text detector at ``hw`` x ``hw``: a strided conv backbone (16..128 channels,
    /2../32), an FPN (1x1 laterals, nearest 2x upsampling + Add), the four levels upsampled to
    /4 and concatenated, a 3x3 conv, two ConvTranspose (k2 s2) + Relu up to full size, Sigmoid."""
    import numpy as np
    from int8_op_graphs import _B
    from onnx_models import vi
    b = _B(seed)

    def up(v, f):
        s = b.const(np.array([1, 1, f, f], np.float32), "scales")
        return b.node("Resize", [v, "", s], mode="nearest", coordinate_transformation_mode="asymmetric",
                      nearest_mode="floor")
    x, cin, feats = "input", 3, []
    for k, c in enumerate((16, 32, 64, 96, 128)):
        x = b.node("Relu", [b.conv(x, cin, c, 3, 2)])
        x = b.node("Relu", [b.conv(x, c, c, 3)])
        cin = c
        if k:
            feats.append((x, c))
    lat = [b.conv(f, c, 32) for f, c in feats]              # /4, /8, /16, /32
    for i in range(len(lat) - 2, -1, -1):
        lat[i] = b.node("Add", [lat[i], up(lat[i + 1], 2)])
    outs = [b.conv(v, 32, 8, 3) for v in lat]
    cat = b.node("Concat", [outs[0]] + [up(v, 2 ** i) for i, v in enumerate(outs) if i], axis=1)
    h = b.node("Relu", [b.conv(cat, 32, 16, 3)])
    for cin, cout in ((16, 16), (16, 1)):
        w = (b.rng.standard_normal((cin, cout, 2, 2)) * 0.3).astype(np.float32)
        h = b.node("ConvTranspose", [h, b.const(w, "wt"), b.const(np.zeros(cout, np.float32), "bt")],
                   kernel_shape=[2, 2], strides=[2, 2])
        h = b.node("Relu", [h]) if cout > 1 else b.node("Sigmoid", [h])
    return b.model([vi("input", [1, 3, hw, hw])], [vi(h, None)])


def converted(name: str, int8: bool) -> str:
    """The model's .eim, fp32 or int8 (converted once; random calibration: drift allowed, since
    plan bytes do not depend on the scales)."""
    import edge_infer
    src = source_model(name)
    dst = os.path.join(CACHE, f"{name}_{'int8' if int8 else 'fp32'}_mem.eim")
    if stale(dst, src):
        opts = dict(quantize="int8", calib="random", calib_samples=4, allow_drift=True) if int8 else {}
        edge_infer.convert(src, dst, verify_samples=1, **opts)
    return dst


def input_feeds(name: str) -> dict:
    from compare import input_feeds as feeds
    return feeds(source_model(name))


def plan_bytes(eim: str, feeds: dict) -> dict:
    from edge_infer.runtime import Runtime
    rt = Runtime(eim, backend="cpu")
    ex = rt.plan({k: v.shape for k, v in feeds.items()})
    return {"arena": ex.arena_plan.size, "workspace": ex.workspace_bytes,
            "scratch": dict(getattr(ex, "scratch_roles", {}) or {})}


def bytes_table(models) -> list:
    rows = []
    for name in models:
        feeds = input_feeds(name)
        f, q = plan_bytes(converted(name, False), feeds), plan_bytes(converted(name, True), feeds)
        rows.append({"model": name, "fp32": f, "int8": q,
                     "ratio": (q["arena"] + q["workspace"]) / max(1, f["arena"] + f["workspace"])})
    return rows


def size(n) -> str:
    """Bytes as MB, or KB under 1 MB (the toy families' plans are a few KB)."""
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.1f} KB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rss-model", default="db640,yolo640", help="family detectors (memory_bench.py --families)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: bytes,rss")
    args = ap.parse_args(argv)
    skip = set(args.skip.split(","))
    if "bytes" not in skip:
        rows = bytes_table([m for m in args.models.split(",") if m])
        print("| model | fp32 arena | fp32 workspace | int8 arena | int8 workspace | int8 / fp32 |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            f, q = r["fp32"], r["int8"]
            print(f"| {r['model']} | {size(f['arena'])} | {size(f['workspace'])} | {size(q['arena'])} | "
                  f"{size(q['workspace'])} | {r['ratio']:.2f}x |")
        print(f"worst int8 / fp32 (arena + workspace): {max(r['ratio'] for r in rows):.2f}x (target <= 1)")
    if "rss" not in skip:
        from memory_bench import family_rss_table, print_family_rss
        print_family_rss(family_rss_table([m for m in args.rss_model.split(",") if m], args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
