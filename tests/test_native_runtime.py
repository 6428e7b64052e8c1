"""The native library's loader, ISA detection and thread pool (edge_infer/backends/cpu/native)."""
import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from edge_infer.backends.cpu import native

needs_native = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")

RANGE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


@needs_native
def test_features_match_cpuinfo():
    feats = native.features()
    assert set(feats) == {"avx2", "avx512", "neon", "dotprod", "amx"}
    try:
        flags = open("/proc/cpuinfo").read().split()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    assert feats["avx2"] == ("avx2" in flags and "fma" in flags)
    assert feats["avx512"] == ("avx512f" in flags and "avx512bw" in flags)
    # AMX also needs the kernel to grant the tile state, which a VM may refuse
    assert not feats["amx"] or ("amx_int8" in flags and "amx_tile" in flags)


@needs_native
def test_isa_mask_round_trip():
    old = native.set_isa_mask(0)
    try:
        assert native.set_isa_mask(-1) == 0
    finally:
        native.set_isa_mask(old)


@needs_native
@pytest.mark.parametrize("n,grain,threads", [(1, 1, 4), (10, 1, 3), (1000, 7, 2), (5, 10, 8), (64, 1, 64)])
def test_parallel_for_covers_each_index_once(n, grain, threads):
    par = native.function("ei_parallel_for", ctypes.c_int64, ctypes.c_int64, RANGE_FN, ctypes.c_void_p,
                          ctypes.c_int)
    hits = np.zeros(n, np.int64)
    chunks = []
    lock = threading.Lock()

    def body(_ctx, b, e):
        with lock:
            chunks.append((b, e))
            hits[b:e] += 1
    par(n, grain, RANGE_FN(body), None, threads)
    assert (hits == 1).all()
    # dynamic hand-out: up to 4 chunks per thread, each of at least `grain` items
    assert len(chunks) <= max(1, min(4 * threads, -(-n // grain)))
    assert all(e - b >= min(grain, n) or e == n for b, e in chunks)


@needs_native
def test_parallel_for_from_many_threads():
    # concurrent callers: one gets the pool, the others run serially; none deadlocks
    par = native.function("ei_parallel_for", ctypes.c_int64, ctypes.c_int64, RANGE_FN, ctypes.c_void_p,
                          ctypes.c_int)
    totals = []

    def one():
        hits = np.zeros(200, np.int64)
        cb = RANGE_FN(lambda _c, b, e: hits.__setitem__(slice(b, e), hits[b:e] + 1))
        for _ in range(20):
            par(200, 1, cb, None, 4)
        totals.append(int(hits.sum()))
    ts = [threading.Thread(target=one) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert totals == [4000] * 6


def test_disabled_by_environment():
    code = ("import warnings, sys\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    from edge_infer.backends.cpu import native\n"
            "print(native.lib is None, native.why_not, len([x for x in w if 'native' in str(x.message)]))")
    env = dict(os.environ, EDGE_INFER_NO_NATIVE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "True"
    assert "EDGE_INFER_NO_NATIVE" in out.stdout
    assert out.stdout.split()[-1] == "0"          # asked for: no warning (a failed load warns)
