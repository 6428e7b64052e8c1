"""Builds the picker's microbenchmark graphs (backends/throughput.py) as the converter
leaves them, and writes them here as artifacts.

The throughput profile times the op forms artifacts contain (fused ops, the layout pass's
NHWC convolutions, int8 plans), but measuring a device must not import the converter
(passes, quantizer): a runtime-only install profiles from these files. Regenerate after a
change to the optimizer's or the quantizer's output forms (tests/test_picker.py checks that
the bundled files match what the converter makes today):

    python -m edge_infer.data.microbench.make_microbench
"""
from __future__ import annotations

import os
from typing import Dict

import numpy as np

from edge_infer.ir import Graph

HERE = os.path.dirname(os.path.abspath(__file__))


def _conv_graph(c_in: int, c_out: int, hw: int, group: int) -> Graph:
    rng = np.random.default_rng(0)
    g = Graph("microbench_conv")
    g.add_input("x", "float32", (1, c_in, hw, hw))
    g.add_const("w", rng.standard_normal((c_out, c_in // group, 3, 3)).astype(np.float32) * 0.1)
    g.add_const("b", rng.standard_normal(c_out).astype(np.float32))
    g.add_node("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
               strides=[1, 1], dilations=[1, 1], group=group, auto_pad="NOTSET")
    g.outputs = ["y"]
    return g


def _mini_cnn() -> Graph:
    """The convolutions of a small CNN (107 MFLOP): a 7x7/2 stem on 3 channels, 3x3, 1x1 and
    3x3/2 layers with ReLU, global pooling and a classifier: the layer mix models have."""
    rng = np.random.default_rng(0)
    g = Graph("microbench_cnn")
    g.add_input("x", "float32", (1, 3, 56, 56))
    prev, c_in = "x", 3
    for k, (c_out, ks, stride) in enumerate(((32, 7, 2), (64, 3, 1), (128, 1, 1), (128, 3, 2))):
        g.add_const(f"w{k}", rng.standard_normal((c_out, c_in, ks, ks)).astype(np.float32) * (2.0 / (c_in * ks * ks)) ** 0.5)
        g.add_const(f"b{k}", np.zeros(c_out, np.float32))
        g.add_node("Conv", [prev, f"w{k}", f"b{k}"], [f"c{k}"], name=f"conv{k}", kernel_shape=[ks, ks],
                   pads=[ks // 2] * 4, strides=[stride, stride], dilations=[1, 1], group=1, auto_pad="NOTSET")
        g.add_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}")
        prev, c_in = f"r{k}", c_out
    g.add_node("GlobalAveragePool", [prev], ["gap"], name="gap")
    g.add_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1)
    g.add_const("wf", rng.standard_normal((c_in, 100)).astype(np.float32) * 0.1)
    g.add_const("bf", np.zeros(100, np.float32))
    g.add_node("Gemm", ["flat", "wf", "bf"], ["y"], name="fc", alpha=1.0, beta=1.0, transA=0, transB=0)
    g.outputs = ["y"]
    return g


def _group_conv() -> Graph:
    """A ShuffleNet-style grouped 1x1 Conv: 4 groups, 136 -> 544 channels on 28x28 (58 MFLOP)."""
    rng = np.random.default_rng(0)
    g = Graph("microbench_group_conv")
    g.add_input("x", "float32", (1, 136, 28, 28))
    g.add_const("w", rng.standard_normal((544, 34, 1, 1)).astype(np.float32) * 0.1)
    g.add_node("Conv", ["x", "w"], ["y"], name="gconv", kernel_shape=[1, 1], pads=[0, 0, 0, 0],
               strides=[1, 1], dilations=[1, 1], group=4, auto_pad="NOTSET")
    g.outputs = ["y"]
    return g


def _conv_chain(n_ops: int) -> Graph:
    """``n_ops`` chained 3x3 Convs on 1x8x4x4: per-op cost of a dense op where the math is nothing."""
    rng = np.random.default_rng(0)
    g = Graph("microbench_conv_chain")
    g.add_input("x", "float32", (1, 8, 4, 4))
    g.add_const("w", rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1)
    prev = "x"
    for k in range(n_ops):
        g.add_node("Conv", [prev, "w"], [f"c{k}"], name=f"conv{k}", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                   strides=[1, 1], dilations=[1, 1], group=1, auto_pad="NOTSET")
        prev = f"c{k}"
    g.outputs = [prev]
    return g


def _pool_chain(n_ops: int) -> Graph:
    """A 1x1 Conv then ``n_ops`` 3x3 MaxPools on 8x128x128 (int8 once quantized: pools stay int8)."""
    g = _conv_graph(8, 8, 128, 1)
    prev = "y"
    for k in range(n_ops):
        g.add_node("MaxPool", [prev], [f"p{k}"], name=f"pool{k}", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                   strides=[1, 1], dilations=[1, 1], ceil_mode=0, auto_pad="NOTSET", storage_order=0)
        prev = f"p{k}"
    g.outputs = [prev]
    return g


#: bundled file stem -> (float graph builder, quantized to int8?)
GRAPHS = {
    "conv_chain1": (lambda: _conv_chain(1), False),
    "conv_chain8": (lambda: _conv_chain(8), False),
    "dense": (_mini_cnn, False),
    "grouped": (lambda: _conv_graph(64, 64, 56, 64), False),
    "group_dense": (_group_conv, False),
    "int8_dense": (_mini_cnn, True),
    "int8_memory": (lambda: _pool_chain(8), True),
    "int8_grouped": (lambda: _conv_graph(64, 64, 56, 64), True),
}


def convert_graph(key: str) -> Graph:
    """The graph ``key`` as the converter leaves it: optimized at level 3, int8 where asked."""
    from edge_infer.backends.specialize import specialize
    from edge_infer.passes import optimize
    from edge_infer.quantize import quantize_graph
    from edge_infer.quantize.calibration import random_feeds
    build, int8 = GRAPHS[key]
    g = build()
    optimize(g, 3)
    if int8:
        sg = specialize(g, {n: g.tensors[n].shape for n in g.inputs})
        g, _ = quantize_graph(sg, random_feeds(sg, 4))
    return g


def path_of(key: str) -> str:
    return os.path.join(HERE, f"{key}.eim")


def main() -> Dict[str, int]:
    from edge_infer.artifact import save_artifact
    sizes = {}
    for key in GRAPHS:
        sizes[key] = save_artifact(path_of(key), convert_graph(key), {"microbench": key})
        print(f"{path_of(key)}: {sizes[key]} bytes")
    return sizes


if __name__ == "__main__":
    main()
