"""int8 squeeze-excite blocks as one native step (backends/cpu/fuse_int8_se.py, native/src/se.c):
GlobalAveragePool -> 1x1 conv [+ Relu] -> 1x1 conv [+ HardSigmoid / Sigmoid table] -> Mul with
the pool's input. The fused plan writes the bytes of the unfused one (every tensor of the block,
not only the outputs) at 1 and 2 threads and on every ISA path (VNNI GEMV, plain loops), on
randomized blocks and on whole MobileNetV3 / text-direction / DB family graphs; the unfused
native plan itself agrees with the numpy kernels (independent of the native code); blocks whose
intermediate tensors are read elsewhere stay apart, and the saved graph keeps its nodes.
"""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from edge_infer.backends.cpu import CpuBackend, native
from edge_infer.backends.cpu import fuse_int8_se as se
from edge_infer.ir import Graph
from edge_infer.runtime import specialize

sys.path.insert(0, os.path.dirname(__file__))
from test_native_int8_ops import qd  # noqa: E402
from edge_infer.ops.qmath import fp32_ok, fp32_scales  # noqa: E402

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")
SETTINGS = dict(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
#: ISA masks: all features (VNNI GEMV, AVX-512 Mul and mean), AVX2 only, none (plain loops)
MASKS = [-1, native.AVX2 | native.NEON, 0]


def se_graph(rng, c: int, cr: int, hw, *, relu: bool, act: str, gate_first: bool, gate_output: bool = False,
             requant: str = "fixed"):
    """One int8 NHWC squeeze-excite block on input x (1, h, w, c), random weights and parameters;
    ``requant``: the two convs' and the Mul's requantization mode."""
    def make():
        g = Graph("se")
        r = np.random.default_rng(rng)
        g.add_input("x", "int8", (1, *hw, c)).quant = qd(float(r.uniform(0.01, 0.1)), int(r.integers(-40, 40)))
        g.add_node("GlobalAveragePool", ["x"], ["mean"], data_layout="NHWC")
        g.tensors["mean"].quant = qd(float(r.uniform(0.005, 0.05)), int(r.integers(-20, 20)))
        for name, (m, k), out in (("1", (cr, c), "hid"), ("2", (c, cr), "pre")):
            g.add_const("w" + name, r.integers(-127, 128, (m, k, 1, 1), dtype=np.int8)).quant = {
                "scale": [float(v) for v in r.uniform(0.002, 0.02, m).astype(np.float32)], "zero_point": [0] * m,
                "axis": 0}
            g.add_const("b" + name, r.integers(-4000, 4000, m).astype(np.int32))
            attrs = {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0] * 4, "group": 1, "data_layout": "NHWC",
                     "requant": requant}
            fused = relu and name == "1"
            if fused:
                attrs.update(activation="Relu", activation_params=[])
            g.add_node("FusedConv" if fused else "Conv", ["mean" if name == "1" else "hid", "w" + name, "b" + name],
                       [out], **attrs)
            g.tensors[out].quant = qd(float(r.uniform(0.02, 0.3)), int(r.integers(-30, 30)))
        if act:
            g.add_node(act, ["pre"], ["gate"], **({"alpha": 1 / 6, "beta": 0.5} if act == "HardSigmoid" else {}))
            g.tensors["gate"].quant = qd(1 / 256, -128)
        gate = "gate" if act else "pre"
        yq = qd(float(r.uniform(0.01, 0.1)), int(r.integers(-40, 40)))
        # as the converter writes it: "fp32" where the Mul's multiplier allows it
        m = fp32_scales(g.tensors["x"].quant["scale"][0], g.tensors[gate].quant["scale"], yq["scale"][0])
        g.add_node("Mul", [gate, "x"] if gate_first else ["x", gate], ["y"],
                   requant=requant if fp32_ok(m) else "fixed")
        g.tensors["y"].quant = yq
        g.outputs = ["y"] + ([gate] if gate_output else [])
        return g
    return make


def buffers(make, x, *, fuse: bool, native_on: bool = True, threads: int = 1, mask: int = -1, monkeypatch):
    """(plan, {tensor: value after a run}) of the graph ``make()`` on the CPU backend."""
    g = specialize(make(), {"x": x.shape})
    with monkeypatch.context() as m:
        m.setattr(se, "ENABLED", fuse)
        if not native_on:
            m.setattr(native, "lib", None)
        old = native.set_isa_mask(mask) if native.lib is not None else None
        try:
            ex = CpuBackend().prepare(g, threads=threads)
            return ex, {k: np.array(v) for k, v in ex.run_views({"x": x}).items()}
        finally:
            if old is not None:
                native.set_isa_mask(old)


BLOCK_TENSORS = ("mean", "hid", "pre", "gate", "y")


@settings(**SETTINGS)
@given(c=st.integers(1, 600), cr=st.integers(1, 160), h=st.integers(1, 9), w=st.integers(1, 9),
       relu=st.booleans(), act=st.sampled_from(["HardSigmoid", "Sigmoid", ""]), gate_first=st.booleans(),
       seed=st.integers(0, 2 ** 16), requant=st.sampled_from(["fixed", "fp32"]))
@example(c=576, cr=144, h=7, w=7, relu=True, act="HardSigmoid", gate_first=False, seed=1,
         requant="fixed").via("MobileNetV3's last")
@example(c=576, cr=144, h=7, w=7, relu=True, act="HardSigmoid", gate_first=False, seed=5,
         requant="fp32").via("MobileNetV3's last, fp32 requantization")
@example(c=16, cr=8, h=9, w=9, relu=True, act="HardSigmoid", gate_first=False, seed=2,
         requant="fixed").via("16 channels: one block")
@example(c=17, cr=5, h=3, w=2, relu=False, act="Sigmoid", gate_first=True, seed=3,
         requant="fp32").via("ragged blocks and quads")
@example(c=1024, cr=256, h=13, w=13, relu=True, act="HardSigmoid", gate_first=False, seed=4, requant="fixed").via(
    "256 KB GEMVs and a 173K-value Mul: split over the threads")
def test_fused_block_is_bit_exact(monkeypatch, c, cr, h, w, relu, act, gate_first, seed, requant):
    x = np.random.default_rng(seed).integers(-128, 128, (1, h, w, c), dtype=np.int8)
    make = se_graph(seed, c, cr, (h, w), relu=relu, act=act, gate_first=gate_first, requant=requant)
    want_ex, want = buffers(make, x, fuse=False, monkeypatch=monkeypatch)
    assert not want_ex.fused_se and len(want_ex.steps) == 4
    # the unfused native steps against the numpy kernels: the output (the arena holds other
    # scratch over the dead intermediate tensors in a numpy plan)
    _, ref = buffers(make, x, fuse=False, native_on=False, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(want["y"], ref["y"])
    for threads in (1, 2):
        for mask in MASKS:
            ex, got = buffers(make, x, fuse=True, threads=threads, mask=mask, monkeypatch=monkeypatch)
            assert len(ex.steps) == 1 and list(ex.fused_se) == [ex.nodes[0].name], ex.fused_se
            assert ex.nodes[0].op == "Mul" and "squeeze-excite" in ex.notes[ex.nodes[0].name]
            for t in BLOCK_TENSORS:     # the same arena and order of writes: every tensor
                if t in want:
                    np.testing.assert_array_equal(got[t], want[t], err_msg=f"{t}: threads={threads} mask={mask}")


@pytest.mark.parametrize("c,cr,h,w,threads", [
    (16, 8, 56, 56, 2),         # MobileNetV3's first block: the 16- / 32-channel run sums
    (576, 144, 7, 7, 2),        # its last ones: an odd row count, 3 and 4 rows
    (240, 64, 14, 14, 2),
    (40, 16, 9, 5, 3),          # C not a multiple of 16, 9 rows in 3 shares
    (17, 5, 3, 4, 4),           # fewer rows than threads: a share a row
    (8, 8, 2, 24, 3),           # a gate of 8 channels (the Mul's narrow path), 2 rows
    (100, 24, 1, 30, 2),        # one row: not split
    (600, 120, 5, 7, 3),        # 600 channels: a ragged last vector, 5 rows in 3 shares
])
def test_row_shares_are_bit_exact(monkeypatch, c, cr, h, w, threads):
    """At 2+ threads the fused step sums and gates x in row shares, one a thread (the mean:
    the shares' int32 sums added, then divided); every tensor of the block as the unfused
    plan's, on every ISA path, whatever thread runs which share."""
    monkeypatch.setattr(se, "SPLIT_VALUES", 0)          # small shapes and large GEMVs too
    monkeypatch.setattr(se, "SPLIT_WEIGHTS_PER_VALUE", 1 << 30)
    x = np.random.default_rng(c * h).integers(-128, 128, (1, h, w, c), dtype=np.int8)
    x[0, :, :, 0] = -128                                # a channel at the int16 lanes' extreme
    make = se_graph(h * w, c, cr, (h, w), relu=True, act="HardSigmoid", gate_first=c % 2 == 1)
    _, want = buffers(make, x, fuse=False, monkeypatch=monkeypatch)
    for mask in MASKS:
        ex, got = buffers(make, x, fuse=True, threads=threads, mask=mask, monkeypatch=monkeypatch)
        assert ex.steps[0].native_keep[1].parts == (min(threads, h) if h > 1 else 1)
        for _ in range(3):                              # shares taken by other threads on later runs
            for t in (t for t in BLOCK_TENSORS if t in want):
                np.testing.assert_array_equal(got[t], want[t], err_msg=f"{t}: threads={threads} mask={mask}")
            got = {k: np.array(v) for k, v in ex.run_views({"x": x}).items()}


@pytest.mark.parametrize("c,cr,h,threads,parts", [
    (240, 64, 14, 2, 2), (16, 8, 56, 2, 2),            # MobileNetV3's mean- and Mul-bound blocks: split
    (240, 64, 14, 1, 1),                                # one thread: the steps as they are
    (576, 144, 7, 2, 1),                                # GEMV-bound (166 KB of weights): the caller alone
    (288, 72, 7, 2, 1),                                 # under SPLIT_VALUES
    (480, 120, 20, 2, 2),                               # DB-640's: 115 KB of weights, but 192K values
])
def test_row_shares_by_size(monkeypatch, c, cr, h, threads, parts):
    """The default rule (fuse_int8_se.SPLIT_VALUES, SPLIT_WEIGHTS_PER_VALUE) on MobileNetV3's and
    DB-640's shapes."""
    x = np.zeros((1, h, h, c), np.int8)
    ex, _ = buffers(se_graph(0, c, cr, (h, h), relu=True, act="HardSigmoid", gate_first=False), x, fuse=True,
                    threads=threads, monkeypatch=monkeypatch)
    assert ex.steps[0].native_keep[1].parts == parts


@pytest.mark.parametrize("reader", ["gate_output", "mean_output"])
def test_block_with_another_reader_stays_apart(monkeypatch, reader):
    """An intermediate tensor that a graph output also reads keeps its own steps."""
    x = np.random.default_rng(0).integers(-128, 128, (1, 5, 5, 24), dtype=np.int8)
    make = se_graph(0, 24, 8, (5, 5), relu=True, act="HardSigmoid", gate_first=False,
                    gate_output=reader == "gate_output")
    if reader == "mean_output":
        base = make

        def make():
            g = base()
            g.outputs.append("mean")
            return g
    ex, got = buffers(make, x, fuse=True, monkeypatch=monkeypatch)
    assert not ex.fused_se and len(ex.steps) == 4
    _, want = buffers(make, x, fuse=False, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(got["y"], want["y"])


def _family_graphs():
    import family_models as F
    from int8_op_graphs import mnv3_block
    return {"mnv3_block": (lambda: mnv3_block(hw=(16, 16), c=32), (1, 3, 16, 16)),
            "text_direction": (lambda: F.text_direction_classifier((48, 96)), (1, 3, 48, 96)),
            "mobilenetv3": (lambda: F.mobilenetv3_classifier((64, 64), width=0.5, classes=10), (1, 3, 64, 64)),
            "db_detector": (lambda: F.db_text_detector((64, 64), width=0.35, fpn=16), (1, 3, 64, 64))}


FAMILY_GRAPHS = _family_graphs()


@pytest.mark.parametrize("family", sorted(FAMILY_GRAPHS))
def test_family_plans_fused_and_unfused_agree(tmp_path, monkeypatch, family):
    """Whole family graphs quantized: every squeeze-excite block fused (one step instead of four),
    the outputs of the unfused plan's on several inputs, at 1 and 2 threads and on each ISA
    path; the artifact's graph keeps its nodes."""
    from edge_infer.runtime import Runtime
    from int8_op_graphs import quantized_family
    make, shape = FAMILY_GRAPHS[family]
    eim, in_name, xs = quantized_family(tmp_path, make, shape, 7)

    def run(fuse, threads, mask):
        with monkeypatch.context() as m:
            m.setattr(se, "ENABLED", fuse)
            old = native.set_isa_mask(mask)
            try:
                rt = Runtime(eim, backend="cpu", threads=threads)
                ex = rt.plan({in_name: shape})
                return rt, ex, [rt.run(x) for x in xs[4:]]
            finally:
                native.set_isa_mask(old)
    rt, ex0, want = run(False, 1, -1)
    for threads in (1, 2):
        for mask in MASKS:
            _, ex, got = run(True, threads, mask)
            # (an ISA mask can change whether the stem conv takes the input quantize: fuse_int8_input.py)
            assert ex.fused_se and (len(ex.steps) + len(ex.fused_inputs)
                                    == len(ex0.steps) + len(ex0.fused_inputs) - 3 * len(ex.fused_se)), \
                (family, ex.fused_se)
            for g_, w_ in zip(got, want):
                for k in w_:
                    np.testing.assert_array_equal(g_[k], w_[k], err_msg=f"{family} {k} x{threads} mask={mask}")
    names = {n.name for n in rt.graph.nodes}
    assert all(set(v) <= names for v in ex.fused_se.values())        # the graph keeps the four nodes
    assert ex.step_summary()["fused_squeeze_excite"] == ex.fused_se


def test_pack_gemv_layout():
    """The packed GEMV weights: 16 outputs x 4 inputs a block, zero padded (what se.c reads)."""
    w = np.arange(-60, 60, dtype=np.int8).reshape(20, 6)
    p = se.pack_gemv(w)
    assert p.shape == (2, 2, 16, 4)
    for o in range(32):
        for k in range(8):
            want = w[o, k] if o < 20 and k < 6 else 0
            assert p[o // 16, k // 4, o % 16, k % 4] == want


def test_inspect_lists_fused_blocks(tmp_path):
    import onnx
    import edge_infer
    from edge_infer.inspection import format_inspect, inspect_artifact
    from int8_op_graphs import mnv3_block
    src = str(tmp_path / "m.onnx")
    onnx.save(mnv3_block(c=32), src)
    rng = np.random.default_rng(1)
    calib = [{"input": rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    edge_infer.convert(src, str(tmp_path / "q.eim"), quantize="int8", calib=calib, allow_drift=True)
    rep = inspect_artifact(str(tmp_path / "q.eim"))
    blocks = rep["memory"]["fused_squeeze_excite"]
    assert len(blocks) == 1 and [len(v) for v in blocks.values()] == [3]
    assert "squeeze-excite blocks run as one step: 1" in format_inspect(rep)
