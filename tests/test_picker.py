"""The backend picker under forced conditions: a backend missing or unavailable, an op
unsupported (partition or fall back), estimates from throughput profiles, measured timings
overriding them, the target profile's preference; Runtime(auto), run --explain,
bench --backends and inspect --partition. Caches go to a tmp dir (EDGE_INFER_CACHE_DIR)."""
import json

import numpy as np
import pytest

from edge_infer.backends import BACKENDS, get_backend
from edge_infer.backends.base import Backend
from edge_infer.backends.partition import PartitionedExecutable
from edge_infer.backends.picker import (cache_dir, candidate_names, format_report, model_key, pick,
                                        record_timing, throughput_profile)
from edge_infer.backends.throughput import graph_seconds, measure_profile, running_nodes
from edge_infer.errors import BackendError
from edge_infer.runtime import Runtime, specialize

from test_partition import CPU, SubsetBackend, profile, small_graph


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    from edge_infer.backends import picker
    monkeypatch.setenv("EDGE_INFER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(picker, "_measured_here", {})
    return tmp_path / "cache"


class Unavailable(Backend):
    name = "ghost"

    def available(self):
        return False, "no ghost device on this machine"

    def supported_ops(self):
        return ["Conv"]


def broken():
    raise ImportError("libghost.so: cannot open shared object file")


@pytest.fixture(autouse=True)
def only_cpu(monkeypatch):
    """The registry as these tests expect it: the CPU backend plus what a test registers
    (the real OpenCL/CUDA/LiteRT backends, where present, would change the choices)."""
    for name in [n for n in BACKENDS if n != "cpu"]:
        monkeypatch.delitem(BACKENDS, name)


@pytest.fixture
def register(monkeypatch):
    def add(name, factory):
        monkeypatch.setitem(BACKENDS, name, factory)
    return add


def all_ops(g):
    return {n.op for n in running_nodes(g)}


def test_unavailable_or_broken_backends_leave_cpu(register):
    register("ghost", Unavailable)
    register("broken", broken)
    g = small_graph()
    c = pick(g)
    assert c.name == "cpu" and c.backend.name == "cpu"
    cands = {e["name"]: e for e in c.report["candidates"]}
    assert cands["ghost"] == {"name": "ghost", "available": False, "reason": "no ghost device on this machine"}
    assert not cands["broken"]["available"] and "libghost.so" in cands["broken"]["reason"]
    text = format_report(c.report)
    assert "ghost    unavailable: no ghost device" in text and "only available backend" in text
    with pytest.raises(BackendError, match="not available here: no ghost device"):
        pick(g, "ghost")
    with pytest.raises(BackendError, match="unknown backend"):
        pick(g, "nosuch")


def test_estimate_decides_between_full_coverage_backends(register):
    g = small_graph()
    register("subset", lambda: SubsetBackend(all_ops(g)))
    fast = pick(g, profiles={"subset": profile(10), "cpu": profile()})
    assert fast.name == "subset" and "estimated" in fast.report["why"]
    slow = pick(g, profiles={"subset": profile(0.1), "cpu": profile()})
    assert slow.name == "cpu"
    est = {o["name"]: o["score_ms"] for o in slow.report["options"]}
    assert est["subset"] > est["cpu"] > 0
    assert est["cpu"] == pytest.approx(graph_seconds(g, profile()) * 1e3)


def test_unsupported_op_partitions_or_falls_back(register):
    g = small_graph()
    register("subset", lambda: SubsetBackend(all_ops(g) - {"Relu"}))
    # fast device, fast link: offload around the Relu, which stays on the CPU
    c = pick(g, profiles={"subset": profile(50, transfer=1e13), "cpu": profile()})
    assert c.name == "subset+cpu" and c.plan is not None
    assert [s.backend for s in c.plan.segments] == ["subset", "cpu", "subset"]
    ex = c.backend.prepare(g, threads=1)
    assert isinstance(ex, PartitionedExecutable)
    x = np.random.default_rng(0).standard_normal((1, 4, 16, 16)).astype(np.float32)
    ref = CPU.prepare(g, threads=1).run({"x": x})
    out = ex.run({"x": x})
    for k in ref:
        np.testing.assert_array_equal(out[k], ref[k])
    # a slow link: no segment is worth it, so the CPU runs it all, and the report says why
    c = pick(g, profiles={"subset": profile(50, transfer=1e7), "cpu": profile()})
    assert c.name == "cpu"
    sub = next(e for e in c.report["candidates"] if e["name"] == "subset")
    assert sub["coverage"]["unsupported"] == {"Relu": 1} and "ratio" in sub["why_not"]
    assert "lacks Relu x1" in format_report(c.report)


def test_requested_backend_with_missing_ops_is_partitioned(register):
    g = small_graph()
    register("subset", lambda: SubsetBackend(all_ops(g) - {"MaxPool"}))
    rt = Runtime(g, backend="subset")
    x = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    out = rt.run({"x": x})
    ref = Runtime(g, backend="cpu").run({"x": x})
    for k in ref:
        np.testing.assert_array_equal(out[k], ref[k])
    assert rt.backend.name == "subset+cpu"
    rep = rt.backend_report()
    assert rep["requested"] == "subset" and rep["choice"] == "subset+cpu" and "partitioned" in rep["why"]


def test_measured_timings_override_the_estimate(register, cache):
    g = small_graph()
    register("subset", lambda: SubsetBackend(all_ops(g)))
    profs = {"subset": profile(10), "cpu": profile()}
    assert pick(g, profiles=profs).name == "subset"
    key = model_key(g, 1)
    record_timing(key, "subset", 5.0, 20)
    record_timing(key, "cpu", 1.0, 20)
    c = pick(g, profiles=profs)
    assert c.name == "cpu" and "measured" in c.report["why"]
    assert {o["name"]: o["basis"] for o in c.report["options"]} == {"cpu": "measured", "subset": "measured"}
    assert pick(g, profiles=profs, use_timings=False).name == "subset"
    # another thread count is another key: the estimate decides again
    assert pick(g, profiles=profs, threads=2).name == "subset"
    data = json.loads((cache / "timings.json").read_text())
    (dev,) = data
    assert data[dev][key]["cpu"]["median_ms"] == 1.0


class SlowSubset(SubsetBackend):
    """A subset backend whose runs take 20 ms more than the CPU's: what an estimate cannot see."""

    def prepare(self, graph, threads=None, **options):
        import time
        ex = super().prepare(graph, threads, **options)
        run = ex.run

        def slow(feeds, *a, **kw):
            time.sleep(0.02)
            return run(feeds, *a, **kw)
        ex.run = slow
        return ex


def test_close_estimates_are_settled_by_timing_the_model_once(register, cache, monkeypatch):
    from edge_infer.backends import picker
    g = small_graph()
    register("subset", lambda: SlowSubset(all_ops(g)))
    monkeypatch.setattr(picker, "MEASURE_ON_PICK", frozenset({"cpu", "subset"}))
    profs = {"subset": profile(2), "cpu": profile()}
    monkeypatch.setattr(picker, "throughput_profile", lambda b, threads: profs[b.name])
    monkeypatch.setattr(picker, "_load_per_cpu", lambda: 0.5)
    # the estimate alone says subset (2x the CPU's rates), and the two are within 4x: both
    # run on the model itself, and the measurement decides
    c = pick(g)
    assert c.name == "cpu" and c.report["measured_at_pick"] == ["cpu", "subset"]
    basis = {o["name"]: (o["basis"], o["score_ms"]) for o in c.report["options"]}
    assert basis["subset"][0] == basis["cpu"][0] == "measured" and basis["subset"][1] >= 20.0
    data = json.loads((cache / "timings.json").read_text())
    (dev,) = data
    assert set(data[dev][model_key(g, 1)]) == {"cpu", "subset"}
    # recorded: the next pick reads the timings and measures nothing
    again = pick(g)
    assert again.name == "cpu" and "measured_at_pick" not in again.report
    # timed on a busy machine: that pick follows the timing, nothing is recorded
    monkeypatch.setattr(picker, "_load_per_cpu", lambda: 9.0)
    busy = pick(g, threads=5)
    assert busy.name == "cpu" and busy.report["measured_at_pick"] == ["cpu", "subset"]
    assert model_key(g, 5) not in json.loads((cache / "timings.json").read_text())[dev]
    # far apart (10x), or profiles given by the caller, or timings off: the estimate decides
    profs["subset"] = profile(10)
    assert "measured_at_pick" not in pick(g, threads=2).report
    assert pick(g, threads=3, profiles=profs).name == "subset"
    assert pick(g, threads=4, use_timings=False).name == "subset"


def test_preference_order_breaks_ties_and_native_is_cpu(register):
    g = small_graph()
    register("subset", lambda: SubsetBackend(all_ops(g)))
    assert candidate_names(["native", "opencl_missing"])[0] == "cpu"
    assert candidate_names(["subset", "native"])[:2] == ["subset", "cpu"]
    same = {"subset": profile(), "cpu": profile()}
    assert pick(g, preference=["subset", "native"], profiles=same).name == "subset"
    assert pick(g, preference=["native", "subset"], profiles=same).name == "cpu"
    assert get_backend("native").name == "cpu"


def test_throughput_profile_is_measured_once_and_cached(cache, monkeypatch):
    from edge_infer.backends import picker
    monkeypatch.setattr(picker, "_load_per_cpu", lambda: 9.0)
    busy = throughput_profile(CPU, 1)
    assert busy["load_per_cpu"] == 9.0
    assert throughput_profile(CPU, 1) == busy                  # busy now too: kept
    monkeypatch.setattr(picker, "_measured_here", {})          # a later process ...
    assert throughput_profile(CPU, 1) == busy                  # ... on a busy machine uses it
    monkeypatch.setattr(picker, "_load_per_cpu", lambda: 0.5)
    prof = throughput_profile(CPU, 1)                          # ... on a quiet one measures again
    assert prof["load_per_cpu"] == 0.5
    for k in ("op_s", "dense_op_s", "run_s", "memory", "transfer", "dense", "grouped"):
        assert prof[k] > 0, k
    assert prof["dense"] > 1e8 and prof["memory"] > 1e8 and prof["op_s"] < 1e-2    # sane magnitudes
    saved = json.loads((cache / "throughput.json").read_text())
    assert len(saved) == 1 and list(saved.values())[0]["dense"] == prof["dense"]
    assert throughput_profile(CPU, 1) == prof      # from the cache, not re-measured
    assert cache_dir() == str(cache)


def test_microbenchmark_skips_what_a_backend_lacks():
    prof = measure_profile(SubsetBackend({"Add"}), 1)
    assert prof["op_s"] > 0 and prof["memory"] > 0
    assert "dense" not in prof and "grouped" not in prof and "int8_dense" not in prof


def test_profiling_a_device_does_not_import_the_converter():
    """measure_profile in a fresh process: every key measured, and no converter module
    (passes, quantizer, frontends) imported: a runtime-only install can profile."""
    import subprocess
    import sys
    code = ("import sys; from edge_infer.backends import get_backend; "
            "from edge_infer.backends.throughput import measure_profile; "
            "p = measure_profile(get_backend('cpu'), 1); "
            "print(sorted(p)); print([m for m in sys.modules if m.split('.')[1:2] in "
            "(['passes'], ['quantize'], ['convert'], ['frontends'])])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    keys, converter = out.stdout.strip().splitlines()
    for k in ("dense", "dense_op_s", "group_dense", "grouped", "int8_dense", "int8_memory", "memory", "op_s"):
        assert repr(k) in keys, (k, keys)
    assert converter == "[]", converter


def test_bundled_microbench_graphs_are_what_the_converter_makes():
    """The artifacts in edge_infer/data/microbench match the converter's output today (same
    ops, attributes, shapes, dtypes, weights; quantization scales to float tolerance):
    regenerate them with ``python -m edge_infer.data.microbench.make_microbench`` when not."""
    from edge_infer.artifact import load_artifact
    from edge_infer.data.microbench.make_microbench import GRAPHS, convert_graph, path_of
    for key in GRAPHS:
        made, (bundled, _) = convert_graph(key), load_artifact(path_of(key))
        assert [(n.op, n.attrs) for n in made.nodes] == [(n.op, n.attrs) for n in bundled.nodes], key
        assert made.inputs == bundled.inputs and made.outputs == bundled.outputs, key
        for name, t in made.tensors.items():
            b = bundled.tensors[name]
            assert (t.dtype, tuple(t.shape)) == (b.dtype, tuple(b.shape)), (key, name)
            if t.is_const:
                np.testing.assert_allclose(np.asarray(b.data, np.float64), np.asarray(t.data, np.float64),
                                           rtol=1e-5, atol=1, err_msg=f"{key}: {name}")
            if t.quant is not None:
                np.testing.assert_allclose(b.quant["scale"], t.quant["scale"], rtol=1e-4, err_msg=f"{key}: {name}")
                np.testing.assert_allclose(b.quant["zero_point"], t.quant["zero_point"], atol=1, err_msg=f"{key}: {name}")


def test_runtime_auto_and_cli(register, tmp_path, capsys, cache):
    from edge_infer import convert
    from edge_infer.cli import main
    from edge_infer.data import digits_model_path
    path = str(tmp_path / "d.eim")
    convert(digits_model_path(), path)
    g = Runtime(path, backend="cpu").graph
    register("subset", lambda: SubsetBackend(all_ops(specialize(g, {"input": (1, 1, 8, 8)}))))
    x = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["bench", path, "--backends", "all", "--runs", "5", "--warmup", "1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert {r["backend"] for r in rep["results"]} == {"cpu", "subset"}
    assert rep["fastest"] == min(rep["results"], key=lambda r: r["median_ms"])["backend"]
    assert rep["choice"] == rep["fastest"] and "measured" in rep["why"]
    rt = Runtime(path)
    assert rt.backend.name == rep["fastest"]
    np.testing.assert_array_equal(rt.run(x)["logits"], Runtime(path, backend="cpu").run(x)["logits"])
    assert main(["run", path, "--input", str(tmp_path / "x.npy"), "--explain"]) == 0
    out = capsys.readouterr().out
    assert f"backend: {rep['fastest']} (requested auto)" in out and "measured" in out
    assert main(["bench", path, "--backends", "nosuch"]) == 2
    assert "unknown backend" in capsys.readouterr().err
    assert main(["inspect", path, "--partition", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "partition cpu" in out and "cut bytes" in out
    assert main(["inspect", path, "--backend", "cpu"]) == 2


def test_inspect_partition_shows_segments(register, tmp_path, capsys):
    from edge_infer import convert
    from edge_infer.cli import main
    from edge_infer.data import digits_model_path
    path = str(tmp_path / "d.eim")
    convert(digits_model_path(), path)
    register("subset", lambda: SubsetBackend({"FusedConv", "Reshape", "Gemm", "FusedGemm"}))
    assert main(["inspect", path, "--partition", "--backend", "subset", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    segs = rep["plan"]["segments"]
    assert rep["plan"]["primary"] == "subset" and len(segs) >= 2
    assert {s["backend"] for s in segs} <= {"subset", "cpu"}
    for s in segs:
        assert s["cut_bytes"] > 0 and s["flops"] >= 0 and s["ops"]
    assert main(["inspect", path, "--partition", "--backend", "subset"]) == 0
    text = capsys.readouterr().out
    assert "partition" in text and "MFLOP" in text and "ratio" in text
