"""Native fp32 packed SGEMM (src/sgemm.c, conv_f32.c, kernels/conv_native.py): NHWC Conv and
FusedConv (odd sizes, groups, strides, dilations, asymmetric pads, 1-D, every fused
activation, residual), Gemm and MatMul with constant B, against onnxruntime on the source
model; the scalar micro-kernel against the SIMD one; the C self-test; and whole models whose
every fp32 op runs as a native step."""
import ctypes
import os
import sys

import numpy as np
import pytest
from onnx import helper, numpy_helper

from edge_infer.backends.cpu import native
from edge_infer.convert import optimize_verified
from edge_infer.frontends import load_model
from edge_infer.runtime import Runtime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import make_model, ort_run, randomized_light_model_path, rel_l2, vi  # noqa: E402

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")


def _optimized(model, tmp_path):
    """``model`` (an onnx ModelProto) saved, loaded and optimized at level 3, verified."""
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return optimize_verified(load_model(path), 3, samples=1)[0]


def _runtime(model, tmp_path, threads=2):
    return Runtime(_optimized(model, tmp_path), backend="cpu", threads=threads)


def _sgemm_notes(rt, feeds):
    notes = rt.plan({k: v.shape for k, v in feeds.items()}).notes
    return [v for v in notes.values() if "native SGEMM" in v or "native direct few-channel" in v]


def _all_native(rt, feeds):
    ex = rt.plan({k: v.shape for k, v in feeds.items()})
    return [s for s in ex.steps if getattr(s, "native_step", None) is None]


def test_selftest_simd_and_scalar():
    old = native.set_isa_mask(-1)
    try:
        assert native.lib.ei_selftest_conv_f32() == 0
        native.set_isa_mask(0)
        assert native.lib.ei_selftest_conv_f32() == 0
    finally:
        native.set_isa_mask(old)


def _w(rng, *shape):
    fan = int(np.prod(shape[1:]))
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32))


#: (C, M, H, W, kernel, strides, dilations, pads, group)
CONVS = [
    (3, 16, 17, 19, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (5, 7, 9, 11, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),         # direct, odd channels
    (40, 33, 6, 5, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),        # strided 1x1: packed
    (6, 12, 10, 9, (3, 2), (1, 2), (2, 1), (2, 0, 1, 1), 3),        # groups, dilation, asymmetric pads
    (8, 20, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
    (350, 24, 5, 6, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),       # K = 3150: several K blocks
    (16, 40, 1, 1, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),        # one pixel
]


def _conv_nodes(c, m, kernel, strides, dil, pads, group, rng, act, residual):
    inits = [_w(rng, m, c // group, *kernel), numpy_helper.from_array(rng.standard_normal(m).astype(np.float32) * 0.1, "b")]
    inits[0].name = "w"
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(kernel), strides=list(strides),
                              dilations=list(dil), pads=list(pads), group=group)]
    t = "c"
    if residual:
        nodes.append(helper.make_node("Add", [t, "r"], ["s"]))
        t = "s"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", [t], ["y"]))
    elif act == "Clip":
        inits += [numpy_helper.from_array(np.array(-0.2, np.float32), "lo"),
                  numpy_helper.from_array(np.array(0.3, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", [t, "lo", "hi"], ["y"]))
    elif act == "SiLU":
        nodes += [helper.make_node("Sigmoid", [t], ["sg"]), helper.make_node("Mul", [t, "sg"], ["y"])]
    elif act in ("HardSwish", "Sigmoid", "Tanh"):
        nodes.append(helper.make_node(act, [t], ["y"]))
    elif act == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", [t], ["y"], alpha=0.07))
    elif act == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", [t], ["y"], alpha=0.3, beta=0.4))
    else:
        nodes.append(helper.make_node("Identity", [t], ["y"]))
    return nodes, inits


@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("act,residual", [("", False), ("Relu", True), ("Clip", False), ("HardSwish", True),
                                          ("SiLU", False), ("Sigmoid", False), ("LeakyRelu", True),
                                          ("HardSigmoid", False), ("Tanh", False)])
def test_conv_matches_onnxruntime(case, act, residual, tmp_path):
    c, m, h, w, kernel, strides, dil, pads, group = CONVS[case]
    rng = np.random.default_rng(case)
    nodes, inits = _conv_nodes(c, m, kernel, strides, dil, pads, group, rng, act, residual)
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    ref_c = ort_run(make_model(nodes[:1], [vi("x", x.shape)], [vi("c", None)], initializers=inits), {"x": x})["c"]
    feeds = {"x": x}
    inputs = [vi("x", x.shape)]
    if residual:
        feeds["r"] = rng.standard_normal(ref_c.shape).astype(np.float32)
        inputs.append(vi("r", ref_c.shape))
    model = make_model(nodes, inputs, [vi("y", None)], initializers=inits)
    ref = ort_run(model, feeds)["y"]
    rt = _runtime(model, tmp_path)
    got = rt.run(feeds)["y"]
    notes = _sgemm_notes(rt, feeds)
    assert len(notes) == 1, rt.plan({k: v.shape for k, v in feeds.items()}).notes
    if act:
        assert act in notes[0] and (not residual or "residual" in notes[0]), notes
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_scalar_path_close_to_simd(tmp_path):
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 5], strides=[1, 2], pads=[0, 2, 0, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    init = _w(rng, 13, 9, 1, 5)
    init.name = "w"
    model = make_model(nodes, [vi("x", (1, 9, 3, 50))], [vi("y", None)], initializers=[init])
    x = rng.standard_normal((1, 9, 3, 50)).astype(np.float32)
    ref = ort_run(model, {"x": x})["y"]
    rt = _runtime(model, tmp_path)
    assert _sgemm_notes(rt, {"x": x})
    simd = rt.run({"x": x})["y"]
    np.testing.assert_allclose(simd, ref, rtol=1e-4, atol=1e-5)
    old = native.set_isa_mask(0)
    try:
        scalar_rt = _runtime(model, tmp_path)
        assert "scalar" in _sgemm_notes(scalar_rt, {"x": x})[0]
        scalar = scalar_rt.run({"x": x})["y"]
    finally:
        native.set_isa_mask(old)
    # different summation order (FMA lanes vs scalar): float32 noise only
    np.testing.assert_allclose(scalar, simd, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows,k,m,trans_b,alpha,beta,bias", [
    (1, 2048, 1000, 1, 1.0, 1.0, "vec"), (5, 37, 19, 0, 0.5, 2.0, "row"), (13, 300, 70, 1, 1.0, 1.0, None)])
def test_gemm_matches_onnxruntime(rows, k, m, trans_b, alpha, beta, bias, tmp_path):
    rng = np.random.default_rng(rows)
    b = (rng.standard_normal((m, k) if trans_b else (k, m)) / np.sqrt(k)).astype(np.float32)
    inits = [numpy_helper.from_array(b, "B")]
    ins = ["a", "B"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal((m,) if bias == "vec" else (1, m)).astype(np.float32), "C"))
        ins.append("C")
    nodes = [helper.make_node("Gemm", ins, ["g"], transB=trans_b, alpha=alpha, beta=beta),
             helper.make_node("Relu", ["g"], ["y"])]
    model = make_model(nodes, [vi("a", (rows, k))], [vi("y", None)], initializers=inits)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    rt = _runtime(model, tmp_path)
    assert _sgemm_notes(rt, {"a": a})
    assert not _all_native(rt, {"a": a})
    np.testing.assert_allclose(rt.run({"a": a})["y"], ort_run(model, {"a": a})["y"], rtol=1e-4, atol=1e-5)


def test_matmul_constant_b_matches_onnxruntime(tmp_path):
    rng = np.random.default_rng(3)
    b = (rng.standard_normal((24, 40)) / 5).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["a", "B"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["y"])]
    model = make_model(nodes, [vi("a", (2, 7, 24))], [vi("y", None)],
                       initializers=[numpy_helper.from_array(b, "B"), numpy_helper.from_array(bias, "bias")])
    a = rng.standard_normal((2, 7, 24)).astype(np.float32)
    rt = _runtime(model, tmp_path)
    assert _sgemm_notes(rt, {"a": a})
    np.testing.assert_allclose(rt.run({"a": a})["y"], ort_run(model, {"a": a})["y"], rtol=1e-4, atol=1e-5)


def mobilenet_v3_like():
    """A MobileNetV3-style block stack: HardSwish stem, depthwise, squeeze-excite (GAP, 1x1,
    Relu, 1x1, HardSigmoid, Mul), inverted residual, GAP + Gemm head (seeded weights)."""
    rng = np.random.default_rng(11)
    inits, nodes = [], []

    def conv(src, cin, cout, k, s, group=1, act="", name=""):
        w = _w(rng, cout, cin // group, k, k)
        w.name = name + "_w"
        inits.extend([w, numpy_helper.from_array((rng.standard_normal(cout) * 0.05).astype(np.float32), name + "_b")])
        nodes.append(helper.make_node("Conv", [src, w.name, name + "_b"], [name], kernel_shape=[k, k], strides=[s, s],
                                      pads=[k // 2] * 4, group=group))
        if act:
            nodes.append(helper.make_node(act, [name], [name + "_a"]))
            return name + "_a"
        return name

    t = conv("x", 3, 16, 3, 2, act="HardSwish", name="stem")
    e = conv(t, 16, 64, 1, 1, act="HardSwish", name="exp")
    d = conv(e, 64, 64, 5, 1, group=64, act="HardSwish", name="dw")
    nodes.append(helper.make_node("GlobalAveragePool", [d], ["se_p"]))
    s1 = conv("se_p", 64, 16, 1, 1, act="Relu", name="se1")
    s2 = conv(s1, 16, 64, 1, 1, name="se2")
    nodes += [helper.make_node("HardSigmoid", [s2], ["se_g"], alpha=1 / 6, beta=0.5),
              helper.make_node("Mul", [d, "se_g"], ["se_y"])]
    p = conv("se_y", 64, 16, 1, 1, name="proj")
    nodes.append(helper.make_node("Add", [p, t], ["res"]))
    h = conv("res", 16, 96, 1, 1, act="HardSwish", name="head")
    nodes += [helper.make_node("GlobalAveragePool", [h], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"])]
    inits.append(numpy_helper.from_array((rng.standard_normal((10, 96)) * 0.1).astype(np.float32), "fc_w"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w"], ["logits"], transB=1))
    return make_model(nodes, [vi("x", (1, 3, 48, 64))], [vi("logits", None)], initializers=inits)


def test_mobilenet_v3_like_all_native(tmp_path):
    model = mobilenet_v3_like()
    x = np.random.default_rng(0).standard_normal((1, 3, 48, 64)).astype(np.float32)
    rt = _runtime(model, tmp_path)
    assert len(_sgemm_notes(rt, {"x": x})) >= 5
    assert not _all_native(rt, {"x": x}), rt.plan({"x": x.shape}).notes
    assert rel_l2(rt.run({"x": x})["logits"], ort_run(model, {"x": x})["logits"]) < 1e-5


@pytest.mark.parametrize("name", ["squeezenet", pytest.param("resnet50", marks=pytest.mark.slow)])
def test_zoo_model_all_native_matches_onnxruntime(name):
    path = randomized_light_model_path(name)
    g3, _ = optimize_verified(load_model(path), 3, samples=1)
    rt = Runtime(g3, backend="cpu", threads=2)
    info = rt.inputs[0]
    x = np.random.default_rng(1).standard_normal(tuple(1 if isinstance(s, str) else s for s in info.shape)
                                                 ).astype(np.float32)
    feeds = {info.name: x}
    assert not _all_native(rt, feeds), [n for n in rt.plan({info.name: x.shape}).notes.values() if "native" not in n]
    got = rt.run(feeds)
    ref = ort_run(path, feeds)
    for k, v in ref.items():
        assert rel_l2(got[k], v) < 1e-5, (k, rel_l2(got[k], v))


@pytest.mark.parametrize("c,m,hw,k,s", [(256, 1024, 14, 1, 1), (1024, 256, 14, 1, 1), (48, 192, 13, 1, 1),
                                        (64, 40, 9, 3, 2)])
def test_work_split_any_threads_same_outputs(c, m, hw, k, s, tmp_path):
    """The work split chosen at prepare for 2 and 3 threads (conv_f32.c plan_split: even row
    blocks, at least one pool chunk per item) gives the 1-thread outputs bit for bit."""
    from edge_infer.backends.cpu.kernels.conv_native import ConvF32Args
    rng = np.random.default_rng(c + m)
    init = _w(rng, m, c, k, k)
    init.name = "w"
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    model = make_model(nodes, [vi("x", x.shape)], [vi("y", None)], initializers=[init])
    ref = ort_run(model, {"x": x})["y"]
    outs = {}
    for threads in (1, 2, 3):
        rt = _runtime(model, tmp_path, threads)
        outs[threads] = rt.run({"x": x})["y"]
        steps = [s_.native_step for s_ in rt.plan({"x": x.shape}).steps if getattr(s_, "native_step", None)]
        args = [ConvF32Args.from_address(a) for _, a in steps if ConvF32Args.from_address(a).m == m]
        assert len(args) == 1
        a = args[0]
        if threads > 1:
            assert a.split_threads == threads and a.split_mr > 0
            if m < 128:
                continue            # (3 panels x 3 row tiles: fewer items than chunks is all there is)
            items = a.split_rows * -(-(-(-m // 16)) // a.split_panels)
            assert items >= 4 * threads, (a.split_rows, a.split_panels)
    np.testing.assert_allclose(outs[1], ref, rtol=1e-4, atol=1e-5)
    assert np.array_equal(outs[1], outs[2]) and np.array_equal(outs[1], outs[3])


def _scalar_matches_simd_and_ort(rt, model, feeds):
    """The plan run under the scalar mask (the SIMD plan's scratch kept) agrees with its SIMD
    run, and that with onnxruntime."""
    simd = rt.run(feeds)["y"].copy()
    old = native.set_isa_mask(0)
    try:
        scalar = rt.run(feeds)["y"]
    finally:
        native.set_isa_mask(old)
    np.testing.assert_allclose(scalar, simd, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(simd, ort_run(model, feeds)["y"], rtol=1e-4, atol=2e-5)
