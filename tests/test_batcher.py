"""Dynamic batching: results to the right caller under 16 threads, FIFO order, priorities
without starvation, the max-wait deadline, fixed-batch models, errors, adaptation."""
import threading
import time

import numpy as np
import pytest

import edge_infer
from edge_infer import Batcher, InputError
from edge_infer.data import digits_model_path, load_digits_samples
from edge_infer.monitor import Registry
from edge_infer.runtime import TensorInfo


class FakeModel:
    """x [N, 4] -> y = 2x, s = sum(x); records each batch's first column; optional delay."""

    def __init__(self, batch_dim="N", delay=0.0, per_item=0.0, fail_on=None):
        self.inputs = [TensorInfo("x", (batch_dim, 4), "float32")]
        self.outputs = [TensorInfo("y", (batch_dim, 4), "float32"), TensorInfo("s", (batch_dim,), "float32")]
        self.delay, self.per_item, self.fail_on = delay, per_item, fail_on
        self.batches = []
        self.lock = threading.Lock()
        self.started = threading.Event()

    def run(self, feeds):
        x = feeds["x"]
        with self.lock:
            self.batches.append(x[:, 0].tolist())
        self.started.set()
        if self.fail_on is not None and self.fail_on in x[:, 0]:
            raise ValueError(f"bad sample {self.fail_on}")
        time.sleep(self.delay + self.per_item * len(x))
        return {"y": x * 2, "s": x.sum(axis=1)}


def _x(v):
    return np.full(4, v, np.float32)


@pytest.fixture(scope="module")
def digits_rt(tmp_path_factory):
    out = tmp_path_factory.mktemp("batch") / "digits.eim"
    edge_infer.convert(digits_model_path(), str(out))
    return edge_infer.Runtime(str(out))


def test_16_threads_get_their_own_results_real_model(digits_rt):
    x, _ = load_digits_samples()
    ref = digits_rt.run(x)["logits"]
    reg = Registry()
    wrong, done = [], []
    with Batcher(digits_rt, max_batch=16, max_wait_ms=5, registry=reg) as b:
        def caller(t):
            for i in range(t, 320, 16):
                prio = i % 3
                sample = x[i] if i % 2 else x[i:i + 1]          # with or without the batch axis
                out = b.submit(sample, priority=prio).result(timeout=30)["logits"]
                want = ref[i] if i % 2 else ref[i:i + 1]
                if out.shape != want.shape or not np.allclose(out, want, atol=1e-4):
                    wrong.append(i)
                done.append(i)
        threads = [threading.Thread(target=caller, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        st = b.stats()
    assert not wrong and sorted(done) == list(range(320))
    assert st["requests"] == 320 and st["errors"] == 0
    assert st["mean_batch"] > 1.5                      # concurrent callers were batched
    assert reg.get("edge_infer_batch_size").count == st["batches"]
    assert reg.get("edge_infer_requests_total").value == 320


def test_16_threads_fake_model_values_match_callers():
    model = FakeModel(delay=0.002)
    results = {}
    with Batcher(model, max_batch=8, max_wait_ms=2) as b:
        def caller(t):
            for k in range(40):
                v = t * 1000 + k
                out = b.submit(_x(v), priority=k % 4).result(timeout=30)
                results[v] = (out["y"], out["s"])
        threads = [threading.Thread(target=caller, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 640
    for v, (y, s) in results.items():
        np.testing.assert_array_equal(y, _x(v) * 2)
        assert s == pytest.approx(4 * v)
    assert max(len(bt) for bt in model.batches) > 1


def test_fifo_within_a_priority():
    model = FakeModel(delay=0.01)
    with Batcher(model, max_batch=4, max_wait_ms=1, batch_sizes=None) as b:
        futs = [b.submit(_x(i)) for i in range(20)]
        for i, f in enumerate(futs):
            assert f.result(timeout=10)["s"] == pytest.approx(4 * i)
    order = [v for bt in model.batches for v in bt]
    assert order == list(range(20))
    assert all(len(bt) <= 4 for bt in model.batches)


def test_higher_priority_first():
    model = FakeModel(delay=0.05)
    with Batcher(model, max_batch=1, max_wait_ms=0) as b:
        first = b.submit(_x(0))
        assert model.started.wait(5)                      # the dispatcher is busy with it
        futs = [b.submit(_x(v), priority=p) for v, p in ((1, 0), (2, 0), (3, 5), (4, 5), (5, 2))]
        for f in [first] + futs:
            f.result(timeout=10)
    assert [bt[0] for bt in model.batches] == [0, 3, 4, 5, 1, 2]


def test_lowest_priority_is_not_starved():
    model = FakeModel(delay=0.004)
    stop = threading.Event()
    with Batcher(model, max_batch=2, max_wait_ms=1, aging_ms=20) as b:
        def flood():                                       # always more high-priority work waiting
            while not stop.is_set():
                futs = [b.submit(_x(1), priority=10) for _ in range(4)]
                futs[-1].result(timeout=10)
        floods = [threading.Thread(target=flood) for _ in range(3)]
        for t in floods:
            t.start()
        time.sleep(0.05)
        t0 = time.perf_counter()
        low = b.submit(_x(-1), priority=0)
        low.result(timeout=5)
        waited = time.perf_counter() - t0
        served_high_before = sum(1 for bt in model.batches for v in bt if v == 1)
        stop.set()
        for t in floods:
            t.join()
    # it gains a level per 20 ms: 10 levels ~ 0.2 s, plus batches in progress
    assert waited < 1.0
    assert served_high_before > 10                        # the flood really was ahead of it


def test_max_wait_deadline():
    model = FakeModel()
    with Batcher(model, max_batch=8, max_wait_ms=60) as b:
        b.run(_x(0))                                      # warm up
        t0 = time.perf_counter()
        b.submit(_x(1)).result(timeout=5)
        alone = time.perf_counter() - t0
        t0 = time.perf_counter()
        futs = [b.submit(_x(i)) for i in range(8)]        # a full batch does not wait
        for f in futs:
            f.result(timeout=5)
        full = time.perf_counter() - t0
    assert 0.055 <= alone < 0.06 + 0.15
    assert full < 0.05
    assert model.batches[-1] == list(range(8))


def test_fixed_batch_one_runs_back_to_back():
    model = FakeModel(batch_dim=1, delay=0.001)
    with Batcher(model, max_batch=16, max_wait_ms=50) as b:
        assert b.max_batch == 1 and b.fixed_batch == 1
        t0 = time.perf_counter()
        futs = [b.submit(_x(i)) for i in range(12)]
        out = [f.result(timeout=5)["s"] for f in futs]
        took = time.perf_counter() - t0
    assert out == [pytest.approx(4 * i) for i in range(12)]
    assert all(len(bt) == 1 for bt in model.batches)
    assert took < 0.05 + 12 * 0.01                        # no max-wait pause per request


def test_fixed_batch_four_is_padded():
    model = FakeModel(batch_dim=4)
    with Batcher(model, max_wait_ms=5) as b:
        assert b.max_batch == 4
        out = b.run(_x(7))
        assert out["s"] == pytest.approx(28)
    assert len(model.batches[0]) == 4


def test_pow2_buckets_pad_partial_batches():
    model = FakeModel(delay=0.02)
    with Batcher(model, max_batch=8, max_wait_ms=5) as b:
        blocker = b.submit(_x(100))
        model.started.wait(5)
        futs = [b.submit(_x(i)) for i in range(5)]        # 5 -> a batch of 8 (padded)
        blocker.result(timeout=5)
        assert [f.result(timeout=5)["s"] for f in futs] == [pytest.approx(4 * i) for i in range(5)]
        st = b.stats()
    assert len(model.batches[1]) == 8 and model.batches[1][:5] == list(range(5))
    assert st["padded"] == 3


def test_errors_reach_the_callers_and_the_batcher_survives():
    model = FakeModel(fail_on=13.0)
    with Batcher(model, max_batch=4, max_wait_ms=1) as b:
        with pytest.raises(ValueError, match="bad sample"):
            b.run(_x(13))
        assert b.run(_x(2))["s"] == pytest.approx(8)
        assert b.stats()["errors"] == 1


def test_input_validation_at_submit(digits_rt):
    with Batcher(digits_rt) as b:
        with pytest.raises(InputError, match="shape"):
            b.submit(np.zeros((1, 9, 9), np.float32))
        with pytest.raises(InputError, match="one sample"):
            b.submit(np.zeros((2, 1, 8, 8), np.float32))
        with pytest.raises(InputError, match="match"):
            b.submit({"nope": np.zeros((1, 8, 8), np.float32)})
    with pytest.raises(RuntimeError, match="closed"):
        b.submit(np.zeros((1, 8, 8), np.float32))


def test_close_without_wait_cancels_pending():
    model = FakeModel(delay=0.05)
    b = Batcher(model, max_batch=1, max_wait_ms=0)
    first = b.submit(_x(0))
    model.started.wait(5)
    rest = [b.submit(_x(i)) for i in range(1, 6)]
    b.close(wait=False)
    assert first.result(timeout=5)["s"] == 0
    assert all(f.cancelled() for f in rest)


def test_batch_limit_adapts_to_latency_target():
    model = FakeModel(delay=0.002, per_item=0.002)        # 2 ms + 2 ms per sample
    stop = threading.Event()
    with Batcher(model, max_batch=32, max_wait_ms=10, latency_target_ms=30, adapt_every=4,
                 batch_sizes=None) as b:
        def client():
            while not stop.is_set():
                b.submit(_x(1)).result(timeout=10)
        clients = [threading.Thread(target=client) for _ in range(24)]
        for t in clients:
            t.start()
        time.sleep(1.5)
        stop.set()
        for t in clients:
            t.join()
        st = b.stats()
    # 24 waiting callers would make batches of ~24 (50 ms); the target pulls the limit down
    assert st["batch_limit"] < 24
    assert np.mean([len(bt) for bt in model.batches[-10:]]) < 20


def test_two_workers_run_batches_concurrently():
    model = FakeModel(delay=0.03)
    active, peak, lock = [0], [0], threading.Lock()
    inner = model.run

    def run(feeds):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return inner(feeds)
        finally:
            with lock:
                active[0] -= 1
    model.run = run
    with Batcher(model, max_batch=2, max_wait_ms=1, workers=2) as b:
        futs = [b.submit(_x(i)) for i in range(12)]
        assert [f.result(timeout=10)["s"] for f in futs] == [pytest.approx(4 * i) for i in range(12)]
    assert peak[0] == 2
