"""The per-call path of ``Runtime.run`` on the CPU backend: the checked fast path (one dict
lookup per call), the plan pool without a lock on the common path, and plans that read the
caller's input array in place (backends/cpu/direct_input.py). The contracts kept: a wrong
feed raises the same InputError after a shape was cached, outputs never alias the arena, the
caller's input is never written, and any C-contiguous (aligned as numpy aligns, or as the
arena), Fortran-ordered, read-only or sliced input computes what a plain copy computes
(onnxruntime the oracle for fp32).
"""
import os
import sys
import threading

import numpy as np
import pytest

from edge_infer import InputError, Runtime
from edge_infer.backends.cpu import native

sys.path.insert(0, os.path.dirname(__file__))
import family_models as F  # noqa: E402
from onnx_models import ort_run  # noqa: E402

needs_native = pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")
SHAPE = (1, 3, 48, 96)


@pytest.fixture(scope="module")
def textdir(tmp_path_factory):
    """(onnx model, fp32 graph at opt level 3, its int8 graph, input name, inputs)."""
    from edge_infer.convert import optimize_verified
    from edge_infer.frontends import load_model
    from edge_infer.quantize import quantize_model
    import onnx
    model = F.text_direction_classifier(SHAPE[2:])
    path = tmp_path_factory.mktemp("textdir") / "textdir.onnx"
    onnx.save(model, path)
    g = load_model(path)
    g.validate()
    g3, _ = optimize_verified(g, 3, samples=1)
    name = g3.inputs[0]
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-1, 1, SHAPE).astype(np.float32) for _ in range(6)]
    q, _ = quantize_model(g3, [{name: x} for x in xs[:3]])
    return model, g3, q, name, xs[3:]


def _misaligned(x):
    """A C-contiguous copy of ``x`` starting 16 bytes past a 64-byte boundary (as numpy's own
    allocations often do): a kernel assuming the arena's alignment shows here."""
    raw = np.empty(x.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 16
    out = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    out[...] = x
    return out


def _copy_path_input(x):
    """The same values in an array the plan cannot read in place (not C-contiguous)."""
    return np.asfortranarray(x) if x.ndim > 1 and max(x.shape) > 1 else x.astype(np.float64)


@pytest.mark.parametrize("kind", ["fp32", "int8"])
@pytest.mark.parametrize("threads", [1, 2])
def test_inputs_of_any_layout_match_copy_and_oracle(textdir, kind, threads):
    model, g3, q, name, xs = textdir
    rt = Runtime(g3 if kind == "fp32" else q, backend="cpu", threads=threads)
    ex = rt.plan({name: SHAPE})
    if native.lib is not None:
        assert ex.direct_inputs == [name]     # the reader is a READS_IN_PLACE kernel
    for x in xs:
        keep = x.copy()
        got = rt.run(x)
        np.testing.assert_array_equal(x, keep)                 # the caller's input is not written
        odd = _misaligned(x)                                   # 16 bytes past a 64-byte boundary
        for k, v in rt.run(odd).items():
            np.testing.assert_array_equal(v, got[k])
        np.testing.assert_array_equal(x, keep)                 # the caller's input is not written
        copied = rt.run({name: _copy_path_input(x)})
        for k in got:
            np.testing.assert_array_equal(got[k], copied[k])
        if kind == "fp32":
            ref = ort_run(model, {model.graph.input[0].name: x})
            for k, r in zip(got, ref.values()):
                assert np.abs(got[k] - r).max() <= 1e-4 * np.abs(r).max()
        # after an in-place run the plan's fields point at the arena again: a copying run of
        # other values (run_profiled copies into the arena) computes those values
        other = np.ascontiguousarray(x[..., ::-1])
        rt.run(x)
        prof, _ = ex.run_profiled({name: other})
        want = rt.run(_copy_path_input(other))
        for k in got:
            np.testing.assert_array_equal(prof[k], want[k])
            assert not np.array_equal(prof[k], got[k])


def test_outputs_of_a_run_are_not_overwritten_by_the_next(textdir):
    _, g3, _, name, xs = textdir
    rt = Runtime(g3, backend="cpu", threads=1)
    first = rt.run(xs[0])
    keep = {k: v.copy() for k, v in first.items()}
    for x in xs[1:]:
        later = rt.run(x)
        assert not any(np.array_equal(later[k], keep[k]) for k in keep)   # other inputs, other outputs
    for k in keep:
        np.testing.assert_array_equal(first[k], keep[k])
        assert not np.shares_memory(first[k], rt.plan({name: SHAPE}).arena_plan.arena)


@pytest.mark.parametrize("feed, msg", [
    (np.zeros((1, 3, 48, 95), np.float32), "expected shape"),
    (np.zeros((3, 48, 96), np.float32), "rank"),
    (np.zeros(SHAPE, np.int64), "dtype"),
])
def test_wrong_feed_raises_after_the_shape_is_cached(textdir, feed, msg):
    _, g3, _, name, xs = textdir
    rt = Runtime(g3, backend="cpu", threads=1)
    rt.run(xs[0])
    rt.run({name: xs[0]})                          # both forms on the fast path now
    with pytest.raises(InputError, match=msg):
        rt.run(feed)
    with pytest.raises(InputError, match=msg):
        rt.run({name: feed})
    with pytest.raises(InputError, match="unknown input"):
        rt.run({"nosuch": xs[0]})
    np.testing.assert_array_equal(rt.run(xs[1])[g3.outputs[0]], rt.run(_copy_path_input(xs[1]))[g3.outputs[0]])


def test_dropped_shape_is_planned_again(tmp_path):
    """A dynamically shaped model past ``max_shapes``: the fast path forgets the dropped pool."""
    from edge_infer import convert
    from edge_infer.data import digits_model_path, load_digits_samples
    eim = tmp_path / "d.eim"
    convert(digits_model_path(), eim)
    rt = Runtime(eim, backend="cpu", threads=1)
    rt.max_shapes = 1
    x, _ = load_digits_samples()
    a = rt.run(x[:2])["logits"]
    b = rt.run(x[:3])["logits"]                   # drops the shape of 2
    assert len(rt._plans) == 1
    np.testing.assert_array_equal(rt.run(x[:2])["logits"], a)
    assert list(rt._plans) == [((2, 1, 8, 8),)]    # planned again, not the dropped pool reused
    np.testing.assert_allclose(b[:2], a, rtol=1e-5, atol=1e-5)


def test_pool_wakes_waiting_runs(textdir):
    """More threads than executables: a run waits for one and is woken when it comes back."""
    _, g3, _, name, xs = textdir
    rt = Runtime(g3, backend="cpu", threads=1)
    rt.max_concurrency = 1
    want = [rt.run(x)[g3.outputs[0]] for x in xs]
    errors, done = [], []

    def work(k):
        try:
            for i in range(15):
                j = (k + i) % len(xs)
                np.testing.assert_array_equal(rt.run(xs[j])[g3.outputs[0]], want[j])
            done.append(k)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(done) == [0, 1, 2, 3]
    assert rt._plans[(SHAPE,)].size == 1


@needs_native
def test_later_tensor_in_the_input_bytes_does_not_write_the_callers_array():
    """The arena gives the input's bytes to a later tensor (y, once x is dead): only x's
    readers read the caller's array, y is still written to the arena, x stays as it was."""
    from edge_infer.ir import Graph
    g = Graph("reuse")
    g.add_input("x", "float32", (1, 64))
    g.add_node("Relu", ["x"], ["r"])
    g.add_const("b", np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64))
    g.add_node("Add", ["r", "b"], ["y"])
    g.outputs = ["y"]
    rt = Runtime(g, backend="cpu", threads=1)
    ex = rt.plan({"x": (1, 64)})
    assert ex.arena_plan.offsets["y"] == ex.arena_plan.offsets["x"]
    assert ex.direct_inputs == []             # its reader (Relu) is not a READS_IN_PLACE kernel
    for k in range(3):
        x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(1, 64) * (k + 1)
        keep = x.copy()
        np.testing.assert_allclose(rt.run(x)["y"], np.maximum(keep, 0) + g.tensors["b"].data, rtol=1e-6)
        np.testing.assert_array_equal(x, keep)


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
def test_quantize_reads_the_callers_input_in_place(threads):
    """An int8 graph's input QuantizeLinear (ei_quantize_f32) reads the caller's array: the
    bytes of a copying run, for arena-aligned and numpy-aligned arrays, input unchanged."""
    from edge_infer.ir import Graph
    g = Graph("quantize")
    g.add_input("x", "float32", (1, 3, 64, 64))
    g.add_const("s", np.array(0.02, np.float32))
    g.add_const("z", np.array(3, np.int8))
    g.add_node("QuantizeLinear", ["x", "s", "z"], ["q"])
    g.outputs = ["q"]
    rt = Runtime(g, backend="cpu", threads=threads)
    ex = rt.plan({"x": (1, 3, 64, 64)})
    assert ex.direct_inputs == ["x"] and ex.nodes[0].op == "QuantizeLinear"
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = rng.uniform(-3, 3, (1, 3, 64, 64)).astype(np.float32)
        keep = x.copy()
        want = rt.run(np.asfortranarray(x))["q"]
        np.testing.assert_array_equal(want, np.clip(np.round(x / np.float32(0.02)) + 3, -128, 127).astype(np.int8))
        for arr in (x, _misaligned(x)):
            np.testing.assert_array_equal(rt.run(arr)["q"], want)
        np.testing.assert_array_equal(x, keep)


@pytest.mark.parametrize("kind", ["fp32", "int8"])
def test_read_only_and_sliced_inputs_are_read_where_they_are(textdir, kind):
    """A read-only array and one sample of a batch (a view into its middle) give the outputs
    of a plain copy of the same values."""
    _, g3, q, name, xs = textdir
    rt = Runtime(g3 if kind == "fp32" else q, backend="cpu", threads=1)
    batch = np.concatenate(xs)
    frozen = xs[0].copy()
    frozen.flags.writeable = False
    for arr in [frozen] + [batch[k:k + 1] for k in range(len(xs))]:
        want = rt.run(np.array(arr, order="F"))
        got = rt.run(arr)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_array_equal(batch, np.concatenate(xs))


def test_two_input_feeds_are_checked_after_caching():
    """Each input's shape and dtype is part of the cached key: a change in the second one
    still meets the checks."""
    from edge_infer.ir import Graph
    g = Graph("two")
    g.add_input("a", "float32", (2, 8))
    g.add_input("b", "float32", (2, 8))
    g.add_node("Sub", ["a", "b"], ["y"])
    g.outputs = ["y"]
    rt = Runtime(g, backend="cpu", threads=1)
    a = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    b = np.cos(a)
    for _ in range(2):
        np.testing.assert_array_equal(rt.run({"a": a, "b": b})["y"], a - b)
        np.testing.assert_array_equal(a, np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
    with pytest.raises(InputError, match="expected shape"):
        rt.run({"a": a, "b": b[:, :7]})
    with pytest.raises(InputError, match="dtype"):
        rt.run({"a": a, "b": b.astype(np.int32)})
    with pytest.raises(InputError, match="unknown input"):
        rt.run({"a": a, "c": b})
    with pytest.raises(InputError, match="pass a dict"):
        rt.run(a)
