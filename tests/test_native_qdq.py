"""Native int8 boundary and pooling kernels (native/src/qdq.c, int8_misc.c): QuantizeLinear and
DequantizeLinear per tensor and per axis, int8 GlobalAveragePool (TFLite rounded mean), GlobalMaxPool and
2-D MaxPool, against the numpy kernels they replace, bit for bit, SIMD and scalar paths.

Oracle: the same one-node graph prepared with the native library switched off
(``native.lib = None``: every builder returns None and the numpy closure serves).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from edge_infer.backends.cpu import native
from edge_infer.backends.cpu import CpuBackend
from edge_infer.ir import Graph
from edge_infer.runtime import specialize

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")

SETTINGS = dict(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=[-1, 0], ids=["simd", "scalar"])
def isa(request):
    old = native.set_isa_mask(request.param)
    yield request.param
    native.set_isa_mask(old)


def q(scale, zp):
    return {"scale": [float(np.float32(scale))], "zero_point": [int(zp)], "axis": None}


def prepare(g, feeds, native_on, monkeypatch):
    g = specialize(g, {k: v.shape for k, v in feeds.items()})
    if not native_on:
        monkeypatch.setattr(native, "lib", None)
    try:
        return CpuBackend().prepare(g, threads=2)
    finally:
        monkeypatch.undo()


def both(monkeypatch, make_graph, feeds):
    """Outputs (native, numpy) of the graph; asserts which path each one took."""
    fast = prepare(make_graph(), feeds, True, monkeypatch)
    slow = prepare(make_graph(), feeds, False, monkeypatch)
    assert all(getattr(s, "native_step", None) is not None or hasattr(s, "native_keep") for s in fast.steps), \
        fast.notes
    assert any("native" in v for v in fast.notes.values()), fast.notes
    assert not any("native" in v for v in slow.notes.values()), slow.notes
    with np.errstate(all="ignore"):
        return fast.run(feeds), slow.run(feeds)


def qdq_graph(shape, scale, zp, dtype):
    def make():
        g = Graph("qdq")
        g.add_input("x", "float32", shape)
        g.add_const("s", np.array(scale, np.float32))
        g.add_const("z", np.array(zp, dtype))
        g.add_node("QuantizeLinear", ["x", "s", "z"], ["q"])
        g.add_node("DequantizeLinear", ["q", "s", "z"], ["y"])
        g.outputs = ["q", "y"]
        return g
    return make


@settings(**SETTINGS)
@given(shape=st.lists(st.integers(1, 23), min_size=1, max_size=4), scale=st.floats(1e-3, 2.0),
       zp=st.integers(-128, 127), u8=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_quantize_dequantize_bit_exact(monkeypatch, isa, shape, scale, zp, u8, seed):
    rng = np.random.default_rng(seed)
    scale = np.float32(scale)
    x = (rng.standard_normal(shape) * 100 * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[::3] = (np.rint(flat[::3] / scale) + 0.5) * scale          # ties (or as near as float32 gets)
    flat[::11] = np.float32(1e30) * np.sign(flat[::11] + 0.5)        # saturation
    dtype = np.uint8 if u8 else np.int8
    zp = zp + 128 if u8 else zp
    got, want = both(monkeypatch, qdq_graph(tuple(shape), scale, zp, dtype), {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])
    np.testing.assert_array_equal(got["y"], want["y"])


def test_quantize_image_sized_tensor_matches(monkeypatch):
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    got, want = both(monkeypatch, qdq_graph(x.shape, 0.02, -3, np.int8), {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("scale", [0.0187, 1 / 255, 3.0e-3, 7.5, 1.0e-37, 3.0e37])
def test_quantize_reciprocal_path_exact_near_ties(monkeypatch, isa, scale):
    """The AVX-512 per-tensor quantize multiplies by 1 / scale and redoes the division where a
    half-integer is close: values 0..3 ulp from every tie, random ones, inf / NaN / subnormal
    inputs and scales whose reciprocal is not normal (those keep the division) all match numpy."""
    rng = np.random.default_rng(int(scale * 1e3) % 997)
    scale = np.float32(scale)
    ties = ((np.arange(-300, 300) + 0.5) * scale).astype(np.float32)
    near = np.concatenate([np.nextafter(ties, np.float32(s * np.inf)) if s else ties for s in (-1, 0, 1)])
    near = np.concatenate([near, np.nextafter(np.nextafter(near, np.float32(np.inf)), np.float32(np.inf))])
    rand = (rng.standard_normal(4000) * 200 * scale).astype(np.float32)
    odd = np.array([np.inf, -np.inf, np.nan, 1e-45, -1e-40, 0.0, -0.0, 3e38], np.float32)
    x = rng.permutation(np.concatenate([near, rand, odd])).astype(np.float32)
    x = np.concatenate([x, x[:5]]).reshape(1, -1)               # a tail past the last 16 lanes
    got, want = both(monkeypatch, qdq_graph(x.shape, scale, 5, np.int8), {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])


@pytest.mark.parametrize("zp,dtype", [(255, np.uint8), (0, np.uint8), (127, np.int8), (-128, np.int8)])
@pytest.mark.parametrize("n", [16 * 5 + 3, 64 + 13])
@pytest.mark.parametrize("scale", [1 / 127.5, 2.0 ** -7])
def test_quantize_all_ties_and_the_int32_edge(monkeypatch, isa, zp, dtype, n, scale):
    """8-bit pixels mapped to [-1, 1] by p / 127.5 - 1 at scale 1 / 127.5 (every value a tie:
    half of them round down to even, half up), and finite values whose x / scale is the last
    float under +-2^31 (with a power-of-two scale the bracket test passes them: + zp must not
    wrap in the 16-lane tail), in 64-value blocks and tails."""
    rng = np.random.default_rng(zp + 256 + n)
    scale = np.float32(scale)
    pixels = rng.integers(0, 256, n).astype(np.float32) / np.float32(127.5) - np.float32(1)
    i = np.arange(n)
    edge = np.float32(2147483520.0) * scale * np.where(i // 5 % 2, np.float32(-1), np.float32(1))
    x = np.where(i % 5 == 0, edge, pixels).astype(np.float32).reshape(1, n)     # both signs, blocks and tail
    got, want = both(monkeypatch, qdq_graph(x.shape, scale, zp, dtype), {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])


def int8_graph(op, shape, attrs, params_out=None):
    def make():
        g = Graph(op)
        g.add_input("x", "int8", shape).quant = q(0.05, 3)
        g.add_node(op, ["x"], ["y"], **attrs)
        g.outputs = ["y"]
        g.tensors["y"].quant = params_out or q(0.05, 3)
        return g
    return make


@settings(**SETTINGS)
@given(n=st.integers(1, 2), c=st.integers(1, 300), h=st.integers(1, 9), w=st.integers(1, 9),
       nhwc=st.booleans(), op=st.sampled_from(["GlobalAveragePool", "GlobalMaxPool"]),
       seed=st.integers(0, 2 ** 16))
def test_int8_global_pools_bit_exact(monkeypatch, isa, n, c, h, w, nhwc, op, seed):
    shape = (n, h, w, c) if nhwc else (n, c, h, w)
    x = np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)
    attrs = {"data_layout": "NHWC"} if nhwc else {}
    got, want = both(monkeypatch, int8_graph(op, shape, attrs), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("hw,c", [((1, 1), 5), ((1, 3), 17), ((7, 7), 576), ((14, 14), 40), ((56, 56), 16),
                                  ((112, 112), 3), ((5, 13), 300)])
def test_int8_global_average_pool_mobilenet_sizes(monkeypatch, hw, c):
    """The squeeze-excite and head means of MobileNets (NHWC, 16 channels a vector, the division
    by the position count as a multiply): random values, every sum at its largest and smallest
    (all 127 / all -128), and sums just off multiples of the count (ties and their neighbours)."""
    rng = np.random.default_rng(c)
    p = hw[0] * hw[1]
    x = rng.integers(-128, 128, (1, *hw, c), dtype=np.int8)
    x[..., 0], x[..., -1] = 127, -128
    if c > 2 and p > 1:               # channel 1: sum = p / 2 + 1 (a tie or just past it)
        x[..., 1] = 0
        x.reshape(-1, c)[: p // 2 + 1, 1] = 1
    got, want = both(monkeypatch, int8_graph("GlobalAveragePool", x.shape, {"data_layout": "NHWC"}), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    s = x.reshape(-1, c).astype(np.int64).sum(0)
    q = (np.abs(s) + p // 2) // p
    np.testing.assert_array_equal(want["y"].reshape(-1), np.clip(np.sign(s) * q, -128, 127))


@pytest.mark.parametrize("hw,c", [((56, 56), 16), ((112, 112), 32), ((7, 7), 576), ((14, 14), 240),
                                  ((3, 12), 96), ((2, 6), 17), ((23, 23), 200), ((17, 19), 300),
                                  ((12, 48), 8), ((96, 96), 8), ((80, 80), 4), ((64, 67), 2), ((97, 101), 1)])
@pytest.mark.parametrize("requant", [False, True], ids=["rounded", "requantized"])
def test_int8_squeeze_excite_means_simd_and_scalar(monkeypatch, isa, hw, c, requant):
    """The squeeze-excite means of MobileNetV3 (NHWC): the int16 partial sums (flushed every 256
    positions: 56x56 and 112x112 have 12 and 49 flushes), the runs of 1-32 channels (narrow
    ones: 8 of the text classifier's 12x48 gate, and 1-8 channels over several flushes and a
    masked tail) and the vector epilogues, TFLite's rounded mean and the requantized one (other output parameters),
    on random values and every channel's extremes (all -128 in channel 0: the int16 lanes'
    limit)."""
    rng = np.random.default_rng(c + hw[0])
    x = rng.integers(-128, 128, (1, *hw, c), dtype=np.int8)
    x[..., 0], x[..., -1] = -128, 127
    out = q(0.011, -7) if requant else None
    got, want = both(monkeypatch, int8_graph("GlobalAveragePool", x.shape, {"data_layout": "NHWC"}, out), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])


def test_int8_mean_rounds_half_away_from_zero(monkeypatch):
    # sums of +-2 over 4 positions: exact .5 means, rounded away from zero as TFLite does
    x = np.array([1, 1, 0, 0, -1, -1, 0, 0, 127, 127, 127, 127, -128, -128, -128, -127],
                 np.int8).reshape(1, 4, 2, 2)
    got, want = both(monkeypatch, int8_graph("GlobalAveragePool", x.shape, {}), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["y"].reshape(-1), [1, -1, 127, -128])


@pytest.mark.parametrize("isa", [-1, native.AVX2 | native.NEON, 0], ids=["simd", "avx2_neon", "scalar"],
                         indirect=True)
@settings(**SETTINGS)
@given(c=st.integers(1, 80), h=st.integers(1, 12), w=st.integers(1, 12), k=st.integers(1, 3),
       s=st.integers(1, 2), pad=st.integers(0, 1), nhwc=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_int8_maxpool_bit_exact(monkeypatch, isa, c, h, w, k, s, pad, nhwc, seed):
    pad = min(pad, k - 1)
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    shape = (2, h, w, c) if nhwc else (2, c, h, w)
    x = np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [pad] * 4}
    if nhwc:
        attrs["data_layout"] = "NHWC"
    got, want = both(monkeypatch, int8_graph("MaxPool", shape, attrs), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])


# -- the input transpose NCHW -> NHWC of 2-4 channels (native/src/layout.c's plane interleave) --

def transpose_graph(shape, dtype, perm):
    def make():
        g = Graph("t")
        g.add_input("x", dtype, shape)
        g.add_node("Transpose", ["x"], ["y"], perm=list(perm))
        g.outputs = ["y"]
        return g
    return make


@settings(**SETTINGS)
@given(n=st.integers(1, 3), c=st.integers(1, 5), h=st.integers(1, 13), w=st.integers(1, 37),
       dtype=st.sampled_from(["int8", "uint8", "float32", "int32", "float16"]), seed=st.integers(0, 2 ** 16))
def test_transpose_to_nhwc_matches_numpy(isa, n, c, h, w, dtype, seed):
    x = (np.random.default_rng(seed).standard_normal((n, c, h, w)) * 50).astype(dtype)
    g = specialize(transpose_graph(x.shape, dtype, (0, 2, 3, 1))(), {"x": x.shape})
    plan = CpuBackend().prepare(g, threads=2)
    assert getattr(plan.steps[0], "native_step", None) is not None
    np.testing.assert_array_equal(plan.run({"x": x})["y"], x.transpose(0, 2, 3, 1))


def test_interleave_covers_image_inputs_only():
    from edge_infer.backends.cpu.native import ops
    x = np.zeros((1, 3, 224, 224), np.int8)
    y = np.empty((1, 224, 224, 3), np.int8)
    assert ops.interleave_step(y, x.transpose(0, 2, 3, 1)) is not None
    assert ops.interleave_step(y.astype(np.float32), x.astype(np.float32).transpose(0, 2, 3, 1)) is not None
    assert ops.interleave_step(y[:, :, :, :1], x[:, :1].transpose(0, 2, 3, 1)) is None      # one plane: a copy
    x8 = np.zeros((1, 8, 5, 5), np.int8)
    assert ops.interleave_step(np.empty((1, 5, 5, 8), np.int8), x8.transpose(0, 2, 3, 1)) is None
    assert ops.interleave_step(np.empty((1, 5, 5, 8), np.int16), x8.astype(np.int16).transpose(0, 2, 3, 1)) is None


def test_transpose_batch_and_large_tensor_threads():
    from edge_infer.backends.cpu.native import ops
    x = np.random.default_rng(1).integers(-128, 128, (3, 4, 301, 299), dtype=np.int8)
    y = np.empty((3, 301, 299, 4), np.int8)
    ops.interleave_step(y, x.transpose(0, 2, 3, 1), threads=2)()
    np.testing.assert_array_equal(y, x.transpose(0, 2, 3, 1))


def test_selftest_layout():
    assert native.lib.ei_selftest_layout() == 0


@settings(**SETTINGS)
@given(c=st.integers(1, 300), h=st.integers(1, 12), w=st.integers(1, 12), k=st.integers(1, 4),
       s=st.integers(1, 3), pad=st.integers(0, 2), d=st.integers(1, 2), ceil=st.booleans(),
       nhwc=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_int8_average_pool_bit_exact(monkeypatch, isa, c, h, w, k, s, pad, d, ceil, nhwc, seed):
    pad = min(pad, k - 1)
    span = (k - 1) * d + 1
    if h + 2 * pad < span or w + 2 * pad < span or (pad and d > 1):
        return
    shape = (2, h, w, c) if nhwc else (2, c, h, w)
    x = np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)
    x.reshape(-1)[::5] = 127                                    # sums near the int8 limits, ties
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [pad] * 4, "dilations": [d, d],
             "ceil_mode": int(ceil)}
    if nhwc:
        attrs["data_layout"] = "NHWC"
    try:
        got, want = both(monkeypatch, int8_graph("AveragePool", shape, attrs), {"x": x})
    except Exception as e:                  # geometry the numpy kernel refuses: so must the native one
        assert "padding" in str(e) or "ceil" in str(e), e
        return
    np.testing.assert_array_equal(got["y"], want["y"])


def test_int8_average_pool_ties_round_away_from_zero(monkeypatch):
    x = np.array([1, 0, -1, 0, 3, 0, -3, 0], np.int8).reshape(1, 2, 1, 4)     # 2x1 windows: .5 means
    attrs = {"kernel_shape": [1, 2], "strides": [1, 2]}
    got, want = both(monkeypatch, int8_graph("AveragePool", x.shape, attrs), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["y"].reshape(-1), [1, -1, 2, -2])


def test_int8_average_pool_native_only_where_exact(monkeypatch):
    shape = (1, 4, 6, 6)
    attrs = {"kernel_shape": [3, 3], "pads": [1] * 4}
    for make in (int8_graph("AveragePool", shape, dict(attrs, count_include_pad=1)),
                 int8_graph("AveragePool", shape, attrs, params_out=q(0.1, -2))):
        plan = prepare(make(), {"x": np.zeros(shape, np.int8)}, True, monkeypatch)
        assert not any("native" in v for v in plan.notes.values()), plan.notes


# -- per-axis QuantizeLinear / DequantizeLinear (native/src/qdq.c) --

def qdq_axis_graph(shape, scales, zps, dtype, axis):
    def make():
        g = Graph("qdq_axis")
        g.add_input("x", "float32", shape)
        g.add_const("s", np.asarray(scales, np.float32))
        g.add_const("z", np.asarray(zps, dtype))
        g.add_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis)
        g.add_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis)
        g.outputs = ["q", "y"]
        return g
    return make


@settings(**SETTINGS)
@given(shape=st.lists(st.integers(1, 19), min_size=1, max_size=4), data=st.data(), u8=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_quantize_dequantize_per_axis_bit_exact(monkeypatch, isa, shape, data, u8, seed):
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    c = shape[axis]
    if c == 1:                                    # one scale: the per-tensor kernel's case
        shape[axis] = c = 2
    rng = np.random.default_rng(seed)
    scales = rng.uniform(1e-3, 0.5, c).astype(np.float32)
    zps = rng.integers(0, 256, c) if u8 else rng.integers(-128, 128, c)
    bshape = [1] * rank
    bshape[axis] = c
    s = scales.reshape(bshape)
    x = (rng.standard_normal(shape) * 100 * s).astype(np.float32)
    ties = (np.rint(x / s) + 0.5) * s                                   # ties (or as near as float32 gets)
    x = np.where(rng.random(shape) < 0.3, ties, x).astype(np.float32)
    x.reshape(-1)[::11] = np.float32(1e30) * np.sign(x.reshape(-1)[::11] + 0.5)      # saturation
    dtype = np.uint8 if u8 else np.int8
    got, want = both(monkeypatch, qdq_axis_graph(tuple(shape), scales, zps, dtype, axis), {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("axis", [1, 3])
def test_per_axis_large_tensor_threads_and_note(monkeypatch, axis):
    x = np.random.default_rng(2).standard_normal((1, 32, 56, 64)).astype(np.float32)
    c = x.shape[axis]
    scales = np.linspace(0.01, 0.05, c, dtype=np.float32)
    zps = np.arange(c) % 21 - 10
    got, want = both(monkeypatch, qdq_axis_graph(x.shape, scales, zps, np.int8, axis), {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])
    np.testing.assert_array_equal(got["y"], want["y"])
    plan = prepare(qdq_axis_graph(x.shape, scales, zps, np.int8, axis)(), {"x": x}, True, monkeypatch)
    assert all("native" in v and "per axis" in v for v in plan.notes.values()), plan.notes


def test_selftest_qdq():
    # SIMD against scalar: per-axis row layouts, and the per-tensor entry points
    assert native.lib.ei_selftest_qdq() == 0


def test_transpose_notes_native_path(monkeypatch):
    for shape, perm, word in (((1, 3, 8, 8), (0, 2, 3, 1), "interleave"), ((2, 8, 5, 6), (0, 2, 3, 1), "strided")):
        x = np.zeros(shape, np.int8)
        plan = prepare(transpose_graph(shape, "int8", perm)(), {"x": x}, True, monkeypatch)
        note = next(iter(plan.notes.values()))
        assert "native" in note and word in note, plan.notes


@pytest.mark.parametrize("u8", [False, True])
def test_exact_ties_round_half_to_even_per_axis(monkeypatch, isa, u8):
    # power-of-two scales: x / scale is exactly k + 0.5, so rounding must pick the even k
    scales = np.array([0.25, 0.5, 1.0, 2.0, 4.0], np.float32)
    k = np.arange(-140, 140, dtype=np.float32)
    x = ((k[:, None] + 0.5) * scales[None, :]).astype(np.float32).reshape(1, -1, 5)   # axis 2: 5 channels
    zps = np.array([0, 3, 128, 255, 1]) if u8 else np.array([0, 3, -1, -128, 127])
    got, want = both(monkeypatch, qdq_axis_graph(x.shape, scales, zps, np.uint8 if u8 else np.int8, 2), {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])
    np.testing.assert_array_equal(got["y"], want["y"])
    lo, hi = (0, 255) if u8 else (-128, 127)
    np.testing.assert_array_equal(got["q"], np.clip(np.rint(x / scales) + zps, lo, hi).astype(got["q"].dtype))
