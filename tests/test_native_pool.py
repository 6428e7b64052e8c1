"""The native thread pool when a thread is held up (runtime.c): a worker stopped inside its
chunk holds up nothing else (the caller runs every chunk not yet taken, each exactly once),
more threads than cores neither deadlock nor lose a chunk, a pool whose joins wait longer than
the workers' share of the work runs jobs in the caller alone and takes the threads back later,
and whole models give bit-identical outputs at 1, 2, 3 and 8 threads, fp32 and int8."""
import ctypes
import os
import sys
import threading
import time

import numpy as np
import pytest

from edge_infer.backends.cpu import native

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_models import randomized_light_model_path  # noqa: E402

needs_native = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")
RANGE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
SHRINK_WINDOW, SHRINK_JOBS = 16, 64        # runtime.c


def parallel_for():
    return native.function("ei_parallel_for", ctypes.c_int64, ctypes.c_int64, RANGE_FN, ctypes.c_void_p,
                           ctypes.c_int)


class Recorder:
    """A range function that counts each index and notes which thread ran each range; a
    worker thread (not the caller) can be held inside its first range until ``release(b, e)``
    says so (the test's stand-in for a worker the OS has descheduled)."""

    def __init__(self, n, caller_sleep=0.0, release=None):
        self.hits = np.zeros(n, np.int64)
        self.ranges = []
        self.lock = threading.Lock()
        self.caller = threading.get_ident()
        self.caller_sleep = caller_sleep
        self.release = release
        self.held = 0
        self.fn = RANGE_FN(self.body)

    def body(self, _ctx, b, e):
        me = threading.get_ident()
        with self.lock:
            hold = me != self.caller and self.release is not None and self.held == 0
            self.held += hold
        if hold:
            deadline = time.monotonic() + 30
            while not self.release(self, b, e) and time.monotonic() < deadline:
                time.sleep(0.0005)          # releases the GIL: the caller's ranges go on
        elif me == self.caller and self.caller_sleep:
            time.sleep(self.caller_sleep)
        with self.lock:
            self.hits[b:e] += 1
            self.ranges.append((b, e, me == self.caller))


@needs_native
@pytest.mark.parametrize("threads", [2, 4])
def test_held_worker_holds_up_only_its_own_chunk(threads):
    # the held worker waits until every index outside its range has run: the caller (and
    # any other worker) must take every chunk it has not started, and the job still ends
    par = parallel_for()
    # every thread of the process on all CPUs: a worker whose affinity an earlier test narrowed
    # to one CPU (threads inherit their creator's; forget=True below makes the pool treat it as
    # set by somebody else) declines every chunk while the caller runs on that CPU, by design,
    # so no job would hold it (a likely cause of its failures under pytest -n 2; reproduced by
    # pinning caller and worker to one CPU before this test)
    if hasattr(os, "sched_setaffinity"):
        set_affinity_of_every_thread(set(range(os.cpu_count() or 1)))
    native.pool_stats(reset=True, forget=True)   # not shrunk by an earlier test's runs
    held_jobs = 0
    for _ in range(20):
        n = 64
        rec = Recorder(n, caller_sleep=0.002,
                       release=lambda r, b, e: int(r.hits.sum()) >= n - (e - b))
        par(n, 1, rec.fn, None, threads)
        assert (rec.hits == 1).all()
        if rec.held:
            held_jobs += 1
            theirs = [(b, e) for b, e, by_caller in rec.ranges if not by_caller]
            if threads == 2:        # one worker: it ran the one chunk it was held in
                assert len(theirs) == 1
    assert held_jobs > 0, "no worker took a chunk in 20 jobs"


@needs_native
@pytest.mark.parametrize("spin_us", [0, 200])
def test_more_threads_than_cores(spin_us):
    par = parallel_for()
    spin = native.function("ei_set_spin_us", ctypes.c_int, restype=ctypes.c_int)
    threads = max(8, 4 * (os.cpu_count() or 1))
    old = spin(spin_us)
    try:
        for n in (7, 100, 1000):
            rec = Recorder(n, caller_sleep=0.0002)
            for _ in range(3):
                par(n, 1, rec.fn, None, threads)
            assert (rec.hits == 3).all()
    finally:
        spin(old)


@needs_native
def test_pool_shrinks_when_joins_wait_and_grows_back():
    par = parallel_for()
    native.pool_stats(reset=True, forget=True)
    jobs = 0
    # a worker held 5 ms in its chunk while the caller's chunks take 0.3 ms: every join waits
    # longer than the worker's share of the work
    while native.pool_stats()["shrinks"] == 0 and jobs < 10 * SHRINK_WINDOW:
        rec = Recorder(16, caller_sleep=0.0003,
                       release=lambda r, b, e, t0=time.monotonic(): time.monotonic() - t0 > 0.005)
        par(16, 1, rec.fn, None, 2)
        assert (rec.hits == 1).all()
        jobs += 1
    stats = native.pool_stats(reset=True)
    assert stats["shrinks"] >= 1, stats
    # the joins waited; or, on a loaded machine, the scheduler put the worker on the caller's
    # CPU, where it leaves its chunks to the caller (counted as contention), which shrinks too
    assert (stats["waits"] >= 1 and stats["wait_ns"] > 0) or stats["calms"] >= 1, stats
    # shrunk: the next jobs run in the caller alone (each index once), then threads come back
    rec = Recorder(16)
    for _ in range(SHRINK_JOBS + 10):
        par(16, 1, rec.fn, None, 2)
    assert (rec.hits == SHRINK_JOBS + 10).all()
    stats = native.pool_stats(reset=True)
    assert stats["serial_jobs"] == SHRINK_JOBS
    assert stats["jobs"] == 10


def set_affinity_of_every_thread(cpus):
    old = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            old[int(tid)] = os.sched_getaffinity(int(tid))
            os.sched_setaffinity(int(tid), cpus)
        except OSError:         # a thread that just ended
            pass
    return old


@needs_native
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_threads_sharing_a_cpu_stop_spinning():
    # every thread of this process on one CPU: a worker spinning between the layers of a run
    # would take that CPU from the caller, so its spin must notice and stop (counted as
    # contention), and a worker woken there leaves every chunk to the caller (time-slicing
    # with it would only halve both), and the pool soon runs the jobs in the caller alone;
    # the outputs stay those of the unpinned run
    from edge_infer import Runtime
    from edge_infer.frontends import load_model
    g = load_model(randomized_light_model_path("squeezenet"))
    rt = Runtime(g, backend="cpu", threads=2)
    x = {g.inputs[0]: np.random.default_rng(5).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    want = rt.run(x)                             # the worker exists before the pinning
    cpu = min(os.sched_getaffinity(0))
    old = set_affinity_of_every_thread({cpu})
    try:
        native.pool_stats(reset=True, forget=True)
        got = [rt.run(x) for _ in range(5)]
        stats = native.pool_stats(reset=True)
    finally:
        for tid, cpus in old.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
    for out in got:
        for k in want:
            np.testing.assert_array_equal(out[k], want[k])
    assert stats["calms"] >= 1, stats
    assert stats["caller_chunks"] == stats["chunks"], stats
    assert stats["shrinks"] >= 1 and stats["serial_jobs"] > stats["jobs"], stats


def model_runs(graph, x, threads_list):
    from edge_infer import Runtime
    outs = {}
    for t in threads_list:
        rt = Runtime(graph, backend="cpu", threads=t)
        native.pool_stats(reset=True, forget=True)
        outs[t] = [rt.run(x) for _ in range(3)]
        outs[t].append(native.pool_stats(reset=True))
    return outs


@needs_native
@pytest.mark.parametrize("kind", ["fp32", "int8"])
def test_outputs_identical_at_every_thread_count(kind):
    from edge_infer.convert import optimize_verified
    from edge_infer.frontends import load_model
    from edge_infer.quantize import quantize_model
    g = load_model(randomized_light_model_path("squeezenet"))
    g.validate()
    g3, _ = optimize_verified(g, 3, samples=1)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(3)]
    name = g3.inputs[0]
    graph = quantize_model(g3, [{name: x} for x in xs[:2]])[0] if kind == "int8" else g3
    outs = model_runs(graph, {name: xs[2]}, [1, 2, 3, 8])
    ref = outs[1][0]
    for t, (*runs, stats) in outs.items():
        for got in runs:
            for k in ref:
                np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{kind} at {t} threads")
        if t > 1:
            assert stats["jobs"] + stats["serial_jobs"] > 0, (t, stats)   # the pool did run jobs


@needs_native
def test_profile_steps_records_each_native_step():
    from edge_infer import Runtime
    from edge_infer.frontends import load_model
    g = load_model(randomized_light_model_path("squeezenet"))
    rt = Runtime(g, backend="cpu", threads=2)
    x = np.zeros((1, 3, 224, 224), np.float32)
    rt.run(x)
    ex = rt.plan({g.inputs[0]: x.shape})
    addrs = [s.native_step[1] for s in ex.steps if getattr(s, "native_step", None) is not None]
    buf = np.zeros((4 * len(addrs) + 4, native.PROFILE_FIELDS), np.int64)
    native.profile_steps(buf)
    rt.run(x)
    rt.run(x)
    n = native.profile_steps(None)
    assert n == 2 * len(addrs)
    assert list(buf[:n, 0]) == addrs * 2
    assert (buf[:n, 1] > 0).all()
    rt.run(x)                                   # stopped: nothing more recorded
    assert native.profile_steps(None) == 0


@needs_native
@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_parallel_copy_matches_numpy(threads):
    """ei_copy_par: a channel Concat in NHWC (strided destinations, inputs with different
    channel counts), a transposed source and pairs with different row counts in one step give
    what np.copyto gives, each element written once, at any thread count."""
    from edge_infer.backends.cpu.native import ops as native_ops
    rng = np.random.default_rng(threads)
    a = rng.standard_normal((1, 37, 29, 16)).astype(np.float32)
    b = rng.standard_normal((1, 37, 29, 48)).astype(np.float32)
    y = np.full((1, 37, 29, 64), np.nan, np.float32)
    t = rng.standard_normal((53, 41, 7)).astype(np.float32)
    ty = np.full((7, 41, 53), np.nan, np.float32)
    s = rng.integers(-128, 128, (300, 131), dtype=np.int8)
    sy = np.zeros((300, 262), np.int8)
    pairs = [(y[..., :16], a), (y[..., 16:], b), (ty, t.transpose(2, 1, 0)), (sy[:, 1::2], s)]
    step = native_ops.copy_step(pairs, threads)
    assert step is not None
    step()
    np.testing.assert_array_equal(y, np.concatenate([a, b], -1))
    np.testing.assert_array_equal(ty, t.transpose(2, 1, 0))
    np.testing.assert_array_equal(sy[:, 1::2], s)
    assert not sy[:, 0::2].any()
