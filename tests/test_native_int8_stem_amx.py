"""The int8 stem's rows on AMX tiles (native/src/int8_stem.c row_amx): where this CPU runs AMX the
VNNI kind's rows are computed with tdpbusd on the line buffers read as A tiles, and they give the
bytes of the VNNI rows, the scalar rows and a direct numpy convolution (MBQM requantization,
clamp, activation table) on seeded random geometries: 5 to 64 output channels, rows narrower
than 16 pixels, strides 1 to 3, 1x1 to 7x7 kernels and kernel rows of 64 bytes, 1 and 2 threads,
under every ISA mask. On machines without AMX the same cases check the other kinds."""
import ctypes

import numpy as np
import pytest

from edge_infer.backends.cpu import native
from edge_infer.backends.cpu.native import kernels
from edge_infer.ops.qmath import requantize
from test_native_kernels import MASKS, int8_conv_case, run_three_ways

pytestmark = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")

KIND_VNNI = 4
RQ_LIMIT = 1 << 30


def _has_amx() -> bool:
    return bool(native.lib.ei_cpu_features() & native.AMX) and kernels.gemm_kind(64) == 5


def _fn(name, restype):
    f = getattr(native.lib, name)
    f.restype, f.argtypes = restype, [ctypes.c_void_p] * (3 if name == "ei_int8_stem_pack" else 1)
    return f


def _case(seed, c, m, h, w, kh, kw, sh, sw, pt, pl, threads, lut):
    """(conv args without pointers, the arrays they point at): int8 NHWC x, (m, kh kw c) weights."""
    rng = np.random.default_rng(seed)
    oh, ow = (h + 2 * pt - kh) // sh + 1, (w + 2 * pl - kw) // sw + 1
    d = dict(x=rng.integers(-128, 128, (1, h, w, c)).astype(np.int8),
             w=rng.integers(-127, 128, (m, kh * kw * c)).astype(np.int8),
             bias=rng.integers(-100000, 100000, m).astype(np.int32),
             mult=rng.integers(1 << 30, 1 << 31, m).astype(np.int32),
             shift=rng.integers(-12, 2, m).astype(np.int32),
             lut=rng.integers(-128, 128, 256).astype(np.int8) if lut else None,
             y=np.zeros((1, oh, ow, m), np.int8))
    zp_y = int(rng.integers(-128, 128))
    a = kernels.Int8ConvArgs(zp_x=int(rng.integers(-128, 128)), zp_y=zp_y, lo=zp_y if seed % 3 == 0 else -128, hi=127,
                             n=1, c=c, h=h, w=w, m=m, oh=oh, ow=ow, kh=kh, kw=kw, sh=sh, sw=sw, dh=1, dw=1,
                             pt=pt, pl=pl, threads=threads)
    return a, d


def _direct(a, d) -> np.ndarray:
    """The conv in numpy: int64 sums over the zp_x-padded input, MBQM, clamp, table."""
    xp = np.full((a.h + a.kh + a.pt * 2 + a.sh, a.w + a.kw + a.pl * 2 + a.sw, a.c), a.zp_x, np.int64)
    xp[a.pt:a.pt + a.h, a.pl:a.pl + a.w] = d["x"][0]
    wt = d["w"].astype(np.int64).reshape(a.m, a.kh, a.kw, a.c)
    acc = np.zeros((a.oh, a.ow, a.m), np.int64) + d["bias"]
    for ky in range(a.kh):
        for kx in range(a.kw):
            win = xp[ky:ky + a.sh * (a.oh - 1) + 1:a.sh, kx:kx + a.sw * (a.ow - 1) + 1:a.sw]
            acc += win @ wt[:, ky, kx].T
    v = np.clip(requantize(acc, d["mult"], d["shift"]), -RQ_LIMIT, RQ_LIMIT) + a.zp_y
    q = np.clip(v, a.lo, a.hi).astype(np.int8)[None]
    return d["lut"][q.view(np.uint8)] if d["lut"] is not None else q


def _run(a, d, kind: int) -> np.ndarray:
    """ei_int8_stem with weights packed for kind, under the current ISA mask."""
    a.kind = kind
    addr = ctypes.addressof(a)
    pack = kernels.aligned(int(_fn("ei_int8_stem_pack_size", ctypes.c_int64)(addr)))
    _fn("ei_int8_stem_pack", None)(addr, d["w"].ctypes.data, pack.ctypes.data)
    scratch = kernels.aligned(int(_fn("ei_int8_stem_scratch", ctypes.c_int64)(addr)) * a.threads)
    d["y"][...] = 0
    for name in ("x", "y", "bias", "mult", "shift", "lut"):
        setattr(a, name, d[name].ctypes.data if d[name] is not None else None)
    a.wpack, a.scratch = pack.ctypes.data, scratch.ctypes.data
    native.lib.ei_int8_stem.restype, native.lib.ei_int8_stem.argtypes = None, [ctypes.c_void_p]
    native.lib.ei_int8_stem(addr)
    return d["y"].copy()


CASES = [  # c, m, h, w, kh, kw, sh, sw, pt, pl
    (3, 16, 31, 64, 3, 3, 2, 2, 1, 1),      # MobileNetV3's stem, rows of 32 pixels
    (3, 16, 9, 33, 3, 3, 2, 2, 1, 1),       # rows of 17: the last step recomputes 15 pixels
    (3, 8, 12, 20, 3, 3, 2, 2, 1, 1),       # the text classifier's 8 channels, rows of 10 (< 16)
    (3, 5, 7, 40, 3, 3, 1, 1, 1, 1),        # 5 channels: two pixels a tile row, masked pixel stores
    (3, 24, 12, 21, 3, 3, 1, 1, 1, 1),      # 1.5 channel blocks, stride 1
    (3, 32, 15, 37, 5, 5, 2, 2, 2, 2),      # two blocks, 5x5 (kernel rows of 15 values)
    (1, 8, 20, 45, 7, 7, 2, 2, 3, 3),       # one channel, 7x7 (rows of 7 values -> 8)
    (4, 40, 17, 33, 7, 7, 1, 2, 3, 3),      # 4 channels, 7x7: rows of 28 values, 2.5 blocks
    (2, 64, 11, 40, 7, 7, 3, 3, 3, 3),      # 64 channels (the most), stride 3
    (3, 16, 6, 1, 3, 3, 1, 1, 1, 1),        # one pixel a row
    (3, 16, 5, 16, 3, 3, 1, 1, 1, 1),       # exactly 16 pixels a row
    (4, 16, 6, 40, 2, 16, 1, 1, 1, 7),      # kernel rows of 64 values: whole 64-byte A tile rows
    (3, 32, 9, 50, 1, 1, 2, 2, 0, 0),       # a strided 1x1: one k-group
    (3, 8, 9, 139, 3, 3, 2, 2, 1, 1),       # two pixels a tile row: 70 pixels, a last step of 32 from 38
    (3, 8, 5, 61, 3, 3, 2, 2, 1, 1),        # an odd row of 31 (< 32): the last pair's second pixel unused
    (4, 8, 9, 70, 4, 7, 2, 2, 2, 3),        # pairs of 4 kernel rows of 36 bytes (held B tiles 4..7)
    (2, 3, 12, 44, 5, 3, 1, 1, 2, 1),       # pairs with 5 kernel rows: their B tiles loaded each step
    (4, 6, 6, 40, 2, 16, 1, 1, 1, 7),       # a pair would take 68 bytes: 8-channel tiles of one pixel
    (3, 16, 12, 40, 5, 5, 1, 1, 2, 2),      # one block, 5 kernel rows: not held
    (1, 16, 10, 37, 4, 4, 1, 1, 1, 1),      # one block, 4 kernel rows held
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_stem_rows_match_direct_conv_under_every_mask(case, threads):
    seed = sum(case) * 7 + threads
    a, d = _case(seed, *case, threads=threads, lut=seed % 2 == 1)
    want = _direct(a, d)
    for mode, mask in MASKS.items():
        old = native.set_isa_mask(mask)
        try:
            kind = _fn("ei_int8_stem_kind", ctypes.c_int)(ctypes.addressof(a))
            # the GEMM's convs (more than 48 channels with AMX) still run on the VNNI rows here
            got = _run(a, d, kind if kind >= 0 else KIND_VNNI)
            path = _fn("ei_int8_stem_path", ctypes.c_char_p)(ctypes.addressof(a)).decode()
            scalar = _run(a, d, 0)
        finally:
            native.set_isa_mask(old)
        assert np.array_equal(got, want), (mode, path)
        assert np.array_equal(scalar, want), mode
        if mode == "native" and _has_amx():
            assert path.startswith("AMX tdpbusd"), path
        if mode in ("no_amx", "base", "scalar"):
            assert "AMX" not in path, (mode, path)


@pytest.mark.parametrize("m,hw", [(16, (40, 56)), (8, (24, 70))])
def test_plan_notes_name_the_amx_rows(m, hw):
    """In a plan, the stem conv's note names the rows it runs: AMX tiles where the machine has
    them (two pixels a tile row for 8 channels), the VNNI rows with AMX masked off; same bytes."""
    rng = np.random.default_rng(m)
    g, feeds = int8_conv_case(rng, 1, 3, m, hw[0], hw[1], 3, 2, 1, 1, "NHWC", "Relu", False)
    res = run_three_ways(g, feeds)
    for mode in MASKS:
        assert np.array_equal(res[mode][0], res["numpy"][0]), mode
        assert "native stem conv" in res[mode][1], (mode, res[mode][1])
    if not _has_amx():
        pytest.skip("no AMX on this machine")
    assert "AMX tdpbusd" + (", two pixels a tile row" if m <= 8 else "") in res["native"][1], res["native"][1]
    assert "AVX-512 VNNI vpdpbusd" in res["no_amx"][1], res["no_amx"][1]
