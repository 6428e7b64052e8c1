"""NHWC MaxPool on the native kernel (native/src/pool.c, pool_max_body.h: channels in blocks of
four vectors, then single vectors, then a scalar tail) against the numpy kernel it replaces
(bit-exact: max is order-free) on channel counts that reach every block (AVX-512 64-wide,
AVX2 32-wide), padding, strides, dilation, NaN and -inf inputs, every ISA path and 1-3
threads; and a conv + Relu + MaxPool stem against onnxruntime."""
import os
import sys

import numpy as np
import pytest
from onnx import helper, numpy_helper

from edge_infer.backends.cpu import native
from edge_infer.backends.cpu import CpuBackend
from edge_infer.ir import Graph
from edge_infer.runtime import specialize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import make_model, ort_run, vi  # noqa: E402
from test_native_sgemm import _runtime  # noqa: E402

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")


def _maxpool(x, attrs, threads, native_on=True, monkeypatch=None):
    g = Graph("t")
    g.add_input("x", "float32", x.shape)
    g.add_node("MaxPool", ["x"], ["y"], **dict(attrs, data_layout="NHWC"))
    g.outputs = ["y"]
    g = specialize(g, {"x": x.shape})
    if not native_on:
        monkeypatch.setattr(native, "lib", None)
    try:
        ex = CpuBackend().prepare(g, threads=threads)
    finally:
        if not native_on:
            monkeypatch.undo()
    assert all((getattr(s, "native_step", None) is not None) == native_on for s in ex.steps)
    return ex.run({"x": x})["y"]


CASES = [({"kernel_shape": [3, 3], "strides": [2, 2]}, 64),                       # SqueezeNet's
         ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 150),  # ResNet-50's, wider
         ({"kernel_shape": [2, 3], "strides": [1, 2], "dilations": [2, 1], "pads": [0, 2, 1, 0]}, 83),
         ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 40)]


@pytest.mark.parametrize("mask", [-1, 1, 0], ids=["best", "avx2-or-neon", "scalar"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_maxpool_nhwc_matches_numpy(mask, case, threads, monkeypatch):
    attrs, c = CASES[case]
    rng = np.random.default_rng(case * 7 + threads)
    x = rng.standard_normal((2, 15, 17, c)).astype(np.float32)
    x.flat[rng.integers(0, x.size, 9)] = np.nan          # NaN in some windows: the output is NaN there
    x.flat[rng.integers(0, x.size, 9)] = -np.inf
    old = native.set_isa_mask(mask)
    try:
        got = _maxpool(x, attrs, threads)
    finally:
        native.set_isa_mask(old)
    want = _maxpool(x, attrs, threads, native_on=False, monkeypatch=monkeypatch)
    assert np.isnan(want).any()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
def test_conv_relu_maxpool_stem_matches_onnxruntime(threads, tmp_path):
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((64, 3, 7, 7)) * 0.08).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(64) * 0.1).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[7, 7], strides=[2, 2], pads=[3] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)]
    model = make_model(nodes, [vi("x", (1, 3, 96, 96))], [vi("y", None)], initializers=[w, b])
    x = {"x": rng.standard_normal((1, 3, 96, 96)).astype(np.float32)}
    rt = _runtime(model, tmp_path, threads)
    np.testing.assert_allclose(rt.run(x)["y"], ort_run(model, x)["y"], rtol=1e-4, atol=1e-5)
