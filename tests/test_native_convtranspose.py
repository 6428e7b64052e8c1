"""Native NHWC ConvTranspose (src/convtranspose.c, kernels/convt_native.py, conv_transpose.py;
int8: kernels/int8_spatial.py on the int8 GEMM): fp32 against onnxruntime on the source model
(strides, pads, output padding, dilations, groups, auto_pad, output_shape, kernels below, at and
above the stride, odd sizes, several K blocks), every ISA path on one plan, the numpy NHWC
fallback, the C self-test; int8 bit-exact against the numpy reference kernel; and the DB-style
text detector whose head it is (text-map IoU fp32 vs onnxruntime and int8 vs fp32)."""
import os
import sys

import numpy as np
import pytest
from onnx import helper, numpy_helper

from edge_infer.backends.cpu import native
from edge_infer.ir import Graph
from edge_infer.runtime import Runtime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import make_model, ort_run, vi  # noqa: E402
from test_native_int8_ops import run_graph  # noqa: E402
from test_native_sgemm import _runtime  # noqa: E402  (optimize_verified at level 3, the CPU backend)

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")

#: (x shape NCHW, W shape (C, M/group, kh, kw), attributes)
CASES = [
    ((1, 24, 10, 12), (24, 24, 2, 2), dict(strides=[2, 2])),                 # DB head: the fold form
    ((2, 24, 7, 5), (24, 1, 2, 2), dict(strides=[2, 2])),                    # one output channel
    ((1, 19, 5, 7), (19, 5, 3, 3), dict(strides=[3, 3])),                    # fold, odd channels
    ((2, 5, 7, 9), (5, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ((1, 32, 6, 7), (32, 20, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),   # k4 s2 p1
    ((1, 40, 5, 5), (40, 18, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 40, 5, 6), (40, 18, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 4, 5, 5), (4, 2, 4, 4), dict(strides=[2, 2], output_shape=[10, 11])),
    ((1, 6, 4, 5), (6, 2, 3, 3), dict(group=3, strides=[2, 1], pads=[0, 1, 1, 0], dilations=[1, 2])),
    ((1, 34, 6, 6), (34, 17, 3, 3), dict(group=2, strides=[2, 2], pads=[1, 0, 0, 1])),
    ((1, 17, 5, 6), (17, 5, 1, 1), dict(strides=[3, 2])),                    # outputs no tap reaches
    ((1, 8, 3, 4), (8, 6, 2, 3), dict(strides=[3, 4], output_padding=[2, 1])),
    ((1, 20, 6, 5), (20, 9, 3, 2), dict(strides=[1, 1], pads=[2, 1, 0, 1], dilations=[2, 3])),
    ((1, 350, 4, 3), (350, 20, 2, 2), dict(strides=[2, 2])),                 # K = 350: two K blocks
    ((1, 330, 3, 4), (330, 16, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 1, 1), (3, 7, 5, 5), dict(strides=[2, 2])),                      # one input pixel
    ((3, 16, 9, 31), (16, 40, 2, 2), dict(strides=[2, 2], pads=[1, 0, 0, 1])),
]


def _model(xs, ws, attrs, rng, bias=True, weight_input=False):
    g = attrs.get("group", 1)
    w = (rng.standard_normal(ws) / np.sqrt(ws[0] * ws[2] * ws[3] / g)).astype(np.float32)
    b = (rng.standard_normal(ws[1] * g) * 0.2).astype(np.float32)
    ins = ["x", "w"] + (["b"] if bias else [])
    node = helper.make_node("ConvTranspose", ins, ["y"], kernel_shape=list(ws[2:]), **attrs)
    inits = [numpy_helper.from_array(b, "b")] if bias else []
    inputs = [vi("x", xs)]
    if weight_input:
        inputs.append(vi("w", ws))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    return make_model([node], inputs, [vi("y", None)], initializers=inits), w


def _close(ours, ref):
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(ref).max())))


def test_selftest_every_isa():
    old = native.set_isa_mask(-1)
    try:
        for mask in (-1, -1 & ~native.AVX512, 0):
            native.set_isa_mask(mask)
            assert native.lib.ei_selftest_convt_f32() == 0, mask
    finally:
        native.set_isa_mask(old)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fp32_against_onnxruntime(case, threads, tmp_path):
    rng = np.random.default_rng(100 + case)
    xs, ws, attrs = CASES[case]
    model, _ = _model(xs, ws, attrs, rng, bias=case % 4 != 1)
    x = rng.standard_normal(xs).astype(np.float32)
    rt = _runtime(model, tmp_path, threads)
    notes = [v for v in rt.plan({"x": xs}).notes.values() if "ConvTranspose" in v]
    assert len(notes) == 1 and "native sub-pixel SGEMM" in notes[0], notes
    _close(rt.run({"x": x})["y"], ort_run(model, {"x": x})["y"])


def test_every_isa_runs_one_plan(tmp_path):
    """The packing is the same for every ISA: a plan prepared under one runs under the others."""
    rng = np.random.default_rng(7)
    for xs, ws, attrs in (CASES[0], CASES[4], CASES[8]):
        model, _ = _model(xs, ws, attrs, rng)
        x = rng.standard_normal(xs).astype(np.float32)
        ref = ort_run(model, {"x": x})["y"]
        rt = _runtime(model, tmp_path, 2)
        old = native.set_isa_mask(-1)
        try:
            for mask in (-1, -1 & ~native.AVX512, 0):
                native.set_isa_mask(mask)
                _close(rt.run({"x": x})["y"], ref)
        finally:
            native.set_isa_mask(old)


def test_numpy_nhwc_fallback_for_a_computed_weight(tmp_path):
    rng = np.random.default_rng(8)
    for xs, ws, attrs in (CASES[3], CASES[8]):
        model, w = _model(xs, ws, attrs, rng, weight_input=True)
        x = rng.standard_normal(xs).astype(np.float32)
        rt = _runtime(model, tmp_path, 2)
        note = next(v for v in rt.plan({"x": xs, "w": ws}).notes.values() if "col2im" in v)
        assert note.startswith("NHWC matmul + col2im") and "not the sub-pixel kernel: its weight is not a dense constant" in note
        _close(rt.run({"x": x, "w": w})["y"], ort_run(model, {"x": x, "w": w})["y"])


def test_layout_pass_puts_conv_transpose_in_nhwc(tmp_path):
    rng = np.random.default_rng(9)
    model, _ = _model(*CASES[0], rng)
    rt = _runtime(model, tmp_path, 1)
    g = rt.plan({"x": CASES[0][0]}).graph
    ct = next(n for n in g.nodes if n.op == "ConvTranspose")
    assert ct.attrs.get("data_layout") == "NHWC"
    assert g.tensors[ct.outputs[0]].shape == (1, 20, 24, 24)


# -- int8 ---------------------------------------------------------------------------------------

def _int8_graph(x, wt, bias, sw, zx, zy, attrs):
    def make():
        g = Graph("ct8")
        g.add_input("x", "int8", x.shape).quant = {"scale": [0.05], "zero_point": [zx], "axis": None}
        g.add_const("w", wt).quant = {"scale": [float(v) for v in sw], "zero_point": [0] * sw.size, "axis": 1}
        g.add_const("b", bias)
        g.add_node("ConvTranspose", ["x", "w", "b"], ["y"], data_layout="NHWC", **attrs)
        g.outputs = ["y"]
        g.tensors["y"].quant = {"scale": [0.04], "zero_point": [zy], "axis": None}
        return g
    return make


#: (x NHWC, (C, M, kh, kw), attributes): the fold form (kernel = stride) and the phase form
INT8_CASES = [
    ((1, 10, 12, 24), (24, 24, 2, 2), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((2, 9, 7, 24), (24, 1, 2, 2), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 5, 6, 7), (7, 40, 3, 3), dict(kernel_shape=[3, 3], strides=[3, 3])),
    ((1, 6, 7, 32), (32, 20, 4, 4), dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 5, 5, 9), (9, 6, 3, 3), dict(kernel_shape=[3, 3], strides=[2, 2])),
    # the taps' depth to space: runs of 4 bytes by permutes over 64-byte chunks (a part one at
    # the end of each row), runs of 6 bytes copied
    ((1, 6, 40, 8), (8, 2, 2, 2), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((2, 4, 5, 6), (6, 3, 2, 2), dict(kernel_shape=[2, 2], strides=[2, 2])),
]


@pytest.mark.parametrize("isa", [-1, 0], ids=["simd", "scalar"])
@pytest.mark.parametrize("case", range(len(INT8_CASES)))
def test_int8_native_bit_exact_with_reference(case, isa, monkeypatch):
    rng = np.random.default_rng(300 + case)
    xs, ws, attrs = INT8_CASES[case]
    x = rng.integers(-128, 128, xs, dtype=np.int8)
    wt = rng.integers(-127, 128, ws, dtype=np.int8)
    bias = rng.integers(-5000, 5000, ws[1]).astype(np.int32)
    sw = rng.uniform(0.001, 0.01, ws[1]).astype(np.float32)
    make = _int8_graph(x, wt, bias, sw, int(rng.integers(-128, 128)), int(rng.integers(-30, 30)), attrs)
    old = native.set_isa_mask(isa)
    try:
        fast_ex, fast = run_graph(make, {"x": x}, True, monkeypatch)
    finally:
        native.set_isa_mask(old)
    note = next(v for v in fast_ex.notes.values() if "ConvTranspose" in v)
    assert "native" in note and all(getattr(s, "native_step", None) is not None for s in fast_ex.steps)
    assert ("one int8 GEMM over the input pixels" in note) == (attrs["kernel_shape"] == attrs["strides"])
    slow_ex, slow = run_graph(make, {"x": x}, False, monkeypatch)
    assert "exact float32 GEMM to columns" in next(v for v in slow_ex.notes.values() if "ConvTranspose" in v)
    np.testing.assert_array_equal(fast["y"], slow["y"])


# -- the DB-style text detector -------------------------------------------------------------------

def _iou(a, b):
    """IoU of the maps binarized at ``b``'s median (random weights: no trained threshold)."""
    t = float(np.median(b))
    a, b = a > t, b > t
    return float((a & b).sum()) / max(1, int((a | b).sum()))


def test_db_detector_text_map(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    import onnx
    import family_models as F
    from edge_infer import convert
    model = F.db_text_detector((128, 160), width=0.35, fpn=32)
    src, f32, i8 = tmp_path / "db.onnx", tmp_path / "db.eim", tmp_path / "db8.eim"
    onnx.save(model, src)
    convert(src, f32, verify_samples=1)
    convert(src, i8, verify_samples=1, quantize="int8", calib="random", calib_samples=4)
    xs = np.random.default_rng(11).standard_normal((3, 1, 3, 128, 160)).astype(np.float32)
    rt, rt8 = Runtime(str(f32), backend="cpu", threads=2), Runtime(str(i8), backend="cpu", threads=2)
    for r in (rt, rt8):
        notes = [v for v in r.plan({"input": (1, 3, 128, 160)}).notes.values() if "ConvTranspose" in v]
        assert len(notes) == 2 and all("NHWC" in v and "native" in v for v in notes), notes
    monkeypatch.setattr(native, "lib", None)
    ref8 = Runtime(str(i8), backend="cpu", threads=2)          # the numpy int8 kernels
    ref8.run(xs[0])
    monkeypatch.undo()
    for x in xs:
        ref = next(iter(ort_run(model, {"input": x}).values()))
        ours, ours8 = rt.run(x), rt8.run(x)
        y, y8 = next(iter(ours.values())), next(iter(ours8.values()))
        assert float(np.abs(y - ref).max()) <= 1e-4
        assert _iou(y, ref) >= 0.99
        assert _iou(y8, y) >= 0.85         # measured 0.91-0.92 (random weights, 4 random calibration inputs)
        np.testing.assert_array_equal(y8, next(iter(ref8.run(x).values())))
