#!/usr/bin/env python3
"""One engine in a fresh process: load a model, run it 3 times, print its peak RSS (VmHWM) as
JSON. Imports nothing but numpy and the engine, so the peak is what a deployed process pays.

    python benchmarks/rss_child.py ours|ort|floor MODEL THREADS NAME=FEED.npy [NAME=FEED.npy ...]

``ours``: edge_infer's Runtime on an .eim (also prints the plan's arena and workspace bytes);
``ort``: an onnxruntime CPU session on an .onnx; ``floor``: python + numpy + the inputs alone.
"""
import json
import sys


def vm(field: str = "VmHWM") -> int:
    """A /proc/self/status field in bytes (VmHWM: peak RSS since exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv) -> dict:
    import numpy as np
    kind, path, threads = argv[0], argv[1], int(argv[2])
    feeds = {k: np.load(v) for k, v in (a.split("=", 1) for a in argv[3:])}
    out = {}
    if kind == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        run = lambda: sess.run(None, feeds)  # noqa: E731
    elif kind == "ours":
        from edge_infer import Runtime
        rt = Runtime(path, backend="cpu", threads=threads)
        run = lambda: rt.run(feeds)  # noqa: E731
    else:
        run = lambda: None  # noqa: E731
    for _ in range(3):
        run()
    out["peak_rss"] = vm("VmHWM")
    if kind == "ours":
        ex = rt.plan({k: v.shape for k, v in feeds.items()})
        out.update(arena=ex.arena_plan.size, workspace=int(ex.workspace_bytes))
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
