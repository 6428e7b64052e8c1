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
from edge_infer.backends.cpu import CpuBackend
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
        # inspect lists the step and why
        from edge_infer.inspection import memory_plan
        from edge_infer.frontends.onnx import load_onnx
        plan = memory_plan(load_onnx(model))
        assert plan["numpy_steps"] == ["Resize"] and why in " ".join(plan["numpy_notes"].values()), plan
        np.testing.assert_allclose(ex.run({"x": x})["y0"], ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


# -- Concat / Split / Slice / Reshape placed in place (memory/views.py) ----------------------------

def graph_model(nodes, x, consts=(), outputs=("y",)):
    """An ONNX model of ``nodes`` over input ``x`` (float32) and constant initializers."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [onnx.ValueInfoProto(name=o) for o in outputs],
                          [onnx.numpy_helper.from_array(v, k) for k, v in consts])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def check_views(model, x, monkeypatch, placed=(), copied=()):
    """The plan places ``placed`` inside other tensors and not ``copied``; outputs equal
    onnxruntime's and, bit for bit, those of the same plan without placements."""
    from edge_infer.backends.cpu import executor
    ex = ir_plan(model, x)
    views = ex.arena_plan.views
    for name in placed:
        assert name in views, (name, views)
    for name in copied:
        assert name not in views, (name, views)
    got = ex.run({"x": x})
    want = ort_run(model, {"x": x})
    for k, w in zip(got, want):
        np.testing.assert_allclose(got[k], w, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(executor, "copy_views", lambda node, graph: [])
    ref = ir_plan(model, x)
    assert not ref.arena_plan.views
    again = ref.run({"x": x})
    for k in got:
        np.testing.assert_array_equal(got[k], again[k])
    return ex


def test_concat_of_slabs_is_placed_and_copies_nothing(monkeypatch):
    """(1, n_i, 8) pieces concatenated on axis 1 (a detector head) are written by their
    producers straight into the output; a channels-last concat (axis 2 here) is copied."""
    x = np.random.default_rng(0).standard_normal((1, 6, 8)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Abs", ["x"], ["c"]),
             helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=1),
             helper.make_node("Concat", ["b", "x"], ["z"], axis=2)]     # b is already placed in y
    ex = check_views(graph_model(nodes, x, outputs=("y", "z")), x, monkeypatch, placed=("a", "b", "c"))
    y = ex.buffers["y"]
    for k, name in enumerate("abc"):
        assert np.shares_memory(ex.buffers[name], y[:, 6 * k:6 * k + 6])
    # the concat's step copies nothing: all its pairs were skipped
    k = [n.op for n in ex.nodes].index("Concat")
    from edge_infer.backends.cpu.native.ops import CopyParArgs
    args = ex.steps[k].native_keep[1]
    assert (args.c if isinstance(args, CopyParArgs) else args).count == 0
    assert ex.notes[ex.nodes[k].name].startswith("3 of 3 input(s) written in place")


def test_split_slice_reshape_outputs_are_views(monkeypatch):
    x = np.random.default_rng(1).standard_normal((1, 12, 5)).astype(np.float32)
    consts = [("sp", np.array([4, 8], np.int64)), ("s0", np.array([3], np.int64)), ("e0", np.array([9], np.int64)),
              ("ax", np.array([1], np.int64)), ("e2", np.array([4], np.int64)), ("ax2", np.array([2], np.int64)),
              ("shp", np.array([1, 60], np.int64))]
    nodes = [helper.make_node("Exp", ["x"], ["t"]),
             helper.make_node("Split", ["t", "sp"], ["p", "q"], axis=1),
             helper.make_node("Slice", ["t", "s0", "e0", "ax"], ["s"]),          # rows 3..8: a slab
             helper.make_node("Slice", ["t", "s0", "e2", "ax2"], ["u"]),         # columns: strided
             helper.make_node("Reshape", ["t", "shp"], ["r"]),
             helper.make_node("Sigmoid", ["p"], ["y"]), helper.make_node("Tanh", ["q"], ["y2"]),
             helper.make_node("Neg", ["s"], ["y3"]), helper.make_node("Neg", ["u"], ["y4"]),
             helper.make_node("Abs", ["r"], ["y5"])]
    check_views(graph_model(nodes, x, consts, ("y", "y2", "y3", "y4", "y5")), x, monkeypatch,
                placed=("p", "q", "s", "r"), copied=("u",))


def test_views_and_in_place_writes_do_not_clobber(monkeypatch):
    """An element-wise op may write over its input only when no view shares those bytes: a
    Reshape of x still read after Relu(x), a Split output whose sibling lives on, a tensor
    concatenated twice (placed once, copied once), pieces in reverse order."""
    x = np.random.default_rng(2).standard_normal((1, 8, 4)).astype(np.float32)
    consts = [("shp", np.array([1, 32], np.int64)), ("sp", np.array([4, 4], np.int64))]
    nodes = [helper.make_node("Tanh", ["x"], ["e"]),
             helper.make_node("Reshape", ["e", "shp"], ["r"]),
             helper.make_node("Relu", ["e"], ["re"]),                   # e's last use: in place unless viewed
             helper.make_node("Split", ["re", "sp"], ["p", "q"], axis=1),
             helper.make_node("Sigmoid", ["p"], ["sp_"]),                # p dies here; q lives on
             helper.make_node("Concat", ["q", "sp_", "q"], ["c1"], axis=1),
             helper.make_node("Concat", ["sp_", "x"], ["c2"], axis=1),
             helper.make_node("Abs", ["r"], ["y"])]
    check_views(graph_model(nodes, x, consts, ("y", "c1", "c2")), x, monkeypatch, placed=("r", "p", "q"))


def test_channels_last_concat_of_resized_maps_is_written_in_place(monkeypatch):
    """A channels-last channel concat (the DB FPN, YOLO's upsample + concat): a nearest
    Resize read only by the concat writes straight into its strided slice of the output; a
    linear one, and a nearest one read elsewhere too, are copied as before."""
    x = np.random.default_rng(4).standard_normal((1, 5, 6, 8)).astype(np.float32)
    consts = [("s2", np.array([1, 2, 2, 1], np.float32)), ("s4", np.array([1, 4, 4, 1], np.float32)),
              ("s1", np.array([1, 0.5, 0.5, 1], np.float32))]
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Resize", ["a", "", "s2"], ["n1"], mode="nearest"),
             helper.make_node("Resize", ["x", "", "s2"], ["n2"], mode="nearest",
                              coordinate_transformation_mode="half_pixel"),
             helper.make_node("Resize", ["a", "", "s2"], ["l1"], mode="linear"),
             helper.make_node("Resize", ["x", "", "s2"], ["n3"], mode="nearest", nearest_mode="floor",
                              coordinate_transformation_mode="asymmetric"),
             helper.make_node("Neg", ["n3"], ["y2"]),                           # n3 has a second reader
             helper.make_node("Resize", ["a", "", "s4"], ["big"], mode="nearest"),
             helper.make_node("Resize", ["big", "", "s1"], ["n4"], mode="nearest"),   # 4x then 0.5x
             helper.make_node("Concat", ["n1", "l1", "n2", "n3", "n4"], ["y"], axis=3)]
    ex = check_views(graph_model(nodes, x, consts, ("y", "y2")), x, monkeypatch, placed=("n1", "n2", "n4"),
                     copied=("l1", "n3"))
    assert set(ex.arena_plan.strided) == {"n1", "n2", "n4"}
    y = ex.buffers["y"]
    assert np.shares_memory(ex.buffers["n2"], y[..., 16:24]) and not ex.buffers["n2"].flags.c_contiguous
    assert all_native(ex)
    # without the native library nothing is placed strided (the numpy gather wants contiguous rows)
    monkeypatch.undo()
    plain = ir_plan(graph_model(nodes, x, consts, ("y", "y2")), x, native_on=False, monkeypatch=monkeypatch)
    assert not plain.arena_plan.strided
    np.testing.assert_array_equal(plain.run({"x": x})["y"], ex.run({"x": x})["y"])


@pytest.mark.parametrize("name", ["yolo", "db", "mobilenetv3", "text_direction", "squeezenet", "mobilenetv2"])
def test_benchmark_family_plans_are_all_native(name, tmp_path, monkeypatch):
    """The fp32 plan of each benchmark architecture (built narrow and small: the same ops and
    graph structure as compare.py's) runs every step natively (the DB head's ConvTranspose too),
    and matches onnxruntime. The detectors' upsampled maps are written into their concat (placed strided)."""
    import family_models as F
    from edge_infer.backends.cpu import executor
    small = {"yolo": lambda: F.yolo_detector(96, width=0.125, classes=5),
             "db": lambda: F.db_text_detector((64, 64), width=0.35, fpn=32),
             "mobilenetv3": lambda: F.mobilenetv3_classifier((64, 64), width=0.5, classes=10),
             "text_direction": lambda: F.text_direction_classifier((48, 96))}
    if name in small:
        model = small[name]()
    elif name == "squeezenet":
        from onnx_models import randomized_light_model_path
        model = onnx.load(randomized_light_model_path("squeezenet"))
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
        from _common import mobilenet_v2_onnx
        mobilenet_v2_onnx(str(tmp_path / "m.onnx"), hw=96)
        model = onnx.load(str(tmp_path / "m.onnx"))
    inits = {i.name for i in model.graph.initializer}
    inp = [i for i in model.graph.input if i.name not in inits][0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    onnx.save(model, tmp_path / "m.onnx")
    edge_infer.convert(tmp_path / "m.onnx", tmp_path / "m.eim", input_shapes={inp.name: shape})
    rt = Runtime(str(tmp_path / "m.eim"), backend="cpu", threads=2)
    ex = rt.plan({inp.name: tuple(shape)})
    slow = sorted({n.op for n, st in zip(ex.nodes, ex.steps) if getattr(st, "native_step", None) is None})
    assert slow == [], (slow, ex.notes)
    if name in ("db", "yolo"):
        assert len(ex.arena_plan.strided) == (3 if name == "db" else 2), ex.arena_plan.strided
    ours = rt.run({inp.name: x})
    so = ort.SessionOptions()
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for o, r in zip(sess.get_outputs(), sess.run(None, {inp.name: x})):
        err = float(np.abs(ours[o.name] - r).max() / np.abs(r).max())
        assert err <= 1e-4, (name, o.name, err)
    # placements change where tensors live, never a value
    monkeypatch.setattr(executor, "copy_views", lambda node, graph: [])
    plain = Runtime(str(tmp_path / "m.eim"), backend="cpu", threads=2).run({inp.name: x})
    for k in ours:
        np.testing.assert_array_equal(ours[k], plain[k])


def test_int8_plan_places_the_same_way(tmp_path, monkeypatch):
    """The int8 plan of the small YOLO (seeded random calibration) shares the planner: its
    concat pieces with the output's parameters, reshapes and the upsampled maps are placed,
    every step is native, and the outputs are those of the plan without placements, bit for bit."""
    import family_models as F
    from edge_infer.backends.cpu import executor
    model = F.yolo_detector(96, width=0.125, classes=5)
    onnx.save(model, tmp_path / "y.onnx")
    edge_infer.convert(tmp_path / "y.onnx", tmp_path / "y8.eim", quantize="int8", calib="random",
                       allow_drift=True, input_shapes={"images": [1, 3, 96, 96]})
    x = np.random.default_rng(6).random((1, 3, 96, 96), dtype=np.float32)
    rt = Runtime(str(tmp_path / "y8.eim"), backend="cpu", threads=2)
    ex = rt.plan({"images": (1, 3, 96, 96)})
    assert all_native(ex)
    assert len(ex.arena_plan.views) >= 4 and ex.arena_plan.strided, ex.arena_plan.views
    assert any(ex.graph.tensors[n].dtype == "int8" for n in ex.arena_plan.views)
    got = rt.run({"images": x})
    monkeypatch.setattr(executor, "copy_views", lambda node, graph: [])
    want = Runtime(str(tmp_path / "y8.eim"), backend="cpu", threads=2).run({"images": x})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
