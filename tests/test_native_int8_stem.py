"""The int8 stem convolution (native/src/int8_stem.c): first convs with few input channels, NHWC,
read through padded line buffers instead of im2col rows. Bit for bit against the numpy int8
kernel and the int8 GEMM path on every ISA mode (AMX machines run it with VNNI), with and
without the fused activation table (the conv args' lut), and left to the GEMM where it does
not apply."""
import numpy as np
import pytest

from edge_infer.backends.cpu import native
from edge_infer.backends.cpu.native import kernels
from edge_infer.ops.qmath import conv_requant_params
from test_native_kernels import MASKS, assert_native_matches, int8_conv_case, run_three_ways

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")


def _has_amx() -> bool:
    return bool(native.lib.ei_cpu_features() & native.AMX) and kernels.gemm_kind(64) == 5


def _gemm_only(monkeypatch):
    monkeypatch.setattr(kernels, "int8_stem_step", lambda *a, **k: None)


@pytest.mark.parametrize("n,c,m,hw,k,stride,pad,act", [
    (1, 3, 16, (224, 224), 3, 2, 1, "Relu"),       # MobileNetV3's first conv
    (1, 3, 16, (33, 47), 3, 2, 1, ""),              # odd sizes: a last step of fewer than 8 pixels
    (2, 3, 24, (17, 30), 3, 1, 1, "Clip"),          # two images, 1.5 channel blocks
    (1, 1, 8, (9, 70), 3, 1, 0, ""),                # one channel, no padding
    (1, 4, 40, (12, 23), 5, 2, 2, "Relu"),          # kernel rows of 20 values (5 groups of 4)
    (1, 2, 64, (11, 40), 7, 3, 3, ""),              # 64 channels (the most), stride 3, rows of 14
    (1, 3, 32, (20, 20), 1, 2, 0, ""),              # a strided 1x1
    (1, 3, 16, (6, 6), 3, 2, 2, "Relu"),            # padding wider than the taps reach
])
@pytest.mark.parametrize("requant", ["fixed", "fp32"])
def test_stem_matches_numpy_and_gemm(monkeypatch, n, c, m, hw, k, stride, pad, act, requant):
    rng = np.random.default_rng(c * 100 + m + k)
    g, feeds = int8_conv_case(rng, n, c, m, hw[0], hw[1], k, stride, pad, 1, "NHWC", act, False, requant=requant)
    res = run_three_ways(g, feeds)
    assert_native_matches(res)
    for mode in MASKS:
        # with AMX the GEMM keeps the first convs of more than 48 channels (its tiles were faster)
        gemm_wins = mode == "native" and m > 48 and c * k * k >= kernels.AMX_MIN_K and _has_amx()
        assert ("native stem conv" in res[mode][1]) != gemm_wins, (mode, res[mode][1])
    _gemm_only(monkeypatch)
    gemm = run_three_ways(g, feeds)
    for mode in MASKS:
        assert "GEMM" in gemm[mode][1]
        assert np.array_equal(gemm[mode][0], res[mode][0]), mode


@pytest.mark.parametrize("c,layout,residual,dil", [(5, "NHWC", False, 1), (3, "NCHW", False, 1),
                                                   (3, "NHWC", True, 1), (3, "NHWC", False, 2)])
def test_stem_leaves_other_convs_to_the_gemm(c, layout, residual, dil):
    """More than 4 channels, NCHW, a residual input or a dilated width: the GEMM serves, exactly."""
    rng = np.random.default_rng(c + dil)
    g, feeds = int8_conv_case(rng, 1, c, 16, 15, 18, 3, 2, 2, dil, layout, "Relu", residual)
    res = run_three_ways(g, feeds)
    assert_native_matches(res)
    assert "stem" not in res["native"][1] and "GEMM" in res["native"][1]


def _conv_step(x, w, bias, xq, yq, ws, stride, pad):
    """The native int8 conv step for NHWC x (1, h, w, c) and weights (m, c, k, k), no plan."""
    m, c, k = w.shape[0], w.shape[1], w.shape[2]
    oh, ow = (x.shape[1] + 2 * pad - k) // stride + 1, (x.shape[2] + 2 * pad - k) // stride + 1
    y = np.zeros((1, oh, ow, m), np.int8)
    q, sh = conv_requant_params(np.float32(xq[0]), ws, np.float32(yq[0]))
    folded = bias.astype(np.int64) - xq[1] * w.reshape(m, -1).astype(np.int64).sum(axis=1)
    w_mk = np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(m, -1))
    step = kernels.int8_conv_step(None, x=x, y=y, w_mk=w_mk, bias=folded, q=q, shift=sh, zp_x=xq[1], zp_y=yq[1],
                                  lo=-128, hi=127, geometry=(1, c, x.shape[1], x.shape[2], m, oh, ow, k, k, stride,
                                                             stride, 1, 1, pad, pad), in_nchw=False, out_nchw=False)
    return step, y


@pytest.mark.parametrize("mode", list(MASKS))
@pytest.mark.parametrize("m,hw", [(16, (40, 56)), (13, (9, 13))])
def test_stem_applies_the_activation_table(monkeypatch, mode, m, hw):
    """A table in the args' lut (y = lut[(uint8)q] after the clamp, as a fused HardSwish sets it):
    the stem's output is the table of the GEMM's unfused output, value for value."""
    rng = np.random.default_rng(m)
    x = rng.integers(-128, 128, (1, *hw, 3)).astype(np.int8)
    w = rng.integers(-127, 128, (m, 3, 3, 3)).astype(np.int8)
    bias = rng.integers(-20000, 20000, m).astype(np.int32)
    ws = rng.uniform(0.0005, 0.02, m).astype(np.float32)
    xq, yq = (0.02, int(rng.integers(-128, 128))), (0.3, int(rng.integers(-128, 128)))
    table = rng.integers(-128, 128, 256).astype(np.int8)
    old = native.set_isa_mask(MASKS[mode])
    try:
        with monkeypatch.context() as mp:
            _gemm_only(mp)
            gemm, y_ref = _conv_step(x, w, bias, xq, yq, ws, 2, 1)
        gemm()
        step, y = _conv_step(x, w, bias, xq, yq, ws, 2, 1)
        assert getattr(step, "stem", False)
        step()
        assert np.array_equal(y, y_ref)
        args = step.native_keep[1]
        args.lut = table.ctypes.data
        y[...] = 0
        step()
    finally:
        native.set_isa_mask(old)
    # the C field is indexed by the output's bit pattern (ei_lut.h)
    assert np.array_equal(y, table[y_ref.view(np.uint8)])


def test_selftest_int8_stem():
    """Every kind's rows (and every packed layout through the scalar rows) against a direct
    convolution, random geometries with tables, in C."""
    assert native.lib.ei_selftest_int8_stem() == 0
