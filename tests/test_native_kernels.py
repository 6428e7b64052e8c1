"""Native int8 / depthwise kernels (edge_infer/backends/cpu/native/src) against the numpy kernels.

Each case runs the same one-node graph four ways: the numpy kernel (``native.lib`` patched
to None before prepare), the native kernel with every ISA feature of this CPU (AVX-512 VNNI
or AVX2 here; NEON sdot on an ARM host), with AVX-512 and the dot product masked off (AVX2 /
NEON smlal) and with the ISA mask cleared (the portable scalar path). int8 results must be bit-identical, fp32 within 1e-5 relative. The numpy int8 kernels
are themselves checked bit for bit against tests/int8_reference.py (test_quantize.py).
"""
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from edge_infer.backends.cpu import native  # noqa: E402
from edge_infer.backends.cpu.executor import CpuExecutable  # noqa: E402
from edge_infer.ir import Graph  # noqa: E402
from edge_infer.runtime import specialize  # noqa: E402

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def qd(scale, zp, axis=None):
    return {"scale": [float(np.float32(v)) for v in np.atleast_1d(scale)],
            "zero_point": [int(v) for v in np.atleast_1d(zp)], "axis": axis}


def one_node(op, inputs, out_q, attrs, consts, out_dtype="int8"):
    """(graph, feeds): ``inputs`` [(name, array, quant)], names in ``consts`` are constants."""
    g = Graph("t")
    feeds, names = {}, []
    for name, arr, q in inputs:
        names.append(name)
        if not name:
            continue
        if name in consts:
            g.add_tensor(name, arr.dtype.name, arr.shape, arr, q)
        else:
            g.add_input(name, arr.dtype.name, arr.shape).quant = q
            feeds[name] = arr
    g.add_node(op, names, ["y"], **attrs)
    g.tensors["y"].dtype = out_dtype
    g.tensors["y"].quant = out_q
    g.outputs = ["y"]
    return g, feeds


#: ISA masks of the native modes: every feature; every feature but AMX (the AVX-512 VNNI int8
#: GEMM where a CPU has AMX, else the same as native); without AVX-512 and the dot product (the
#: AVX2 / NEON smlal micro-kernels); none (the portable scalar code)
MASKS = {"native": -1, "no_amx": -1 & ~native.AMX, "base": native.AVX2 | native.NEON, "scalar": 0}


def run_three_ways(g, feeds, threads=2):
    """{mode: (output, note)} for mode in numpy / native / base / scalar (see MASKS)."""
    g = specialize(g, {k: v.shape for k, v in feeds.items()})
    out = {}
    for mode in ("numpy", *MASKS):
        with pytest.MonkeyPatch.context() as m:
            if mode == "numpy":
                m.setattr(native, "lib", None)
            old = native.set_isa_mask(MASKS[mode]) if mode != "numpy" else None
            try:
                ex = CpuExecutable(g, threads)
                y = ex.run(feeds)["y"]
            finally:
                if old is not None:
                    native.set_isa_mask(old)
        out[mode] = (y, ex.notes.get(g.nodes[0].name, ""))
    return out


def assert_native_matches(res, want_native=True, exact=True):
    ref, ref_note = res["numpy"]
    assert "native" not in ref_note
    for mode in MASKS:
        y, note = res[mode]
        if want_native:
            assert "native" in note, (mode, note)
        if exact:
            assert y.dtype == ref.dtype and np.array_equal(y, ref), (mode, note)
        else:
            tol = 1e-5 * max(1.0, float(np.abs(ref).max()))
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=tol, err_msg=f"{mode}: {note}")
    if want_native:
        assert "scalar" in res["scalar"][1]


# -- int8 conv / GEMM ------------------------------------------------------------------------------

def int8_conv_case(rng, n, c, m, h, w, k, stride, pad, dil, layout, act, residual, big_bias=False, requant="fixed"):
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    wt = rng.integers(-127, 128, (m, c, k, k)).astype(np.int8)
    b = rng.integers(-(1 << 20) if big_bias else -20000, (1 << 20) if big_bias else 20000, m).astype(np.int32)
    xq = (float(np.float32(rng.uniform(0.01, 0.1))), int(rng.integers(-128, 128)))
    yq = (float(np.float32(rng.uniform(0.05, 2.0))), int(rng.integers(-128, 128)))
    ws = rng.uniform(0.0005, 0.02, m).astype(np.float32)
    oh = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    nhwc = layout == "NHWC"
    t = (lambda v: np.ascontiguousarray(v.transpose(0, 2, 3, 1))) if nhwc else (lambda v: v)
    ins = [("x", t(x), qd(*xq)), ("w", wt, qd(ws, [0] * m, 0)), ("b", b, qd(xq[0] * ws, [0] * m, 0))]
    if residual:
        z = rng.integers(-128, 128, (n, m, oh, ow)).astype(np.int8)
        ins.append(("z", t(z), qd(float(np.float32(rng.uniform(0.01, 0.3))), int(rng.integers(-128, 128)))))
    attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, dilations=[dil, dil], group=1,
                 activation=act, activation_params=[0.0, 6.0] if act == "Clip" else [], data_layout=layout,
                 requant=requant)
    return one_node("FusedConv", ins, qd(*yq), attrs, {"w", "b"})


@SETTINGS
@given(seed=st.integers(0, 2 ** 31), n=st.integers(1, 2), c=st.integers(1, 37), m=st.integers(1, 41),
       h=st.integers(1, 11), w=st.integers(1, 11), k=st.sampled_from([1, 1, 2, 3, 5]), stride=st.integers(1, 2),
       pad=st.integers(0, 2), dil=st.integers(1, 2), layout=st.sampled_from(["NHWC", "NCHW"]),
       act=st.sampled_from(["", "Relu", "Clip"]), residual=st.booleans(), requant=st.sampled_from(["fixed", "fp32"]))
def test_int8_conv_random_shapes(seed, n, c, m, h, w, k, stride, pad, dil, layout, act, residual, requant):
    if h + 2 * pad < dil * (k - 1) + 1 or w + 2 * pad < dil * (k - 1) + 1:
        pad = pad + dil * (k - 1)
    rng = np.random.default_rng(seed)
    g, feeds = int8_conv_case(rng, n, c, m, h, w, k, stride, pad, dil, layout, act, residual, requant=requant)
    assert_native_matches(run_three_ways(g, feeds, threads=1 + seed % 3))


@pytest.mark.parametrize("c,k,layout", [(1100, 1, "NHWC"), (130, 3, "NHWC"), (1030, 1, "NCHW"), (1, 1, "NHWC"),
                                        (3, 3, "NHWC")])
def test_int8_conv_large_k_and_k1(c, k, layout):
    """K = 1100, 1170, 1030 (past the numpy kernels' 1024 K-chunk), K = 1, first-layer K = 27."""
    rng = np.random.default_rng(c + k)
    g, feeds = int8_conv_case(rng, 1, c, 19, 6, 5, k, 1, k // 2, 1, layout, "Relu", True, big_bias=True)
    assert_native_matches(run_three_ways(g, feeds))


@pytest.mark.parametrize("c,k,stride,pad,hw", [
    (3, 3, 2, 1, (33, 47)), (3, 3, 1, 1, (9, 70)), (3, 3, 2, 0, (16, 41)), (1, 3, 1, 0, (5, 64)),
    (7, 3, 2, 1, (12, 30)), (3, 2, 2, 0, (8, 26)), (4, 3, 1, 2, (6, 23)), (2, 5, 2, 2, (11, 40)), (3, 1, 2, 0, (9, 50))])
def test_int8_conv_first_layer_windows(c, k, stride, pad, hw):
    """First-layer convs (K = k * k * c <= 64): the im2col rows built by permutes from 64-byte
    windows of the input rows (several pixels a window, a window cut at the end of the row),
    with the border pixels and padding rows tap by tap; bit for bit on every ISA path."""
    rng = np.random.default_rng(c * 10 + k)
    g, feeds = int8_conv_case(rng, 1, c, 16, hw[0], hw[1], k, stride, pad, 1, "NHWC", "Relu", False)
    assert_native_matches(run_three_ways(g, feeds))


def test_int8_conv_1x1_image_and_strided_pointwise():
    rng = np.random.default_rng(3)
    for h, w, k, stride, pad in [(1, 1, 1, 1, 0), (1, 1, 3, 1, 1), (7, 9, 1, 2, 0)]:
        g, feeds = int8_conv_case(rng, 2, 17, 33, h, w, k, stride, pad, 1, "NHWC", "", False)
        assert_native_matches(run_three_ways(g, feeds))


@pytest.mark.parametrize("m,c,k,hw,layout,residual", [
    (8, 8, 1, (13, 17), "NHWC", True), (8, 3, 3, (19, 23), "NHWC", False), (4, 6, 1, (9, 11), "NHWC", True),
    (4, 24, 1, (7, 9), "NCHW", False), (2, 16, 1, (5, 13), "NHWC", True), (1, 8, 1, (11, 3), "NHWC", False),
    (8, 64, 1, (6, 7), "NHWC", True), (8, 7, 3, (10, 12), "NHWC", True), (4, 40, 1, (5, 5), "NHWC", False),
    (1, 16, 1, (7, 9), "NHWC", True), (2, 60, 1, (5, 7), "NHWC", False), (4, 6, 3, (6, 9), "NHWC", True),
    (8, 72, 1, (3, 5), "NHWC", False), (8, 8, 1, (13, 17), "NHWC", False), (2, 8, 1, (9, 15), "NHWC", False)])
def test_int8_conv_narrow_outputs(m, c, k, hw, layout, residual):
    """M = 1, 2, 4, 8 output channels: 16 / M rows share one 16-lane vector (their words
    permuted out of the u8 rows, padded and compact ones, or gathered where 16 / M rows are more
    than 32 words: M 1 K 16, M 2 K 60, M 4 K 40 / 54) and one requantization; odd pixel counts
    end in a part vector; without a residual 4 whole vectors a time share one pack (13 x 17 =
    221 pixels: 27 such blocks of 8 rows and a part vector); K > 64 (M 8, K 72) takes the
    panels; both requantization modes."""
    for requant in ("fixed", "fp32"):
        rng = np.random.default_rng(m * 100 + c + k)
        g, feeds = int8_conv_case(rng, 1, c, m, hw[0], hw[1], k, 1, k // 2, 1, layout, "Relu", residual,
                                  requant=requant)
        for threads in (1, 2):
            assert_native_matches(run_three_ways(g, feeds, threads=threads))


@pytest.mark.parametrize("m,c,k,hw,residual", [
    (16, 16, 1, (20, 20), False), (72, 16, 1, (7, 9), False), (48, 12, 1, (5, 5), False), (16, 8, 1, (3, 4), False),
    (40, 16, 1, (2, 5), False), (16, 16, 1, (4, 5), False), (16, 4, 3, (9, 11), False), (16, 16, 1, (6, 7), True),
    (80, 16, 1, (1, 1), False), (72, 16, 1, (20, 20), False), (40, 16, 1, (5, 8), False), (36, 20, 1, (3, 11), False),
    (44, 8, 3, (7, 7), False)])
def test_int8_conv_sixteen_channel_panels(m, c, k, hw, residual):
    """VNNI panels of at most 16 output channels (M 16, 48): 16 rows x 16 channels a tile while
    more than 8 rows are left (16, 15, 12, 10, 9 rows); of at most 8 (the last 8 of M 72 / 40,
    4 of 36, 12 of 44 in the 16-row tile): two rows a vector, up to 32 rows a call (odd counts:
    31, 63 rows); the 8 x 32 tile for a rest of <= 8 rows and for a residual; bit for bit on
    every ISA path."""
    rng = np.random.default_rng(m * 10 + c + k)
    g, feeds = int8_conv_case(rng, 1, c, m, hw[0], hw[1], k, 1, k // 2, 1, "NHWC", "Relu", residual)
    for threads in (1, 2):
        assert_native_matches(run_three_ways(g, feeds, threads=threads))


@pytest.mark.parametrize("c,m,hw,residual", [(40, 240, (14, 14), False), (48, 288, (14, 14), True),
                                              (40, 240, (11, 14), False)])
def test_int8_conv_amx_row_halves(c, m, hw, residual):
    """AMX pointwise layers whose rows fit one block but pay for two thread slots (MobileNetV3's
    14x14 expansions): at 2 and 3 threads the rows go in two blocks of whole 32-row tiles, one
    a slot (154 rows: 96 + 58, the last tile part-filled); bit for bit on every ISA path."""
    rng = np.random.default_rng(c + m)
    g, feeds = int8_conv_case(rng, 1, c, m, hw[0], hw[1], 1, 1, 0, 1, "NHWC", "Relu", residual)
    for threads in (1, 2, 3):
        assert_native_matches(run_three_ways(g, feeds, threads=threads))


@pytest.mark.parametrize("n,c,m,hw,k,pad,residual", [
    (1, 96, 24, (7, 70), 3, 1, True), (2, 64, 40, (5, 67), 3, 1, False), (1, 128, 33, (4, 80), 3, 0, True),
    (1, 68, 16, (6, 70), 5, 2, False), (1, 64, 70, (3, 66), 3, 1, False), (1, 32, 48, (5, 83), 3, 1, True),
    (2, 24, 12, (4, 97), 3, 1, False), (1, 16, 32, (3, 68), 5, 2, False)])
def test_int8_conv_implicit_interior(n, c, m, hw, k, pad, residual):
    """Stride-1 NHWC convs whose kernel rows span kw * C >= 64 bytes (AMX: interior pixels
    multiplied straight from the input where rows have 64 of them, 32 a tile, the last tile of
    a row moved back, 16 for a short rest; a span not a multiple of 64: its last chunk moved
    back under zero weights; border rows and columns through the im2col), several output
    panels, batches, 1 and 2 threads; bit for bit on every ISA path."""
    rng = np.random.default_rng(c + m + k)
    g, feeds = int8_conv_case(rng, n, c, m, hw[0], hw[1], k, 1, pad, 1, "NHWC", "Relu", residual)
    for threads in (1, 2):
        assert_native_matches(run_three_ways(g, feeds, threads=threads))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_1d_int8_and_depthwise(layout):
    """1-D convs (run as 2-D ones of height 1): int8 im2col, int8 and fp32 depthwise."""
    rng = np.random.default_rng(11)
    nhwc = layout == "NHWC"
    t = (lambda v: np.ascontiguousarray(v.transpose(0, 2, 1))) if nhwc else (lambda v: v)
    for group, k, stride, pad, dtype in [(1, 3, 1, 1, "int8"), (1, 5, 2, 0, "int8"), (12, 3, 2, 1, "int8"),
                                         (12, 5, 1, 2, "float32")]:
        c, m, length = 12, 12 if group > 1 else 7, 17
        attrs = dict(kernel_shape=[k], strides=[stride], pads=[pad, pad], dilations=[1], group=group,
                     data_layout=layout)
        if dtype == "int8":
            x = rng.integers(-128, 128, (2, c, length)).astype(np.int8)
            w = rng.integers(-127, 128, (m, c // group, k)).astype(np.int8)
            b = rng.integers(-5000, 5000, m).astype(np.int32)
            ws = rng.uniform(0.001, 0.02, m).astype(np.float32)
            ins = [("x", t(x), qd(0.05, 3)), ("w", w, qd(ws, [0] * m, 0)), ("b", b, qd(0.05 * ws, [0] * m, 0))]
            g, feeds = one_node("Conv", ins, qd(0.3, -2), attrs, {"w", "b"})
        else:
            ins = [("x", t(rng.standard_normal((2, c, length)).astype(np.float32)), None),
                   ("w", rng.standard_normal((m, 1, k)).astype(np.float32), None),
                   ("b", rng.standard_normal(m).astype(np.float32), None)]
            g, feeds = one_node("Conv", ins, None, attrs, {"w", "b"}, out_dtype="float32")
        assert_native_matches(run_three_ways(g, feeds), exact=dtype == "int8")


def test_int8_conv_falls_back_when_int32_could_overflow():
    """|bias| near 2^31: the numpy kernel's int64 accumulator serves (the native one is int32)."""
    rng = np.random.default_rng(4)
    g, feeds = int8_conv_case(rng, 1, 8, 4, 3, 3, 1, 1, 0, 1, "NHWC", "", False)
    g.tensors["b"].data = np.full(4, (1 << 31) - 1000, np.int32)
    res = run_three_ways(g, feeds)
    assert_native_matches(res, want_native=False)
    assert "native" not in res["native"][1]


@SETTINGS
@given(seed=st.integers(0, 2 ** 31), rows=st.integers(1, 40), k=st.sampled_from([1, 3, 16, 64, 200, 1500]),
       n=st.integers(1, 70), op=st.sampled_from(["Gemm", "GemmTA", "FusedMatMul", "MatMul3D"]),
       act=st.sampled_from(["", "Relu"]), requant=st.sampled_from(["fixed", "fp32"]))
def test_int8_gemm_random_shapes(seed, rows, k, n, op, act, requant):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (rows, k)).astype(np.int8)
    bm = rng.integers(-127, 128, (k, n)).astype(np.int8)
    bias = rng.integers(-30000, 30000, n).astype(np.int32)
    aq = (float(np.float32(rng.uniform(0.01, 0.1))), int(rng.integers(-128, 128)))
    yq = (float(np.float32(rng.uniform(0.05, 3.0))), int(rng.integers(-128, 128)))
    bs = rng.uniform(0.0005, 0.02, n).astype(np.float32)
    cq = qd(aq[0] * bs, [0] * n, 0)
    fused = dict(activation=act, activation_params=[], requant=requant)
    if op in ("Gemm", "GemmTA"):
        ta = op == "GemmTA"
        ins = [("a", np.ascontiguousarray(a.T) if ta else a, qd(*aq)),
               ("b", np.ascontiguousarray(bm.T), qd(bs, [0] * n, 0)), ("c", bias, cq)]
        g, feeds = one_node("FusedGemm", ins, qd(*yq), dict(transA=int(ta), transB=1, alpha=1.0, beta=1.0, **fused),
                            {"b", "c"})
    elif op == "FusedMatMul":
        g, feeds = one_node("FusedMatMul", [("a", a, qd(*aq)), ("b", bm, qd(bs, [0] * n, 1)), ("c", bias, cq)],
                            qd(*yq), fused, {"b", "c"})
    else:
        a3 = rng.integers(-128, 128, (2, rows, k)).astype(np.int8)
        g, feeds = one_node("MatMul", [("a", a3, qd(*aq)), ("b", bm, qd(bs, [0] * n, 1))], qd(*yq),
                            {"requant": requant}, {"b"})
    assert_native_matches(run_three_ways(g, feeds, threads=1 + seed % 2))


def test_multithreaded_large_layers():
    """Layers big enough to be split over 3 threads: by row blocks (convs, depthwise) and by
    channel ranges (a GEMM of few rows)."""
    rng = np.random.default_rng(12)
    g, feeds = int8_conv_case(rng, 1, 64, 72, 30, 30, 3, 1, 1, 1, "NHWC", "Relu", True)
    assert_native_matches(run_three_ways(g, feeds, threads=3))
    g, feeds = depthwise_case(rng, "int8", 1, 144, 58, 58, 3, 1, 1, 1, "NHWC", "Relu", True)
    assert_native_matches(run_three_ways(g, feeds, threads=3))
    g, feeds = depthwise_case(rng, "float32", 1, 144, 58, 58, 3, 1, 1, 1, "NHWC", "Clip", True)
    assert_native_matches(run_three_ways(g, feeds, threads=3), exact=False)
    a = rng.integers(-128, 128, (5, 3000)).astype(np.int8)
    b = rng.integers(-127, 128, (3000, 2100)).astype(np.int8)
    bs = rng.uniform(0.0005, 0.002, 2100).astype(np.float32)
    g, feeds = one_node("MatMul", [("a", a, qd(0.02, 5)), ("b", b, qd(bs, [0] * 2100, 1))], qd(0.5, -3), {}, {"b"})
    assert_native_matches(run_three_ways(g, feeds, threads=3))



def test_multithreaded_few_row_depthwise():
    """int8 depthwise layers of few output rows a thread (MobileNetV3's 5x5 at 14x14 and 7x7, a
    stride-2 one to 14x14, two images whose rows a run crosses) split into one equal run of rows
    a thread: the same integers as the numpy reference at 2 and 3 threads."""
    rng = np.random.default_rng(31)
    cases = [(1, 144, 14, 14, 1, "Clip", True), (1, 96, 28, 28, 2, "Relu", False),
             (1, 584, 7, 7, 1, "Clip", False), (2, 72, 7, 7, 1, "Relu", True)]
    for i, (n, c, h, w, stride, act, residual) in enumerate(cases):
        g, feeds = depthwise_case(rng, "int8", n, c, h, w, 5, stride, 2, 1, "NHWC", act, residual)
        assert_native_matches(run_three_ways(g, feeds, threads=2 + i % 2))

# -- depthwise -------------------------------------------------------------------------------------

def depthwise_case(rng, dtype, n, c, h, w, k, stride, pad, dil, layout, act, residual, bias=True, requant="fixed"):
    oh = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    nhwc = layout == "NHWC"
    t = (lambda v: np.ascontiguousarray(v.transpose(0, 2, 3, 1))) if nhwc else (lambda v: v)
    attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, dilations=[dil, dil], group=c,
                 data_layout=layout)
    params = {"Clip": [0.0, 6.0], "HardSigmoid": [0.2, 0.5], "LeakyRelu": [0.1]}.get(act, [])
    if dtype == "int8":
        x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
        wt = rng.integers(-127, 128, (c, 1, k, k)).astype(np.int8)
        b = rng.integers(-20000, 20000, c).astype(np.int32)
        xq = (float(np.float32(rng.uniform(0.01, 0.1))), int(rng.integers(-128, 128)))
        yq = (float(np.float32(rng.uniform(0.02, 0.5))), int(rng.integers(-128, 128)))
        ws = rng.uniform(0.001, 0.02, c).astype(np.float32)
        ins = [("x", t(x), qd(*xq)), ("w", wt, qd(ws, [0] * c, 0)), ("b", b, qd(xq[0] * ws, [0] * c, 0))]
        if residual:
            z = rng.integers(-128, 128, (n, c, oh, ow)).astype(np.int8)
            ins.append(("z", t(z), qd(float(np.float32(rng.uniform(0.01, 0.3))), int(rng.integers(-128, 128)))))
        return one_node("FusedConv", ins, qd(*yq), dict(attrs, activation=act, activation_params=params,
                                                        requant=requant), {"w", "b"})
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    ins = [("x", t(x), None), ("w", wt, None), ("b", b, None) if bias else ("", None, None)]
    if residual:
        ins.append(("z", t(rng.standard_normal((n, c, oh, ow)).astype(np.float32)), None))
    if not act and not residual:
        return one_node("Conv", ins, None, attrs, {"w", "b"}, out_dtype="float32")
    return one_node("FusedConv", ins, None, dict(attrs, activation=act, activation_params=params), {"w", "b"},
                    out_dtype="float32")


@SETTINGS
@given(seed=st.integers(0, 2 ** 31), dtype=st.sampled_from(["int8", "float32"]), n=st.integers(1, 2),
       c=st.integers(1, 40), h=st.integers(1, 13), w=st.integers(1, 13), k=st.sampled_from([3, 3, 5, 2]),
       stride=st.sampled_from([1, 2, 1, 3]), pad=st.integers(0, 2), dil=st.sampled_from([1, 1, 2]),
       layout=st.sampled_from(["NHWC", "NCHW"]), residual=st.booleans(), bias=st.booleans(),
       act=st.sampled_from(["", "Relu", "Clip", "HardSwish", "HardSigmoid", "LeakyRelu"]))
def test_depthwise_random_shapes(seed, dtype, n, c, h, w, k, stride, pad, dil, layout, residual, bias, act):
    if c == 1:
        c = 2                                         # group 1 is an ordinary conv
    if h + 2 * pad < dil * (k - 1) + 1 or w + 2 * pad < dil * (k - 1) + 1:
        pad = pad + dil * (k - 1)
    if dtype == "int8":
        act = act if act in ("", "Relu", "Clip") else "Relu"
    rng = np.random.default_rng(seed)
    g, feeds = depthwise_case(rng, dtype, n, c, h, w, k, stride, pad, dil, layout, act, residual, bias)
    res = run_three_ways(g, feeds, threads=1 + seed % 3)
    assert_native_matches(res, exact=dtype == "int8")


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("act", ["Relu", "Clip", "HardSwish"])
def test_depthwise_fp32_fused_epilogue(layout, act):
    rng = np.random.default_rng(len(act))
    for k, stride in ((3, 1), (3, 2), (5, 1), (5, 2)):
        g, feeds = depthwise_case(rng, "float32", 1, 19, 9, 8, k, stride, k // 2, 1, layout, act, True)
        assert_native_matches(run_three_ways(g, feeds), exact=False)



@pytest.mark.parametrize("mode", ["native", "base", "scalar"])
def test_depthwise_fp32_nhwc_selftest(mode):
    """The fp32 NHWC FMA kernel (depthwise_f32.c) under each ISA mask against its double-precision
    reference on random geometries; and a MobileNet-sized layer (112x112x32, stride 1 and 2)
    against the numpy kernel, where the interior four-pixel path dominates."""
    old = native.set_isa_mask(MASKS[mode])
    try:
        assert native.lib.ei_selftest_depthwise_f32() == 0
    finally:
        native.set_isa_mask(old)
    rng = np.random.default_rng(7)
    for stride in (1, 2):
        g, feeds = depthwise_case(rng, "float32", 1, 32, 112, 112, 3, stride, 1, 1, "NHWC", "Clip", stride == 1)
        res = run_three_ways(g, feeds)
        assert "FMA" in res["native"][1]
        assert_native_matches(res, exact=False)


FP32_DW_LAYERS = {(8, (24, 96)), (24, (28, 29)), (72, (14, 14)), (33, (3, 5)), (8, (23, 50)), (8, (6, 7)),
                  (16, (112, 112)), (576, (14, 14)), (96, (7, 10))}


@pytest.mark.parametrize("c,hw,k,stride,residual", [
    (8, (24, 96), 3, 1, False), (16, (56, 56), 3, 2, False), (24, (28, 29), 3, 1, True), (72, (14, 14), 5, 2, False),
    (96, (7, 10), 5, 1, True), (40, (9, 6), 5, 1, False), (33, (3, 5), 3, 1, True), (8, (23, 50), 3, 2, True),
    (16, (9, 31), 5, 2, False), (8, (11, 13), 3, 1, True), (8, (6, 7), 3, 2, False), (8, (5, 3), 3, 1, False),
    (16, (112, 112), 3, 2, False), (72, (56, 56), 3, 2, True), (88, (28, 28), 3, 1, False),
    (240, (14, 14), 5, 1, True), (576, (14, 14), 5, 1, False), (576, (7, 7), 5, 1, True)])
def test_depthwise_int8_mobilenet_layers(c, hw, k, stride, residual):
    """int8 depthwise layers of MobileNet-v2/v3 sizes (the VNNI kernel's blocks of four output
    pixels over interior and border columns, channel tails under masks, widths that leave 1-3
    pixels after the last block; 8 channels: pixel pairs, odd widths end in half a pair; with
    VBMI2 the quad rows by shifts, chained or from every fourth quad; 576-channel 5x5 layers, which
    at one thread run in bands of output rows) bit for bit against the numpy kernel, on every ISA
    path, at 2 threads and (the large layers) at 1."""
    rng = np.random.default_rng(c * 100 + k)
    # both requantization modes: these layers (8-channel pairs, quads, bands, shifts) in "fp32"
    requant = "fp32" if (c, hw) in FP32_DW_LAYERS else "fixed"
    g, feeds = depthwise_case(rng, "int8", 1, c, hw[0], hw[1], k, stride, k // 2, 1, "NHWC", "Relu", residual,
                              requant=requant)
    res = run_three_ways(g, feeds, threads=2)
    assert "depthwise" in res["native"][1]
    assert_native_matches(res)
    if c * hw[0] * hw[1] >= 28000:
        assert_native_matches(run_three_ways(g, feeds, threads=1))


#: (c, (h, w), k, stride, pad, batch, residual, kernel): int8 depthwise layers about the bounds of
#: depthwise_small.c's kernels where the CPU has VBMI: "small image" (5x5 and wider, at most 256
#: quads a channel group: h * (ow + 4 / stride * (nq - 1)) with nq = ceil(k / 4)), "pairs" (8
#: channels, kernels up to 4 wide, strides up to 4: a pair of pixels reads sw + 4 columns, 64
#: bytes at stride 4), "ring" (depthwise_quad.c's quad rows)
SMALL_DW_LAYERS = [
    (200, (2, 6), 5, 1, 2, 1, False, "small"), (88, (3, 12), 5, 1, 2, 1, True, "small"),
    (104, (3, 12), 5, 2, 2, 1, False, "small"), (32, (6, 24), 5, 2, 2, 1, True, "small"),
    (40, (16, 12), 5, 1, 2, 2, True, "small"), (24, (16, 13), 5, 1, 2, 1, False, "ring"),
    (17, (4, 9), 7, 1, 3, 1, True, "small"), (576, (7, 7), 5, 1, 2, 1, False, "small"),
    (33, (1, 1), 5, 1, 2, 2, True, "small"), (16, (5, 3), 5, 2, 4, 1, False, "small"),
    (24, (12, 48), 3, 2, 1, 1, False, "ring"),
    (8, (24, 96), 3, 2, 1, 1, False, "pairs"), (8, (23, 50), 3, 2, 1, 2, True, "pairs"),
    (8, (9, 13), 4, 3, 2, 1, False, "pairs"), (8, (7, 11), 4, 4, 3, 1, True, "pairs"),
    (8, (6, 7), 4, 1, 0, 1, False, "pairs"), (8, (1, 1), 3, 1, 1, 1, False, "pairs"),
    (8, (12, 9), 2, 2, 0, 1, True, "pairs")]
DW_KERNEL_NOTES = {"small": "small image", "pairs": "pixel pairs' quads in registers"}


@pytest.mark.parametrize("c,hw,k,stride,pad,n,residual,kind", SMALL_DW_LAYERS)
@pytest.mark.parametrize("requant", ["fp32", "fixed"])
def test_depthwise_int8_small_images(c, hw, k, stride, pad, n, residual, kind, requant):
    """depthwise_small.c's int8 kernels: small images (each channel group's quads of the whole
    input, kernel rows on padding rows as a constant) on MobileNetV3's text-classifier layers (2x6,
    3x12, 6x24) and shapes about its bounds (256 quads a group: 16x12 in, 16x13 out; 3x3 stays on the
    ring; padding wider than the image, 1x1 images, two images, channel tails, residuals); 8
    channels as pixel pairs whose quads are made in registers (its 24x96 stride-2 layer, kernels 2
    to 4 wide, strides 1 to 4, border pairs and a last odd column); bit for bit against the numpy
    kernel on every ISA path, at 1 and 2 threads, both requantization modes."""
    rng = np.random.default_rng(c * 31 + hw[0] * 7 + hw[1] + k)
    g, feeds = depthwise_case(rng, "int8", n, c, hw[0], hw[1], k, stride, pad, 1, "NHWC", "Relu", residual,
                              requant=requant)
    for threads in (1, 2):
        res = run_three_ways(g, feeds, threads=threads)
        assert_native_matches(res)
        note = res["native"][1]
        if "vpdpbusd" in note:              # AVX-512 VNNI + VBMI
            for other, text in DW_KERNEL_NOTES.items():
                assert (text in note) == (other == kind), note


@pytest.mark.parametrize("mode", ["native", "base"])
def test_depthwise_int8_selftest(mode):
    """depthwise_selftest.c: every int8 NHWC kernel this CPU has (AVX2, per-tap VNNI, quads,
    quads split by channel blocks as 2-thread few-row layers run them) against the scalar
    instance, bit for bit, on random geometries (3x3 / 5x5, strides 1-2, dilation, residual
    tables, fused activation tables, channel tails); and the quad kernels with each quad-row
    build (from scratch, VBMI2 shift chain, every fourth quad) on their own seeded geometries:
    kernels 3 / 5 / 7, strides 1-2, 8 / 16 / 24 / 72 / 576 / random channels, rows 1-20 wide,
    padding 0..k-1 a side, bands of output rows, two images, runs split in two."""
    old = native.set_isa_mask(MASKS[mode])
    try:
        assert native.lib.ei_selftest_depthwise() == 0
    finally:
        native.set_isa_mask(old)


@pytest.mark.parametrize("k,pad", [(3, 5), (5, 9), (3, 0)])
def test_depthwise_int8_batches_and_wide_padding(k, pad):
    """Two images and padding wider than the kernel: the quad kernel's cached input rows must
    never hand one image's rows (or a padding row) to another."""
    rng = np.random.default_rng(k + pad)
    g, feeds = depthwise_case(rng, "int8", 2, 24, 6, 7, k, 1, pad, 1, "NHWC", "Relu", False)
    assert_native_matches(run_three_ways(g, feeds, threads=1))


# -- int8 Add ----------------------------------------------------------------------------------------

@SETTINGS
@given(seed=st.integers(0, 2 ** 31), shape=st.sampled_from([(1,), (7,), (2, 3, 5), (1, 14, 14, 96), (300, 257)]),
       op=st.sampled_from(["Add", "Sub"]), const_b=st.booleans())
def test_int8_add_random(seed, shape, op, const_b):
    rng = np.random.default_rng(seed)
    q = [(float(np.float32(rng.uniform(0.002, 0.5))), int(rng.integers(-128, 128))) for _ in range(3)]
    a = rng.integers(-128, 128, shape).astype(np.int8)
    b = rng.integers(-128, 128, shape).astype(np.int8)
    g, feeds = one_node(op, [("a", a, qd(*q[0])), ("b", b, qd(*q[1]))], qd(*q[2]), {}, {"b"} if const_b else set())
    assert_native_matches(run_three_ways(g, feeds, threads=1 + seed % 2))


def test_int8_add_every_value_pair():
    """All 65536 (a, b) pairs, scales that make the sum saturate both ways."""
    v = np.arange(-128, 128, dtype=np.int8)
    a, b = np.meshgrid(v, v)
    for qs in [((0.1, -3), (0.02, 17), (0.05, 4)), ((0.5, 0), (0.5, 0), (0.01, -100)), ((0.004, 127), (1.0, -128), (0.3, 9))]:
        g, feeds = one_node("Add", [("a", a.copy(), qd(*qs[0])), ("b", b.copy(), qd(*qs[1]))], qd(*qs[2]), {}, set())
        assert_native_matches(run_three_ways(g, feeds))


# -- whole int8 models -------------------------------------------------------------------------------

_RUN_WITHOUT_NATIVE = """
import sys, numpy as np
from edge_infer.backends.cpu import native
assert native.lib is None, native.why_not
from edge_infer.artifact import load_artifact
from edge_infer.runtime import Runtime
feeds = dict(np.load(sys.argv[2]))
g = load_artifact(sys.argv[1])[0]
g.outputs = list(g.outputs) + [n.inputs[0] for n in g.nodes if n.op == "DequantizeLinear"]
out = Runtime(g, backend="cpu", threads=2).run(feeds)
np.savez(sys.argv[3], **out)
"""


def _compare_with_numpy_subprocess(eim: str, feeds, tmp_path, min_native: int):
    """Run the artifact here (native kernels) and in a subprocess with EDGE_INFER_NO_NATIVE=1
    (every native kernel off, the numpy kernels only). The int8 tensors the graph dequantizes
    must be bit-identical; float outputs agree to 1e-5 (native fp32 math such as exp in
    Softmax may differ from numpy's by an ulp)."""
    import subprocess
    from edge_infer.artifact import load_artifact
    from edge_infer.runtime import Runtime
    g = load_artifact(eim)[0]
    g.outputs = list(g.outputs) + [n.inputs[0] for n in g.nodes if n.op == "DequantizeLinear"]
    rt = Runtime(g, backend="cpu", threads=2)
    ex = rt.plan({k: v.shape for k, v in feeds.items()})
    ours = ex.run(feeds)
    n_native = sum("native" in v for v in ex.notes.values())
    assert n_native >= min_native, ex.notes
    np.savez(tmp_path / "feeds.npz", **feeds)
    env = dict(os.environ, EDGE_INFER_NO_NATIVE="1")
    r = subprocess.run([sys.executable, "-c", _RUN_WITHOUT_NATIVE, eim, str(tmp_path / "feeds.npz"),
                        str(tmp_path / "ref.npz")], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = dict(np.load(tmp_path / "ref.npz"))
    assert set(ref) == set(ours)
    assert sum(v.dtype == np.int8 for v in ref.values()) >= 1
    for k in ref:
        assert ours[k].dtype == ref[k].dtype, k
        if ref[k].dtype == np.int8:
            assert np.array_equal(ours[k], ref[k]), k
        else:
            np.testing.assert_allclose(ours[k], ref[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_digits_int8_model_bit_exact_with_and_without_native(tmp_path):
    from edge_infer.convert import convert
    from edge_infer.data import digits_model_path, load_digits_samples
    x, _ = load_digits_samples()
    np.save(tmp_path / "cal.npy", x[:64])
    eim = str(tmp_path / "digits_int8.eim")
    convert(digits_model_path(), eim, quantize="int8", calib=str(tmp_path / "cal.npy"), verify_samples=1)
    _compare_with_numpy_subprocess(eim, {"input": x[:200]}, tmp_path, min_native=3)


def test_int8_zoo_model_bit_exact_with_and_without_native(tmp_path):
    """light_squeezenet (seeded weights) converted to int8 at opt level 3 (NHWC), 2 threads."""
    onnx_models = pytest.importorskip("onnx_models")
    from edge_infer.artifact import load_artifact
    from edge_infer.convert import convert
    try:
        src = onnx_models.randomized_light_model_path("squeezenet", seed=0)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    eim = str(tmp_path / "sq.eim")
    convert(src, eim, quantize="int8", calib="random", calib_samples=2, verify_samples=1)
    q = load_artifact(eim)[0]
    name = q.inputs[0]
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(tuple(q.tensors[name].shape)).astype(np.float32)}
    _compare_with_numpy_subprocess(eim, feeds, tmp_path, min_native=20)


@pytest.mark.parametrize("cached", [True, False])
def test_int8_fully_connected_split_follows_whether_weights_stay_cached(monkeypatch, cached):
    """A batch-1 fully-connected layer's thread slots: where the plan's int8 weights fit in half an
    L2 (``kernels.weights_cached``: the text classifier's 205 KB head) they stay in cache between
    runs and the layer (2 us) runs on one slot, where a split measured slower; otherwise its
    weights stream from memory and it splits (MobileNetV3-small's heads: 21.7 -> 10.3 us)."""
    from edge_infer.backends.cpu.native import kernels
    assert kernels.l2_bytes() >= 64 << 10
    rng = np.random.default_rng(3)
    k, n = 200, 1024
    a = rng.integers(-128, 128, (1, k)).astype(np.int8)
    b = rng.integers(-127, 128, (n, k)).astype(np.int8)
    bs = rng.uniform(0.0005, 0.002, n).astype(np.float32)
    g, feeds = one_node("FusedGemm", [("a", a, qd(0.02, 3)), ("b", b, qd(bs, [0] * n, 0)),
                                      ("c", rng.integers(-500, 500, n).astype(np.int32), qd(0.02 * bs, [0] * n, 0))],
                        qd(0.5, -3), dict(transB=1, alpha=1.0, beta=1.0, transA=0, activation="", activation_params=[]),
                        {"b", "c"})
    assert kernels.weights_cached(type("Ctx", (), {"graph": g, "plan_facts": {}})()) is True   # 205 KB
    monkeypatch.setattr(kernels, "weights_cached", lambda ctx: cached)
    ex = CpuExecutable(specialize(g, {"a": a.shape}), 2)
    ex.run(feeds)
    native.pool_stats(reset=True, forget=True)
    for _ in range(5):
        y = ex.run(feeds)["y"]
    jobs = native.pool_stats()["jobs"] + native.pool_stats()["serial_jobs"]
    assert (jobs == 0) == cached, jobs
    res = run_three_ways(g, feeds)
    assert np.array_equal(res["native"][0], y)
