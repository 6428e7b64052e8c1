"""Native Winograd F(4x4, 3x3) and F(2x2, 3x3) conv (src/winograd_f32.c, kernels/conv_winograd.py):
NHWC 3x3 stride-1 Conv / FusedConv across shapes (odd sizes, partial edge tiles, every padding,
channel counts off the vector widths, every fused epilogue, residual), in both forms, against
onnxruntime and against a float64 direct conv; the size rule (which form) and its off switch;
the C self-test; and whole models (ResNet-50 from the onnx package's light models, the
YOLOv8n-style detector) against onnxruntime with their 3x3 convs on Winograd."""
import os
import sys

import numpy as np
import pytest
from onnx import numpy_helper

from edge_infer.backends.cpu import native
from edge_infer.backends.cpu.kernels import conv_winograd
from edge_infer.convert import optimize_verified
from edge_infer.frontends import load_model
from edge_infer.runtime import Runtime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import make_model, ort_run, randomized_light_model_path, rel_l2, vi  # noqa: E402
from test_native_sgemm import _conv_nodes, _optimized, _runtime, _scalar_matches_simd_and_ort  # noqa: E402

pytestmark = pytest.mark.skipif(native.lib is None or not hasattr(native.lib, "ei_winograd_f32"),
                                reason=f"native kernels: {native.why_not}")


def _notes(rt, feeds):
    return list(rt.plan({k: v.shape for k, v in feeds.items()}).notes.values())


def _wino_notes(rt, feeds):
    return [v for v in _notes(rt, feeds) if "Winograd F(" in v]


def _force_tile(monkeypatch, r):
    """Make the size rule pick F(r x r, 3x3) for every conv."""
    monkeypatch.setattr(conv_winograd, "F2_MAX_TILES", 1 << 30 if r == 2 else 0)
    monkeypatch.setattr(conv_winograd, "F2_MIN_CM", 0)


def test_selftest_simd_and_scalar():
    old = native.set_isa_mask(-1)
    try:
        assert native.lib.ei_selftest_winograd_f32() == 0
        native.set_isa_mask(0)
        assert native.lib.ei_selftest_winograd_f32() == 0
    finally:
        native.set_isa_mask(old)


def _direct64(x, w, b, pads):
    """NCHW 3x3 stride-1 conv in float64 (the oracle of the error bound)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for ky in range(3):
        for kx in range(3):
            y += np.einsum("nchw,mc->nmhw", xp[:, :, ky:ky + oh, kx:kx + ow], w[:, :, ky, kx].astype(np.float64))
    return y + b.astype(np.float64)[None, :, None, None]


#: (N, C, M, H, W, pads): partial tiles (H, W not multiples of 4), pads 0/1/2 and asymmetric,
#: channels off the 16/8/4 vector widths, several column blocks (M > 128), 1x1 and 2x2 outputs
SHAPES = [
    (1, 16, 16, 8, 8, (1, 1, 1, 1)),
    (2, 19, 23, 13, 11, (1, 1, 1, 1)),
    (1, 5, 3, 7, 9, (0, 0, 0, 0)),
    (1, 33, 40, 10, 17, (0, 2, 1, 0)),
    (1, 3, 150, 6, 5, (2, 2, 2, 2)),
    (1, 24, 17, 3, 3, (0, 0, 0, 0)),
    (2, 64, 32, 9, 14, (1, 0, 0, 1)),
    (1, 330, 20, 5, 6, (1, 1, 1, 1)),       # C = 330: two K blocks
]

EPILOGUES = [("", False), ("Relu", True), ("Clip", False), ("HardSwish", True), ("SiLU", False),
             ("Sigmoid", True), ("LeakyRelu", False), ("HardSigmoid", True), ("Tanh", False)]


@pytest.mark.parametrize("r", [4, 2])
@pytest.mark.parametrize("case", range(len(SHAPES)))
@pytest.mark.parametrize("act,residual", EPILOGUES)
def test_conv_matches_onnxruntime(case, act, residual, r, tmp_path, monkeypatch):
    n, c, m, h, w, pads = SHAPES[case]
    rng = np.random.default_rng(case)
    nodes, inits = _conv_nodes(c, m, (3, 3), (1, 1), (1, 1), pads, 1, rng, act, residual)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    conv_only = make_model(nodes[:1], [vi("x", x.shape)], [vi("c", None)], initializers=inits)
    ref_c = ort_run(conv_only, {"x": x})["c"]
    feeds, inputs = {"x": x}, [vi("x", x.shape)]
    if residual:
        feeds["r"] = rng.standard_normal(ref_c.shape).astype(np.float32)
        inputs.append(vi("r", ref_c.shape))
    model = make_model(nodes, inputs, [vi("y", None)], initializers=inits)
    ref = ort_run(model, feeds)["y"]
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "1")
    _force_tile(monkeypatch, r)
    rt = _runtime(model, tmp_path, threads=1 + case % 2)
    notes = _wino_notes(rt, feeds)
    assert len(notes) == 1 and f"F({r}x{r},3x3)" in notes[0], _notes(rt, feeds)
    if act:
        assert act in notes[0] and (not residual or "residual" in notes[0]), notes
    got = rt.run(feeds)["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("r", [4, 2])
@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_error_against_float64_direct_conv(case, r, tmp_path, monkeypatch):
    """The error Winograd adds: relative L2 vs the float64 conv within 10x the direct SGEMM's
    own float32 error (or 1e-6), and under 1e-5 outright (docs/architecture.md); F(2x2, 3x3),
    whose transforms add and subtract only, within 2x the SGEMM's (or 1e-6)."""
    _force_tile(monkeypatch, r)
    n, c, m, h, w, pads = SHAPES[case]
    rng = np.random.default_rng(100 + case)
    nodes, inits = _conv_nodes(c, m, (3, 3), (1, 1), (1, 1), pads, 1, rng, "", False)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    model = make_model(nodes, [vi("x", x.shape)], [vi("y", None)], initializers=inits)
    wt, b = (numpy_helper.to_array(i) for i in inits[:2])
    ref = _direct64(x, wt, b, pads)
    errs = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("EDGE_INFER_WINOGRAD", mode)
        rt = _runtime(model, tmp_path)
        assert bool(_wino_notes(rt, {"x": x})) == (mode == "1"), _notes(rt, {"x": x})
        errs[mode] = rel_l2(rt.run({"x": x})["y"].astype(np.float64), ref)
    assert errs["1"] < max((10 if r == 4 else 2) * errs["0"], 1e-6) and errs["1"] < 1e-5, errs


def test_size_rule_and_off_switch(tmp_path, monkeypatch):
    """auto: a 32->32 conv on 40x40 takes Winograd, a 4-channel one and a 4x4 one do not;
    EDGE_INFER_WINOGRAD=0 keeps every conv on the SGEMM."""
    rng = np.random.default_rng(3)
    for (c, hw), want in (((32, 40), True), ((4, 40), False), ((32, 4), False)):
        nodes, inits = _conv_nodes(c, c, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, rng, "Relu", False)
        feeds = {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32)}
        model = make_model(nodes, [vi("x", (1, c, hw, hw))], [vi("y", None)], initializers=inits)
        monkeypatch.setenv("EDGE_INFER_WINOGRAD", "auto")
        rt = _runtime(model, tmp_path)
        notes = _notes(rt, feeds)
        assert bool(_wino_notes(rt, feeds)) == want, notes
        if not want:
            assert any("not Winograd" in v for v in notes), notes
        ref = ort_run(model, feeds)["y"]
        np.testing.assert_allclose(rt.run(feeds)["y"], ref, rtol=1e-4, atol=2e-5)
        monkeypatch.setenv("EDGE_INFER_WINOGRAD", "0")
        assert not _wino_notes(_runtime(model, tmp_path), feeds)
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "auto")
    assert conv_winograd.chosen(1, 64, 64, 56, 56)[0] and conv_winograd.chosen(1, 8, 8, 40, 40)[0]
    assert not conv_winograd.chosen(1, 32, 32, 6, 6)[0]           # F(4x4): 4 tiles filled 56%
    # few 4x4 tiles of many weights: F(2x2, 3x3) (ResNet-50's 14x14 and 7x7 layers, YOLO's 10x10)
    for n, c, m, hw, r in ((1, 256, 256, 14, 2), (1, 512, 512, 7, 2), (1, 256, 256, 10, 2), (1, 128, 128, 6, 2),
                           (1, 128, 128, 28, 4), (1, 128, 128, 20, 4), (1, 32, 32, 8, 4), (4, 256, 256, 14, 4)):
        assert conv_winograd.tile(n, c, m, hw, hw) == r, (n, c, m, hw)
        assert conv_winograd.chosen(n, c, m, hw, hw)[0], (n, c, m, hw)
    assert not conv_winograd.chosen(1, 256, 256, 4, 4)[0]         # F(2x2): 4 tiles of 256 x 256


def test_scalar_isa_matches_simd(tmp_path, monkeypatch):
    """A plan prepared under one ISA mask runs under another (the scratch and the packing do
    not depend on it): the scalar transforms and micro-kernels agree with the SIMD ones."""
    rng = np.random.default_rng(9)
    nodes, inits = _conv_nodes(21, 37, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, rng, "HardSwish", True)
    x = rng.standard_normal((1, 21, 11, 13)).astype(np.float32)
    feeds = {"x": x, "r": rng.standard_normal((1, 37, 11, 13)).astype(np.float32)}
    model = make_model(nodes, [vi("x", x.shape), vi("r", feeds["r"].shape)], [vi("y", None)], initializers=inits)
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "1")
    rt = _runtime(model, tmp_path)
    assert _wino_notes(rt, feeds)
    _scalar_matches_simd_and_ort(rt, model, feeds)


def _model_parity(rt, feeds, ref):
    for k, v in ref.items():
        assert rel_l2(rt.run(feeds)[k], v) < 1e-5, (k, rel_l2(rt.run(feeds)[k], v))


def test_yolo_detector_matches_onnxruntime(tmp_path, monkeypatch):
    from family_models import yolo_detector
    model = yolo_detector(160)
    x = np.random.default_rng(2).random((1, 3, 160, 160)).astype(np.float32)
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "auto")
    rt = _runtime(model, tmp_path, threads=2)
    assert len(_wino_notes(rt, {"images": x})) >= 4, _notes(rt, {"images": x})
    _model_parity(rt, {"images": x}, ort_run(model, {"images": x}))


@pytest.mark.slow
def test_resnet50_matches_onnxruntime(monkeypatch):
    path = randomized_light_model_path("resnet50")
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "auto")
    g3, _ = optimize_verified(load_model(path), 3, samples=1)
    rt = Runtime(g3, backend="cpu", threads=2)
    info = rt.inputs[0]
    x = np.random.default_rng(1).standard_normal(tuple(1 if isinstance(s, str) else s for s in info.shape)
                                                 ).astype(np.float32)
    feeds = {info.name: x}
    assert len(_wino_notes(rt, feeds)) >= 8, _notes(rt, feeds)
    _model_parity(rt, feeds, ort_run(path, feeds))


def _lone_conv_64_at_56(tmp_path):
    """A lone 3x3 64 -> 64 conv + Relu on a 56x56 input: (ONNX model, optimized graph, feeds).
    Its Winograd scratch (~2.6 MB band + blocks) fits no free arena bytes of its step."""
    rng = np.random.default_rng(4)
    nodes, inits = _conv_nodes(64, 64, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, rng, "Relu", False)
    feeds = {"x": rng.standard_normal((1, 64, 56, 56)).astype(np.float32)}
    model = make_model(nodes, [vi("x", (1, 64, 56, 56))], [vi("y", None)], initializers=inits)
    return model, _optimized(model, tmp_path), feeds


def test_memory_budget_keeps_the_sgemm(tmp_path, monkeypatch):
    """A budget the Winograd scratch (the band's transformed input, ~2.6 MB here) does not fit
    leaves the conv on the SGEMM conv (a 120 KB tile), with the reason in its note."""
    model, g3, feeds = _lone_conv_64_at_56(tmp_path)
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "auto")
    ref = ort_run(model, feeds)["y"]
    for limit, want in ((None, True), (4 << 20, False)):
        rt = Runtime(g3, backend="cpu", threads=1, memory_limit=limit)
        notes = _notes(rt, feeds)
        assert bool(_wino_notes(rt, feeds)) == want, notes
        assert want or any("not Winograd: its scratch does not fit" in v for v in notes), notes
        np.testing.assert_allclose(rt.run(feeds)["y"], ref, rtol=1e-4, atol=2e-5)


def test_inspect_names_the_winograd_convs(tmp_path, capsys, monkeypatch):
    """`edge-infer inspect` lists the convs on Winograd and why an eligible one is not."""
    import json
    from edge_infer.cli import main
    rng = np.random.default_rng(5)
    (n1, i1), (n2, i2) = (_conv_nodes(16, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, rng, "Relu", False),
                          _conv_nodes(16, 4, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, rng, "", False))
    for t in i2:
        t.name += "2"
    n2[0].input[:] = ["y", "w2", "b2"]
    n2[0].output[:] = ["c2"]
    n2[-1].input[:] = ["c2"]
    n2[-1].output[:] = ["y2"]
    model = make_model(n1 + n2, [vi("x", (1, 16, 24, 24))], [vi("y2", None)], initializers=i1 + i2)
    src, out = tmp_path / "m.onnx", tmp_path / "m.eim"
    src.write_bytes(model.SerializeToString())
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "auto")
    assert main(["convert", str(src), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out), "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)["memory"]
    assert len(mem["winograd"]) == 1 and list(mem["not_winograd"].values()) == ["4 channels < 8"], mem
    assert main(["inspect", str(out)]) == 0
    assert "each conv's plan note says which): 1 of 2 3x3 stride-1 conv(s)" in capsys.readouterr().out
    # what inspect reads: the plan's declared choice (Executable.winograd), not its note text
    ex = Runtime(str(out), backend="cpu").plan({"x": (1, 16, 24, 24)})
    assert ex.winograd == {**dict.fromkeys(mem["winograd"]), **mem["not_winograd"]}


def test_weight_growth_allowance_takes_the_largest_outputs_first(monkeypatch):
    """The transformed weights (3x a conv's own bytes more) of a plan stay within
    WEIGHT_GROWTH x its fp32 weights (at least MIN_GROWTH_BYTES): the convs with the most output
    pixels, where Winograd saves the most time per extra byte, are taken first."""
    from edge_infer.backends.cpu.kernels import conv_winograd as cw
    from edge_infer.ir import Graph
    monkeypatch.delenv("EDGE_INFER_WINOGRAD", raising=False)
    monkeypatch.setattr(cw, "MIN_GROWTH_BYTES", 0)
    monkeypatch.setattr(cw, "WEIGHT_GROWTH", 1.0)
    g = Graph("t")
    g.add_tensor("w", "float32", (1000, 1000), np.zeros((1000, 1000), np.float32))     # 4 MB of weights
    cm = 16384                                          # each conv adds 27 * 16384 * 4 = 1.77 MB
    cands = [("small", 400, cm, 0, 4), ("big", 6400, cm, 0, 4), ("mid", 1600, cm, 0, 4),
             ("huge_weights", 25600, 10 * cm, 0, 4)]
    assert cw.allowed(g, cands) == {"big", "mid"}        # 17.7 MB of "huge_weights" never fits
    monkeypatch.setattr(cw, "WEIGHT_GROWTH", 5.0)                        # 20 MB: the largest output first
    assert cw.allowed(g, cands) == {"huge_weights", "big"}
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "1")
    assert cw.allowed(g, cands) == {"small", "big", "mid", "huge_weights"}


def test_scratch_no_hole_takes_is_reserved_in_the_arena_when_the_allowance_pays(tmp_path, monkeypatch):
    """A lone 3x3 conv: at its step the arena holds only its input and output, so the Winograd
    scratch (~2.6 MB band + blocks) fits no free bytes. Under an allowance that pays for the
    arena's growth, the arena reserves it (no scratch buffer of its own) and the conv runs as
    Winograd; under one that does not, it stays on the SGEMM and nothing is reserved. Both
    equal onnxruntime's output."""
    from edge_infer.backends.cpu.kernels import conv_winograd as cw
    model, g3, feeds = _lone_conv_64_at_56(tmp_path)
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "auto")
    ref = ort_run(model, feeds)["y"]
    monkeypatch.setattr(cw, "MIN_GROWTH_BYTES", 0)
    sizes = {}
    for growth, want in ((100.0, True), (0.0, False)):
        monkeypatch.setattr(cw, "WEIGHT_GROWTH", growth)
        rt = Runtime(g3, backend="cpu", threads=2)
        ex = rt.plan({"x": (1, 64, 56, 56)})
        assert (None in ex.winograd.values()) == want, ex.winograd
        assert bool(ex.arena_plan.reserved) == want and ex.workspace_bytes < (1 << 20), ex.workspace_bytes
        sizes[want] = ex.arena_plan.size
        np.testing.assert_allclose(rt.run(feeds)["y"], ref, rtol=1e-4, atol=2e-5)
    assert sizes[True] > sizes[False]          # the arena grew for the reserved scratch


def test_weight_growth_allowance_costs_f2x2_its_16_points(monkeypatch):
    """An F(2x2, 3x3) conv grows its weights by (16 - 9) x C x M floats (F(4x4): 27): under a
    2.4 MB allowance the first F(4x4) conv (1.77 MB) leaves room for an F(2x2) one (0.46 MB)
    but not for a second F(4x4) one; the saved multiply-adds per byte order them."""
    from edge_infer.backends.cpu.kernels import conv_winograd as cw
    from edge_infer.ir import Graph
    monkeypatch.delenv("EDGE_INFER_WINOGRAD", raising=False)
    monkeypatch.setattr(cw, "MIN_GROWTH_BYTES", 0)
    monkeypatch.setattr(cw, "WEIGHT_GROWTH", 0.6)
    g = Graph("t")
    g.add_tensor("w", "float32", (1000, 1000), np.zeros((1000, 1000), np.float32))     # 4 MB of weights
    cm = 16384
    cands = [("f4a", 1600, cm, 0, 4), ("f4b", 1500, cm, 0, 4), ("f2", 400, cm, 0, 2)]
    assert cw.allowed(g, cands) == {"f4a", "f2"}


def test_weight_growth_allowance_counts_scratch_no_arena_hole_takes_once(monkeypatch):
    """A conv whose scratch no arena hole takes also costs that scratch, but only what it grows
    the one buffer all convs share by: under 4 MB, "a" (1.77 MB + 3 MB of scratch) does not
    fit and "c" (no scratch) does; under 8 MB, "a" pays for the scratch and "b" then rides on it."""
    from edge_infer.backends.cpu.kernels import conv_winograd as cw
    from edge_infer.ir import Graph
    monkeypatch.delenv("EDGE_INFER_WINOGRAD", raising=False)
    monkeypatch.setattr(cw, "MIN_GROWTH_BYTES", 0)
    monkeypatch.setattr(cw, "WEIGHT_GROWTH", 1.0)
    g = Graph("t")
    g.add_tensor("w", "float32", (1000, 1000), np.zeros((1000, 1000), np.float32))     # 4 MB of weights
    cm, mb3 = 16384, 3 << 20
    cands = [("a", 6400, cm, mb3, 4), ("b", 3200, cm, mb3, 4), ("c", 1600, cm, 0, 4)]
    assert cw.allowed(g, cands) == {"c"}
    monkeypatch.setattr(cw, "WEIGHT_GROWTH", 2.0)
    assert cw.allowed(g, cands) == {"a", "b"}


@pytest.mark.parametrize("c,m,hw", [(64, 64, 56), (128, 128, 28), (256, 256, 14), (40, 24, 23)])
def test_work_split_any_threads_same_outputs(c, m, hw, tmp_path, monkeypatch):
    """The tile blocks, column blocks and input-transform channel chunks chosen at prepare
    for 2 and 3 threads (winograd_f32.c wg_split) give the 1-thread outputs bit for bit."""
    from edge_infer.backends.cpu.kernels.conv_native import ConvF32Args
    rng = np.random.default_rng(c + hw)
    nodes, inits = _conv_nodes(c, m, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, rng, "Relu", False)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    model = make_model(nodes, [vi("x", x.shape)], [vi("y", None)], initializers=inits)
    ref = ort_run(model, {"x": x})["y"]
    monkeypatch.setenv("EDGE_INFER_WINOGRAD", "1")
    outs = {}
    for threads in (1, 2, 3):
        rt = _runtime(model, tmp_path, threads)
        assert len(_wino_notes(rt, {"x": x})) == 1
        outs[threads] = rt.run({"x": x})["y"]
        steps = [s.native_step for s in rt.plan({"x": x.shape}).steps if getattr(s, "native_step", None)]
        args = [ConvF32Args.from_address(a) for _, a in steps if ConvF32Args.from_address(a).m == m]
        assert len(args) == 1 and (threads == 1 or args[0].split_threads == threads)
    np.testing.assert_allclose(outs[1], ref, rtol=1e-4, atol=2e-5)
    assert np.array_equal(outs[1], outs[2]) and np.array_equal(outs[1], outs[3])
