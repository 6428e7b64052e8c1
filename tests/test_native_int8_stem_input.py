"""An int8 graph's input quantization done by its stem conv (backends/cpu/fuse_int8_input.py,
native/src/int8_stem.c ei_int8_stem_q): the plan with the QuantizeLinear (and its NCHW -> NHWC
Transpose) folded into the stem gives the unfused plan's bytes on whole MobileNetV3 / text
classifier / DB / YOLO family graphs, at 1 and 2 threads and under every ISA mask; neither
int8 copy of the input has a buffer; float inputs with NaN, infinities, ties and values past
the int8 range; NHWC float inputs (no Transpose); the prologue path when the kernel refuses the
conv at prepare; and what must not be folded."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_infer.backends.cpu import CpuBackend, native
from edge_infer.backends.cpu import fuse_int8_input as fusion
from edge_infer.backends.cpu.native import kernels
from edge_infer.ir import Graph
from edge_infer.runtime import specialize
from test_int8_activation_fusion import FAMILY_GRAPHS
from test_native_int8_ops import qd
from test_native_kernels import MASKS

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")


def _quantized(tmp_path, family):
    """(the int8 artifact of a family graph, its input name, shape, six seeded inputs)."""
    import onnx
    import edge_infer
    make, shape = FAMILY_GRAPHS[family]
    src = str(tmp_path / "m.onnx")
    onnx.save(make(), src)
    in_name = onnx.load(src).graph.input[0].name
    rng = np.random.default_rng(3)
    xs = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(6)]
    path = str(tmp_path / "q.eim")
    edge_infer.convert(src, path, quantize="int8", calib=[{in_name: x} for x in xs[:4]], allow_drift=True)
    return path, in_name, shape, xs[4:]


def _plan(path, in_name, shape, *, fuse, threads, monkeypatch):
    from edge_infer.runtime import Runtime
    with monkeypatch.context() as m:
        m.setattr(fusion, "ENABLED", fuse)
        rt = Runtime(path, backend="cpu", threads=threads)
        return rt, rt.plan({in_name: shape})


@pytest.mark.parametrize("family", sorted(FAMILY_GRAPHS))
def test_family_plans_with_and_without_the_input_fold_agree(tmp_path, monkeypatch, family):
    path, in_name, shape, xs = _quantized(tmp_path, family)
    rt0, ex0 = _plan(path, in_name, shape, fuse=False, threads=1, monkeypatch=monkeypatch)
    want = [rt0.run({in_name: x}) for x in xs]
    for mode, mask in MASKS.items():
        prev = native.set_isa_mask(mask)
        try:
            for threads in (1, 2):
                rt, ex = _plan(path, in_name, shape, fuse=True, threads=threads, monkeypatch=monkeypatch)
                folded = ex.step_summary()["fused_inputs"]
                assert folded, (family, mode)              # every family starts with a 3-channel stem
                quantize = next(n for n in rt.graph.nodes if n.op == "QuantizeLinear")
                assert quantize.name in folded and quantize.name in {n.name for n in rt.graph.nodes}
                assert len(ex.steps) == len(ex0.steps) - len(folded)
                # the int8 copies of the input take no buffer
                assert not {quantize.outputs[0]} & set(ex.buffers)
                stem = folded[quantize.name]
                assert "input quantized into the line buffers" in ex.notes[stem], ex.notes[stem]
                for x, w in zip(xs, want):
                    got = rt.run({in_name: x})
                    for k in w:
                        np.testing.assert_array_equal(got[k], w[k], err_msg=f"{family} {mode} x{threads} {k}")
        finally:
            native.set_isa_mask(prev)


def stem_graph(x_shape, *, nhwc_input: bool, c: int, m: int = 16, k: int = 3, stride: int = 2, pad: int = 1,
               scale: float = 0.02, zp: int = -14, extra_reader: bool = False, seed: int = 0):
    """float x -> QuantizeLinear -> [Transpose to NHWC] -> int8 NHWC Conv (+ Relu) -> y."""
    rng = np.random.default_rng(seed)
    g = Graph("stem")
    g.add_input("x", "float32", x_shape)
    g.add_const("s", np.array(scale, np.float32))
    g.add_const("zp", np.array(zp, np.int8))
    g.add_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="quantize")
    g.tensors["xq"].quant = qd(scale, zp)
    src = "xq"
    if not nhwc_input:
        g.add_node("Transpose", ["xq"], ["xt"], name="to_nhwc", perm=[0, 2, 3, 1])
        g.tensors["xt"].quant = qd(scale, zp)
        src = "xt"
    ws = rng.uniform(0.002, 0.02, m).astype(np.float32)
    g.add_const("w", rng.integers(-127, 128, (m, c, k, k)).astype(np.int8)).quant = {
        "scale": [float(v) for v in ws], "zero_point": [0] * m, "axis": 0}
    g.add_const("b", rng.integers(-3000, 3000, m).astype(np.int32))
    g.add_node("FusedConv", [src, "w", "b"], ["y"], name="stem", kernel_shape=[k, k], strides=[stride, stride],
               pads=[pad] * 4, group=1, data_layout="NHWC", activation="Relu", activation_params=[])
    g.tensors["y"].quant = qd(0.05, -128)
    g.outputs = ["y"] + (["xq"] if extra_reader else [])      # extra_reader: the int8 input is an output too
    return g


def _run(g, feeds, *, fuse, monkeypatch, threads=2):
    with monkeypatch.context() as mp:
        mp.setattr(fusion, "ENABLED", fuse)
        ex = CpuBackend().prepare(specialize(g, {k: v.shape for k, v in feeds.items()}), threads=threads)
        return ex, ex.run(feeds)


def _awkward(shape, scale, seed):
    """Floats over the int8 range and past it, a few exact ties (k + 0.5) * scale, NaN, +-inf
    and huge values: sparse enough that most 16-pixel steps take the vector path, the others
    the exact division."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 100 * scale).astype(np.float32)
    flat = x.reshape(-1)
    ties = rng.choice(flat.size, max(1, flat.size // 150), replace=False)
    flat[ties] = ((rng.integers(-140, 140, ties.size) + 0.5) * np.float32(scale)).astype(np.float32)
    flat[::997] = np.nan
    flat[5::1009] = np.inf
    flat[7::1013] = -np.inf
    flat[11::1019] = 3e9
    return x


@pytest.mark.parametrize("mode", list(MASKS))
@pytest.mark.parametrize("nhwc_input,c,hw,k,stride", [
    (False, 3, (37, 70), 3, 2),     # NCHW planes, a width past one 16-pixel step and a short last one
    (False, 4, (9, 20), 3, 1),
    (False, 2, (12, 33), 5, 2),
    (False, 1, (10, 17), 3, 1),     # one plane: nothing to interleave
    (True, 3, (11, 40), 3, 2),      # an NHWC float input: no Transpose to fold
])
def test_awkward_floats_quantize_as_the_quantize_step(monkeypatch, mode, nhwc_input, c, hw, k, stride):
    """NaN (-> 0), infinities, values past the int8 range and exact ties round as the separate
    QuantizeLinear step does, on every kind of the stem (ISA masks), NCHW and NHWC."""
    shape = (1, *hw, c) if nhwc_input else (1, c, *hw)
    g = stem_graph(shape, nhwc_input=nhwc_input, c=c, k=k, stride=stride, pad=k // 2)
    feeds = {"x": _awkward(shape, 0.02, c + k)}
    prev = native.set_isa_mask(MASKS[mode])
    try:
        ex0, want = _run(g, feeds, fuse=False, monkeypatch=monkeypatch)
        ex, got = _run(g, feeds, fuse=True, monkeypatch=monkeypatch)
    finally:
        native.set_isa_mask(prev)
    assert ex.fused_inputs == ({"quantize": "stem"} if nhwc_input else {"quantize": "stem", "to_nhwc": "stem"})
    assert "xq" not in ex.buffers and "xt" not in ex.buffers
    np.testing.assert_array_equal(got["y"], want["y"])
    assert np.unique(want["y"]).size > 20                      # a map with structure, not one value


def test_kernel_refusing_at_prepare_quantizes_in_a_prologue(monkeypatch):
    """The stem kernel declining the folded conv at prepare (here: made to): the conv quantizes
    and transposes into its own workspace, then the GEMM runs, same bytes."""
    shape = (1, 3, 20, 24)
    g = stem_graph(shape, nhwc_input=False, c=3)
    feeds = {"x": _awkward(shape, 0.02, 1)}
    _, want = _run(g, feeds, fuse=False, monkeypatch=monkeypatch)
    monkeypatch.setattr(kernels, "int8_stem_step", lambda *a, **k: None)
    ex, got = _run(g, feeds, fuse=True, monkeypatch=monkeypatch)
    assert ex.fused_inputs and "GEMM" in ex.notes["stem"]
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("why", ["graph output", "not a stem"])
def test_what_is_not_folded(monkeypatch, why):
    """An int8 input that is also a graph output keeps its step; so does one feeding a conv of
    more than 4 channels (the GEMM's, not the stem kernel's)."""
    c = 3 if why == "graph output" else 8
    shape = (1, c, 12, 16)
    g = stem_graph(shape, nhwc_input=False, c=c, extra_reader=why == "graph output")
    feeds = {"x": _awkward(shape, 0.02, 2)}
    ex, got = _run(g, feeds, fuse=True, monkeypatch=monkeypatch)
    assert not ex.fused_inputs
    _, want = _run(g, feeds, fuse=False, monkeypatch=monkeypatch)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_inspect_lists_the_folded_input(tmp_path):
    from edge_infer.inspection import format_inspect, inspect_artifact
    path, _, _, _ = _quantized(tmp_path, "mobilenetv3")
    rep = inspect_artifact(path)
    folded = rep["memory"]["fused_inputs"]
    assert any(k for k in folded) and len(set(folded.values())) == 1
    assert "quantized in the stem conv's line buffers" in format_inspect(rep)


def _stem_q(x, scale, zp, mask):
    """y (n, h, w, c) int8 of a 1x1 stem whose channel j reads input channel j with weight 1 and
    a float32 multiplier 1.0 (zp_y = zp): the quantized NCHW float input itself, as the kernel's
    line buffers hold it, under ISA mask ``mask``; and the rows it ran."""
    import ctypes
    P = ctypes.c_void_p
    fn = {name: native.function(name, P, restype=res) for name, res in
          (("ei_int8_stem_kind", ctypes.c_int), ("ei_int8_stem_pack_size", ctypes.c_int64),
           ("ei_int8_stem_q_scratch", ctypes.c_int64), ("ei_int8_stem_path", ctypes.c_char_p))}
    pack_fn, run_fn = native.function("ei_int8_stem_pack", P, P, P), native.function("ei_int8_stem_q", P)
    n, c, h, w = x.shape
    # the kernels take zp_x's share of the sums in the bias (-zp_x sum_k w)
    d = dict(w=np.eye(c, dtype=np.int8), bias=np.full(c, -zp, np.int32), mult=np.full(c, 0x3F800000, np.int32),
             shift=np.full(c, 64, np.int32), y=np.zeros((n, h, w, c), np.int8))
    a = kernels.Int8ConvArgs(zp_x=zp, zp_y=zp, lo=-128, hi=127, n=n, c=c, h=h, w=w, m=c, oh=h, ow=w, kh=1, kw=1,
                             sh=1, sw=1, dh=1, dw=1, pt=0, pl=0, threads=1)
    for k in ("y", "bias", "mult", "shift"):
        setattr(a, k, d[k].ctypes.data)
    prev = native.set_isa_mask(mask)
    try:
        addr = ctypes.addressof(a)
        a.kind = fn["ei_int8_stem_kind"](addr)
        pack = kernels.aligned(int(fn["ei_int8_stem_pack_size"](addr)))
        pack_fn(addr, d["w"].ctypes.data, pack.ctypes.data)
        a.wpack = pack.ctypes.data
        q = kernels.StemQuantArgs(conv=a, xf=x.ctypes.data, scale=scale, zp=float(zp), nchw=1)
        scratch = kernels.aligned(int(fn["ei_int8_stem_q_scratch"](ctypes.addressof(q))))
        q.conv.scratch = scratch.ctypes.data
        run_fn(ctypes.addressof(q))
        return d["y"], fn["ei_int8_stem_path"](addr).decode()
    finally:
        native.set_isa_mask(prev)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2 ** 31), c=st.integers(1, 4), hw=st.tuples(st.integers(1, 5), st.integers(1, 70)),
       scale=st.sampled_from([np.float32(1 / 127.5), 0.02, 0.018658364191651344, 2.0 ** -7, 3.0, 1e-3, 0.0417]),
       zp=st.integers(-128, 127))
def test_line_quantizer_rounds_as_the_division(seed, c, hw, scale, zp):
    """The float input quantized in the stem's line buffers is rint(x / scale) + zp clamped
    (NaN -> 0) on every value: random values over and past the int8 range, values at and next to
    the ties (k + 0.5) scale, 8-bit pixels mapped to [-1, 1] (ties at scale 1 / 127.5), and
    random bit patterns (NaN, infinities, subnormals, huge), under every ISA mask."""
    rng = np.random.default_rng(seed)
    scale = float(np.float32(scale))
    size = c * hw[0] * hw[1]
    ties = ((rng.integers(-140, 140, size) + 0.5) * np.float32(scale)).astype(np.float32)
    kinds = [(rng.standard_normal(size) * 100 * scale).astype(np.float32), ties,
             np.nextafter(ties, np.float32(np.inf) * rng.choice([-1, 1], size)).astype(np.float32),
             (rng.integers(0, 256, size).astype(np.float32) / np.float32(127.5) - np.float32(1)),
             rng.integers(0, 2 ** 32, size, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    pick = rng.integers(0, len(kinds), size)
    x = np.choose(pick, kinds).astype(np.float32).reshape(1, c, *hw)
    with np.errstate(all="ignore"):
        t = np.rint(x / np.float32(scale)) + np.float32(zp)
    want = np.where(np.isnan(t), 0, np.clip(t, -128, 127)).astype(np.int8).transpose(0, 2, 3, 1)
    for mode, mask in MASKS.items():
        got, path = _stem_q(np.ascontiguousarray(x), scale, zp, mask)
        np.testing.assert_array_equal(got, want, err_msg=f"{mode} ({path})")
