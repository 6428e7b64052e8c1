"""int8 table activations fused into the int8 conv that feeds them (backends/cpu/
fuse_int8_activation.py; the ``lut`` epilogue of native/src/int8_gemm.c and depthwise.c, the
numpy kernels' ``clamp_store``): a plan with the pair fused gives the bytes of the plan with two
steps, native and numpy, on every GEMM path (pointwise, im2col, narrow, depthwise NHWC and
NCHW, residual, Relu clamp) and on whole family graphs; the kernels follow the independent
reference (tests/int8_reference.py: conv loops, then TFLite's table); the saved graph is
untouched, and inspect lists the fused activations.
"""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import int8_reference as ref
from edge_infer.backends.cpu import CpuBackend, native
from edge_infer.backends.cpu import fuse_int8_activation as fusion
from edge_infer.ir import Graph
from edge_infer.runtime import specialize
from test_native_int8_ops import qd

sys.path.insert(0, os.path.dirname(__file__))
SETTINGS = dict(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

ACTIVATIONS = {
    "HardSwish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
    "HardSigmoid": lambda v: np.clip(v * 0.2 + 0.5, 0, 1),
    "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "SiLU": lambda v: v / (1 + np.exp(-v)),
    "Tanh": np.tanh,
    "LeakyRelu": lambda v: np.where(v >= 0, v, 0.1 * v),
}
#: output parameters of the activations whose range TFLite fixes
FIXED_OUT = {"Sigmoid": (1 / 256, -128), "Tanh": (1 / 128, 0)}


@pytest.fixture(params=[-1, 1, 0], ids=["simd", "avx2", "scalar"])
def isa(request):
    """The ISA features the native kernels may use: all, AVX2 only (its GEMM kind and the
    scalar table loop), none."""
    if native.lib is None:
        yield None
        return
    if request.param == 1 and not native.features().get("avx2"):
        pytest.skip("no AVX2")
    old = native.set_isa_mask(request.param)
    yield request.param
    native.set_isa_mask(old)


def plan(make, feeds, *, native_on: bool, fuse: bool, monkeypatch, threads: int = 2):
    """(plan, outputs) of the graph ``make()`` on the CPU backend."""
    g = specialize(make(), {k: v.shape for k, v in feeds.items()})
    with monkeypatch.context() as m:
        m.setattr(fusion, "ENABLED", fuse)
        if not native_on:
            m.setattr(native, "lib", None)
        ex = CpuBackend().prepare(g, threads=threads)
        return ex, ex.run(feeds)


def conv_act_graph(x, xq, w, ws, bias, midq, yq, *, op, attrs, stride, pad, group, nhwc, relu=False, z=None, zq=None,
                   extra_reader=False, gate=None):
    """x -> Conv (FusedConv with Relu and / or residual z) -> ``op`` -> y (int8 NCHW or NHWC).
    ``gate`` = (hq, gate_first[, requant]): ``op`` writes h (parameters hq) and y = Mul(mid, h) (or
    Mul(h, mid), requantized in mode ``requant``): HardSwish / SiLU as onnxruntime's QDQ quantizer
    writes them."""
    def make():
        g = Graph("conv_act")
        g.add_input("x", "int8", x.shape).quant = qd(*xq)
        g.add_const("w", w).quant = {"scale": [float(v) for v in ws], "zero_point": [0] * len(ws), "axis": 0}
        g.add_const("b", bias)
        k = w.shape[2]
        cattrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4, "group": group}
        if nhwc:
            cattrs["data_layout"] = "NHWC"
        ins = ["x", "w", "b"]
        if relu or z is not None:
            cattrs.update(activation="Relu" if relu else "", activation_params=[])
            if z is not None:
                g.add_input("z", "int8", z.shape).quant = qd(*zq)
                ins.append("z")
        g.add_node("FusedConv" if relu or z is not None else "Conv", ins, ["mid"], **cattrs)
        g.tensors["mid"].quant = qd(*midq)
        if gate is None:
            g.add_node(op, ["mid"], ["y"], **attrs)
        else:
            g.add_node(op, ["mid"], ["h"], **attrs)
            g.tensors["h"].quant = qd(*gate[0])
            g.add_node("Mul", ["h", "mid"] if gate[1] else ["mid", "h"], ["y"],
                       requant=gate[2] if len(gate) > 2 else "fixed")
        g.tensors["y"].quant = qd(*yq)
        g.outputs = ["y"] + (["mid"] if extra_reader else [])
        return g
    return make


@settings(**SETTINGS)
@given(op=st.sampled_from(sorted(ACTIVATIONS)), c=st.integers(1, 40), m=st.integers(1, 70), hw=st.integers(1, 12),
       k=st.sampled_from([1, 3, 5]), stride=st.integers(1, 2), depthwise=st.booleans(), nhwc=st.booleans(),
       relu=st.booleans(), residual=st.booleans(), seed=st.integers(0, 2 ** 16))
@example(op="HardSwish", c=16, m=72, hw=12, k=1, stride=1, depthwise=False, nhwc=True, relu=False, residual=False,
         seed=1).via("pointwise, AMX / VNNI panels of 32 channels")
@example(op="Sigmoid", c=8, m=1, hw=10, k=3, stride=1, depthwise=False, nhwc=True, relu=False, residual=False,
         seed=2).via("one output channel: the narrow rows kernel")
@example(op="HardSigmoid", c=40, m=40, hw=9, k=5, stride=1, depthwise=True, nhwc=True, relu=False, residual=False,
         seed=3).via("depthwise 5x5 on quads")
@example(op="HardSwish", c=24, m=24, hw=11, k=3, stride=2, depthwise=True, nhwc=True, relu=True, residual=False,
         seed=4).via("depthwise 3x3 stride 2, Relu clamp before the table")
@example(op="SiLU", c=12, m=33, hw=7, k=3, stride=1, depthwise=False, nhwc=True, relu=False, residual=True,
         seed=5).via("im2col with a residual: the table after the residual add")
@example(op="Tanh", c=6, m=6, hw=9, k=3, stride=1, depthwise=True, nhwc=False, relu=False, residual=False,
         seed=6).via("NCHW depthwise")
@example(op="HardSwish", c=96, m=96, hw=14, k=5, stride=1, depthwise=True, nhwc=True, relu=False, residual=False,
         seed=8).via("depthwise quads at 2 threads on few rows: equal row runs")
@example(op="HardSigmoid", c=72, m=72, hw=7, k=5, stride=1, depthwise=True, nhwc=True, relu=True, residual=True,
         seed=9).via("... with a residual and 5 groups")
@example(op="LeakyRelu", c=5, m=9, hw=8, k=1, stride=1, depthwise=False, nhwc=False, relu=False, residual=False,
         seed=7).via("NCHW output planes")
def test_fused_conv_activation_is_bit_exact(monkeypatch, isa, op, c, m, hw, k, stride, depthwise, nhwc, relu,
                                            residual, seed):
    rng = np.random.default_rng(seed)
    if depthwise:
        m = c
    group = c if depthwise and c > 1 else 1
    if depthwise and c == 1:
        depthwise = False
    cg = c // group
    pad = k // 2
    oh = (hw + 2 * pad - k) // stride + 1
    x = rng.integers(-128, 128, (1, c, hw, hw), dtype=np.int8)
    w = rng.integers(-127, 128, (m, cg, k, k), dtype=np.int8)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    ws = rng.uniform(0.002, 0.02, m).astype(np.float32)
    xq = (0.05, int(rng.integers(-20, 20)))
    midq = (float(rng.uniform(0.03, 0.3)), int(rng.integers(-30, 30)))
    yq = FIXED_OUT.get(op, (float(rng.uniform(0.01, 0.1)), int(rng.integers(-60, 60))))
    z = rng.integers(-128, 128, (1, m, oh, oh), dtype=np.int8) if residual else None
    zq = (0.07, int(rng.integers(-10, 10)))
    attrs = {"alpha": 0.1} if op == "LeakyRelu" else {}
    if op == "HardSigmoid":
        attrs = {"alpha": 0.2, "beta": 0.5}
    to_nhwc = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))) if nhwc else (lambda a: a)
    feeds = {"x": to_nhwc(x)} | ({"z": to_nhwc(z)} if residual else {})
    make = conv_act_graph(to_nhwc(x), xq, w, ws, bias, midq, yq, op=op, attrs=attrs, stride=stride, pad=pad,
                          group=group, nhwc=nhwc, relu=relu, z=to_nhwc(z) if residual else None, zq=zq)

    want_ex, want = plan(make, feeds, native_on=False, fuse=False, monkeypatch=monkeypatch)
    assert len(want_ex.steps) == 2 and not want_ex.fused
    mid = ref.conv2d(x, xq, w, ws, bias, midq, strides=(stride, stride), pads=(pad,) * 4, group=group,
                     act="Relu" if relu else "", z=z, zq=zq)
    np.testing.assert_array_equal(want["y"], to_nhwc(ref.lut(mid, midq, yq, ACTIVATIONS[op])))
    runs = [(False, 1), (True, 1), (True, 2)] if native.lib is not None else [(False, 1)]
    for native_on, threads in runs:
        ex, got = plan(make, feeds, native_on=native_on, fuse=True, monkeypatch=monkeypatch, threads=threads)
        assert len(ex.steps) == 1 and list(ex.fused.values()) == [ex.nodes[0].name], ex.fused
        note = ex.notes[ex.nodes[0].name]
        assert f"+ {op}" in note and ("native" in note) == native_on, note
        np.testing.assert_array_equal(got["y"], want["y"], err_msg=f"native={native_on} threads={threads}: {note}")


@pytest.mark.parametrize("graph_output", [False, True])
def test_intermediate_with_another_reader_is_not_fused(monkeypatch, graph_output):
    """The conv's output read by anything but the activation (here: a graph output) stays a
    tensor of its own and the activation its own step."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 6, 6, 8), dtype=np.int8)
    make = conv_act_graph(x, (0.05, 3), rng.integers(-127, 128, (16, 8, 1, 1), dtype=np.int8),
                          np.full(16, 0.01, np.float32), np.zeros(16, np.int32), (0.1, 0), (0.05, -5),
                          op="HardSwish", attrs={}, stride=1, pad=0, group=1, nhwc=True, extra_reader=graph_output)
    ex, got = plan(make, {"x": x}, native_on=native.lib is not None, fuse=True, monkeypatch=monkeypatch)
    assert (len(ex.steps), bool(ex.fused)) == ((2, False) if graph_output else (1, True))
    _, want = plan(make, {"x": x}, native_on=False, fuse=False, monkeypatch=monkeypatch)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


@settings(**SETTINGS)
@given(op=st.sampled_from(["HardSigmoid", "Sigmoid", "Tanh"]), c=st.integers(1, 40), m=st.integers(1, 70),
       hw=st.integers(1, 10), k=st.sampled_from([1, 3, 5]), depthwise=st.booleans(), gate_first=st.booleans(),
       seed=st.integers(0, 2 ** 16), requant=st.sampled_from(["fixed", "fp32"]))
@example(op="HardSigmoid", c=16, m=72, hw=8, k=1, depthwise=False, gate_first=False, seed=1,
         requant="fp32").via("QDQ HardSwish")
@example(op="Sigmoid", c=24, m=24, hw=9, k=3, depthwise=True, gate_first=True, seed=2,
         requant="fixed").via("QDQ SiLU, depthwise")
def test_fused_gated_activation_is_bit_exact(monkeypatch, isa, op, c, m, hw, k, depthwise, gate_first, seed,
                                             requant):
    """Conv -> act -> Mul(x, act(x)) runs as one conv step whose table gives the three steps'
    bytes (the independent reference: conv loops, TFLite's table, TFLite MUL's integers)."""
    rng = np.random.default_rng(seed)
    m = c if depthwise else m
    group = c if depthwise and c > 1 else 1
    x = rng.integers(-128, 128, (1, c, hw, hw), dtype=np.int8)
    w = rng.integers(-127, 128, (m, c // group, k, k), dtype=np.int8)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    ws = rng.uniform(0.002, 0.02, m).astype(np.float32)
    xq, midq = (0.05, int(rng.integers(-20, 20))), (float(rng.uniform(0.03, 0.3)), int(rng.integers(-30, 30)))
    hq = FIXED_OUT.get(op, (1 / 256, -128))             # HardSigmoid: onnxruntime's [0, 1] range
    yq = (float(rng.uniform(0.01, 0.1)), int(rng.integers(-60, 60)))
    attrs = {"alpha": 1 / 6, "beta": 0.5} if op == "HardSigmoid" else {}
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    make = conv_act_graph(nhwc, xq, w, ws, bias, midq, yq, op=op, attrs=attrs, stride=1, pad=k // 2, group=group,
                          nhwc=True, gate=(hq, gate_first, requant))
    fn = {"HardSigmoid": lambda v: np.clip(v / 6 + 0.5, 0, 1), "Sigmoid": ACTIVATIONS["Sigmoid"],
          "Tanh": np.tanh}[op]
    mid = ref.conv2d(x, xq, w, ws, bias, midq, pads=(k // 2,) * 4, group=group)
    h = ref.lut(mid, midq, hq, fn)
    want_y = ref.mul(h, hq, mid, midq, yq, requant) if gate_first else ref.mul(mid, midq, h, hq, yq, requant)
    want_ex, want = plan(make, {"x": nhwc}, native_on=False, fuse=False, monkeypatch=monkeypatch)
    assert len(want_ex.steps) == 3
    np.testing.assert_array_equal(want["y"], want_y.transpose(0, 2, 3, 1))
    runs = [(False, 1), (True, 1), (True, 2)] if native.lib is not None else [(False, 1)]
    for native_on, threads in runs:
        ex, got = plan(make, {"x": nhwc}, native_on=native_on, fuse=True, monkeypatch=monkeypatch, threads=threads)
        assert len(ex.steps) == 1 and ex.fused == dict.fromkeys([ex.graph.nodes[1].name, ex.graph.nodes[2].name],
                                                                ex.nodes[0].name), ex.fused
        note = ex.notes[ex.nodes[0].name]
        assert f"x * {op}(x)" in note, note
        np.testing.assert_array_equal(got["y"], want["y"], err_msg=f"native={native_on} threads={threads}: {note}")


@pytest.mark.parametrize("other", ["x", "gate"])
def test_gated_activation_with_other_readers_is_not_fused(monkeypatch, other):
    """The conv's output or the gate read by anything else (a graph output here) keeps all
    three steps; the outputs stay the unfused plan's."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 5, 5, 8), dtype=np.int8)
    base = conv_act_graph(x, (0.05, 3), rng.integers(-127, 128, (16, 8, 1, 1), dtype=np.int8),
                          np.full(16, 0.01, np.float32), np.zeros(16, np.int32), (0.1, 0), (0.05, -5),
                          op="HardSigmoid", attrs={"alpha": 1 / 6, "beta": 0.5}, stride=1, pad=0, group=1, nhwc=True,
                          gate=((1 / 256, -128), False))

    def make():
        g = base()
        g.outputs.append("mid" if other == "x" else "h")
        return g
    ex, got = plan(make, {"x": x}, native_on=native.lib is not None, fuse=True, monkeypatch=monkeypatch)
    assert len(ex.steps) == 3 and not ex.fused
    _, want = plan(make, {"x": x}, native_on=False, fuse=False, monkeypatch=monkeypatch)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def _family_graphs():
    from int8_op_graphs import FAMILIES
    import family_models as F
    out = {name: (make, (1, 3, 16, 16) if name == "mnv3" else (1, 3, 32, 32)) for name, make in FAMILIES.items()}
    out["text_direction"] = (lambda: F.text_direction_classifier((48, 96)), (1, 3, 48, 96))
    out["mobilenetv3"] = (lambda: F.mobilenetv3_classifier((64, 64), width=0.5, classes=10), (1, 3, 64, 64))
    out["db_detector"] = (lambda: F.db_text_detector((64, 64), width=0.35, fpn=16), (1, 3, 64, 64))
    return out


FAMILY_GRAPHS = _family_graphs()


@pytest.mark.parametrize("family", sorted(FAMILY_GRAPHS))
def test_family_plans_fused_and_unfused_agree(tmp_path, monkeypatch, family):
    """Whole MobileNetV3 / DB / YOLO family graphs quantized: the fused plan (fewer steps, each
    activation after a conv gone) gives the unfused plan's outputs bit for bit, native at 1 and
    2 threads and numpy; the artifact's graph keeps its activation nodes (export sees them)."""
    from edge_infer.runtime import Runtime
    from int8_op_graphs import quantized_family
    make, shape = FAMILY_GRAPHS[family]
    eim, in_name, xs = quantized_family(tmp_path, make, shape, 6)

    def outputs(native_on, fuse, threads):
        with monkeypatch.context() as m:
            m.setattr(fusion, "ENABLED", fuse)
            if not native_on:
                m.setattr(native, "lib", None)
            rt = Runtime(eim, backend="cpu", threads=threads)
            ex = rt.plan({in_name: shape})
            return rt, ex, [rt.run(x) for x in xs[4:]]
    rt, ex0, want = outputs(False, False, 1)
    runs = [(False, 1)] + ([(True, 1), (True, 2)] if native.lib is not None else [])
    for native_on, threads in runs:
        _, ex, got = outputs(native_on, True, threads)
        # (a native plan also runs each squeeze-excite block as one step, fuse_int8_se.py, and the
        # input quantize and transpose folded into a stem conv are further steps gone)
        assert ex.fused and len(ex.steps) == (len(ex0.steps) - len(ex.fused) - 3 * len(ex.fused_se)
                                              - len(ex.fused_inputs)), (family, ex.fused)
        for g_, w_ in zip(got, want):
            for k in w_:
                np.testing.assert_array_equal(g_[k], w_[k], err_msg=f"{family} {k} native={native_on} x{threads}")
    acts = {n.name for n in rt.graph.nodes}
    assert set(ex.fused) <= acts                 # the graph itself still has the activations


def test_inspect_lists_fused_activations(tmp_path):
    import onnx
    import edge_infer
    from edge_infer.inspection import format_inspect, inspect_artifact
    from int8_op_graphs import mnv3_block
    src = str(tmp_path / "m.onnx")
    onnx.save(mnv3_block(), src)
    rng = np.random.default_rng(1)
    calib = [{"input": rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    edge_infer.convert(src, str(tmp_path / "q.eim"), quantize="int8", calib=calib, allow_drift=True)
    rep = inspect_artifact(str(tmp_path / "q.eim"))
    fused = rep["memory"]["fused_activations"]
    assert fused and all(isinstance(v, str) for v in fused.values())
    assert "fused into their conv's epilogue" in format_inspect(rep)
