#!/usr/bin/env python3
"""The ops that joined the compiled execution loop, timed against what they replaced, in one
process (``_common.interleaved``: minimum and median microseconds, load hits both alike):

* Resize at the benchmark families' shapes: the numpy kernel (prepared with the native library
  off) against the native one (byte runs for nearest, ``ei_resize_linear_f32`` for linear);
* channels-last upsample + Concat (the DB FPN's four levels, YOLOv8n's upsample + concat): the
  plan with every tensor in its own buffer (the Concat copies) against the plan whose nearest
  Resizes write into their slices of the output (``memory/views.py``).

    python benchmarks/loop_ops_bench.py --threads 1,2 --rounds 30
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import interleaved  # noqa: E402


def resize_model(shape, scales, mode="nearest", ctm="asymmetric"):
    import onnx
    from onnx import TensorProto, helper
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, coordinate_transformation_mode=ctm,
                            nearest_mode="floor")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [onnx.ValueInfoProto(name="y")], [onnx.numpy_helper.from_array(np.array(scales, np.float32), "s")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def upsample_concat_model(hw: int, c: int, levels: int):
    """Level 0 (a Relu) and levels 1.. (nearest 2^k upsamples of (hw / 2^k)^2 maps) concatenated on channels."""
    import onnx
    from onnx import TensorProto, helper
    nodes, inits, ins, parts = [helper.make_node("Relu", ["x0"], ["r0"])], [], [], ["r0"]
    for k in range(levels):
        h = hw >> k
        ins.append(helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [1, h, h, c]))
        if k:
            inits.append(onnx.numpy_helper.from_array(np.array([1, 2 ** k, 2 ** k, 1], np.float32), f"s{k}"))
            nodes.append(helper.make_node("Resize", [f"x{k}", "", f"s{k}"], [f"u{k}"], mode="nearest",
                                          coordinate_transformation_mode="asymmetric", nearest_mode="floor"))
            parts.append(f"u{k}")
    nodes.append(helper.make_node("Concat", parts, ["y"], axis=3))
    g = helper.make_graph(nodes, "g", ins, [onnx.ValueInfoProto(name="y")], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def plan(model, threads: int, native_on: bool = True, views: bool = True):
    from edge_infer.backends.cpu import CpuBackend, executor, native
    from edge_infer.frontends.onnx import load_onnx
    from edge_infer.runtime import specialize
    g = load_onnx(model)
    g = specialize(g, {i: g.tensors[i].shape for i in g.inputs})
    lib, copy_views = native.lib, executor.copy_views
    native.lib = lib if native_on else None
    executor.copy_views = copy_views if views else (lambda node, graph: [])
    try:
        return CpuBackend().prepare(g, threads=threads)
    finally:
        native.lib, executor.copy_views = lib, copy_views


def time_pair(label: str, a, b, names, rounds: int) -> None:
    feeds = {i: np.random.default_rng(0).standard_normal(a.graph.tensors[i].shape).astype(np.float32)
             for i in a.graph.inputs}
    out = {}
    for k, ex in zip(names, (a, b)):
        out[k] = {o: v.copy() for o, v in ex.run(feeds).items()}
    assert all(np.array_equal(out[names[0]][o], out[names[1]][o]) for o in out[names[0]])
    t = interleaved({k: (lambda f, ex=ex: ex.run_views(f)) for k, ex in zip(names, (a, b))}, feeds, rounds,
                    gap_s=0.002)
    (a_min, a_med), (b_min, b_med) = t[names[0]], t[names[1]]
    print(f"| {label} | {a_min * 1e3:.0f} / {a_med * 1e3:.0f} | {b_min * 1e3:.0f} / {b_med * 1e3:.0f} "
          f"| {a_min / b_min:.2f}x |", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args(argv)
    resizes = [("nearest 2x 10x10x256 (YOLOv8n-320)", [1, 10, 10, 256], [1, 2, 2, 1], "nearest"),
               ("nearest 2x 20x20x256 (YOLOv8n-640)", [1, 20, 20, 256], [1, 2, 2, 1], "nearest"),
               ("nearest 2x 80x80x96 (DB-640)", [1, 80, 80, 96], [1, 2, 2, 1], "nearest"),
               ("nearest 8x 20x20x24 (DB-640)", [1, 20, 20, 24], [1, 8, 8, 1], "nearest"),
               ("linear 2x 80x80x96, half_pixel", [1, 80, 80, 96], [1, 2, 2, 1], "linear")]
    concats = [("DB FPN: 160x160x24 + 3 upsampled levels", 160, 24, 4),
               ("YOLO: 40x40x128 + upsampled 20x20x128", 40, 128, 2),
               ("YOLO: 20x20x256 + upsampled 10x10x256", 20, 256, 2)]
    for th in (int(t) for t in args.threads.split(",")):
        print(f"\n{th} thread(s); us min / median\n\n| Resize | numpy | native | speed-up (min) |\n|---|---:|---:|---:|")
        for label, shape, scales, mode in resizes:
            m = resize_model(shape, scales, mode, "half_pixel" if mode == "linear" else "asymmetric")
            time_pair(label, plan(m, th, native_on=False), plan(m, th), ("numpy", "native"), args.rounds)
        print("\n| upsample + Concat | copies | written in place | speed-up (min) |\n|---|---:|---:|---:|")
        for label, hw, c, levels in concats:
            m = upsample_concat_model(hw, c, levels)
            time_pair(label, plan(m, th, views=False), plan(m, th), ("copies", "placed"), args.rounds)


if __name__ == "__main__":
    main()
