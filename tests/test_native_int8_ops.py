"""int8 kernels of the MobileNetV3 / DB / YOLO families (kernels/int8_elementwise.py,
int8_spatial.py; native/src/int8_ops.c): the numpy kernels against independent references
(tests/int8_reference.py, loops following TFLite's reference kernels), and the native kernels
against the numpy ones bit for bit, SIMD and scalar paths; whole family graphs run with every op
native and agree with fp32.
"""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import int8_reference as ref
from edge_infer.backends.cpu import native
from edge_infer.backends.cpu import CpuBackend
from edge_infer.backends.cpu.kernels.int8_spatial import bilinear_axis, softmax_exp_table
from edge_infer.ir import Graph
from edge_infer.runtime import specialize

sys.path.insert(0, os.path.dirname(__file__))
SETTINGS = dict(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
needs_native = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")


@pytest.fixture(params=[-1, 0], ids=["simd", "scalar"])
def isa(request):
    if native.lib is None:
        yield None
        return
    old = native.set_isa_mask(request.param)
    yield request.param
    native.set_isa_mask(old)


def qd(scale, zp, axis=None):
    s = np.atleast_1d(np.float32(scale))
    return {"scale": [float(v) for v in s], "zero_point": [int(zp)] * s.size, "axis": axis}


def run_graph(make, feeds, native_on, monkeypatch):
    g = specialize(make(), {k: v.shape for k, v in feeds.items()})
    if not native_on:
        monkeypatch.setattr(native, "lib", None)
    try:
        ex = CpuBackend().prepare(g, threads=2)
    finally:
        monkeypatch.undo()
    return ex, ex.run(feeds)


def both(monkeypatch, make, feeds):
    """(native outputs, numpy outputs); the native plan must be all native steps."""
    if native.lib is None:
        _, slow = run_graph(make, feeds, False, monkeypatch)
        return slow, slow
    fast_ex, fast = run_graph(make, feeds, True, monkeypatch)
    assert all(getattr(s, "native_step", None) is not None for s in fast_ex.steps), fast_ex.notes
    slow_ex, slow = run_graph(make, feeds, False, monkeypatch)
    assert not any("native" in v for v in slow_ex.notes.values()), slow_ex.notes
    return fast, slow


def unary(op, shape, xq, yq, attrs=None, consts=()):
    def make():
        g = Graph(op)
        g.add_input("x", "int8", shape).quant = xq
        ins = ["x"]
        for name, arr, quant in consts:
            g.add_const(name, arr).quant = quant
            ins.append(name)
        g.add_node(op, ins, ["y"], **(attrs or {}))
        g.outputs = ["y"]
        g.tensors["y"].quant = yq
        return g
    return make


def rand8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


@settings(**SETTINGS)
@given(op=st.sampled_from(["HardSwish", "HardSigmoid", "Sigmoid", "SiLU", "Tanh", "LeakyRelu"]),
       shape=st.lists(st.integers(1, 40), min_size=1, max_size=4), sx=st.floats(0.005, 0.2),
       zx=st.integers(-128, 127), seed=st.integers(0, 2 ** 16))
def test_lut_activations(monkeypatch, isa, op, shape, sx, zx, seed):
    rng = np.random.default_rng(seed)
    fixed = {"Sigmoid": (1 / 256, -128), "Tanh": (1 / 128, 0)}
    sy, zy = fixed.get(op, (float(rng.uniform(0.005, 0.1)), int(rng.integers(-128, 128))))
    x = rand8(rng, shape)
    attrs = {"alpha": 0.1} if op == "LeakyRelu" else {}
    got, want = both(monkeypatch, unary(op, tuple(shape), qd(sx, zx), qd(sy, zy), attrs), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    fns = {"HardSwish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1), "HardSigmoid": lambda v: np.clip(v * 0.2 + 0.5, 0, 1),
           "Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "SiLU": lambda v: v / (1 + np.exp(-v)), "Tanh": np.tanh,
           "LeakyRelu": lambda v: np.where(v >= 0, v, 0.1 * v)}
    np.testing.assert_array_equal(want["y"], ref.lut(x, (sx, zx), (sy, zy), fns[op]))


@settings(**SETTINGS)
@given(c=st.integers(1, 70), hw=st.integers(1, 30), nhwc=st.booleans(), op=st.sampled_from(["Mul", "Add"]),
       swap=st.booleans(), seed=st.integers(0, 2 ** 16), requant=st.sampled_from(["fixed", "fp32"]))
@example(c=8, hw=24, nhwc=True, op="Mul", swap=False, seed=1, requant="fp32")  # an 8-channel gate: 2 rows a vector
@example(c=120, hw=17, nhwc=True, op="Mul", swap=True, seed=8, requant="fp32")
@example(c=4, hw=5, nhwc=True, op="Mul", swap=True, seed=2, requant="fixed")
@example(c=16, hw=7, nhwc=True, op="Mul", swap=False, seed=3, requant="fixed")
@example(c=48, hw=9, nhwc=True, op="Mul", swap=True, seed=4, requant="fixed")  # whole vectors, gate cycling
@example(c=16, hw=5, nhwc=True, op="Mul", swap=False, seed=5, requant="fixed")     # ... and a tail of 2 vectors
@example(c=120, hw=17, nhwc=True, op="Mul", swap=True, seed=6, requant="fixed")  # gate period 15 vectors, 2 threads
@example(c=72, hw=3, nhwc=True, op="Mul", swap=False, seed=7, requant="fixed")     # period 9 and a masked last vector
@example(c=200, hw=2, nhwc=True, op="Mul", swap=False, seed=9, requant="fp32")     # the text classifier's: period 25
@example(c=88, hw=3, nhwc=True, op="Mul", swap=True, seed=10, requant="fp32")     # period 11
@example(c=1, hw=9, nhwc=True, op="Mul", swap=False, seed=11, requant="fixed")    # 1- and 2-channel gates: period 1
@example(c=2, hw=6, nhwc=True, op="Mul", swap=True, seed=12, requant="fp32")
def test_broadcast_mul_add_squeeze_excite(monkeypatch, isa, c, hw, nhwc, op, swap, seed, requant):
    rng = np.random.default_rng(seed)
    big, small = ((1, hw, hw + 1, c), (1, 1, 1, c)) if nhwc else ((1, c, hw, hw + 1), (1, c, 1, 1))
    qa, qb, qy = qd(0.03, int(rng.integers(-128, 128))), qd(1 / 256, -128), qd(0.02, int(rng.integers(-20, 20)))
    a, b = rand8(rng, big), rand8(rng, small)

    def make():
        g = Graph("se")
        g.add_input("a", "int8", big).quant = qa
        g.add_input("b", "int8", small).quant = qb
        g.add_node(op, ["b", "a"] if swap else ["a", "b"], ["y"], **({"requant": requant} if op == "Mul" else {}))
        g.outputs = ["y"]
        g.tensors["y"].quant = qy
        return g
    got, want = both(monkeypatch, make, {"a": a, "b": b})
    np.testing.assert_array_equal(got["y"], want["y"])
    p = ((0.03, qa["zero_point"][0]), (1 / 256, -128))
    x1, x2 = (b, a) if swap else (a, b)
    p1, p2 = (p[1], p[0]) if swap else p
    x1, x2 = np.broadcast_arrays(x1, x2)
    if op == "Mul":
        r = ref.mul(x1, p1, x2, p2, (0.02, qy["zero_point"][0]), requant)
    else:
        r = ref.add(x1, p1, x2, p2, (0.02, qy["zero_point"][0]))
    np.testing.assert_array_equal(want["y"], r)


@pytest.mark.parametrize("c,hw", [(8, 12), (200, 3), (48, 5)])
def test_gate_mul_with_a_multiplier_above_one(monkeypatch, isa, c, hw):
    """A gate Mul whose output scale is below the product's (multiplier 0.03 / 256 / 1e-5 ~ 11.7:
    a left shift in the fixed-point requantization), values near the zero points so most
    products stay in range, others saturate: the broadcast constants of the tensor-wide
    multiplier (ei_vq16_prepare1) against the numpy kernel and the reference."""
    rng = np.random.default_rng(c)
    big, small = (1, hw, hw + 1, c), (1, 1, 1, c)
    qa, qb, qy = qd(0.03, 5), qd(1 / 256, -128), qd(1e-5, -3)
    a = (5 + rng.integers(-3, 4, big)).astype(np.int8)
    b = (-128 + rng.integers(0, 4, small)).astype(np.int8)
    a.reshape(-1)[:c] = 127                             # saturating products too
    b.reshape(-1)[: c // 2] = 127

    def make():
        g = Graph("se")
        g.add_input("a", "int8", big).quant = qa
        g.add_input("b", "int8", small).quant = qb
        g.add_node("Mul", ["a", "b"], ["y"], requant="fixed")
        g.outputs = ["y"]
        g.tensors["y"].quant = qy
        return g
    got, want = both(monkeypatch, make, {"a": a, "b": b})
    np.testing.assert_array_equal(got["y"], want["y"])
    x1, x2 = np.broadcast_arrays(a, b)
    r = ref.mul(x1, (0.03, 5), x2, (1 / 256, -128), (1e-5, -3), "fixed")
    np.testing.assert_array_equal(want["y"], r)
    assert len(np.unique(r)) > 8 and (r == 127).any() and (r == -128).any()


@settings(**SETTINGS)
@given(c=st.integers(1, 12), h=st.integers(1, 9), w=st.integers(1, 9), fy=st.integers(1, 3), fx=st.integers(1, 3),
       nhwc=st.booleans(), ctm=st.sampled_from(["half_pixel", "align_corners", "asymmetric"]),
       seed=st.integers(0, 2 ** 16))
def test_resize_bilinear_tflite_integer(monkeypatch, isa, c, h, w, fy, fx, nhwc, ctm, seed):
    rng = np.random.default_rng(seed)
    shape = (1, h, w, c) if nhwc else (1, c, h, w)
    oh, ow = h * fy, w * fx
    scales = np.array([1, fy, fx, 1] if nhwc else [1, 1, fy, fx], np.float32)
    x = rand8(rng, shape)

    def make():
        g = Graph("rs")
        g.add_input("x", "int8", shape).quant = qd(0.1, 2)
        g.add_const("roi", np.zeros(0, np.float32))
        g.add_const("sc", scales)
        g.add_node("Resize", ["x", "roi", "sc"], ["y"], mode="linear", coordinate_transformation_mode=ctm)
        g.outputs = ["y"]
        g.tensors["y"].quant = qd(0.1, 2)
        return g
    got, want = both(monkeypatch, make, {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    # TFLite ResizeBilinearInteger, element by element
    align, half = ctm == "align_corners", ctm == "half_pixel"
    ry, rx = bilinear_axis(oh, h, align, half), bilinear_axis(ow, w, align, half)
    xn = x if nhwc else x.transpose(0, 2, 3, 1)
    exp = np.zeros((1, oh, ow, c), np.int64)
    for oy in range(oh):
        y0, y1, dy = (int(v) for v in ry[oy])
        for ox in range(ow):
            x0, x1, dx = (int(v) for v in rx[ox])
            for ch in range(c):
                v = (int(xn[0, y0, x0, ch]) * (1024 - dy) * (1024 - dx) + int(xn[0, y1, x0, ch]) * dy * (1024 - dx)
                     + int(xn[0, y0, x1, ch]) * (1024 - dy) * dx + int(xn[0, y1, x1, ch]) * dy * dx)
                exp[0, oy, ox, ch] = ref.c_div(v + (1 << 19 if v > 0 else -(1 << 19)), 1 << 20)
    np.testing.assert_array_equal(want["y"], exp if nhwc else exp.transpose(0, 3, 1, 2))


@settings(**SETTINGS)
@given(cin=st.integers(1, 9), m=st.integers(1, 9), h=st.integers(1, 6), w=st.integers(1, 6), k=st.integers(1, 4),
       s=st.integers(1, 3), p=st.integers(0, 1), nhwc=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_conv_transpose_int8(monkeypatch, isa, cin, m, h, w, k, s, p, nhwc, seed):
    # NHWC: what the layout pass makes of a 2-D ConvTranspose; NCHW: a graph converted without it
    rng = np.random.default_rng(seed)
    k = max(k, s)               # k < s leaves outputs no tap reaches: the numpy kernel alone serves those
    p = min(p, k - 1)
    oh, ow = (h - 1) * s + k - 2 * p, (w - 1) * s + k - 2 * p
    if oh < 1 or ow < 1:
        return
    x = rand8(rng, (1, h, w, cin) if nhwc else (1, cin, h, w))
    wt = rng.integers(-127, 128, (cin, m, k, k), dtype=np.int8)
    bias = rng.integers(-5000, 5000, m).astype(np.int32)
    sw = rng.uniform(0.001, 0.01, m).astype(np.float32)
    zx, zy = int(rng.integers(-128, 128)), int(rng.integers(-30, 30))

    def make():
        g = Graph("ct")
        g.add_input("x", "int8", x.shape).quant = qd(0.05, zx)
        g.add_const("w", wt).quant = {"scale": [float(v) for v in sw], "zero_point": [0] * m, "axis": 1}
        g.add_const("b", bias)
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4}
        if nhwc:
            attrs["data_layout"] = "NHWC"
        g.add_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
        g.outputs = ["y"]
        g.tensors["y"].quant = qd(0.04, zy)
        return g
    got, want = both(monkeypatch, make, {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    xn = (x.transpose(0, 3, 1, 2) if nhwc else x).astype(np.int64) - zx
    acc = np.zeros((m, oh + 2 * p + s, ow + 2 * p + s), np.int64)
    for iy in range(h):
        for ix in range(w):
            acc[:, iy * s:iy * s + k, ix * s:ix * s + k] += np.einsum("c,cmyx->myx", xn[0, :, iy, ix], wt.astype(np.int64))
    acc = acc[:, p:p + oh, p:p + ow] + bias.reshape(m, 1, 1)
    exp = np.empty_like(acc)
    for c_ in range(m):
        qm, sh = ref.quantize_multiplier(float(np.float32(0.05)) * float(sw[c_]) / float(np.float32(0.04)))
        exp[c_] = ref.clamp8(ref.mbqm_array(acc[c_], qm, sh) + zy)
    exp = exp[None]
    np.testing.assert_array_equal(want["y"], exp.transpose(0, 2, 3, 1) if nhwc else exp)


@settings(**SETTINGS)
@given(rows=st.integers(1, 50), cols=st.integers(1, 300), sx=st.floats(0.01, 0.5), seed=st.integers(0, 2 ** 16))
@example(rows=40, cols=16, sx=0.2, seed=3).via("YOLO's DFL rows: the AVX-512 path")
@example(rows=7, cols=64, sx=0.05, seed=4).via("the widest row of the AVX-512 path")
@example(rows=7, cols=65, sx=0.05, seed=5).via("the narrowest row past it")
def test_softmax_int8(monkeypatch, isa, rows, cols, sx, seed):
    rng = np.random.default_rng(seed)
    x = rand8(rng, (1, rows, cols))
    got, want = both(monkeypatch, unary("Softmax", x.shape, qd(sx, 0), qd(1 / 256, -128), {"axis": -1}), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    f = np.float32(sx) * x.astype(np.float64)
    e = np.exp(f - f.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    # exact on the integer table; within one output step of the float softmax
    assert np.abs((want["y"].astype(np.float64) + 128) / 256 - p).max() <= 1 / 256 + 1e-9
    et = softmax_exp_table(sx).astype(np.int64)
    d = et[x.max(-1, keepdims=True).astype(np.int64) - x]
    np.testing.assert_array_equal(want["y"], np.minimum((512 * d + d.sum(-1, keepdims=True))
                                                         // (2 * d.sum(-1, keepdims=True)) - 128, 127))


@settings(**SETTINGS)
@given(c=st.integers(1, 40), hw=st.integers(1, 12), nhwc=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_prelu_per_channel(monkeypatch, isa, c, hw, nhwc, seed):
    rng = np.random.default_rng(seed)
    shape = (1, hw, hw, c) if nhwc else (1, c, hw, hw)
    slope = rng.integers(-128, 128, (c,) if nhwc else (c, 1, 1), dtype=np.int8)
    x = rand8(rng, shape)
    zx, zy = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    make = unary("PRelu", shape, qd(0.05, zx), qd(0.03, zy), consts=[("a", slope, qd(0.004, 7))])
    got, want = both(monkeypatch, make, {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    d = x.astype(np.int64) - zx
    av = np.broadcast_to(slope.astype(np.int64) - 7, shape)
    m1 = ref.quantize_multiplier(float(np.float32(0.05)) / float(np.float32(0.03)))
    m2 = ref.quantize_multiplier(float(np.float32(0.05)) * float(np.float32(0.004)) / float(np.float32(0.03)))
    exp = np.where(d >= 0, ref.mbqm_array(d, *m1), ref.mbqm_array(d * av, *m2)) + zy
    np.testing.assert_array_equal(want["y"], ref.clamp8(exp))


@settings(**SETTINGS)
@given(shapes=st.lists(st.integers(1, 20), min_size=1, max_size=4), c=st.integers(1, 9), nhwc=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_concat_requantizes_native(monkeypatch, isa, shapes, c, nhwc, seed):
    rng = np.random.default_rng(seed)
    params = [qd(float(rng.uniform(0.01, 0.1)), int(rng.integers(-128, 128))) for _ in shapes]
    params[0] = qd(0.05, 1)                                   # one input copied as is
    shp = [((1, 5, 6, k) if nhwc else (1, k, 5, 6)) for k in shapes]
    xs = {f"x{i}": rand8(rng, s) for i, s in enumerate(shp)}

    def make():
        g = Graph("cat")
        for i, s in enumerate(shp):
            g.add_input(f"x{i}", "int8", s).quant = params[i]
        g.add_node("Concat", list(xs), ["y"], axis=3 if nhwc else 1)
        g.outputs = ["y"]
        g.tensors["y"].quant = qd(0.05, 1)
        return g
    got, want = both(monkeypatch, make, xs)
    np.testing.assert_array_equal(got["y"], want["y"])
    parts = [ref.requant(xs[f"x{i}"], (params[i]["scale"][0], params[i]["zero_point"][0]), (0.05, 1))
             for i in range(len(shp))]
    np.testing.assert_array_equal(want["y"], np.concatenate(parts, axis=3 if nhwc else 1))


@pytest.mark.parametrize("family", ["mnv3", "db", "yolo"])
def test_family_graph_int8_all_native(tmp_path, family):
    """The converted int8 plan of each family graph runs every op natively (no Q/DQ island inside)
    and follows its fp32 plan."""
    import onnx
    import edge_infer
    from edge_infer.runtime import Runtime
    from int8_op_graphs import FAMILIES
    src = str(tmp_path / "m.onnx")
    onnx.save(FAMILIES[family](), src)
    rng = np.random.default_rng(0)
    calib = [{"input": rng.uniform(-1, 1, (1, 3, 32, 32) if family != "mnv3" else (1, 3, 16, 16)).astype(np.float32)}
             for _ in range(10)]
    edge_infer.convert(src, str(tmp_path / "q.eim"), quantize="int8", calib=calib)
    edge_infer.convert(src, str(tmp_path / "f.eim"))
    rq, rf = Runtime(str(tmp_path / "q.eim"), backend="cpu"), Runtime(str(tmp_path / "f.eim"), backend="cpu")
    g = rq.graph
    inner = [n for n in g.nodes if n.op in ("QuantizeLinear", "DequantizeLinear")
             and not (n.inputs[0] in g.inputs or n.outputs[0] in g.outputs)]
    assert not inner, [n.name for n in inner]
    feeds = calib[-1]
    ex = rq.plan({k: v.shape for k, v in feeds.items()})
    if native.lib is not None:
        slow = [n.op for n, s in zip(ex.nodes, ex.steps) if getattr(s, "native_step", None) is None]
        assert not slow, slow
    a, b = rq.run(feeds), rf.run(feeds)
    for k in b:
        ref_v = b[k].astype(np.float64)
        err = np.abs(a[k] - ref_v).max() / (np.abs(ref_v).max() + 1e-9)
        assert err < 0.2, (k, err)
