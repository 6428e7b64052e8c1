"""Native fp32 element-wise, softmax, copy and pooling kernels (native/src/elementwise.c,
pool.c) against the numpy kernels they replace, on random shapes, SIMD and scalar paths.

Oracle: the same one-node graph prepared with the native builders switched off
(``native.lib = None``: every builder returns None and the numpy closure serves).
"""
import ctypes

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from edge_infer.backends.cpu import native
from edge_infer.backends.cpu import CpuBackend
from edge_infer.backends.cpu.native import ops as native_ops
from edge_infer.ir import Graph
from edge_infer.runtime import specialize

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")

# -1: every ISA (AVX-512 for the exp-based activations and HardSwish on CPUs that have it),
# 1: AVX2 / NEON only (the vocabulary of simd_f32.h), 0: scalar
ISAS = [pytest.param(-1, id="simd"), pytest.param(native.AVX2, id="avx2"), pytest.param(0, id="scalar")]
EXACT = {"Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Neg", "Abs", "Sqrt", "Reciprocal",
         "Floor", "Ceil", "Round", "Identity"}
TRANSCENDENTAL = {"Exp", "Sigmoid", "Tanh", "SiLU", "Gelu"}
SETTINGS = dict(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def isa(request):
    old = native.set_isa_mask(request.param)
    yield request.param
    native.set_isa_mask(old)


def build(op, inputs, consts=None, attrs=None, n_out=1, native_on=True, monkeypatch=None):
    """(executable, feeds) of one ``op`` node over graph inputs ``inputs`` and constants."""
    g = Graph("t")
    names = []
    for k, arr in inputs.items():
        g.add_input(k, str(arr.dtype), arr.shape)
        names.append(k)
    for k, arr in (consts or {}).items():
        g.add_const(k, arr)
        names.append(k)
    outs = [f"y{i}" for i in range(n_out)]
    g.add_node(op, names, outs, **dict(attrs or {}))
    g.outputs = outs
    g = specialize(g, {k: v.shape for k, v in inputs.items()})
    if not native_on:
        monkeypatch.setattr(native, "lib", None)
    try:
        ex = CpuBackend().prepare(g, threads=2)
    finally:
        if not native_on:
            monkeypatch.undo()
    return ex


def both(monkeypatch, op, inputs, consts=None, attrs=None, n_out=1):
    """Outputs (native, numpy) of the node; asserts the native one really ran natively."""
    fast = build(op, inputs, consts, attrs, n_out)
    assert all(getattr(s, "native_step", None) is not None for s in fast.steps), f"{op} did not go native"
    slow = build(op, inputs, consts, attrs, n_out, native_on=False, monkeypatch=monkeypatch)
    assert all(getattr(s, "native_step", None) is None for s in slow.steps)
    with np.errstate(all="ignore"):
        return fast.run(inputs), slow.run(inputs)


def check(op, got, want, x=None):
    """Exact ops bit-exact; the others within 1e-5 relative, plus (for x*f(x) forms such as
    Gelu/SiLU, where 1 + tanh or 1 + erf cancels) a few float32 ulps of 1 times |x|."""
    for k in want:
        if op in EXACT:
            np.testing.assert_array_equal(got[k], want[k])
            continue
        g, w = got[k].astype(np.float64), want[k].astype(np.float64)
        slack = 1e-5 * np.abs(w) + 1e-30 + (4 * 2.0 ** -24 * np.abs(x) if x is not None else 1e-6)
        with np.errstate(invalid="ignore"):
            bad = ~((np.abs(g - w) <= slack) | (np.isnan(g) & np.isnan(w)) | (g == w))
            assert not bad.any(), (op, got[k][bad][:5], want[k][bad][:5], None if x is None else x[bad][:5])


shapes = st.lists(st.integers(1, 11), min_size=1, max_size=4).map(tuple)


def data(shape, seed, scale=4.0):
    x = np.asarray(np.random.default_rng(seed).standard_normal(shape) * scale, np.float32)
    flat = x.reshape(-1)
    flat[: min(4, flat.size)] = [0.0, -0.0, 0.5, -2.5][: min(4, flat.size)]     # ties and zeros
    return x


UNARY = [("Relu", {}), ("LeakyRelu", {"alpha": 0.1}), ("LeakyRelu", {"alpha": 3.0}), ("Sigmoid", {}),
         ("Tanh", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("SiLU", {}),
         ("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("Exp", {}), ("Neg", {}), ("Abs", {}),
         ("Sqrt", {}), ("Reciprocal", {}), ("Floor", {}), ("Ceil", {}), ("Round", {}), ("Identity", {})]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("op,attrs", UNARY, ids=[f"{o}{a.get('alpha', '')}{a.get('approximate', '')}" for o, a in UNARY])
@settings(**SETTINGS)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_unary_matches_numpy(monkeypatch, isa, op, attrs, shape, seed):
    x = data(shape, seed, scale=30.0 if op in ("Exp", "Sigmoid", "Tanh") else 4.0)
    if op == "Sqrt":
        x = np.abs(x)
    got, want = both(monkeypatch, op, {"x": x}, attrs=attrs)
    check(op, got, want, x)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_transcendentals_edges(monkeypatch, isa):
    # overflow/underflow bounds, nan and inf, the tanh series / exp crossover
    x = np.array([0, -0.0, 1e-30, -1e-8, 0.3999, 0.4, 0.4001, -0.4, 9, -9, 20, 44, 88.7, 88.8, -87.3, -88,
                  -103.9, -104, 200, -200, np.inf, -np.inf, np.nan, 3.0, -3.0, 1e-3], np.float32)
    for op in sorted(TRANSCENDENTAL) + ["HardSwish", "Relu"]:
        got, want = both(monkeypatch, op, {"x": x})
        check(op, got, want, x)


def test_avx512_activations_equal_avx2_bit_for_bit(monkeypatch):
    """The AVX-512 SiLU / Sigmoid / HardSwish run the AVX2 path's operations in its order:
    the same bits, edge values and tails (sizes not a multiple of 16) included."""
    if not native.features().get("avx512"):
        pytest.skip("no AVX-512 here")
    rng = np.random.default_rng(7)
    x = np.concatenate([np.array([0, -0.0, 88.7, 88.8, -87.3, -104, 200, -200, np.inf, -np.inf, np.nan],
                                 np.float32), (rng.standard_normal(1000) * 30).astype(np.float32)])
    for op in ("SiLU", "Sigmoid", "HardSwish"):
        for n in (len(x), 37, 16, 5):
            old = native.set_isa_mask(-1)
            (wide,) = both(monkeypatch, op, {"x": x[:n]})[0].values()
            native.set_isa_mask(native.AVX2)
            (narrow,) = both(monkeypatch, op, {"x": x[:n]})[0].values()
            native.set_isa_mask(old)
            assert np.array_equal(wide, narrow, equal_nan=True), (op, n)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_clip_constant_bounds(monkeypatch, isa):
    x = data((5, 13), 1)
    x[0, 0] = np.nan
    for consts in ({"lo": np.float32(0), "hi": np.float32(6)}, {"lo": np.float32(-1.5)}):
        got, want = both(monkeypatch, "Clip", {"x": x}, consts={k: np.array(v) for k, v in consts.items()})
        check("Clip", got, want)


@st.composite
def broadcast_pair(draw):
    """Output shape and two operand shapes that broadcast to it (dims dropped or set to 1)."""
    out = draw(st.lists(st.integers(1, 9), min_size=1, max_size=6))
    def operand():
        shape = [d if draw(st.booleans()) else 1 for d in out]
        return tuple(shape[draw(st.integers(0, len(shape))):])
    return operand(), operand()


BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu"]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("op", BINARY)
@settings(**SETTINGS)
@given(pair=broadcast_pair(), seed=st.integers(0, 2**16), const_b=st.booleans())
def test_binary_broadcasting_matches_numpy(monkeypatch, isa, op, pair, seed, const_b):
    sa, sb = pair
    if op == "PRelu":      # the slope broadcasts onto x (unidirectional)
        sa = np.broadcast_shapes(sa, sb)
    a, b = data(sa, seed), data(sb, seed + 1)
    if op == "Div":
        b[b == 0] = 0.5
    name = "Max" if op == "Max" else op
    ins, consts = ({"a": a}, {"b": b}) if const_b else ({"a": a, "b": b}, None)
    got, want = both(monkeypatch, name, ins, consts)
    np.testing.assert_array_equal(got["y0"], want["y0"])


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape_b", [(), (1,), (16, 1, 1), (1, 16, 1, 1), (7,), (1, 1, 1, 7)])
def test_binary_common_patterns(monkeypatch, isa, shape_b):
    # scalar, per-channel NCHW (C=16) and per-channel NHWC (C=7, last)
    a = data((2, 16, 5, 7), 3)
    b = data(shape_b, 4)
    got, want = both(monkeypatch, "Add", {"a": a}, {"b": b})
    np.testing.assert_array_equal(got["y0"], want["y0"])


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("op", ["Mul", "Sub", "Div"])
@pytest.mark.parametrize("shapes", [((1, 55, 57, 16), (1, 1, 1, 16)),     # a squeeze-excite gate, NHWC
                                    ((1, 1, 1, 16), (1, 55, 57, 16)),     # the repeated row first
                                    ((3, 7, 240), (240,)), ((2, 5, 256), (1, 256)),
                                    ((2, 5, 257), (257,)),                # too long to tile: row by row
                                    ((1, 9, 9, 16), (1, 9, 1, 16))])      # repeats over columns only
def test_binary_row_vector_operands(monkeypatch, isa, op, shapes):
    # one operand a row repeated over every row of the other (tiled once, many rows a call)
    a, b = data(shapes[0], 11), data(shapes[1], 12)
    b[b == 0] = 0.5
    a[a == 0] = 0.25
    got, want = both(monkeypatch, op, {"a": a}, {"b": b})
    np.testing.assert_array_equal(got["y0"], want["y0"])
    ins, out = (a, b), np.empty(np.broadcast_shapes(a.shape, b.shape), np.float32)
    with np.errstate(all="ignore"):
        ref = {"Mul": np.multiply, "Sub": np.subtract, "Div": np.divide}[op](*ins)
    for threads in (1, 2, 3):           # rows split over threads, each part tiled on its own
        native_ops.binary_step(op, a, b, out, threads, "Relu")()
        np.testing.assert_array_equal(out, np.maximum(ref, 0))


def test_in_place_unary_and_binary():
    # the arena lets element-wise ops write over input 0: out == in must work
    x = data((3, 1001), 5, scale=3.0)
    for op, p0, p1 in [("Relu", 0, 0), ("Sigmoid", 0, 0), ("HardSwish", 1 / 6, 0.5), ("LeakyRelu", 0.2, 0),
                       ("Tanh", 0, 0)]:
        buf = x.copy()
        out = np.empty_like(x)
        native_ops.unary_step(op, x, out, 1, p0, p1)()
        native_ops.unary_step(op, buf, buf, 1, p0, p1)()
        np.testing.assert_array_equal(buf, out, err_msg=op)
    a, b = data((4, 33), 6), data((33,), 7)
    out = np.empty_like(a)
    native_ops.binary_step("Mul", a, b, out, 1, "Relu")()
    native_ops.binary_step("Mul", a, b, a, 1, "Relu")()
    np.testing.assert_array_equal(a, out)
    np.testing.assert_array_equal(out, np.maximum(data((4, 33), 6) * b, 0))


def test_threads_split_large_tensors():
    x = data((3, 70001), 8)
    out1, out4 = np.empty_like(x), np.empty_like(x)
    native_ops.unary_step("Tanh", x, out1, 1)()
    native_ops.unary_step("Tanh", x, out4, 4)()
    np.testing.assert_array_equal(out1, out4)
    b = data((70001,), 9)
    native_ops.binary_step("Add", x, b, out1, 1, "Sigmoid")()
    native_ops.binary_step("Add", x, b, out4, 4, "Sigmoid")()
    np.testing.assert_array_equal(out1, out4)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@settings(**SETTINGS)
@given(rows=st.integers(1, 9), cols=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_softmax_last_axis(monkeypatch, isa, rows, cols, seed):
    x = data((rows, 1, cols), seed, scale=10.0)
    got, want = both(monkeypatch, "Softmax", {"x": x}, attrs={"axis": -1})
    np.testing.assert_allclose(got["y0"], want["y0"], rtol=1e-5, atol=1e-7)


def test_softmax_other_axis_stays_numpy():
    ex = build("Softmax", {"x": data((2, 5, 3), 1)}, attrs={"axis": 1})
    assert getattr(ex.steps[0], "native_step", None) is None


@settings(**SETTINGS)
@given(shape=st.lists(st.integers(1, 6), min_size=2, max_size=5).map(tuple), seed=st.integers(0, 2**16),
       dtype=st.sampled_from(["float32", "int64", "uint8", "float16"]))
def test_copies_match_numpy(monkeypatch, shape, seed, dtype):
    x = (data(shape, seed) * 10).astype(dtype)
    perm = list(np.random.default_rng(seed).permutation(len(shape)))
    got, want = both(monkeypatch, "Transpose", {"x": x}, attrs={"perm": perm})
    np.testing.assert_array_equal(got["y0"], want["y0"])
    axis = seed % len(shape)
    got, want = both(monkeypatch, "Concat", {"x": x, "z": x[..., :1].copy() if axis == len(shape) - 1 else x},
                     attrs={"axis": axis})
    np.testing.assert_array_equal(got["y0"], want["y0"])
    got, want = both(monkeypatch, "Reshape", {"x": x}, {"s": np.array([-1], np.int64)})
    np.testing.assert_array_equal(got["y0"], want["y0"])
    got, want = both(monkeypatch, "Slice", {"x": x}, {"st": np.array([shape[0] - 1], np.int64),
                                                     "en": np.array([-100], np.int64),
                                                     "ax": np.array([0], np.int64),
                                                     "sp": np.array([-2], np.int64)})
    np.testing.assert_array_equal(got["y0"], want["y0"])


POOLS = [("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
         ("MaxPool", {"kernel_shape": [2, 3], "strides": [1, 2], "dilations": [2, 1], "ceil_mode": 1}),
         ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 2, 1, 0], "dilations": [1, 2]}),
         ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 2]}),
         ("AveragePool", {"kernel_shape": [3, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
         ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
         ("GlobalAveragePool", {}), ("GlobalMaxPool", {})]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op,attrs", POOLS, ids=[f"{o}-{i}" for i, (o, _) in enumerate(POOLS)])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 2), c=st.integers(1, 19), h=st.integers(4, 12), w=st.integers(4, 12), seed=st.integers(0, 999))
def test_pools_match_numpy(monkeypatch, isa, layout, op, attrs, n, c, h, w, seed):
    shape = (n, h, w, c) if layout == "NHWC" else (n, c, h, w)
    attrs = dict(attrs, data_layout=layout) if layout == "NHWC" else attrs
    got, want = both(monkeypatch, op, {"x": data(shape, seed)}, attrs=attrs)
    if op == "GlobalAveragePool":       # numpy may sum pairwise (contiguous reduction axis)
        np.testing.assert_allclose(got["y0"], want["y0"], rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got["y0"], want["y0"])


def test_selftest_simd_against_scalar():
    fn = native.function("ei_selftest_elementwise", restype=ctypes.c_int)
    assert fn() == 0


@pytest.mark.parametrize("act,params", [("Relu", []), ("Clip", [0.0, 6.0]), ("LeakyRelu", [0.1]),
                                        ("HardSwish", []), ("SiLU", []), ("Sigmoid", [])])
def test_fused_epilogue_matches_numpy(monkeypatch, act, params):
    # FusedMatMul: y = act(x @ w + bias) and FusedConv 1x1, native (packed SGEMM, epilogue in the
    # tile) against numpy (BLAS base + numpy epilogue): the sums run in another order, so within
    # float32 rounding of the product, not bit-exact, even for the exact activations
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 17), np.float32)
    consts = {"w": rng.standard_normal((17, 9), np.float32), "b": rng.standard_normal(9).astype(np.float32)}
    attrs = {"activation": act, "activation_params": params}
    fast = build("FusedMatMul", {"x": x}, consts, attrs)
    slow = build("FusedMatMul", {"x": x}, consts, attrs, native_on=False, monkeypatch=monkeypatch)
    close(fast.run({"x": x}), slow.run({"x": x}))
    xc = {"x": rng.standard_normal((1, 8, 5, 5), np.float32)}
    consts = {"w": rng.standard_normal((4, 8, 1, 1), np.float32), "b": rng.standard_normal(4).astype(np.float32)}
    fast = build("FusedConv", xc, consts, attrs)
    slow = build("FusedConv", xc, consts, attrs, native_on=False, monkeypatch=monkeypatch)
    close(fast.run(xc), slow.run(xc))


def close(got, want):
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
