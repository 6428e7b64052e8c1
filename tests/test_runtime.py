"""Runtime: input checking, per-shape plans, thread safety."""
import threading

import numpy as np
import pytest

import edge_infer
from edge_infer import InputError, Runtime
from edge_infer.data import digits_model_path, load_digits_samples


@pytest.fixture(scope="module")
def digits_rt(tmp_path_factory):
    out = tmp_path_factory.mktemp("rt") / "d.eim"
    edge_infer.convert(digits_model_path(), out)
    return Runtime(out)


def test_info_and_bare_array(digits_rt):
    assert [i.name for i in digits_rt.inputs] == ["input"]
    assert digits_rt.inputs[0].shape == ("N", 1, 8, 8)
    assert digits_rt.outputs[0].shape == ("N", 10)
    x, _ = load_digits_samples()
    a = digits_rt.run(x[:3])["logits"]
    b = digits_rt.run({"input": x[:3]})["logits"]
    np.testing.assert_array_equal(a, b)


def test_plan_per_shape_matches_batched(digits_rt):
    x, _ = load_digits_samples()
    full = digits_rt.run(x[:7])["logits"]
    singles = np.concatenate([digits_rt.run(x[k:k + 1])["logits"] for k in range(7)])
    np.testing.assert_allclose(full, singles, rtol=1e-5, atol=1e-5)
    assert len(digits_rt._plans) >= 2


def test_float64_input_is_accepted(digits_rt):
    x, _ = load_digits_samples()
    np.testing.assert_allclose(digits_rt.run(x[:2].astype(np.float64))["logits"],
                               digits_rt.run(x[:2])["logits"], rtol=1e-6)


@pytest.mark.parametrize("feeds, msg", [
    ({"nosuch": np.zeros((1, 1, 8, 8), np.float32)}, "unknown input"),
    ({}, "missing input"),
    ({"input": np.zeros((1, 2, 8, 8), np.float32)}, "expected shape"),
    ({"input": np.zeros((1, 8, 8), np.float32)}, "rank"),
    ({"input": np.zeros((1, 1, 8, 8), np.int64)}, "dtype"),
])
def test_bad_inputs(digits_rt, feeds, msg):
    with pytest.raises(InputError, match=msg):
        digits_rt.run(feeds)


def test_outputs_do_not_alias_buffers(digits_rt):
    x, _ = load_digits_samples()
    a = digits_rt.run(x[:1])["logits"]
    keep = a.copy()
    digits_rt.run(x[5:6])
    np.testing.assert_array_equal(a, keep)


def test_threads_share_one_runtime(digits_rt):
    """8 threads x many runs on one Runtime equal the single-threaded results."""
    x, _ = load_digits_samples()
    ref = [digits_rt.run(x[k:k + 1])["logits"] for k in range(16)]
    errors = []

    def worker(tid):
        for it in range(1000):
            k = (tid * 7 + it) % 16
            out = digits_rt.run(x[k:k + 1])["logits"]
            if not np.array_equal(out, ref[k]):
                errors.append((tid, it, k))

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:5]


def test_memory_limit_refuses_before_running(tmp_path):
    from edge_infer.runtime import MemoryBudgetError, parse_size
    assert parse_size("256MB") == 256 * 2**20 and parse_size("1.5K") == 1536 and parse_size(None) is None
    with pytest.raises(InputError):
        parse_size("lots")
    out = tmp_path / "d.eim"
    edge_infer.convert(digits_model_path(), out)
    x, _ = load_digits_samples()
    roomy = Runtime(out, backend="cpu", memory_limit="64MB")
    plan = roomy.plan({"input": (64, 1, 8, 8)})
    need = plan.arena_plan.size + plan.workspace_bytes
    # just under what the whole-matrix plan needs: the convs tile to fit (same results)
    # banded GEMMs add in another order: float32 rounding relative to the magnitudes summed
    # (~ the output scale), not to each (possibly near-zero) logit
    want = roomy.run(x[:64])["logits"]
    np.testing.assert_allclose(Runtime(out, backend="cpu", memory_limit=need - 1).run(x[:64])["logits"],
                               want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()))
    # (the arena without the scratch it reserved for the Winograd conv: conv_native.winograd_choice)
    tight = Runtime(out, backend="cpu", memory_limit=plan.arena_plan.size - sum(plan.arena_plan.reserved.values()) + 64)
    with pytest.raises(MemoryBudgetError, match="model needs"):
        tight.run(x[:64])
