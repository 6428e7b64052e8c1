"""What tests/test_native_debug.py runs in a subprocess with one native library or another
(``EDGE_INFER_NATIVE_LIB``): ``models OUT.npz`` runs a few graphs through the CPU backend's
native kernels (fp32 conv with stride, dilation and groups, depthwise, max/avg pool, the
sparse 1x1 conv, int8 QDQ, Gemm; the digits CNN fp32) and saves the outputs;
``bad_pool`` calls the native pool with a negative dilation, as issue #16's hostile MaxPool
reached it before validation (a segfault in the release build)."""
from __future__ import annotations

import sys

import numpy as np


def _graphs():
    from edge_infer.ir import Graph
    from fuzz_cases import base_graph
    rng = np.random.default_rng(3)
    yield "fuzz_base", base_graph(), (1, 2, 8, 8)
    g = Graph("convs")
    g.add_input("x", "float32", (2, 8, 15, 13))
    g.add_const("w", rng.standard_normal((8, 4, 3, 3)).astype(np.float32))
    g.add_node("Conv", ["x", "w"], ["a"], strides=[2, 1], dilations=[1, 2], pads=[1, 2, 1, 2],
               kernel_shape=[3, 3], group=2)
    g.add_const("wd", rng.standard_normal((8, 1, 3, 3)).astype(np.float32))
    g.add_const("bd", rng.standard_normal(8).astype(np.float32))
    g.add_node("Conv", ["a", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], group=8)
    g.add_node("Relu", ["d"], ["r"])
    g.add_node("MaxPool", ["r"], ["m"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])
    g.add_node("AveragePool", ["m"], ["y"], kernel_shape=[2, 2], strides=[1, 2], pads=[0, 1, 1, 0])
    g.outputs = ["y"]
    yield "convs", g, (2, 8, 15, 13)


def run_models(out: str) -> None:
    from edge_infer.artifact import load_artifact
    from edge_infer.backends.cpu import native
    from edge_infer.convert import convert
    from edge_infer.data import digits_model_path, load_digits_samples
    from edge_infer.runtime import Runtime
    import tempfile
    assert native.available()[0], native.available()
    results = {"debug_checks": np.array(native.debug_checks())}
    rng = np.random.default_rng(0)
    for name, g, shape in _graphs():
        x = rng.standard_normal(shape).astype(np.float32)
        for k, v in Runtime(g, backend="cpu", threads=2).run({g.inputs[0]: x}).items():
            results[f"{name}/{k}"] = v
    with tempfile.TemporaryDirectory() as tmp:
        for q in ("fp32", "int8"):
            path = f"{tmp}/{q}.eim"
            x = load_digits_samples()[0][:40]
            opts = {"quantize": "int8", "calib": x} if q == "int8" else {}
            convert(digits_model_path(), path, **opts)
            assert load_artifact(path)[0] is not None
            results[f"digits_{q}"] = Runtime(path, backend="cpu", threads=2).run(x)["logits"]
    np.savez(out, **results)


def bad_pool() -> None:
    from edge_infer.backends.cpu.native.ops import pool2d_step
    x = np.ones((1, 1, 8, 8), np.float32)
    y = np.zeros((1, 1, 8, 8), np.float32)
    step = pool2d_step(x, y, "max", (2, 2), (1, 1), (-1048576, 1), (0, 0, 0, 0), nhwc=False)
    assert step is not None
    step()
    print("returned", float(y.sum()))


if __name__ == "__main__":
    run_models(sys.argv[2]) if sys.argv[1] == "models" else bad_pool()
