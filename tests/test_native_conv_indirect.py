"""The indirect path of the native fp32 conv (src/conv_f32.c run_item_indirect, sgemm.c's
AVX-512 ei_sg_ikr): every micro-tile's A rows read through per (tap, row) pointers into the
NHWC input, padding taps on a zero row, no im2col copy. NHWC Conv / FusedConv with 3x3 (stride
1 and 2), 1x1 stride 2 and 5x5 kernels, pads on every side and asymmetric, dilation, groups,
more channels than one K block (a tap's channels split), every fused epilogue and a residual
written in place, against onnxruntime and against the same plan with the path off
(``ei_conv_f32_set_indirect(0)``: the im2col tiles) and under the scalar ISA (a plan prepared
with the path runs under a mask without it)."""
import os
import sys

import numpy as np
import pytest

from edge_infer.backends.cpu import native

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import make_model, ort_run, vi  # noqa: E402
from test_native_sgemm import _conv_nodes, _runtime, _scalar_matches_simd_and_ort  # noqa: E402

pytestmark = pytest.mark.skipif(native.lib is None or not hasattr(native.lib, "ei_conv_f32_indirect"),
                                reason=f"native kernels: {native.why_not}")

AVX512 = native.lib is not None and bool(native.lib.ei_cpu_features() & native.AVX512)

#: (N, C, M, H, W, kernel, strides, dilations, pads, group)
SHAPES = [
    (1, 32, 48, 14, 14, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),      # ResNet-50's 14x14 form
    (1, 40, 33, 15, 13, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),      # stride 2, odd sizes
    (2, 24, 40, 7, 7, (3, 3), (1, 1), (1, 1), (0, 2, 1, 0), 1),        # asymmetric pads, batch 2
    (1, 48, 64, 9, 11, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),       # 1x1 stride 2 (downsample)
    (1, 16, 20, 10, 12, (5, 5), (1, 2), (1, 1), (2, 2, 2, 2), 1),      # 5x5, 25 taps in blocks
    (1, 20, 36, 11, 9, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 1),       # dilation 2
    (1, 64, 64, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),        # 2 groups of 32
    (1, 400, 24, 5, 6, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),       # 400 channels: 2 blocks a tap
]

EPILOGUES = [("Relu", False), ("", True), ("Clip", True), ("HardSwish", False), ("SiLU", True)]


def _case(i, act, residual):
    n, c, m, h, w, kernel, strides, dil, pads, group = SHAPES[i]
    rng = np.random.default_rng(10 + i)
    nodes, inits = _conv_nodes(c, m, kernel, strides, dil, pads, group, rng, act, residual)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    ref_c = ort_run(make_model(nodes[:1], [vi("x", x.shape)], [vi("c", None)], initializers=inits), {"x": x})["c"]
    feeds, inputs = {"x": x}, [vi("x", x.shape)]
    if residual:
        feeds["r"] = rng.standard_normal(ref_c.shape).astype(np.float32)
        inputs.append(vi("r", ref_c.shape))
    return make_model(nodes, inputs, [vi("y", None)], initializers=inits), feeds


def _conv_notes(rt, feeds):
    notes = rt.plan({k: v.shape for k, v in feeds.items()}).notes.values()
    return [v for v in notes if "native SGEMM" in v]


@pytest.mark.parametrize("case", range(len(SHAPES)))
@pytest.mark.parametrize("act,residual", EPILOGUES)
def test_matches_onnxruntime_and_im2col(case, act, residual, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "0")
    model, feeds = _case(case, act, residual)
    ref = ort_run(model, feeds)["y"]
    rt = _runtime(model, tmp_path, threads=1 + case % 2)
    notes = _conv_notes(rt, feeds)
    assert len(notes) == 1, notes
    assert ("indirect on the input" in notes[0]) == AVX512, notes
    got = rt.run(feeds)["y"].copy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5)
    old = native.lib.ei_conv_f32_set_indirect(0)
    try:
        im2col = rt.run(feeds)["y"]
    finally:
        native.lib.ei_conv_f32_set_indirect(old)
    # same products, same K blocks where the channels fit one: only the summation blocks differ
    np.testing.assert_allclose(got, im2col, rtol=1e-5, atol=1e-5)


def test_plan_prepared_with_the_path_runs_under_scalar(tmp_path, monkeypatch):
    """The scratch of the im2col tiles is kept, so a mask without the indirect kernel runs."""
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "0")
    model, feeds = _case(1, "HardSwish", True)
    rt = _runtime(model, tmp_path)
    _scalar_matches_simd_and_ort(rt, model, feeds)
