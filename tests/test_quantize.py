"""Int8 post-training quantization: fixed point, kernels, observers, calibration, the
quantizer end to end on the digits fixture, the report, QDQ export and the CLI.

Every int8 kernel is checked bit for bit against ``tests/int8_reference.py``.
"""
import json
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import int8_reference as R  # noqa: E402

from edge_infer.ir import Graph  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402


def qd(scale, zp, axis=None):
    return {"scale": [float(np.float32(v)) for v in np.atleast_1d(scale)],
            "zero_point": [int(v) for v in np.atleast_1d(zp)], "axis": axis}


def f32(v) -> float:
    return float(np.float32(v))


def run_one(op, inputs, out_q, attrs=None, consts=None, out_dtype="int8"):
    """Run a one-node graph: ``inputs`` [(name, array, quant)] fed (or constant when the name is
    in ``consts``); output int8 with ``out_q``."""
    g = Graph("t")
    feeds, names = {}, []
    for name, arr, q in inputs:
        names.append(name)
        if name == "":
            continue
        if consts and name in consts:
            g.add_tensor(name, arr.dtype.name, arr.shape, arr, q)
        else:
            g.add_input(name, arr.dtype.name, arr.shape).quant = q
            feeds[name] = arr
    g.add_node(op, names, ["y"], **(attrs or {}))
    g.tensors["y"].dtype = out_dtype
    g.tensors["y"].quant = out_q
    g.outputs = ["y"]
    return Runtime(g, backend="cpu").run(feeds)["y"]


def rand_q(rng, lo=0.005, hi=0.2):
    return f32(rng.uniform(lo, hi)), int(rng.integers(-128, 128))


# -- fixed point -----------------------------------------------------------------------------

def test_quantize_multiplier_matches_reference():
    from edge_infer.backends.cpu.kernels.int8_common import quantize_multiplier
    rng = np.random.default_rng(1)
    ms = list(rng.uniform(0, 1, 200)) + list(10.0 ** rng.uniform(-12, 4, 200)) + \
        [1.0, 0.5, 0.25, 2.0 ** -31, 2.0 ** -32, 2.0 ** 31, 1 - 2 ** -40, 0.0, 3e9]
    for m in ms:
        assert quantize_multiplier(float(m)) == R.quantize_multiplier(float(m)), m
        q, sh = quantize_multiplier(float(m))
        if 1e-9 < m < 1e9:
            assert (1 << 30) <= q < (1 << 31) and abs(q * 2.0 ** (sh - 31) / m - 1) < 1e-9


def test_requantization_bit_exact_random_and_edges():
    from edge_infer.backends.cpu.kernels.int8_common import requantize
    rng = np.random.default_rng(2)
    edges_x = [0, 1, -1, 2, -2, 3, -3, R.INT32_MAX, R.INT32_MIN, R.INT32_MIN + 1, R.INT32_MAX - 1,
               1 << 30, -(1 << 30), (1 << 15), -(1 << 15) - 1, 12345, -12345]
    edges_q = [0, 1, (1 << 30), (1 << 31) - 1, (1 << 30) + 1, 1518500250, -(1 << 30), R.INT32_MIN]
    edges_s = list(range(-31, 31))
    ties = [k * (1 << j) + d for k in range(-5, 6) for j in range(0, 31, 3) for d in (-1, 0, 1)]
    ties = [t for t in ties if R.INT32_MIN <= t <= R.INT32_MAX]
    xs = np.array(edges_x + ties + list(rng.integers(R.INT32_MIN, R.INT32_MAX, 300, endpoint=True))
                  + list(rng.integers(-70000, 70000, 300)), np.int64)
    for q in edges_q + list(rng.integers(1 << 30, 1 << 31, 12)):
        for sh in edges_s:
            got = requantize(xs, int(q), int(sh))
            want = R.mbqm_array(xs, int(q), int(sh))
            assert np.array_equal(got, want), (q, sh)
    # per-channel multipliers and shifts broadcasting over rows
    x = rng.integers(-(1 << 24), 1 << 24, (7, 33))
    q = rng.integers(1 << 30, 1 << 31, (7, 1))
    sh = rng.integers(-20, 4, (7, 1))
    assert np.array_equal(requantize(x, q, sh), R.mbqm_array(x, q, sh))
    # an output zero point folded into the rounding constant (or added after, for big shifts)
    from edge_infer.backends.cpu.kernels.int8_common import Requantizer
    for shifts in ((-20, 4), (-31, -22)):
        sh = rng.integers(*shifts, (7, 1))
        for zp in (-128, -5, 0, 127):
            got = Requantizer(q, sh, x.shape, offset=zp)(x.astype(np.int64).copy())
            assert np.array_equal(got, R.mbqm_array(x, q, sh) + zp), (shifts, zp)


def test_fp32_requantization_matches_reference():
    """The "fp32" mode's Requantizer (float32 multiplier, one rounding half to even) against the
    reference's scalar Python, ties and int32 extremes included; channels of q 0 give 0."""
    from edge_infer.backends.cpu.kernels.int8_common import Requantizer
    from edge_infer.ops.qmath import FP32_SHIFT, fp32_multipliers, fp32_ok
    rng = np.random.default_rng(11)
    scales = np.concatenate([rng.uniform(1e-4, 0.05, 5), [0.5, 0.25, 2.0 ** -32, np.nextafter(np.float32(1), np.float32(0))]])
    scales = scales.astype(np.float32)
    q, sh = fp32_multipliers(scales)
    assert np.all(sh == FP32_SHIFT) and fp32_ok(scales) and not fp32_ok([1.0]) and not fp32_ok([2.0 ** -33])
    x = np.concatenate([rng.integers(-(1 << 31), 1 << 31, 200), rng.integers(-3000, 3000, 200),
                        [0, 1, -1, 3, -3, 5, -5, (1 << 31) - 1, -(1 << 31)]])
    x = np.broadcast_to(x, (scales.size, x.size)).astype(np.int64)
    for zp in (0, -7, 127):
        got = Requantizer(q.reshape(-1, 1), sh.reshape(-1, 1), x.shape, offset=zp)(x.copy())
        want = np.array([[R.mbqm_fp32(int(v), scales[i]) + zp for v in row] for i, row in enumerate(x)])
        assert np.array_equal(got, want), zp
    # halves: x * 0.5 and x * 0.25 on odd x land on .5 / .25 / .75: ties round to even
    assert R.mbqm_fp32(3, 0.5) == 2 and R.mbqm_fp32(5, 0.5) == 2 and R.mbqm_fp32(-3, 0.5) == -2
    pad = Requantizer(np.array([[q[0]], [0]]), np.array([[FP32_SHIFT], [0]]), (2, 3))
    assert np.array_equal(pad(np.array([[1000, -1000, 7], [5, 6, 7]], np.int64)),
                          [[R.mbqm_fp32(1000, scales[0]), R.mbqm_fp32(-1000, scales[0]), R.mbqm_fp32(7, scales[0])],
                           [0, 0, 0]])


@pytest.mark.parametrize("requant,scale_y,why", [("bogus", 0.5, "is not one of"),
                                                  ("fp32", 1e-5, "needs multipliers in")])
def test_bad_requant_attribute_is_refused(requant, scale_y, why):
    """A graph (a hand-made or hostile artifact) asking for an unknown mode, or for "fp32" where
    a multiplier is 1 or more, gets a clear error naming it, not other bytes."""
    from edge_infer.errors import EdgeInferError
    a = np.arange(12, dtype=np.int8).reshape(3, 4)
    with pytest.raises(EdgeInferError, match=why):
        run_one("Mul", [("a", a, qd(0.1, 0)), ("b", a, qd(0.1, 0))], qd(scale_y, 0), attrs={"requant": requant})


def test_exact_float32_gemm_beyond_2_24():
    """Worst-case int8 products over K = 3000 (partial sums far past 2^24) stay exact."""
    from edge_infer.backends.cpu.kernels.int8_common import ChunkedGemm
    k = 3000
    a = np.full((3, k), -128, np.float32)
    b = np.full((k, 2), -128, np.float32)
    b[::7, 1] = 127
    acc = np.empty((3, 2), np.int64)
    g = ChunkedGemm(a, b, acc)
    g()
    assert g.chunks == 3
    assert np.array_equal(acc, a.astype(np.int64) @ b.astype(np.int64))


# -- kernels vs the integer reference ------------------------------------------------------------

def _conv_case(rng, kind):
    n = int(rng.integers(1, 3))
    c = int(rng.choice([2, 4, 6]))
    group, m = 1, int(rng.integers(1, 7))
    if kind == "depthwise":
        group, m = c, c * int(rng.integers(1, 3))
    elif kind == "grouped":
        group, m = 2, 2 * int(rng.integers(1, 4))
    k = 1 if kind == "pointwise" else int(rng.choice([2, 3]))
    h, w = int(rng.integers(k + 1, 9)), int(rng.integers(k + 1, 9))
    strides = [1, 1] if kind == "pointwise" else [int(v) for v in rng.integers(1, 3, 2)]
    pads = [0, 0, 0, 0] if kind == "pointwise" else [int(v) for v in rng.integers(0, 2, 4)]
    return n, c, group, m, k, h, w, strides, pads


@pytest.mark.parametrize("requant", ["fixed", "fp32"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("kind", ["im2col", "depthwise", "pointwise", "grouped"])
def test_int8_conv_bit_exact(kind, layout, requant):
    rng = np.random.default_rng(sum(map(ord, kind)))
    nhwc = layout == "NHWC"
    for trial in range(6):
        n, c, group, m, k, h, w, strides, pads = _conv_case(rng, kind)
        x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
        wt = rng.integers(-127, 128, (m, c // group, k, k)).astype(np.int8)
        big = 1 << 26 if trial == 5 else 20000              # past 2^24: the bias joins in int64
        b = rng.integers(-big, big, m).astype(np.int32)
        xq, yq = rand_q(rng, 0.01, 0.1), rand_q(rng, 0.05, 0.5)
        ws = rng.uniform(0.001, 0.02, m).astype(np.float32)
        act = ["", "Relu", "Clip"][trial % 3]
        params = [0.0, 6.0] if act == "Clip" else []
        oh = (h + pads[0] + pads[2] - k) // strides[0] + 1
        ow = (w + pads[1] + pads[3] - k) // strides[1] + 1
        z = rng.integers(-128, 128, (n, m, oh, ow)).astype(np.int8) if trial % 2 else None
        zq = rand_q(rng)
        t = (lambda v: np.ascontiguousarray(v.transpose(0, 2, 3, 1))) if nhwc else (lambda v: v)
        inputs = [("x", t(x), qd(*xq)), ("w", wt, qd(ws, [0] * m, 0)), ("b", b, qd(xq[0] * ws, [0] * m, 0)),
                  ("z", t(z), qd(*zq)) if z is not None else ("", None, None)]
        y = run_one("FusedConv", inputs, qd(*yq), consts={"w", "b"},
                    attrs=dict(kernel_shape=[k, k], strides=strides, pads=pads, dilations=[1, 1],
                               group=group, activation=act, activation_params=params, data_layout=layout,
                               requant=requant))
        want = t(R.conv2d(x, xq, wt, ws, b, yq, strides, pads, (1, 1), group, act, params, z,
                          zq if z is not None else None, requant=requant))
        assert np.array_equal(y, want), (kind, trial)


def test_int8_conv_large_k_chunks_and_nhwc():
    """K = 9 * 160 = 1440 > 1024 (two exact chunks); the NHWC kernel agrees with NCHW."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 160, 5, 5)).astype(np.int8)
    wt = rng.integers(-127, 128, (4, 160, 3, 3)).astype(np.int8)
    b = rng.integers(-1000, 1000, 4).astype(np.int32)
    ws = rng.uniform(1e-4, 1e-3, 4).astype(np.float32)
    xq, yq = (f32(0.02), -7), (f32(0.9), 5)
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    ins = [("x", x, qd(*xq)), ("w", wt, qd(ws, [0] * 4, 0)), ("b", b, qd(xq[0] * ws, [0] * 4, 0))]
    y = run_one("Conv", ins, qd(*yq), attrs, consts={"w", "b"})
    want = R.conv2d(x, xq, wt, ws, b, yq, (1, 1), (1, 1, 1, 1))
    assert np.array_equal(y, want)
    ins[0] = ("x", np.ascontiguousarray(x.transpose(0, 2, 3, 1)), qd(*xq))
    y2 = run_one("Conv", ins, qd(*yq), dict(attrs, data_layout="NHWC"), consts={"w", "b"})
    assert np.array_equal(y2.transpose(0, 3, 1, 2), want)


@pytest.mark.parametrize("requant", ["fixed", "fp32"])
def test_int8_gemm_and_matmul_bit_exact(requant):
    rng = np.random.default_rng(6)
    for trial in range(6):
        mr, k, n = int(rng.integers(1, 6)), int(rng.integers(1, 40)), int(rng.integers(1, 9))
        a = rng.integers(-128, 128, (mr, k)).astype(np.int8)
        bm = rng.integers(-127, 128, (k, n)).astype(np.int8)
        bias = rng.integers(-3000, 3000, n).astype(np.int32)
        aq, yq = rand_q(rng, 0.01, 0.1), rand_q(rng, 0.05, 0.5)
        bs = rng.uniform(0.001, 0.02, n).astype(np.float32)
        act = ["", "Relu"][trial % 2]
        want = R.matmul(a, aq, bm, bs, bias, yq, act=act, requant=requant)
        # Gemm with transB (B stored (N, K), per-channel axis 0)
        ins = [("a", a, qd(*aq)), ("b", np.ascontiguousarray(bm.T), qd(bs, [0] * n, 0)),
               ("c", bias, qd(aq[0] * bs, [0] * n, 0))]
        y = run_one("FusedGemm", ins, qd(*yq), dict(transB=1, alpha=1.0, beta=1.0, transA=0,
                                                   activation=act, activation_params=[], requant=requant),
                    consts={"b", "c"})
        assert np.array_equal(y, want), trial
        # FusedMatMul: (K, N) per-channel axis 1
        ins = [("a", a, qd(*aq)), ("b", bm, qd(bs, [0] * n, 1)), ("c", bias, qd(aq[0] * bs, [0] * n, 0))]
        y = run_one("FusedMatMul", ins, qd(*yq), dict(activation=act, activation_params=[], requant=requant),
                    consts={"b", "c"})
        assert np.array_equal(y, want), trial
        # MatMul of two computed int8 tensors (both with zero points)
        bq = rand_q(rng, 0.01, 0.05)
        y = run_one("MatMul", [("a", a, qd(*aq)), ("b", bm, qd(*bq))], qd(*yq))
        assert np.array_equal(y, R.matmul(a, aq, bm, [bq[0]] * n, None, yq, b_zp=bq[1])), trial


@pytest.mark.parametrize("op,requant", [("Add", "fixed"), ("Sub", "fixed"), ("Mul", "fixed"), ("Mul", "fp32")])
def test_int8_binary_bit_exact(op, requant):
    rng = np.random.default_rng(len(op))
    for shapes in [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (3, 1)), ((1, 5), (4, 1))]:
        a = rng.integers(-128, 128, shapes[0]).astype(np.int8)
        b = rng.integers(-128, 128, shapes[1]).astype(np.int8)
        q1, q2, qy = rand_q(rng), rand_q(rng), rand_q(rng, 0.05, 0.4)
        for consts in (None, {"b"}):
            y = run_one(op, [("a", a, qd(*q1)), ("b", b, qd(*q2))], qd(*qy), consts=consts,
                        attrs={"requant": requant} if op == "Mul" else {})
            want = R.mul(a, q1, b, q2, qy, requant) if op == "Mul" else R.add(a, q1, b, q2, qy, sub=op == "Sub")
            assert np.array_equal(y, want), (shapes, consts)


@pytest.mark.parametrize("op,attrs,fn", [
    ("Sigmoid", {}, lambda v: 1 / (1 + math.exp(-v))),
    ("Tanh", {}, math.tanh),
    ("HardSwish", {}, lambda v: v * min(max(v / 6 + 0.5, 0), 1)),
    ("LeakyRelu", {"alpha": 0.1}, lambda v: v if v >= 0 else 0.1 * v),
])
def test_int8_lookup_tables_bit_exact(op, attrs, fn):
    rng = np.random.default_rng(7)
    x = np.arange(-128, 128, dtype=np.int8).reshape(4, 64)
    xq, yq = (f32(0.05), 10), ((f32(1 / 256), -128) if op == "Sigmoid" else rand_q(rng, 0.01, 0.05))
    y = run_one(op, [("x", x, qd(*xq))], qd(*yq), attrs)
    assert np.array_equal(y, R.lut(x, xq, yq, fn))


def test_int8_relu_clip_concat_bit_exact():
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (2, 3, 5)).astype(np.int8)
    xq = (f32(0.05), -20)
    # same parameters: a pure clamp at the quantized zero
    y = run_one("Relu", [("x", x, qd(*xq))], qd(*xq))
    assert np.array_equal(y, np.maximum(x, -20).astype(np.int8))
    # own output parameters: requantized, then clamped
    yq = (f32(0.03), -128)
    y = run_one("Relu", [("x", x, qd(*xq))], qd(*yq))
    assert np.array_equal(y, R.requant(x, xq, yq, lo=-128))
    lo_c = np.array(0.0, np.float32)
    hi_c = np.array(6.0, np.float32)
    y = run_one("Clip", [("x", x, qd(*xq)), ("lo", lo_c, None), ("hi", hi_c, None)], qd(*yq),
                consts={"lo", "hi"})
    hi = min(127, -128 + R.round_away(6.0 / yq[0]))
    assert np.array_equal(y, R.requant(x, xq, yq, -128, hi))
    a = rng.integers(-128, 128, (1, 2, 3)).astype(np.int8)
    b = rng.integers(-128, 128, (1, 4, 3)).astype(np.int8)
    aq, bq, cq = (f32(0.1), 3), (f32(0.04), -9), (f32(0.1), 3)
    y = run_one("Concat", [("a", a, qd(*aq)), ("b", b, qd(*bq))], qd(*cq), {"axis": 1})
    assert np.array_equal(y, np.concatenate([a, R.requant(b, bq, cq)], axis=1))


def test_int8_pools_bit_exact():
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (2, 3, 7, 6)).astype(np.int8)
    xq = (f32(0.05), 17)
    for include_pad in (0, 1):
        attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 0], count_include_pad=include_pad,
                     ceil_mode=0, auto_pad="NOTSET", dilations=[1, 1])
        y = run_one("AveragePool", [("x", x, qd(*xq))], qd(*xq), attrs)
        assert np.array_equal(y, R.avg_pool2d(x, (3, 3), (2, 2), (1, 1, 1, 0), bool(include_pad), zp=17))
    y = run_one("GlobalAveragePool", [("x", x, qd(*xq))], qd(*xq))
    assert np.array_equal(y, R.global_avg_pool(x))
    y = run_one("MaxPool", [("x", x, qd(*xq))], qd(*xq),
                dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1], ceil_mode=0,
                     auto_pad="NOTSET", dilations=[1, 1], storage_order=0))
    xp = np.full((2, 3, 8, 7), -128, np.int64)
    xp[:, :, :7, :6] = x
    want = np.empty_like(y)
    for i in range(4):
        for j in range(3):
            want[:, :, i, j] = xp[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2].max(axis=(2, 3))
    assert np.array_equal(y, want)


def test_quantize_dequantize_linear():
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((3, 4, 5)) * 3).astype(np.float32)
    x.flat[:4] = [0.5 * 0.1, 1.5 * 0.1, -2.5 * 0.1, 1e6]          # ties and saturation
    scale, zp = f32(0.1), -3
    g = Graph("q")
    g.add_input("x", "float32", x.shape)
    g.add_const("s", np.array(scale, np.float32))
    g.add_const("z", np.array(zp, np.int8))
    g.add_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1)
    g.add_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)
    g.outputs = ["q", "y"]
    out = Runtime(g, backend="cpu").run({"x": x})
    assert np.array_equal(out["q"], R.quantize(x, scale, zp))
    assert np.array_equal(out["y"], R.dequantize(out["q"], scale, zp))
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    model = helper.make_model(helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("q", TensorProto.INT8, list(x.shape))],
        [numpy_helper.from_array(np.array(scale, np.float32), "s"), numpy_helper.from_array(np.array(zp, np.int8), "z")]),
        opset_imports=[helper.make_opsetid("", 21)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.array_equal(sess.run(None, {"x": x})[0], out["q"])


def test_dtype_dispatch_is_installed():
    from edge_infer.backends.cpu import KERNELS
    for op in ("Conv", "FusedConv", "Gemm", "MatMul", "Add", "Mul", "Concat", "Sigmoid", "Relu",
               "AveragePool", "GlobalAveragePool"):
        assert getattr(KERNELS[op], "int8_dispatch", False), op
    assert "QuantizeLinear" in KERNELS and "DequantizeLinear" in KERNELS


# -- observers -------------------------------------------------------------------------------------

def _observe(method, *batches, **kw):
    from edge_infer.quantize.observers import make_observer
    o = make_observer(method, **kw)
    for b in batches:
        o.update(np.asarray(b, np.float32))
    return o.range()


def test_observers_on_known_distributions():
    rng = np.random.default_rng(11)
    u = rng.uniform(-1.0, 3.0, 200_000)
    lo, hi = _observe("minmax", u[:1000], u[1000:])
    assert (lo, hi) == (float(np.float32(u).min()), float(np.float32(u).max()))
    # moving average: first batch sets the range, then 1% steps toward each new batch's min/max
    lo, hi = _observe("ema", [-1.0, 1.0], [-3.0, 5.0])
    assert lo == pytest.approx(-1.0 + 0.01 * (-3.0 + 1.0)) and hi == pytest.approx(1.0 + 0.01 * (5.0 - 1.0))
    # a ReLU-like output: the range always contains 0
    assert _observe("minmax", [0.5, 2.0])[0] == 0.0
    g = rng.standard_normal(1_000_000)
    lo, hi = _observe("percentile", g, percentile=99.9)
    assert hi == pytest.approx(3.09, rel=0.03) and lo == pytest.approx(-3.09, rel=0.03)
    # heavy outliers: minmax follows them, entropy / mse / percentile clip them
    x = np.concatenate([rng.standard_normal(1_000_000), [20.0, -18.0]])
    assert _observe("minmax", x) == (-18.0, 20.0)
    for method in ("entropy", "mse", "percentile"):
        lo, hi = _observe(method, x[:500_000], x[500_000:])
        assert 3.0 < hi < 8.0 and -8.0 < lo < -3.0, (method, lo, hi)
    # uniform data has no outliers: entropy and mse keep (almost) the whole range
    for method in ("entropy", "mse"):
        assert _observe(method, u)[1] > 0.85 * u.max(), method


def test_kl_threshold_is_tensorrt_like():
    from edge_infer.quantize.observers import kl_threshold_bin
    # a distribution with all its mass in the first 300 bins and a lone far outlier bin
    hist = np.zeros(2048)
    hist[:300] = np.linspace(1000, 10, 300)
    hist[2000] = 1
    i = kl_threshold_bin(hist)
    assert 250 <= i <= 600


def test_qparams_and_weight_scales():
    from edge_infer.quantize.observers import activation_qparams, quantize_weights, weight_scales
    for lo, hi in [(-1.0, 3.0), (0.0, 6.0), (-2.5, 0.0), (-1e-3, 1e-3)]:
        s, zp = activation_qparams(lo, hi)
        assert -128 <= zp <= 127 and s == float(np.float32(s)) and s > 0
        assert abs(s * (-128 - zp) - lo) <= s and abs(s * (127 - zp) - hi) <= s   # covers [lo, hi]
    assert activation_qparams(0.0, 6.0)[1] == -128                                # ReLU: zero at qmin
    w = np.stack([np.linspace(-1, 1, 9), np.linspace(-0.01, 0.02, 9), np.zeros(9)]).reshape(3, 1, 3, 3)
    s = weight_scales(w, 0)
    assert s.dtype == np.float32 and np.allclose(s, [1 / 127, 0.02 / 127, 1.0])
    q = quantize_weights(w, s, 0)
    assert q.dtype == np.int8 and q.min() >= -127 and np.abs(q[0]).max() == 127


# -- calibration sources ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits_fp32(tmp_path_factory):
    """The bundled digits model converted to fp32 (.eim path, its graph)."""
    from edge_infer.artifact import load_artifact
    from edge_infer.convert import convert
    from edge_infer.data import digits_model_path
    path = str(tmp_path_factory.mktemp("digits") / "digits_fp32.eim")
    convert(digits_model_path(), path)
    return path, load_artifact(path)[0]


def digits_calibration():
    """(calibration x, evaluation x, evaluation y): sklearn's training split (disjoint from the
    bundled held-out samples) when scikit-learn is installed, else held-out 0..99 / 100..449."""
    from edge_infer.data import load_digits_samples
    x, y = load_digits_samples()
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        return x[:100], x[100:], y[100:]
    d = load_digits()
    xtr, xte, _, _ = train_test_split(d.images.astype(np.float32) / 16, d.target, test_size=0.25,
                                      random_state=0, stratify=d.target)
    assert np.array_equal(xte[:, None], x)              # the README's split: the same held-out set
    return xtr[:200, None], x, y


def test_calibration_sources(digits_fp32, tmp_path, monkeypatch):
    from edge_infer.quantize.calibration import (CalibrationError, list_recipes, load_calibration,
                                                 sample_images_dir)
    _, g = digits_fp32
    assert {"imagenet", "yolo", "unit_range", "symmetric_range", "digits", "imagenet_caffe_bgr"} <= set(list_recipes())
    imgs = sample_images_dir()
    files = sorted(f for f in os.listdir(imgs) if f.endswith(".jpg"))
    assert len(files) >= 5 and all(os.path.getsize(os.path.join(imgs, f)) < 100_000 for f in files)
    assert os.path.isfile(os.path.join(imgs, "LICENSES.md"))
    feeds = load_calibration(imgs, g, recipe="digits", samples=4)
    assert len(feeds) == 4 and feeds[0]["input"].shape == (1, 1, 8, 8)
    assert feeds[0]["input"].dtype == np.float32 and 0 <= feeds[0]["input"].min() <= feeds[0]["input"].max() <= 1
    x = np.random.default_rng(0).random((7, 1, 8, 8)).astype(np.float32)
    np.save(tmp_path / "c.npy", x)
    np.savez(tmp_path / "c.npz", input=x)
    assert len(load_calibration(str(tmp_path / "c.npy"), g)) == 7
    assert len(load_calibration(str(tmp_path / "c.npz"), g, samples=3)) == 3
    got = load_calibration(iter([{"input": x[:2]}, x[2]]), g)             # dicts and bare samples
    assert len(got) == 3 and np.array_equal(got[2]["input"][0], x[2])
    assert len(load_calibration("random", g, samples=5)) == 5
    with pytest.raises(CalibrationError, match="calibration data"):
        load_calibration(None, g)
    with pytest.raises(CalibrationError, match="recipe"):
        load_calibration(imgs, g, recipe="no-such-recipe")
    # tqdm is optional: without it the progress bar is silently absent
    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert len(load_calibration(imgs, g, recipe="digits", samples=2, show_progress=True)) == 2


def test_calibration_from_video(digits_fp32, tmp_path):
    cv2 = pytest.importorskip("cv2")
    from edge_infer.quantize.calibration import load_calibration
    _, g = digits_fp32
    path = str(tmp_path / "clip.avi")
    vw = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 10, (32, 24))
    if not vw.isOpened():
        pytest.skip("no MJPG writer")
    for k in range(12):
        vw.write(np.full((24, 32, 3), 20 * k, np.uint8))
    vw.release()
    feeds = load_calibration(path, g, recipe="digits", samples=5)
    assert len(feeds) == 5 and feeds[0]["input"].shape == (1, 1, 8, 8)
    means = [f["input"].mean() for f in feeds]
    assert means == sorted(means, reverse=True)              # frames spread over the clip (inverted)


# -- the digits fixture end to end -----------------------------------------------------------------

def _accuracy(graph_or_path, x, y):
    return float((Runtime(graph_or_path, backend="cpu").run({"input": x})["logits"].argmax(1) == y).mean())


@pytest.mark.parametrize("method", ["minmax", "ema", "percentile", "entropy", "mse"])
def test_digits_int8_accuracy_per_method(digits_fp32, method):
    from edge_infer.quantize import quantize_model
    path, g = digits_fp32
    cal, xe, ye = digits_calibration()
    q, rep = quantize_model(g, [cal], calib_method=method)
    fp32, int8 = _accuracy(path, xe, ye), _accuracy(q, xe, ye)
    assert fp32 - int8 <= 0.01, (method, fp32, int8)
    assert rep["nodes"]["float32"] == 0 and rep["outputs"]["logits"]["top1_agreement"] >= 0.97
    assert all(n.op in ("QuantizeLinear", "DequantizeLinear") or q.tensors[n.outputs[0]].dtype == "int8"
               for n in q.nodes)
    assert rep["weights"]["ratio"] <= 0.3


def test_digits_convert_artifact_size_report_and_qdq_export(digits_fp32, tmp_path):
    from edge_infer.artifact import load_artifact
    from edge_infer.convert import convert
    from edge_infer.data import digits_model_path
    from edge_infer.quantize.export_onnx import export_qdq
    fp32_path, g32 = digits_fp32
    cal, xe, ye = digits_calibration()
    np.save(tmp_path / "cal.npy", cal)
    out, rep_path = str(tmp_path / "d8.eim"), str(tmp_path / "report.json")
    rep = convert(digits_model_path(), out, quantize="int8", calib=str(tmp_path / "cal.npy"),
                  calib_method="percentile", report=rep_path)
    g8, meta = load_artifact(out)
    wb = lambda g: sum(t.data.nbytes for t in g.tensors.values() if t.is_const)
    assert wb(g8) <= 0.3 * wb(g32)
    assert rep["artifact_bytes"] < os.path.getsize(fp32_path)
    assert meta["quantization"]["calibration"]["method"] == "percentile"
    # int8 tensors carry TFLite-style parameters; weights per channel, biases int32
    for n in g8.nodes:
        if n.op in ("FusedConv", "Gemm"):
            w, b = g8.tensors[n.inputs[1]], g8.tensors[n.inputs[2]]
            assert w.dtype == "int8" and w.quant["axis"] is not None and set(w.quant["zero_point"]) == {0}
            assert len(w.quant["scale"]) == w.shape[w.quant["axis"]] and np.abs(w.data).max() <= 127
            assert b.dtype == "int32"
            x = g8.tensors[n.inputs[0]]
            assert x.dtype == "int8" and -128 <= x.quant["zero_point"][0] <= 127
    report = json.load(open(rep_path))
    assert {"layers", "outputs", "float_nodes", "accuracy_drop", "weights"} <= set(report)
    layer = next(e for e in report["layers"] if e["node"] == "conv2")
    assert layer["precision"] == "int8" and layer["sqnr_db"] > 20 and layer["cosine"] > 0.99
    assert fp32_acc_drop_ok(fp32_path, out, xe, ye)
    # ONNX QDQ export runs in onnxruntime and agrees with our int8 runtime
    ort = pytest.importorskip("onnxruntime")
    onnx_path = str(tmp_path / "d8_qdq.onnx")
    model, counts = export_qdq(g8, onnx_path)
    assert counts["QuantizeLinear"] >= 1 and counts["DequantizeLinear"] >= 5
    per_axis = [n for n in model.graph.node if n.op_type == "DequantizeLinear"
                and any(a.name == "axis" for a in n.attribute)]
    assert per_axis                                                       # per-channel weights
    # onnxruntime's fused QLinear kernels on CPUs without VNNI multiply u8 x s8 with vpmaddubsw,
    # whose int16 pair sums saturate (tens of steps off on digits); its unfused graph
    # (DequantizeLinear -> float op -> QuantizeLinear) is the exact QDQ semantics
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {"input": xe})[0]
    ours = Runtime(out, backend="cpu").run({"input": xe})["logits"]
    step = g8.tensors[g8.nodes[-1].inputs[0]].quant["scale"][0]
    assert float((theirs.argmax(1) == ours.argmax(1)).mean()) >= 0.99
    assert np.abs(theirs - ours).max() / step <= 4.0


def fp32_acc_drop_ok(fp32_path, int8_path, x, y) -> bool:
    return _accuracy(fp32_path, x, y) - _accuracy(int8_path, x, y) <= 0.01


def test_keep_float_and_accuracy_budget(digits_fp32):
    from edge_infer.quantize import quantize_graph
    from edge_infer.quantize.calibration import load_calibration
    _, g = digits_fp32
    cal, xe, ye = digits_calibration()
    feeds = load_calibration([cal[:64]], g)
    q, rep = quantize_graph(g, feeds, keep_float=["conv1", "fc"])
    ops = {n.name: n for n in q.nodes}
    assert q.tensors[ops["conv1"].outputs[0]].dtype == "float32" and q.tensors[ops["conv2"].inputs[0]].dtype == "int8"
    reasons = {e["node"]: e["reason"] for e in rep["float_nodes"]}
    assert {k for k, v in reasons.items() if v == "keep_float"} == {"conv1", "fc"}
    # besides: at most an NHWC graph's input Transpose, feeding the fp32 conv1
    assert all(e["op"] == "Transpose" for e in rep["float_nodes"] if e["node"] not in ("conv1", "fc"))
    assert sum(n.op in ("QuantizeLinear", "DequantizeLinear") for n in q.nodes) == 2
    # a budget the full int8 model misses on these (out-of-range) held-out inputs: the most
    # damaging layers go back to fp32 until it holds
    hard = [{"input": (xe[i:i + 1] * 4.0).astype(np.float32)} for i in range(0, 60)]
    q2, rep2 = quantize_graph(g, feeds, max_accuracy_drop=0.0, eval_feeds=hard)
    b = rep2["budget"]
    assert b["initial_drop"] > 0 and b["met"] and b["final_drop"] == 0.0
    assert b["kept_float"] and len(b["sensitivity"]) >= 5
    assert {e["node"] for e in rep2["float_nodes"]} >= set(b["kept_float"])
    assert all(e["reason"] == "keep_float" for e in rep2["float_nodes"] if e["node"] in b["kept_float"])


# -- more ops through the whole converter --------------------------------------------------------

def _multi_op_model(path):
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    from onnx_models import make_model, vi
    rng = np.random.default_rng(0)

    def w(name, *shape, s=None):
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return numpy_helper.from_array((rng.standard_normal(shape) * (s or np.sqrt(2 / fan))).astype(np.float32), name)
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8, s=0.1), w("w2", 8, 8, 3, 3), w("w3", 8, 8, 1, 1), w("b3", 8, s=0.1),
             w("wm", 16, 10), w("bm", 10, s=0.1), numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array(0.25, np.float32), "quarter")]
    N = helper.make_node
    nodes = [
        N("Conv", ["x", "w1", "b1"], ["a0"], pads=[1, 1, 1, 1]), N("Relu", ["a0"], ["a"]),
        N("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1]), N("Add", ["a", "b"], ["c"]), N("Relu", ["c"], ["d"]),
        N("Conv", ["d", "w3", "b3"], ["e"]), N("Sigmoid", ["e"], ["f"]), N("Mul", ["d", "f"], ["g"]),
        N("HardSwish", ["g"], ["h"]), N("AveragePool", ["h"], ["i"], kernel_shape=[2, 2], strides=[2, 2]),
        N("MaxPool", ["h"], ["j"], kernel_shape=[2, 2], strides=[2, 2]), N("Concat", ["i", "j"], ["k"], axis=1),
        N("Pad", ["k", "pads"], ["l"]), N("Resize", ["l", "", "scales"], ["m"], mode="nearest"),
        N("GlobalAveragePool", ["m"], ["n"]), N("Flatten", ["n"], ["o"]),
        N("MatMul", ["o", "wm"], ["p0"]), N("Add", ["p0", "bm"], ["p"]), N("Mul", ["p", "half"], ["q"]),
        N("Sub", ["q", "quarter"], ["q2"]), N("Tanh", ["q2"], ["r"]), N("Softmax", ["r"], ["out"], axis=-1)]
    model = make_model(nodes, [vi("x", ["N", 3, 16, 16])], [vi("out", ["N", 10])], opset=17, initializers=inits)
    onnx.save(model, path)


@pytest.mark.parametrize("opt_level", [1, 2])
def test_multi_op_model_int8_and_qdq(tmp_path, opt_level):
    """Relu/Add/Mul/Sub/Sigmoid/HardSwish/Tanh/pools/Concat/Pad/Resize/MatMul (separate at opt
    level 1, fused at 2) and Softmax all int8: one QuantizeLinear in, one DequantizeLinear out."""
    ort = pytest.importorskip("onnxruntime")
    from edge_infer.artifact import load_artifact
    from edge_infer.convert import convert
    from edge_infer.quantize.export_onnx import export_qdq
    src, out = str(tmp_path / "m.onnx"), str(tmp_path / "m8.eim")
    _multi_op_model(src)
    rep = convert(src, out, opt_level=opt_level, quantize="int8", calib="random", calib_samples=24)["quantization"]
    assert rep["float_nodes"] == []
    q, _ = load_artifact(out)
    assert [n for n in q.nodes if n.op == "Softmax"][0].outputs[0] in {n.inputs[0] for n in q.nodes
                                                                      if n.op == "DequantizeLinear"}
    assert sum(n.op in ("QuantizeLinear", "DequantizeLinear") for n in q.nodes) == 2
    x = np.random.default_rng(5).standard_normal((32, 3, 16, 16)).astype(np.float32)
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ours = Runtime(out, backend="cpu").run({"x": x})["out"]
    assert float((ref.argmax(1) == ours.argmax(1)).mean()) >= 0.9 and np.abs(ref - ours).max() < 0.05
    export_qdq(q, str(tmp_path / "m_qdq.onnx"))
    theirs = ort.InferenceSession(str(tmp_path / "m_qdq.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert float((theirs.argmax(1) == ours.argmax(1)).mean()) >= 0.95 and np.abs(theirs - ours).max() < 0.02


# -- command line ------------------------------------------------------------------------------------

def test_cli_convert_quantize_and_export(tmp_path, capsys):
    from edge_infer.cli import main
    from edge_infer.data import digits_model_path
    cal, _, _ = digits_calibration()
    np.save(tmp_path / "cal.npy", cal[:80])
    out, rep = str(tmp_path / "d8.eim"), str(tmp_path / "r.json")
    assert main(["convert", digits_model_path(), "-o", out, "--quantize", "int8", "--calib", str(tmp_path / "cal.npy"),
                 "--calib-method", "entropy", "--keep-float", "fc", "--report", rep]) == 0
    text = capsys.readouterr().out
    assert "int8 quantization (entropy calibration" in text and "top-1 agreement" in text
    assert "fc (Gemm): keep_float" in text and os.path.isfile(rep)
    assert main(["convert", digits_model_path(), "-o", out, "--quantize", "int8", "--calib",
                 sample_dir(), "--calib-recipe", "digits", "--max-accuracy-drop", "0.05"]) == 0
    assert "accuracy budget 0.05" in capsys.readouterr().out
    assert main(["convert", digits_model_path(), "-o", out, "--quantize", "int8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--calib" in err and "random" in err
    assert main(["export", out, "--format", "onnx-qdq", "-o", str(tmp_path / "d8.onnx")]) == 0
    assert "QuantizeLinear" in capsys.readouterr().out and os.path.isfile(tmp_path / "d8.onnx")


def sample_dir():
    from edge_infer.quantize.calibration import sample_images_dir
    return sample_images_dir()


def test_int8_tables_in_place():
    """Sigmoid may write over its input's buffer (the arena aliases them): still exact."""
    x = np.arange(-128, 128, dtype=np.int8).reshape(2, 128)
    xq, rq, yq = (f32(0.05), 10), (f32(0.04), -128), (f32(1 / 256), -128)
    g = Graph("t")
    g.add_input("x", "int8", x.shape).quant = qd(*xq)
    g.add_node("Relu", ["x"], ["r"])
    g.add_node("Sigmoid", ["r"], ["s"])
    g.add_node("Relu", ["s"], ["y"])                                   # a clamp at s's parameters
    for name, q in (("r", rq), ("s", yq), ("y", yq)):
        g.tensors[name].dtype = "int8"
        g.tensors[name].quant = qd(*q)
    g.outputs = ["y"]
    rt = Runtime(g, backend="cpu")
    y = rt.run({"x": x})["y"]
    ex = rt.plan({"x": x.shape})
    assert np.shares_memory(ex.buffers["r"], ex.buffers["s"])          # really in place
    want = R.lut(R.requant(x, xq, rq, lo=-128), rq, yq, lambda v: 1 / (1 + math.exp(-v)))
    assert np.array_equal(y, want)


@pytest.mark.filterwarnings("ignore::edge_infer.errors.QuantizationDriftWarning")
def test_qdq_export_of_a_yolo_detector_loads_in_onnxruntime_fully_optimized(tmp_path):
    """A channels-last float op fed by an int8 tensor (YOLO's DFL conv after the int8 Softmax)
    used to export as DequantizeLinear -> Transpose -> Conv, which onnxruntime's extended
    optimizer turns into a QuantizeLinear it then refuses to load (int8 output type, uint8 zero
    point). The export transposes on the integer side instead; the model loads at every
    optimization level and computes what its unoptimized form does."""
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from family_models import yolo_detector
    from edge_infer.artifact import load_artifact
    from edge_infer.convert import convert
    from edge_infer.quantize.export_onnx import export_qdq
    src, out, qdq = str(tmp_path / "y.onnx"), str(tmp_path / "y8.eim"), str(tmp_path / "y_qdq.onnx")
    onnx.save(yolo_detector(96), src)
    convert(src, out, quantize="int8", calib="random", calib_samples=4, allow_drift=True)
    g8, _ = load_artifact(out)
    model, _ = export_qdq(g8, qdq)
    assert any(n.op_type == "Softmax" for n in model.graph.node)
    x = np.random.default_rng(3).random((1, 3, 96, 96), dtype=np.float32)
    runs = {}
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        runs[level] = ort.InferenceSession(qdq, so, providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    ours = Runtime(out, backend="cpu").run({"images": x})["output0"]
    exact, fused = runs["ORT_DISABLE_ALL"], runs["ORT_ENABLE_ALL"]
    assert exact.shape == fused.shape == ours.shape == (1, 84, 189)
    # class probabilities (rows 4:) are int8 with step 1/256: a few steps of rounding apart at most
    assert np.abs(fused[:, 4:] - exact[:, 4:]).max() <= 8 / 256
    assert np.abs(ours[:, 4:] - exact[:, 4:]).max() <= 8 / 256
    # pixel boxes: the same up to a few percent of the image
    assert np.median(np.abs(ours[:, :4] - exact[:, :4])) <= 0.03 * 96
