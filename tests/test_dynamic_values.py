"""Shapes decided by values at run time: data-dependent ops (NonMaxSuppression, NonZero) and
value inputs computed from graph inputs (Reshape targets, Pad pads, Range bounds, TopK's k),
against onnxruntime, with the staged plans' re-planning and cache checked."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto as TP, helper as h, numpy_helper  # noqa: E402

from onnx_models import make_model, ort_run, vi  # noqa: E402

from edge_infer import InputError, Runtime  # noqa: E402
from edge_infer.backends import BACKENDS  # noqa: E402
from edge_infer.backends.cpu import staged  # noqa: E402
from edge_infer.backends.picker import coverage, format_report, pick  # noqa: E402
from edge_infer.backends.specialize import specialize  # noqa: E402
from edge_infer.errors import UnsupportedOpError  # noqa: E402
from edge_infer.frontends.onnx import load_onnx  # noqa: E402
from edge_infer.memory.pool import DYNAMIC_POOL  # noqa: E402

N_BOXES, N_CLASSES = 64, 3


def _init(name, value, dtype=None):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _detector(center: int = 0):
    """SSD-style post-processing: box deltas decoded against anchors, class logits through a
    sigmoid, NMS inside, the selected boxes and scores gathered."""
    nodes = [
        h.make_node("Add", ["deltas", "anchors"], ["boxes"]),
        h.make_node("Sigmoid", ["logits"], ["scores"]),
        h.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"], ["selected"],
                    center_point_box=center),
        h.make_node("Gather", ["selected", "col2"], ["box_idx"], axis=1),
        h.make_node("Squeeze", ["boxes", "zero"], ["boxes2d"]),
        h.make_node("Gather", ["boxes2d", "box_idx"], ["det_boxes"], axis=0),
        h.make_node("GatherND", ["scores", "selected"], ["det_scores"]),
    ]
    rng = np.random.default_rng(7)
    anchors = rng.uniform(0, 1, (1, N_BOXES, 4)).astype(np.float32)
    anchors[..., 2:] = anchors[..., :2] + 0.3 if not center else 0.3
    inits = [_init("anchors", anchors), _init("max_out", [40], np.int64), _init("iou", [0.4], np.float32),
             _init("score_thr", [0.7], np.float32), _init("col2", 2, np.int64), _init("zero", [0], np.int64)]
    return make_model(nodes, [vi("deltas", [1, N_BOXES, 4]), vi("logits", [1, N_CLASSES, N_BOXES])],
                      [vi("selected", None, TP.INT64), vi("det_boxes", None), vi("det_scores", None)],
                      opset=17, initializers=inits)


def _detector_feeds(seed: int, bias: float):
    rng = np.random.default_rng(seed)
    return {"deltas": rng.normal(0, 0.05, (1, N_BOXES, 4)).astype(np.float32),
            "logits": (rng.normal(0, 1, (1, N_CLASSES, N_BOXES)) + bias).astype(np.float32)}


def _staged(rt):
    return [p["staged"] for p in rt.memory_stats()["plans"] if "staged" in p]


@pytest.mark.parametrize("center, matrix", [(0, True), (1, True), (0, False)])
def test_detector_with_nms_matches_onnxruntime(center, matrix, monkeypatch):
    from edge_infer.backends.cpu.kernels import dynamic
    if not matrix:                       # the one-IoU-row-per-kept-box path of many candidates
        monkeypatch.setattr(dynamic, "MATRIX_NMS_MAX", 0)
    model = _detector(center)
    rt = Runtime(load_onnx(model.SerializeToString()), backend="auto", threads=1)
    counts = []
    for seed, bias in [(0, -1.5), (1, 0.0), (2, 1.5), (0, -1.5), (3, -6.0)]:
        feeds = _detector_feeds(seed, bias)
        want = ort_run(model, feeds)
        got = rt.run(feeds)
        np.testing.assert_array_equal(got["selected"], want["selected"])
        np.testing.assert_allclose(got["det_boxes"], want["det_boxes"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got["det_scores"], want["det_scores"], rtol=1e-6, atol=1e-6)
        counts.append(len(want["selected"]))
    assert len(set(counts)) >= 3, f"inputs should give different detection counts, got {counts}"
    st = _staged(rt)[0]
    assert st["kind"] == "data" and st["cut"] == "NonMaxSuppression_2"
    # one rest plan per distinct detection count; the repeated input re-used its plan
    assert st["replans"] == len(set(counts)) and st["reuses"] == len(counts) - len(set(counts))
    assert sorted(k["shapes"]["selected"][0] for k in st["keys"]) == sorted(set(counts))
    report = rt.backend_report()
    assert report["choice"] == "cpu" and "data-dependent size" in report["data_dependent"]["selected"]
    assert "planned in stages" in format_report(report)


def test_data_dependent_outputs_live_in_the_dynamic_pool():
    model = _detector()
    rt = Runtime(load_onnx(model.SerializeToString()), backend="cpu", threads=1)
    rt.run(_detector_feeds(1, 0.0))
    ex = rt.plan({"deltas": (1, N_BOXES, 4), "logits": (1, N_CLASSES, N_BOXES)})
    rest = next(iter(ex._plans.values()))

    def in_pool(arr):
        return any(mem.ctypes.data <= arr.ctypes.data < mem.ctypes.data + mem.nbytes
                   for _, mem in DYNAMIC_POOL.chunks)
    # `selected` (data-dependent size) lives in the rest plan's arena, a block of the dynamic pool
    assert "selected" in rest.graph.inputs and rest.arena_plan.release is not None
    assert in_pool(rest.buffers["selected"]) and in_pool(rest.buffers["det_boxes"])
    assert not in_pool(ex.head.buffers["boxes"])        # the static head keeps its own arena


def _value_graph():
    """Reshape target, Pad pads and Range bounds computed from graph inputs."""
    nodes = [
        h.make_node("Concat", ["rows", "minus1"], ["target"], axis=0),
        h.make_node("Reshape", ["x", "target"], ["reshaped"]),
        h.make_node("Mul", ["p", "two"], ["pads"]),
        h.make_node("Pad", ["reshaped", "pads", "padval"], ["padded"], mode="constant"),
        h.make_node("Add", ["limit", "one"], ["limit1"]),
        h.make_node("Range", ["zero", "limit1", "one"], ["ramp"]),
        h.make_node("Cast", ["ramp"], ["rampf"], to=TP.FLOAT),
        h.make_node("ReduceSum", ["padded"], ["total"], keepdims=0),
        h.make_node("Mul", ["rampf", "total"], ["scaled"]),
    ]
    inits = [_init("minus1", [-1], np.int64), _init("two", 2, np.int64), _init("padval", 0.5, np.float32),
             _init("one", 1, np.int64), _init("zero", 0, np.int64)]
    return make_model(nodes, [vi("x", [4, 6]), vi("rows", [1], TP.INT64), vi("p", [4], TP.INT64),
                              vi("limit", [], TP.INT64)],
                      [vi("padded", None), vi("scaled", None)], opset=17, initializers=inits)


def test_value_dependent_reshape_pad_range_match_onnxruntime():
    model = _value_graph()
    rt = Runtime(load_onnx(model.SerializeToString()), backend="auto", threads=1)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    cases = [([2], [0, 1, 1, 0], 3), ([3], [1, 0, 0, 2], 5), ([2], [0, 1, 1, 0], 3), ([8], [0, 0, 0, 0], 0)]
    for rows, p, limit in cases:
        feeds = {"x": x, "rows": np.array(rows, np.int64), "p": np.array(p, np.int64),
                 "limit": np.array(limit, np.int64)}
        want, got = ort_run(model, feeds), rt.run(feeds)
        for name in ("padded", "scaled"):
            assert got[name].shape == want[name].shape
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6)
    st = _staged(rt)[0]
    assert st["kind"] == "values" and st["replans"] == 3 and st["reuses"] == 1
    assert set(rt.backend_report()["data_dependent"]) >= {"target", "pads"}


def test_topk_with_runtime_and_computed_k_matches_onnxruntime():
    nodes = [
        h.make_node("TopK", ["x", "k"], ["v1", "i1"], axis=1),
        h.make_node("Greater", ["x", "half"], ["big"]),
        h.make_node("Cast", ["big"], ["bigi"], to=TP.INT64),
        h.make_node("ReduceSum", ["bigi"], ["nbig"], keepdims=1),
        h.make_node("Reshape", ["nbig", "one"], ["k2"]),
        h.make_node("Reshape", ["x", "flat"], ["xf"]),
        h.make_node("TopK", ["xf", "k2"], ["v2", "i2"], largest=0),
    ]
    model = make_model(nodes, [vi("x", [3, 10]), vi("k", [1], TP.INT64)],
                       [vi("v1", None), vi("i1", None, TP.INT64), vi("v2", None), vi("i2", None, TP.INT64)],
                       opset=17, initializers=[_init("half", 0.5, np.float32), _init("one", [1], np.int64),
                                               _init("flat", [-1], np.int64)])
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1)
    rng = np.random.default_rng(3)
    for k, lo in [(2, 0.0), (5, 0.3), (2, 0.45), (10, 0.0)]:
        feeds = {"x": rng.uniform(lo, 1, (3, 10)).astype(np.float32), "k": np.array([k], np.int64)}
        want, got = ort_run(model, feeds), rt.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_nonzero_feeding_gather_matches_onnxruntime():
    nodes = [h.make_node("NonZero", ["m"], ["nz"]),
             h.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
             h.make_node("GatherND", ["x", "nzt"], ["picked"]),
             h.make_node("ScatterND", ["x", "nzt", "picked_neg"], ["cleared"], reduction="mul"),
             h.make_node("Neg", ["picked"], ["picked_neg"])]
    model = make_model(nodes, [vi("m", [4, 5], TP.BOOL), vi("x", [4, 5])],
                       [vi("picked", None), vi("cleared", None)], opset=18)
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1)
    rng = np.random.default_rng(0)
    for density in (0.1, 0.5, 0.0, 1.0):
        feeds = {"m": rng.uniform(size=(4, 5)) < density, "x": rng.normal(size=(4, 5)).astype(np.float32)}
        want, got = ort_run(model, feeds), rt.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_plan_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(staged, "MAX_PLANS", 4)
    nodes = [h.make_node("Range", ["zero", "n", "one"], ["r"])]
    model = make_model(nodes, [vi("n", [], TP.INT64)], [vi("r", None, TP.INT64)], opset=17,
                       initializers=[_init("zero", 0, np.int64), _init("one", 1, np.int64)])
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1)
    for n in list(range(1, 8)) + [7, 1]:
        np.testing.assert_array_equal(rt.run({"n": np.array(n, np.int64)})["r"], np.arange(n))
    st = _staged(rt)[0]
    # 7 values, then 7 (cached) and 1 (evicted long ago: planned again)
    assert st["cached"] == 4 and st["replans"] == 8 and st["reuses"] == 1


def test_plans_kept_fit_the_memory_limit():
    nodes = [h.make_node("Expand", ["x", "n"], ["e"]), h.make_node("Add", ["e", "x"], ["y"])]
    model = make_model(nodes, [vi("x", [1]), vi("n", [1], TP.INT64)], [vi("y", None)], opset=17)
    limit = 40_000
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1, memory_limit=limit)
    x = np.array([1.5], np.float32)
    for n in (1000, 2000, 3000, 1000):            # 8-24 KB arenas: not all fit 40 KB together
        np.testing.assert_array_equal(rt.run({"x": x, "n": np.array([n])})["y"], np.full(n, 3.0, np.float32))
    st = _staged(rt)[0]
    assert st["held_bytes"] <= limit and st["cached"] < 3 and st["replans"] == 4


def test_other_backends_partition_or_refuse_cleanly():
    """Asked for another backend, the picker partitions (the data-dependent part on the CPU) or
    refuses with an EdgeInferError; coverage never raises and leaves those nodes to the CPU."""
    from edge_infer.errors import EdgeInferError
    g = specialize(load_onnx(_detector().SerializeToString()),
                   {"deltas": (1, N_BOXES, 4), "logits": (1, N_CLASSES, N_BOXES)})
    for name in BACKENDS:
        if name == "cpu":
            continue
        try:
            choice = pick(g, name)
        except EdgeInferError as e:
            assert "not available" in str(e) or "run-time values" in str(e), str(e)
            continue
        assert choice.plan is not None            # a partition: the NMS and what it feeds on cpu
        on = {n: b for n, b in choice.plan.assignment.items()}
        assert on["NonMaxSuppression_2"] == on["GatherND_6"] == "cpu"
    for name, factory in BACKENDS.items():
        try:
            b = factory()
        except Exception:   # noqa: BLE001  (a backend whose dependency is missing here)
            continue
        if name != "cpu" and b.available()[0]:
            cov = coverage(b, g)
            assert cov["unsupported"].get("NonMaxSuppression") == 1 and cov["unsupported"].get("GatherND") == 1
            for n in g.nodes:
                assert b.supports(n, g) in (True, False)


def test_backbone_on_opencl_nms_on_cpu_matches_onnxruntime():
    """A conv backbone partitioned onto OpenCL, the NMS after it planned in stages on the CPU.
    Weights and inputs are multiples of 1/4: every sum is exact, so selections match exactly."""
    from edge_infer.backends.opencl import OpenCLBackend
    ok, why = OpenCLBackend().available()
    if not ok:
        pytest.skip(f"OpenCL: {why}")
    side, ch = 16, 16
    rng = np.random.default_rng(0)
    inits = [_init(n, rng.integers(-2, 3, s) * 0.25, np.float32)
             for n, s in (("w1", (ch, 4, 3, 3)), ("wb", (4, ch, 1, 1)), ("ws", (3, ch, 1, 1)))]
    inits += [_init("bshape", [1, 4, side * side], np.int64), _init("sshape", [1, 3, side * side], np.int64),
              _init("max_out", [10], np.int64), _init("iou", [0.5], np.float32), _init("thr", [1.0], np.float32)]
    nodes = [h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "wb"], ["cb"]), h.make_node("Reshape", ["cb", "bshape"], ["b3"]),
             h.make_node("Transpose", ["b3"], ["boxes"], perm=[0, 2, 1]),
             h.make_node("Conv", ["r1", "ws"], ["cs"]), h.make_node("Reshape", ["cs", "sshape"], ["scores"]),
             h.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["sel"]),
             h.make_node("GatherND", ["scores", "sel"], ["det_scores"])]
    model = make_model(nodes, [vi("x", [1, 4, side, side])], [vi("sel", None, TP.INT64), vi("det_scores", None)],
                       opset=17, initializers=inits)
    rt = Runtime(load_onnx(model.SerializeToString()), backend="opencl", threads=1)
    counts = set()
    for seed in range(3):
        x = (np.random.default_rng(seed).integers(0, 3, (1, 4, side, side)) * 0.5).astype(np.float32)
        want, got = ort_run(model, {"x": x}), rt.run({"x": x})
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
        counts.add(len(want["sel"]))
    assert rt.backend.name == "opencl+cpu" and len(counts) > 1
    assert "planned in stages" in rt.backend_report()["why"]


def test_runtime_index_out_of_range_is_an_input_error():
    model = make_model([h.make_node("GatherND", ["x", "i"], ["y"])], [vi("x", [3, 4]), vi("i", [2, 2], TP.INT64)],
                       [vi("y", None)], opset=17)
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(rt.run({"x": x, "i": np.array([[0, 1], [-1, -1]])})["y"], [1, 11])
    with pytest.raises(InputError, match="GatherND"):
        rt.run({"x": x, "i": np.array([[3, 0], [0, 0]])})


def test_artifact_round_trip_and_inspect(tmp_path):
    import edge_infer
    from edge_infer.cli import inspect_artifact
    src, out = tmp_path / "det.onnx", tmp_path / "det.eim"
    src.write_bytes(_detector().SerializeToString())
    edge_infer.convert(str(src), str(out))
    rt = Runtime(str(out), threads=1)
    feeds = _detector_feeds(2, 1.5)
    want, got = ort_run(_detector(), feeds), rt.run(feeds)
    np.testing.assert_array_equal(got["selected"], want["selected"])
    np.testing.assert_allclose(got["det_boxes"], want["det_boxes"], rtol=1e-6, atol=1e-6)
    dd = inspect_artifact(str(out))["memory"]["data_dependent"]
    assert "data-dependent size" in dd["selected"] and "det_boxes" in dd


def test_symbolic_batch_with_data_dependent_size():
    model = make_model([h.make_node("NonZero", ["x"], ["nz"]), h.make_node("Transpose", ["nz"], ["idx"])],
                       [vi("x", ["N", 5])], [vi("idx", None, TP.INT64)], opset=17)
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1)
    rng = np.random.default_rng(1)
    for n in (2, 3, 2, 6):
        x = (rng.uniform(size=(n, 5)) > 0.6).astype(np.float32)
        np.testing.assert_array_equal(rt.run(x)["idx"], np.argwhere(x))
    # a plan per batch size, in the run slot's block (a larger batch grows it and drops the others)
    plans = rt.memory_stats()["plans"]
    assert rt.dynamic and [6, 5] in [p["input_shapes"][0] for p in plans] and all("staged" in p for p in plans)


def test_run_time_shape_values_are_validated():
    from edge_infer.errors import GraphError
    nodes = [h.make_node("Expand", ["x", "s"], ["y"])]
    model = make_model(nodes, [vi("x", [1, 1]), vi("s", [2], TP.INT64)], [vi("y", None)], opset=17)
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1)
    assert rt.run({"x": np.ones((1, 1), np.float32), "s": np.array([2, 3])})["y"].shape == (2, 3)
    with pytest.raises(GraphError, match="would allocate"):  # 2^42 elements: refused before numpy
        rt.run({"x": np.ones((1, 1), np.float32), "s": np.array([1 << 21, 1 << 21])})
    with pytest.raises(GraphError, match="Expand_0.*negative"):   # the op's schema, as at load
        rt.run({"x": np.ones((1, 1), np.float32), "s": np.array([2, -3])})


def test_data_dependent_op_on_constants_folds(tmp_path):
    import edge_infer
    mask = np.array([[0, 1, 0], [1, 1, 0]], np.float32)
    nodes = [h.make_node("NonZero", ["m"], ["nz"]), h.make_node("ReduceSum", ["nz"], ["s"], keepdims=0),
             h.make_node("Cast", ["s"], ["sf"], to=TP.FLOAT), h.make_node("Mul", ["x", "sf"], ["y"])]
    model = make_model(nodes, [vi("x", [2])], [vi("y", [2])], opset=17, initializers=[_init("m", mask)])
    src, out = tmp_path / "c.onnx", tmp_path / "c.eim"
    src.write_bytes(model.SerializeToString())
    edge_infer.convert(str(src), str(out))
    rt = Runtime(str(out), threads=1)
    x = np.array([1, 2], np.float32)
    np.testing.assert_allclose(rt.run(x)["y"], ort_run(model, {"x": x})["y"])
    assert not _staged(rt)          # NonZero of a constant folded at convert time: a plain plan


@pytest.mark.parametrize("sorted_, axis", [(1, None), (0, None), (1, 0), (0, 1)])
def test_unique_then_computed_crop_matches_onnxruntime(sorted_, axis):
    """Unique's outputs (data-dependent size) feed later ops, and a CenterCropPad whose target
    size is computed from the number of unique values."""
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    nodes = [h.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs),
             h.make_node("Mul", ["y", "two"], ["y2"]),
             h.make_node("Shape", ["counts"], ["n"]),
             h.make_node("Concat", ["n", "n"], ["crop"], axis=0),
             h.make_node("CenterCropPad", ["img", "crop"], ["cropped"])]
    model = make_model(nodes, [vi("x", [6, 4]), vi("img", [5, 7])],
                       [vi("y2", None), vi("first", None, TP.INT64), vi("inverse", None, TP.INT64),
                        vi("counts", None, TP.INT64), vi("cropped", None)],
                       opset=18, initializers=[_init("two", 2.0, np.float32)])
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1)
    rng = np.random.default_rng(5)
    for levels in (2, 3, 1):
        feeds = {"x": rng.integers(0, levels, (6, 4)).astype(np.float32),
                 "img": rng.normal(size=(5, 7)).astype(np.float32)}
        want, got = ort_run(model, feeds), rt.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("op, inputs, shapes", [
    ("ScatterND", ["x", "i", "u"], {"x": [4, 3], "i": [2, 1], "u": [2, 2]}),
    ("ScatterElements", ["x", "i", "u"], {"x": [4, 3], "i": [2, 3], "u": [2, 2]}),
    ("GatherND", ["x", "i"], {"x": [4, 3], "i": [2, 3]}),
])
def test_mismatched_index_inputs_are_refused(op, inputs, shapes):
    from edge_infer.errors import EdgeInferError
    dt = {"x": TP.FLOAT, "u": TP.FLOAT, "i": TP.INT64}
    model = make_model([h.make_node(op, inputs, ["y"])], [vi(n, shapes[n], dt[n]) for n in inputs],
                       [vi("y", None)], opset=18)
    feeds = {n: np.zeros(shapes[n], np.int64 if n == "i" else np.float32) for n in inputs}
    with pytest.raises(EdgeInferError, match=op):
        Runtime(load_onnx(model.SerializeToString()), threads=1).run(feeds)


def test_concurrent_runs_with_different_values():
    import threading
    model = _value_graph()
    rt = Runtime(load_onnx(model.SerializeToString()), threads=1)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    cases = [([2], [0, 1, 1, 0], 3), ([3], [1, 0, 0, 2], 5), ([4], [0, 0, 1, 1], 1), ([6], [2, 2, 2, 2], 7)]
    feeds = [{"x": x, "rows": np.array(r, np.int64), "p": np.array(p, np.int64), "limit": np.array(n, np.int64)}
             for r, p, n in cases]
    want = [ort_run(model, f) for f in feeds]
    errors = []

    def worker(k):
        try:
            for _ in range(20):
                got = rt.run(feeds[k])
                for name in ("padded", "scaled"):
                    np.testing.assert_allclose(got[name], want[k][name], rtol=1e-6)
        except Exception as e:   # noqa: BLE001  (reported below)
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k % 4,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
