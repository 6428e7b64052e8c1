"""The direct few-channel fp32 conv (native/src/conv_stem_f32.c, routed by
kernels/conv_native.py for convs on <= 4 input channels): its C self-test on every ISA path,
and NHWC Conv / FusedConv against onnxruntime on the source model over kernel sizes, strides,
asymmetric pads, partial channel panels, 1-D, every fused activation, a residual, and 1-3
threads."""
import os
import sys

import numpy as np
import pytest
from onnx import helper, numpy_helper

from edge_infer.backends.cpu import native

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import make_model, ort_run, vi  # noqa: E402
from test_native_sgemm import _runtime  # noqa: E402

pytestmark = pytest.mark.skipif(native.lib is None or not hasattr(native.lib, "ei_conv_stem_f32"),
                                reason=f"native kernels: {native.why_not}")


def _stem_notes(rt, feeds):
    notes = rt.plan({k: v.shape for k, v in feeds.items()}).notes
    return [v for v in notes.values() if "native direct few-channel" in v]


@pytest.mark.parametrize("mask", [-1, 1, 0])       # every ISA, AVX2 (or NEON) only, scalar
def test_selftest(mask):
    old = native.set_isa_mask(mask)
    try:
        assert native.lib.ei_selftest_conv_stem_f32() == 0
    finally:
        native.set_isa_mask(old)


#: (C, M, H, W, kernel, strides, pads): the benchmark models' stems and odd shapes
STEMS = [
    (3, 64, 37, 41, (7, 7), (2, 2), (3, 3, 3, 3)),       # ResNet-50's
    (3, 64, 33, 35, (3, 3), (2, 2), (0, 0, 0, 0)),       # SqueezeNet's (no padding)
    (3, 32, 30, 29, (3, 3), (2, 2), (1, 1, 1, 1)),       # MobileNet-v2's
    (3, 16, 31, 30, (3, 3), (2, 2), (1, 1, 1, 1)),       # MobileNetV3's (one panel)
    (1, 24, 19, 23, (5, 3), (1, 1), (2, 0, 1, 2)),       # grey image, partial panel, asymmetric pads
    (4, 40, 12, 50, (2, 4), (1, 3), (0, 3, 1, 0)),       # 4 channels, stride 3, pads past the border
    (2, 7, 6, 9, (1, 1), (1, 1), (0, 0, 0, 0)),          # 1x1, fewer outputs than a vector
]

ACTS = [("", False), ("Relu", True), ("Clip", False), ("HardSwish", True), ("SiLU", False),
        ("LeakyRelu", True), ("HardSigmoid", False)]


def _model(c, m, kernel, strides, pads, act, residual, rng, xshape):
    scale = 1.0 / np.sqrt(c * np.prod(kernel))
    w = numpy_helper.from_array((rng.standard_normal((m, c, *kernel)) * scale).astype(np.float32), "w")
    inits = [w, numpy_helper.from_array((rng.standard_normal(m) * 0.1).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(kernel), strides=list(strides),
                              pads=list(pads))]
    t = "c"
    if residual:
        nodes.append(helper.make_node("Add", [t, "r"], ["s"]))
        t = "s"
    if act == "Clip":
        inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(0.4, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", [t, "lo", "hi"], ["y"]))
    elif act == "SiLU":
        nodes += [helper.make_node("Sigmoid", [t], ["sg"]), helper.make_node("Mul", [t, "sg"], ["y"])]
    elif act == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", [t], ["y"], alpha=0.07))
    elif act == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", [t], ["y"], alpha=0.3, beta=0.4))
    elif act:
        nodes.append(helper.make_node(act, [t], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [t], ["y"]))
    ref_c = ort_run(make_model(nodes[:1], [vi("x", xshape)], [vi("c", None)], initializers=inits),
                    {"x": np.zeros(xshape, np.float32)})["c"]
    inputs = [vi("x", xshape)] + ([vi("r", ref_c.shape)] if residual else [])
    return make_model(nodes, inputs, [vi("y", None)], initializers=inits), ref_c.shape


@pytest.mark.parametrize("case", range(len(STEMS)))
@pytest.mark.parametrize("act,residual", ACTS)
def test_stem_matches_onnxruntime(case, act, residual, tmp_path):
    c, m, h, w, kernel, strides, pads = STEMS[case]
    rng = np.random.default_rng(case)
    xshape = (2, c, h, w)
    model, yshape = _model(c, m, kernel, strides, pads, act, residual, rng, xshape)
    feeds = {"x": rng.standard_normal(xshape).astype(np.float32)}
    if residual:
        feeds["r"] = rng.standard_normal(yshape).astype(np.float32)
    ref = ort_run(model, feeds)["y"]
    threads = 1 + (case + len(act)) % 3
    rt = _runtime(model, tmp_path, threads)
    notes = _stem_notes(rt, feeds)
    assert len(notes) == 1, rt.plan({k: v.shape for k, v in feeds.items()}).notes
    if act:
        assert act in notes[0] and (not residual or "residual" in notes[0]), notes
    np.testing.assert_allclose(rt.run(feeds)["y"], ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_and_isas_agree(threads, tmp_path):
    """ResNet-50's 7x7 stride-2 stem on a 64x64 image: every thread count and the scalar path
    give onnxruntime's result (rows are split across the pool; each row's sums are the same)."""
    rng = np.random.default_rng(5)
    xshape = (1, 3, 64, 64)
    model, _ = _model(3, 64, (7, 7), (2, 2), (3, 3, 3, 3), "Relu", False, rng, xshape)
    x = {"x": rng.standard_normal(xshape).astype(np.float32)}
    ref = ort_run(model, x)["y"]
    rt = _runtime(model, tmp_path, threads)
    assert _stem_notes(rt, x)
    np.testing.assert_allclose(rt.run(x)["y"], ref, rtol=1e-4, atol=1e-5)
    old = native.set_isa_mask(0)
    try:
        scalar_rt = _runtime(model, tmp_path, threads)
        assert "scalar" in _stem_notes(scalar_rt, x)[0]
        np.testing.assert_allclose(scalar_rt.run(x)["y"], ref, rtol=1e-4, atol=1e-5)
    finally:
        native.set_isa_mask(old)


def test_conv1d_few_channels(tmp_path):
    rng = np.random.default_rng(9)
    w = numpy_helper.from_array((rng.standard_normal((20, 2, 5)) * 0.3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[5], strides=[2], pads=[2, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [vi("x", (2, 2, 57))], [vi("y", None)], initializers=[w])
    x = {"x": rng.standard_normal((2, 2, 57)).astype(np.float32)}
    rt = _runtime(model, tmp_path, 2)
    notes = rt.plan({"x": (2, 2, 57)}).notes
    got = rt.run(x)["y"]
    np.testing.assert_allclose(got, ort_run(model, x)["y"], rtol=1e-4, atol=1e-5)
    # a 1-D conv is planned channels-last only where the layout pass chooses it; when it is,
    # it runs on the direct kernel
    if any("NHWC conv" in v for v in notes.values()):
        assert _stem_notes(rt, x), notes


def test_packed_weights_start_on_a_cache_line(tmp_path):
    """The weight panels start on a 64-byte boundary, so each 16-float weight row is one cache
    line (numpy's own allocation left most packs 16-48 bytes off: every weight load of the
    stem and the SGEMM split over two lines). The stem's packed weights in a plan, and packs of
    the benchmark models' shapes."""
    from edge_infer.backends.cpu.kernels.conv_native import ConvF32Args, pack_panels
    rng = np.random.default_rng(3)
    xshape = (1, 3, 40, 40)
    model, _ = _model(3, 64, (7, 7), (2, 2), (3, 3, 3, 3), "Relu", False, rng, xshape)
    ex = _runtime(model, tmp_path, 1).plan({"x": xshape})
    convs = [ConvF32Args.from_address(s.native_step[1]) for n, s in zip(ex.nodes, ex.steps)
             if n.op in ("Conv", "FusedConv")]
    assert len(convs) == 1 and convs[0].wpack % 64 == 0
    for k, m in [(147, 64), (27, 16), (576, 64), (1152, 128), (2048, 1000), (9, 7)]:
        w = rng.standard_normal((1, k, m)).astype(np.float32)
        pk = pack_panels(w)
        assert pk.ctypes.data % 64 == 0, (k, m)
        np.testing.assert_array_equal(pk[0, :, :, :].transpose(1, 0, 2).reshape(k, -1)[:, :m], w[0])


def test_winograd_packs_start_on_a_cache_line():
    """Winograd's transformed weights (both forms) start on a 64-byte boundary like the SGEMM's
    panels (they are the same panels, one set per transform point), and hold the same values."""
    from edge_infer.backends.cpu.kernels import conv_winograd
    rng = np.random.default_rng(4)
    for m, c in [(64, 64), (24, 40), (256, 256)]:
        w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
        for r in (2, 4):
            pk = conv_winograd.pack(w, r)
            assert pk.ctypes.data % 64 == 0 and pk.shape == (conv_winograd.points(r), -(-m // 16), c, 16)
            assert np.isfinite(pk).all() and np.abs(pk).max() > 0
