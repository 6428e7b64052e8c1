"""The ops that joined the compiled execution loop (issue 17): Resize nearest and linear
(src/resize.c, byte runs), and Concat / Split / Slice / Reshape placed by the memory planner
so that no copy runs (memory/arena.py ``views``).

Oracles: onnxruntime on one-node models over the coordinate modes, layouts and broadcast
patterns the native kernels take; the numpy kernels (native library switched off) for
bit-identity; for the benchmark families, onnxruntime on the whole model plus an assertion on
the plan itself: every step of the fp32 plan is native (or a placed view that runs nothing).
"""
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import edge_infer
from edge_infer import Runtime
from edge_infer.backends.cpu import native
from edge_infer.backends.cpu.executor import CpuBackend
from edge_infer.ir import Graph
from edge_infer.runtime import specialize

ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from family_models import FAMILIES  # noqa: E402

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")
ISAS = [pytest.param(-1, id="simd"), pytest.param(native.AVX2 | native.NEON, id="avx2-neon"),
        pytest.param(0, id="scalar")]


@pytest.fixture
def isa(request):
    old = native.set_isa_mask(request.param)
    yield request.param
    native.set_isa_mask(old)


def one_node(op, x, consts, attrs, n_out=1, dtype=TensorProto.FLOAT):
    """A one-node ONNX model over graph input ``x`` and constant initializers."""
    names = ["x"] + [k if v is not None else "" for k, v in consts]
    outs = [f"y{i}" for i in range(n_out)]
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in consts if v is not None]
    g = helper.make_graph([helper.make_node(op, names, outs, **attrs)], "g",
                          [helper.make_tensor_value_info("x", dtype, x.shape)],
                          [onnx.ValueInfoProto(name=o) for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def ort_run(model, feeds, threads=1):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ir_plan(model, x, threads=2, native_on=True, monkeypatch=None):
    """The CPU plan of ``model`` (the ONNX frontend's graph, specialized to x's shape)."""
    from edge_infer.frontends.onnx import load_onnx
    g = specialize(load_onnx(model), {"x": x.shape})
    if not native_on:
        monkeypatch.setattr(native, "lib", None)
    try:
        return CpuBackend().prepare(g, threads=threads)
    finally:
        if not native_on:
            monkeypatch.undo()


def all_native(ex):
    return all(getattr(s, "native_step", None) is not None for s in ex.steps)


# -- Resize ----------------------------------------------------------------------------------------

CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
#: (x shape, scales or sizes): NCHW 2-D up / down / mixed, one axis, non-integer ratios,
#: an odd channel count (SIMD tails), a length-1 output axis
RESIZE_CASES = [((1, 3, 5, 7), dict(scales=[1, 1, 2.0, 2.0])),
                ((2, 19, 6, 4), dict(scales=[1, 1, 0.5, 1.75])),
                ((1, 4, 9, 10), dict(sizes=[1, 4, 4, 23])),
                ((1, 2, 8, 8), dict(sizes=[1, 2, 8, 13])),
                ((1, 3, 6, 5), dict(sizes=[1, 3, 1, 9])),
                ((1, 37, 10, 10), dict(scales=[1, 1, 3.0, 3.0]))]


def resize_model(shape, spec, attrs):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    consts = [("roi", None), ("scales", None), ("sizes", None)]
    if "scales" in spec:
        consts[1] = ("scales", np.array(spec["scales"], np.float32))
    else:
        consts[2] = ("sizes", np.array(spec["sizes"], np.int64))
    return one_node("Resize", x, consts, attrs), x


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("ctm", CTMS)
def test_resize_linear_native_matches_onnxruntime_and_numpy(isa, ctm, monkeypatch):
    for shape, spec in RESIZE_CASES:
        model, x = resize_model(shape, spec, dict(mode="linear", coordinate_transformation_mode=ctm))
        ex = ir_plan(model, x)
        assert all_native(ex), ex.notes
        assert "native" in next(iter(ex.notes.values()))
        got = ex.run({"x": x})["y0"]
        np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
        # the numpy kernel's order of operations: the same bits
        ref = ir_plan(model, x, native_on=False, monkeypatch=monkeypatch)
        assert not all_native(ref)
        np.testing.assert_array_equal(got, ref.run({"x": x})["y0"])


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_resize_linear_channels_last(isa):
    """NHWC (inner = channels, vectorized, with tails) against onnxruntime on the NCHW model."""
    for c in (1, 3, 8, 16, 21, 64):
        model, x = resize_model((1, c, 7, 9), dict(scales=[1, 1, 2.0, 1.5]),
                                dict(mode="linear", coordinate_transformation_mode="half_pixel"))
        want = ort_run(model, {"x": x})[0].transpose(0, 2, 3, 1)
        xt = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        m2, _ = resize_model((1, 7, 9, c), dict(scales=[1, 2.0, 1.5, 1]),
                             dict(mode="linear", coordinate_transformation_mode="half_pixel"))
        ex = ir_plan(m2, xt, threads=2)
        assert all_native(ex)
        np.testing.assert_allclose(ex.run({"x": xt})["y0"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ctm", CTMS)
def test_resize_nearest_native_every_mode(ctm):
    for shape, spec in RESIZE_CASES:
        for nm in NEAREST:
            model, x = resize_model(shape, spec, dict(mode="nearest", coordinate_transformation_mode=ctm,
                                                      nearest_mode=nm))
            ex = ir_plan(model, x)
            assert all_native(ex), ex.notes
            # a gather: exactly onnxruntime's values (ratios here are exact in float32)
            np.testing.assert_array_equal(ex.run({"x": x})["y0"], ort_run(model, {"x": x})[0])


def test_resize_nearest_other_dtypes():
    """The byte runs carry any element size: int32 and uint8 tensors, channels last; runs of
    single bytes (uint8 NCHW widened 3x) stay a numpy gather, saying so."""
    for dtype, onnx_type in ((np.int32, TensorProto.INT32), (np.uint8, TensorProto.UINT8)):
        for shape, scales, native_expected in (((2, 4, 5, 3), [1, 2, 3, 1], True),
                                               ((2, 3, 4, 5), [1, 1, 2, 3], dtype == np.int32)):
            x = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
            model = one_node("Resize", x, [("roi", None), ("scales", np.array(scales, np.float32))],
                             dict(mode="nearest"), dtype=onnx_type)
            ex = ir_plan(model, x)
            assert all_native(ex) == native_expected, ex.notes
            if not native_expected:
                assert "numpy: runs too short" in " ".join(ex.notes.values())
            np.testing.assert_array_equal(ex.run({"x": x})["y0"], ort_run(model, {"x": x})[0])


def test_resize_outside_native_coverage_falls_back_with_a_note():
    """cubic, an antialiased downscale and tf_crop_and_resize extrapolation stay on numpy, and
    inspect's note says why; the results are still onnxruntime's."""
    cases = [(dict(mode="cubic"), dict(scales=[1, 1, 2.0, 2.0]), "cubic mode"),
             (dict(mode="linear", antialias=1), dict(scales=[1, 1, 0.5, 0.5]), "antialiased"),
             (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.0),
              dict(sizes=[1, 3, 6, 6], roi=[0, 0, -0.2, -0.2, 1, 1, 1.2, 1.2]), "extrapolation")]
    for attrs, spec, why in cases:
        x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
        roi = np.array(spec.get("roi"), np.float32) if "roi" in spec else None
        consts = [("roi", roi), ("scales", np.array(spec["scales"], np.float32) if "scales" in spec else None),
                  ("sizes", np.array(spec["sizes"], np.int64) if "sizes" in spec else None)]
        model = one_node("Resize", x, consts, attrs)
        ex = ir_plan(model, x)
        note = " ".join(ex.notes.values())
        assert not all_native(ex) and "numpy: " in note and why in note, note
        np.testing.assert_allclose(ex.run({"x": x})["y0"], ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
