"""Partitioning a graph across backends: segments, cut tensors, the compute-to-transfer rule,
and partitioned runs equal to single-backend runs (digits fp32/int8, a light model, OpenCL)."""
import numpy as np
import pytest

from edge_infer.backends import BACKENDS
from edge_infer.backends.cpu import CpuBackend
from edge_infer.backends.partition import (PartitionedBackend, PartitionedExecutable, assign, format_plan,
                                           plan_partition, schedule, split, subgraph)
from edge_infer.backends.throughput import running_nodes
from edge_infer.errors import UnsupportedOpError
from edge_infer.ir import Graph
from edge_infer.runtime import Runtime, specialize


class SubsetBackend(CpuBackend):
    """The real CPU backend declaring only ``ops``: it refuses to prepare anything else."""

    def __init__(self, ops, name="subset"):
        self.ops = set(ops)
        self.name = name

    def supported_ops(self):
        return sorted(self.ops)

    def supports(self, node, graph):
        return node.op in self.ops

    def prepare(self, graph, threads=None, **options):
        bad = [n.op for n in running_nodes(graph) if n.op not in self.ops]
        if bad:
            raise UnsupportedOpError(f"{self.name} lacks {bad}")
        return super().prepare(graph, threads, **options)


def profile(scale=1.0, transfer=1e10):
    """A throughput profile ``scale`` times the nominal CPU one."""
    return {"op_s": 1e-6 / scale, "run_s": 2e-6 / scale, "memory": 2e10 * scale, "dense": 1e11 * scale,
            "grouped": 3e9 * scale, "int8_dense": 6e10 * scale, "int8_memory": 6e10 * scale, "transfer": transfer}


CPU = CpuBackend()
ALL_OPS = None


def small_graph():
    """x -> Conv -> Relu -> MaxPool -> Conv -> y, plus a side branch Sigmoid(x) -> s."""
    rng = np.random.default_rng(0)
    g = Graph("small")
    g.add_input("x", "float32", (1, 4, 16, 16))
    g.add_const("w1", rng.standard_normal((8, 4, 3, 3)).astype(np.float32))
    g.add_const("w2", rng.standard_normal((8, 8, 1, 1)).astype(np.float32))
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1, auto_pad="NOTSET")
    g.add_node("Conv", ["x", "w1"], ["c1"], name="conv1", **conv)
    g.add_node("Relu", ["c1"], ["r1"], name="relu1")
    g.add_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0],
               dilations=[1, 1], ceil_mode=0, auto_pad="NOTSET", storage_order=0)
    g.add_node("Conv", ["p1", "w2"], ["y"], name="conv2", **dict(conv, kernel_shape=[1, 1], pads=[0, 0, 0, 0]))
    g.add_node("Sigmoid", ["x"], ["s"], name="sig")
    g.outputs = ["y", "s"]
    return specialize(g, {"x": (1, 4, 16, 16)})


def test_segments_and_cuts_on_a_small_graph():
    g = small_graph()
    sub = SubsetBackend({"Conv", "MaxPool", "Sigmoid"})
    a = assign(g, sub, CPU)
    assert a == {"conv1": "subset", "relu1": "cpu", "pool1": "subset", "conv2": "subset", "sig": "subset"}
    order = schedule(g, a)
    segs = split(g, order, a)
    # the ready Sigmoid joins the first subset segment instead of opening a fourth one
    assert [(s.backend, [n.name for n in s.nodes]) for s in segs] == [
        ("subset", ["conv1", "sig"]), ("cpu", ["relu1"]), ("subset", ["pool1", "conv2"])]
    assert segs[0].inputs == ["x"] and segs[0].outputs == ["c1", "s"]
    assert segs[1].inputs == ["c1"] and segs[1].outputs == ["r1"]
    assert segs[2].inputs == ["r1"] and segs[2].outputs == ["y"]
    sg = subgraph(g, segs[2], 2)
    assert sg.inputs == ["r1"] and sg.outputs == ["y"] and [n.op for n in sg.nodes] == ["MaxPool", "Conv"]
    assert sg.tensors["w2"].data is g.tensors["w2"].data           # weights shared, not copied
    sg.validate()
    plan = plan_partition(g, sub, CPU, {"subset": profile(10), "cpu": profile()}, min_ratio=0, require_gain=False)
    c1, s = 8 * 16 * 16 * 4, 4 * 16 * 16 * 4
    assert plan.segments[0].cut_bytes == 4 * 16 * 16 * 4 + c1 + s
    assert plan.segments[1].transfer_s == 0                           # cpu side of a cut: counted on the accelerator
    assert plan.segments[0].transfer_s == pytest.approx(plan.segments[0].cut_bytes / 1e10)
    assert plan.name == "subset+cpu" and plan.offloaded
    assert "ratio" in format_plan(plan) and "MaxPool x1" in format_plan(plan)


def test_compute_to_transfer_rule():
    g = small_graph()
    sub = SubsetBackend({"Conv", "MaxPool", "Sigmoid"})
    # a fast device behind a fast link: both subset segments are worth it
    fast = plan_partition(g, sub, CPU, {"subset": profile(50, transfer=1e13), "cpu": profile()})
    assert [s.backend for s in fast.segments].count("subset") == 2 and not fast.demoted
    assert all(s.ratio >= 5 for s in fast.segments if s.backend == "subset")
    # a slow link: the ratio falls under 5:1, everything stays on the CPU, and the plan says why
    slow = plan_partition(g, sub, CPU, {"subset": profile(50, transfer=1e8), "cpu": profile()})
    assert [s.backend for s in slow.segments] == ["cpu"] and not slow.offloaded
    assert len(slow.demoted) == 2 and all("ratio" in d for d in slow.demoted)
    # a fast link but a slower device: offloading does not pay
    slower = plan_partition(g, sub, CPU, {"subset": profile(0.2, transfer=1e13), "cpu": profile()})
    assert not slower.offloaded and "not faster" in slower.demoted[0]
    # the threshold is a parameter: the same slow link at 0:1 keeps the work offloaded
    forced = plan_partition(g, sub, CPU, {"subset": profile(50, transfer=1e8), "cpu": profile()},
                            min_ratio=0, require_gain=False)
    assert forced.offloaded


def test_uncovered_op_is_a_clear_error():
    g = small_graph()
    with pytest.raises(UnsupportedOpError, match="Relu x1"):
        assign(g, SubsetBackend({"Conv"}), SubsetBackend({"MaxPool", "Sigmoid"}, "other"))


def run_both(graph, feeds, sub, profiles=None):
    """(single-backend CPU outputs, partitioned outputs, the executable) on a specialized graph."""
    plan = plan_partition(graph, sub, CPU, profiles or {"subset": profile(10), "cpu": profile()},
                          min_ratio=0, require_gain=False)
    ex = PartitionedBackend(plan, {sub.name: sub, "cpu": CPU}).prepare(graph, threads=1)
    assert isinstance(ex, PartitionedExecutable)
    ref = CPU.prepare(graph, threads=1).run(feeds)
    return ref, ex.run(feeds), ex, plan


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from edge_infer import convert
    from edge_infer.data import digits_model_path, load_digits_samples
    d = tmp_path_factory.mktemp("part")
    fp32, int8 = str(d / "fp32.eim"), str(d / "int8.eim")
    convert(digits_model_path(), fp32)
    x, _ = load_digits_samples()
    np.save(d / "calib.npy", x[:32])
    convert(digits_model_path(), int8, quantize="int8", calib=str(d / "calib.npy"))
    return {"fp32": fp32, "int8": int8, "x": x[:4]}


@pytest.mark.parametrize("kind", ["fp32", "int8"])
def test_partitioned_run_equals_single_backend_on_digits(digits, kind):
    rt = Runtime(digits[kind], backend="cpu")
    g = specialize(rt.graph, {"input": (4, 1, 8, 8)})
    ops = sorted({n.op for n in running_nodes(g)})
    # every other op type goes to the subset backend: the most cuts this graph can have
    sub = SubsetBackend(ops[::2])
    ref, out, ex, plan = run_both(g, {"input": digits["x"]}, sub)
    assert len(plan.segments) >= 3 and {s.backend for s in plan.segments} == {"subset", "cpu"}
    for k in ref:
        np.testing.assert_array_equal(out[k], ref[k])
    assert np.array_equal(out["logits"], rt.run(digits["x"])["logits"])
    outs, times = ex.run_profiled({"input": digits["x"]})
    np.testing.assert_array_equal(outs["logits"], ref["logits"])
    # every op is timed, but those a CPU part ran inside another node's step (an int8 stem that
    # quantizes the input itself: fuse_int8_input.py; table activations; squeeze-excite blocks)
    inside = {name for _, part in ex.parts
              for folded in (getattr(part, "fused_inputs", {}), getattr(part, "fused", {}))
              for name in folded} | {name for _, part in ex.parts
                                     for block in getattr(part, "fused_se", {}).values() for name in block}
    timed = {op for _, op, _ in times} | {n.op for n in running_nodes(g) if n.name in inside}
    assert timed >= set(ops) | {"Transfer"}


@pytest.mark.slow
def test_partitioned_run_equals_single_backend_on_a_light_model():
    pytest.importorskip("onnx")
    from onnx_models import randomized_light_model_path
    from edge_infer.frontends.onnx import load_onnx
    from edge_infer.passes import optimize
    g = load_onnx(randomized_light_model_path("squeezenet"))
    optimize(g, 3)
    name = g.inputs[0]
    shape = tuple(d if isinstance(d, int) else 1 for d in g.tensors[name].shape)
    sg = specialize(g, {name: shape})
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    sub = SubsetBackend({n.op for n in running_nodes(sg)} - {"Concat", "MaxPool"})
    ref, out, _, plan = run_both(sg, {name: x}, sub)
    assert len(plan.segments) > 4
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-6, atol=1e-6)


class HidingBackend:
    """A real backend with some ops hidden (so a partition with the CPU is needed)."""

    def __init__(self, inner, hidden):
        self.inner, self.hidden, self.name = inner, set(hidden), inner.name

    def available(self):
        return self.inner.available()

    def supported_ops(self):
        return [o for o in self.inner.supported_ops() if o not in self.hidden]

    def supports(self, node, graph):
        return node.op not in self.hidden and self.inner.supports(node, graph)

    def prepare(self, graph, threads=None, **options):
        return self.inner.prepare(graph, threads=threads, **options)


@pytest.mark.parametrize("kind", ["fp32", "int8"])
def test_partition_with_the_real_opencl_backend(digits, kind):
    if "opencl" not in BACKENDS:
        pytest.skip("the OpenCL backend is not registered in this tree")
    ocl = BACKENDS["opencl"]()
    ok, why = ocl.available()
    if not ok:
        pytest.skip(f"OpenCL unavailable: {why}")
    g = specialize(Runtime(digits[kind], backend="cpu").graph, {"input": (4, 1, 8, 8)})
    covered = [n for n in running_nodes(g) if ocl.supports(n, g)]
    if not covered:
        pytest.skip(f"the OpenCL backend covers no {kind} digits op yet")
    hidden = {n.op for n in running_nodes(g) if n.op in ("MaxPool", "Relu", "Flatten", "Reshape")}
    hb = HidingBackend(ocl, hidden)
    plan = plan_partition(g, hb, CPU, {"opencl": profile(), "cpu": profile()}, min_ratio=0, require_gain=False)
    assert plan.offloaded and "cpu" in {s.backend for s in plan.segments}
    ex = PartitionedBackend(plan, {"opencl": ocl, "cpu": CPU}).prepare(g, threads=1)
    ref = CPU.prepare(g, threads=1).run({"input": digits["x"]})
    out = ex.run({"input": digits["x"]})
    if kind == "int8":
        np.testing.assert_array_equal(out["logits"], ref["logits"])
    else:
        np.testing.assert_allclose(out["logits"], ref["logits"], rtol=1e-4, atol=1e-5)
