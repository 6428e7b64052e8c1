"""Arena planning and the buddy allocator (property tests)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from edge_infer.ir import Graph
from edge_infer.memory.arena import plan_arena
from edge_infer.memory.buddy import BuddyAllocator, OutOfMemory


def _random_graph(draw_sizes, edges):
    """A chain-with-skips graph of element-wise ops whose tensors have the given sizes."""
    g = Graph("rand")
    g.add_input("t0", "float32", (draw_sizes[0],))
    names = ["t0"]
    for k, (size, skip) in enumerate(zip(draw_sizes[1:], edges), start=1):
        src = names[max(0, k - 1 - skip)]
        out = f"t{k}"
        g.add_node("Relu", [src], [out])
        g.tensors[out].dtype, g.tensors[out].shape = "float32", (size,)
        names.append(out)
    g.outputs = [names[-1]]
    return g


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=2, max_size=40), st.data())
def test_arena_live_tensors_never_overlap(sizes, data):
    edges = data.draw(st.lists(st.integers(0, 4), min_size=len(sizes) - 1, max_size=len(sizes) - 1))
    g = _random_graph(sizes, edges)
    plan = plan_arena(g, inplace=False)
    names = list(plan.offsets)
    for i, a in enumerate(names):
        fa, la = plan.lifetimes[a]
        for b in names[i + 1:]:
            fb, lb = plan.lifetimes[b]
            if la < fb or lb < fa:
                continue
            ra = (plan.offsets[a], plan.offsets[a] + plan.nbytes[a])
            rb = (plan.offsets[b], plan.offsets[b] + plan.nbytes[b])
            assert ra[1] <= rb[0] or rb[1] <= ra[0], f"{a} and {b} overlap while both live"
    assert plan.lower_bound <= plan.size <= plan.naive


def test_arena_reuses_memory_on_a_chain():
    g = _random_graph([1000] * 10, [0] * 9)
    plan = plan_arena(g, inplace=False)
    assert plan.size == 2 * 4032  # two 4000-byte tensors (64-aligned) live at any step
    assert plan.naive == 10 * 4032


def test_inplace_aliases_respect_lifetimes():
    g = Graph()
    g.add_input("x", "float32", (8,))
    g.add_node("Relu", ["x"], ["a"])
    g.add_node("Relu", ["a"], ["b"])   # a dies here: b may take its place
    g.add_node("Relu", ["b"], ["c"])
    g.add_node("Add", ["c", "b"], ["d"])  # b still live at c's step: c can't alias b
    g.outputs = ["d"]
    for t in "abcd":
        g.tensors[t].dtype, g.tensors[t].shape = "float32", (8,)
    plan = plan_arena(g)
    assert plan.aliases.get("b") == "a"
    assert "c" not in plan.aliases


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 9000)), min_size=1, max_size=200))
def test_buddy_blocks_disjoint_and_coalesce(ops):
    b = BuddyAllocator(1 << 16, min_block=64)
    live = []
    for do_alloc, n in ops:
        if do_alloc or not live:
            try:
                live.append(b.alloc(n))
            except OutOfMemory:
                continue
        else:
            b.free(live.pop(n % len(live)))
        blocks = b.blocks()
        for (o1, s1), (o2, s2) in zip(blocks, blocks[1:]):
            assert o1 + s1 <= o2
        assert all(o % s == 0 for o, s in blocks)  # buddy alignment
        assert b.used_bytes + b.free_bytes == b.capacity
    for off in live:
        b.free(off)
    assert b.largest_free_block == b.capacity and b.fragmentation == 0.0


def test_buddy_views_hold_data_and_errors():
    b = BuddyAllocator(4096)
    o1, o2 = b.alloc(100), b.alloc(100)
    v1, v2 = b.array(o1, (25,), np.float32), b.array(o2, (25,), np.float32)
    v1[:] = 1
    v2[:] = 2
    assert v1.sum() == 25 and v2.sum() == 50
    with pytest.raises(ValueError):
        b.free(12345)
    with pytest.raises(OutOfMemory):
        b.alloc(1 << 20)


# -- adaptive workspace under a memory budget ---------------------------------------------------

import gc
import os
import re
import subprocess
import sys
import textwrap

from edge_infer.backends.cpu import executor as cpu_executor
from edge_infer.backends.cpu import native
from edge_infer.backends.cpu.executor import CpuExecutable
from edge_infer.ir import infer_shapes
from edge_infer.memory.budget import MemoryBudgetError, parse_size
from edge_infer.memory.pool import DYNAMIC_POOL, DynamicPool, register_metrics
from edge_infer.runtime import Runtime


def _conv_graph(layout, group, c, m, h, w, k, stride, dil, pad, int8=False, seed=0):
    rng = np.random.default_rng(seed)
    g = Graph("conv")
    xs = (1, c, h, w) if layout == "NCHW" else (1, h, w, c)
    attrs = {"pads": [pad] * 4, "strides": [stride, stride], "dilations": [dil, dil], "group": group}
    if layout == "NHWC":
        attrs["data_layout"] = "NHWC"
    if int8:
        g.add_input("x", "int8", xs).quant = {"scale": [0.05], "zero_point": [3], "axis": None}
        wt = g.add_const("w", rng.integers(-127, 128, (m, c // group, k, k)).astype(np.int8))
        wt.quant = {"scale": list(rng.uniform(0.001, 0.01, m).astype(np.float32)), "zero_point": [0] * m,
                    "axis": 0}
        g.add_const("b", rng.integers(-2000, 2000, m).astype(np.int32))
    else:
        g.add_input("x", "float32", xs)
        g.add_const("w", rng.standard_normal((m, c // group, k, k)).astype(np.float32))
        g.add_const("b", rng.standard_normal(m).astype(np.float32))
    g.add_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    g.outputs = ["y"]
    infer_shapes(g)
    if int8:
        g.tensors["y"].quant = {"scale": [0.2], "zero_point": [-5], "axis": None}
    x = (rng.integers(-128, 128, xs).astype(np.int8) if int8 else rng.standard_normal(xs).astype(np.float32))
    return g, x


def _full_and_banded(g, x):
    """(whole-matrix plan, its output, a plan squeezed so im2col runs in bands of about half
    the output rows, its output)."""
    whole = CpuExecutable(g)
    n = g.nodes[0]
    w, y = g.tensors["w"].shape, g.tensors["y"].shape
    oh, ow = (y[2], y[3]) if n.attrs.get("data_layout") != "NHWC" else (y[1], y[2])
    cols = int(np.prod(w[1:])) * int(n.attrs["group"]) * oh * ow * 4      # float32 columns
    limit = whole.arena_plan.size + whole.workspace_bytes - cols + max(cols // oh, cols // 2)
    banded = CpuExecutable(g, memory_limit=limit)
    return whole, whole.run({"x": x})["y"], banded, banded.run({"x": x})["y"]


_geometry = st.tuples(st.sampled_from(["NCHW", "NHWC"]), st.sampled_from([1, 2]), st.integers(1, 4),
                      st.integers(1, 4), st.integers(3, 13), st.integers(3, 13), st.sampled_from([2, 3]),
                      st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.integers(0, 2))


@settings(max_examples=40, deadline=None)
@given(_geometry)
def test_banded_im2col_equals_whole_fp32(geo):
    layout, group, cg, mg, h, w, k, stride, dil, pad = geo
    cg += group - 1                              # group 2 with one channel each would be depthwise
    if (k - 1) * dil + 1 > min(h, w) + 2 * pad or (h + 2 * pad - (k - 1) * dil - 1) // stride < 1:
        return                                   # no two output rows: nothing to band
    g, x = _conv_graph(layout, group, cg * group, mg * group, h, w, k, stride, dil, pad)
    lib = native.lib
    native.lib = None            # the numpy im2col (the native SGEMM tiles by itself, see below)
    try:
        whole, ref, banded, out = _full_and_banded(g, x)
    finally:
        native.lib = lib
    assert " bands of " in banded.notes["Conv_0"], banded.notes
    assert banded.arena_plan.size + banded.workspace_bytes <= banded.memory_limit
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6 * float(np.abs(ref).max()))


@settings(max_examples=25, deadline=None)
@given(_geometry)
def test_banded_im2col_equals_whole_int8_bit_exact(geo):
    layout, group, cg, mg, h, w, k, stride, dil, pad = geo
    cg += group - 1                              # group 2 with one channel each would be depthwise
    if (k - 1) * dil + 1 > min(h, w) + 2 * pad or (h + 2 * pad - (k - 1) * dil - 1) // stride < 1:
        return
    lib = native.lib
    native.lib = None            # the numpy int8 kernel (the native one has fixed-size scratch)
    try:
        g, x = _conv_graph(layout, group, cg * group, mg * group, h, w, k, stride, dil, pad, int8=True)
        whole, ref, banded, out = _full_and_banded(g, x)
    finally:
        native.lib = lib
    assert " bands of " in banded.notes["Conv_0"], banded.notes
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, ref)


def _chain_graph(c=16, hw=96, depth=4, batch="1", seed=0):
    """A chain of 3x3 convs (+Relu): big activations and im2col columns, tiny weights."""
    rng = np.random.default_rng(seed)
    g = Graph("chain")
    g.add_input("x", "float32", (1 if batch == "1" else batch, 3, hw, hw))
    prev, cin = "x", 3
    for k in range(depth):
        g.add_const(f"w{k}", (rng.standard_normal((c, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32))
        g.add_node("Conv", [prev, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1])
        g.add_node("Relu", [f"c{k}"], [f"r{k}"])
        prev, cin = f"r{k}", c
    g.outputs = [prev]
    return g


def _least_from(msg: str) -> int:
    return int(re.search(r"\(([\d,]+) B\)", msg).group(1).replace(",", ""))


def test_refusal_names_the_least_memory_and_that_much_runs():
    g = _chain_graph(hw=48)
    x = np.random.default_rng(1).standard_normal((1, 3, 48, 48)).astype(np.float32)
    ref = Runtime(g, backend="cpu", memory_limit="1GB").run(x)["r3"]
    arena = Runtime(g, backend="cpu", memory_limit="1GB").plan({"x": x.shape}).arena_plan.size
    with pytest.raises(MemoryBudgetError, match=r"model needs [\d.]+ [KM]iB \([\d,]+ B\)") as e:
        Runtime(g, backend="cpu", memory_limit=arena + 1000).run(x)
    least = _least_from(str(e.value))
    assert least > arena + 1000
    rt = Runtime(g, backend="cpu", memory_limit=least)
    np.testing.assert_allclose(rt.run(x)["r3"], ref, rtol=1e-6, atol=1e-6)
    ex = rt.plan({"x": x.shape})
    assert ex.arena_plan.size + ex.workspace_bytes <= least
    assert any(" bands of " in t for t in ex.notes.values())
    with pytest.raises(MemoryBudgetError):
        Runtime(g, backend="cpu", memory_limit=least - 1).run(x)
    # the arena alone over the limit: nothing to tile, the arena is the least
    with pytest.raises(MemoryBudgetError, match="arena alone") as e:
        Runtime(g, backend="cpu", memory_limit=arena - 1).run(x)
    assert _least_from(str(e.value)) == arena


def test_default_limit_from_artifact_then_target_then_psutil(tmp_path):
    from edge_infer.artifact import save_artifact
    from edge_infer.memory.budget import default_memory_limit
    g = _chain_graph(hw=16, depth=1)
    path = tmp_path / "m.eim"
    save_artifact(str(path), g, {"memory_limit": parse_size("3MB"), "target": {"name": "rpi4", "memory_budget_mb": 768}})
    rt = Runtime(str(path), backend="cpu")
    assert rt.memory_limit == 3 * 2**20 and "artifact" in rt.memory_limit_source
    assert default_memory_limit({"target": {"name": "rpi4", "memory_budget_mb": 768}}) == (768 * 2**20, "target rpi4")
    import psutil
    limit, source = default_memory_limit({})
    assert "psutil" in source and 0 < limit <= psutil.virtual_memory().total
    assert Runtime(str(path), backend="cpu", memory_limit="1MB").memory_limit == 2**20


_CAPPED_CHILD = textwrap.dedent("""
    import resource, sys, numpy as np
    from edge_infer.runtime import Runtime
    path, x_path, out_path, limit, headroom, cap = sys.argv[1:7]
    from edge_infer.backends.cpu.kernels import conv
    conv.COLS_CAP = float(cap)               # inf: whole-matrix im2col unless a limit asks for less
    x = np.load(x_path)
    rt = Runtime(path, backend="cpu", memory_limit=limit)
    a = np.ones((1024, 1024), np.float32)
    a @ a                                    # BLAS has mapped its GEMM buffers
    del a
    vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + int(headroom), vm + int(headroom)))
    try:
        np.save(out_path, rt.run(x)["r3"])
        print("ok", rt.memory_stats()["held_bytes"])
    except MemoryError as e:
        print("memoryerror", type(e).__name__)
""")


def test_run_under_capped_address_space_equals_unlimited(tmp_path, monkeypatch):
    """In a child whose address space is capped (RLIMIT_AS) 24 MiB above what it has mapped
    after loading, a model whose whole-matrix im2col needs more than that runs in bands
    under memory_limit=12MB, with the unlimited run's outputs; without the limit (and
    without the default column cap, conv.COLS_CAP) it fails."""
    from edge_infer.artifact import save_artifact
    from edge_infer.backends.cpu.kernels import conv
    monkeypatch.setattr(conv, "COLS_CAP", float("inf"))
    g = _chain_graph(c=40, hw=128, depth=4)      # untiled: ~31 MB, well over the 24 MiB cap
    path, xp, outp = tmp_path / "chain.eim", tmp_path / "x.npy", tmp_path / "y.npy"
    save_artifact(str(path), g, {})
    x = np.random.default_rng(2).standard_normal((1, 3, 128, 128)).astype(np.float32)
    np.save(xp, x)
    rt = Runtime(str(path), backend="cpu", memory_limit="4GB")
    ref = rt.run(x)["r3"]
    whole = rt.plan({"x": x.shape})
    headroom = 24 << 20
    assert whole.arena_plan.size + whole.workspace_bytes > headroom   # untiled cannot fit the cap
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")

    def child(limit, cap="inf"):
        out = subprocess.run([sys.executable, "-c", _CAPPED_CHILD, str(path), str(xp), str(outp), limit,
                              str(headroom), cap], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split()
    res = child("12MB")
    assert res[0] == "ok" and int(res[1]) <= 12 << 20, res
    np.testing.assert_allclose(np.load(outp), ref, rtol=1e-6, atol=1e-6)
    assert child("4GB")[0] == "memoryerror"
    assert child("4GB", str(1 << 20))[0] == "ok"   # the default column cap: fits unlimited too


# -- the dynamic pool ---------------------------------------------------------------------------

def test_dynamic_shapes_take_arenas_from_the_buddy_pool_and_give_them_back():
    g = _chain_graph(c=8, hw=24, depth=2, batch="N")
    g.outputs = ["r1"]
    rng = np.random.default_rng(3)
    rt = Runtime(g, backend="cpu", memory_limit="64MB")
    assert rt.dynamic
    gc.collect()        # runtimes of earlier tests give their blocks back first, not during this one
    used0 = DYNAMIC_POOL.stats()["used"]
    for n in (1, 3, 2, 5, 1, 4):
        x = rng.standard_normal((n, 3, 24, 24)).astype(np.float32)
        got = rt.run(x)["r1"]
        want = np.concatenate([Runtime(_single(g), backend="cpu").run(x[i:i + 1])["r1"] for i in range(n)])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    stats = rt.memory_stats()
    # one run slot: every shape's arena sits at the start of the slot's one block; batches 3
    # and 5 outgrew it (the slot's plans then were rebuilt), so 5, 1 and 4 are kept
    assert stats["dynamic"] and len(stats["slots"]) == 1
    assert stats["slots"][0]["grows"] == 3 and sorted(p["input_shapes"][0][0] for p in stats["plans"]) == [1, 4, 5]
    block = stats["slots"][0]["block_bytes"]
    assert max(p["arena_bytes"] for p in stats["plans"]) <= block < 2 * max(p["arena_bytes"] for p in stats["plans"])
    assert DYNAMIC_POOL.stats()["used"] - used0 == block
    assert stats["held_bytes"] < sum(p["arena_bytes"] + p["workspace_bytes"] for p in stats["plans"])
    del rt, stats
    gc.collect()
    assert DYNAMIC_POOL.stats()["used"] == used0                       # every arena went back


def _single(g):
    s = g.copy()
    s.tensors["x"].shape = (1, 3, 24, 24)
    return s


def test_dynamic_plans_evicted_past_the_memory_limit():
    g = _chain_graph(c=8, hw=24, depth=2, batch="N")
    one = Runtime(_single(g), backend="cpu").plan({"x": (1, 3, 24, 24)})
    per_sample = one.arena_plan.size + one.workspace_bytes
    rt = Runtime(g, backend="cpu", memory_limit=per_sample * 12)
    for n in (4, 5, 6, 4, 7, 1, 2):
        rt.run(np.zeros((n, 3, 24, 24), np.float32))
        assert rt.memory_stats()["held_bytes"] <= rt.memory_limit or len(rt.memory_stats()["plans"]) == 1


def test_pool_fragmentation_metric_and_registry():
    from edge_infer.monitor.registry import Registry
    pool = DynamicPool(chunk_bytes=1 << 20, min_block=4096)
    a, free_a = pool.arena(300_000)
    b, free_b = pool.arena(100_000)
    a[:] = 1
    b[:] = 2
    assert a.ctypes.data % 64 == 0 and not np.shares_memory(a, b)
    s = pool.stats()
    assert s["used"] == (512 + 128) * 1024 and s["largest_free_block"] == 256 * 1024
    assert s["fragmentation"] == pytest.approx(1 - 256 / (1024 - 640), abs=1e-4)
    reg = Registry()
    register_metrics(reg, pool)
    assert reg.get("edge_infer_dynamic_pool_fragmentation").value == s["fragmentation"]
    free_a(), free_b(), free_b()          # a second release is a no-op
    assert pool.stats()["fragmentation"] == 0.0 and pool.stats()["used"] == 0


def test_drop_pages_only_touches_read_only_file_maps(tmp_path):
    """Dropping an artifact weight's pages keeps its values (they come back from the file);
    anonymous or writable arrays are never advised (MADV_DONTNEED would zero them)."""
    from edge_infer.artifact import load_artifact, save_artifact
    from edge_infer.memory.pages import drop_pages, mapped_range
    g = _chain_graph(c=64, hw=8, depth=2)
    save_artifact(str(tmp_path / "w.eim"), g, {})
    loaded, _ = load_artifact(str(tmp_path / "w.eim"))
    w = loaded.tensors["w1"].data
    want = g.tensors["w1"].data.copy()
    assert mapped_range(w) is not None and not w.flags.writeable
    assert drop_pages([w, None]) == w.nbytes
    np.testing.assert_array_equal(w, want)
    anon = want.copy()
    anon.flags.writeable = False
    assert mapped_range(anon) is None and drop_pages([anon, want]) == 0
    np.testing.assert_array_equal(anon, want)


def test_cli_memory_limit_convert_run_inspect(tmp_path, capsys):
    """convert --memory-limit records the budget; inspect shows the convs tiled to fit it;
    run under it matches the unlimited run; a limit below the least exits 2 naming it."""
    from edge_infer.artifact import load_artifact
    from edge_infer.cli import main
    from edge_infer.data import digits_model_path
    eim, x, out = tmp_path / "d.eim", tmp_path / "x.npy", tmp_path / "y.npz"
    np.save(x, np.random.default_rng(4).standard_normal((8, 1, 8, 8)).astype(np.float32))
    rt = Runtime(_convert_digits(tmp_path), backend="cpu", memory_limit="1GB")
    whole = rt.plan({"input": (8, 1, 8, 8)})
    limit = whole.arena_plan.size + whole.workspace_bytes - 2000
    assert main(["convert", digits_model_path(), "-o", str(eim), "--memory-limit", str(limit)]) == 0
    assert load_artifact(str(eim))[1]["memory_limit"] == limit
    capsys.readouterr()
    one = rt.plan({"input": (1, 1, 8, 8)})            # what inspect plans (batch 1)
    assert main(["inspect", str(eim), "--memory-limit", str(one.arena_plan.size + one.workspace_bytes - 500)]) == 0
    assert "tiled to fit" in capsys.readouterr().out
    assert main(["run", str(eim), "--input", f"input={x}", "--output", str(out), "--backend", "cpu"]) == 0
    ref = rt.run(np.load(x))["logits"]      # banded numpy vs native SGEMM: another summation order
    np.testing.assert_allclose(np.load(out)["logits"], ref, rtol=1e-5, atol=1e-6 * float(np.abs(ref).max()))
    capsys.readouterr()
    assert main(["run", str(eim), "--input", f"input={x}", "--backend", "cpu", "--memory-limit", "20KB"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("edge-infer: error: model needs") and "\n" not in err and " B)" in err


def _convert_digits(tmp_path):
    import edge_infer
    from edge_infer.data import digits_model_path
    path = tmp_path / "plain.eim"
    edge_infer.convert(digits_model_path(), path)
    return str(path)


def test_dynamic_model_shared_by_threads_matches_single_runs():
    """4 threads x 40 runs of random batch sizes on one dynamic Runtime: each run holds a
    slot whose block the plans of all shapes share; results equal single-threaded ones."""
    import threading
    g = _chain_graph(c=8, hw=16, depth=2, batch="N")
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((int(n), 3, 16, 16)).astype(np.float32) for n in rng.integers(1, 7, 12)]
    want = [Runtime(g, backend="cpu").run(x)["r1"] for x in xs]
    rt = Runtime(g, backend="cpu", memory_limit="256MB")
    rt.max_concurrency = 3                  # fewer slots than threads: runs also wait for one
    errors = []

    def worker(seed):
        order = np.random.default_rng(seed).integers(0, len(xs), 40)
        for k in order:
            got = rt.run(xs[k])["r1"]
            if not np.array_equal(got, want[k]):
                errors.append(k)
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert 1 <= len(rt.memory_stats()["slots"]) <= 3


def test_slot_gives_one_arena_per_build_in_its_block_and_others_their_own():
    """A partitioned plan prepares several CPU parts, each asking for an arena: only the
    first goes in the slot's block, so parts never overlap."""
    from edge_infer.memory.slots import SlotSet
    slots = SlotSet(None, max_slots=1, pool=DynamicPool())
    got = []

    def build(graph, alloc):
        got.extend(alloc(n)[0] for n in (5000, 3000))
        return object()
    slot = slots.acquire()
    slots.executable(slot, ("k",), None, build)
    a, b = got
    assert np.shares_memory(a, slot.block) and not np.shares_memory(b, slot.block)
    assert a.size == 5000 and b.size == 3000 and b.ctypes.data % 64 == 0


@pytest.mark.skipif(native.lib is None, reason="the target is the native int8 kernels' (numpy's keep int64 accumulators)")
@pytest.mark.parametrize("family", ["mnv3", "db", "yolo", "digits"])
def test_int8_plan_takes_no_more_memory_than_fp32(tmp_path, family):
    """The int8 plan of a model needs no more arena + workspace bytes than its fp32 plan: the
    int8 kernels' scratch (int64 accumulators, float32 products, columns) is asked for by
    role, sized by its largest request, and placed first in arena bytes no tensor uses during
    the step (before the scratch facility: db 1.06x, yolo 1.55x of the fp32 plan). The native
    int8 conv's tiles are sized for the slots it runs on and the sums its path stores: the
    16x16 MobileNetV3 toy's int8 plan took 28.5 KB against fp32's 12 KB (a 12 KB tile per thread
    with a row block of int32 sums the AMX / VNNI epilogues never store), now 11.8 KB."""
    import onnx
    import edge_infer
    from edge_infer.data import digits_model_path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from int8_op_graphs import FAMILIES
    if family == "digits":
        src, shape = digits_model_path(), (1, 1, 8, 8)
    else:
        src, shape = str(tmp_path / "m.onnx"), (1, 3, 16, 16) if family == "mnv3" else (1, 3, 32, 32)
        onnx.save(FAMILIES[family](), src)
    rng = np.random.default_rng(0)
    calib = [{"input": rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(4)]
    edge_infer.convert(src, str(tmp_path / "q.eim"), quantize="int8", calib=calib, verify_samples=1)
    edge_infer.convert(src, str(tmp_path / "f.eim"), verify_samples=1)
    plans = {}
    for kind in ("q", "f"):
        rt = Runtime(str(tmp_path / f"{kind}.eim"), backend="cpu")
        ex = rt.plan({"input": shape})
        plans[kind] = ex.arena_plan.size + ex.workspace_bytes
        assert sum(ex.scratch_bytes.values()) <= ex.workspace_bytes       # the role buffers are workspace
        stats = rt.memory_stats()["plans"][0]
        assert stats["workspace_bytes"] == ex.workspace_bytes and stats["scratch_bytes"] == ex.scratch_bytes
        assert stats["scratch_in_arena"] == len(ex.arena_plan.scratch_offsets)
    assert plans["q"] <= plans["f"], plans


@pytest.mark.skipif(native.lib is None, reason="the native int8 conv's tiles")
@pytest.mark.parametrize("mask", [-1, -1 & ~native.AMX, native.AVX2 | native.NEON, 0],
                         ids=["best", "no_amx", "avx2_neon", "scalar"])
def test_native_int8_conv_scratch_is_what_its_run_uses(mask):
    """The native int8 conv's tiles are sized for the thread slots its run uses and the rows
    and sums its path stores: a conv too small to split (16 pixels, 8 -> 8 channels: under
    the 4 us a thread slot must pay for, even on the scalar kernel) runs on one thread, so
    two threads take no more scratch than one; a large one takes a tile per thread. A 14x14
    40 -> 240 pointwise conv (~12 us) splits; on AMX its rows fit one block, so it splits them
    in two blocks of whole tiles and each slot stages only its own rows: more than one slot's
    scratch, less than two (int8_gemm.c conv_slots). Outputs at 1 and 2 threads bit-exact with
    the numpy int8 kernel."""
    from edge_infer.backends.cpu.native import kernels
    old = native.set_isa_mask(mask)
    try:
        amx = kernels.gemm_kind(40, rows=196, m=240, pointwise=True) == 5
        for geo, split in (((8, 8, 4, 4, 1, 1, 1, 0), False), ((64, 64, 56, 56, 3, 1, 1, 1), True),
                           ((40, 240, 14, 14, 1, 1, 1, 0), "rows" if amx else True)):
            c, m, h, w, k, stride, dil, pad = geo
            g, x = _conv_graph("NHWC", 1, c, m, h, w, k, stride, dil, pad, int8=True)
            lib = native.lib
            native.lib = None
            try:
                ref = CpuExecutable(g).run({"x": x})["y"]
            finally:
                native.lib = lib
            tiles = {}
            for threads in (1, 2):
                ex = CpuExecutable(g, threads)
                assert "native" in ex.notes["Conv_0"], ex.notes
                np.testing.assert_array_equal(ex.run({"x": x})["y"], ref)
                tiles[threads] = ex.scratch_bytes.get("im2col", 0)
            if split == "rows":
                assert tiles[1] < tiles[2] < 2 * tiles[1], (geo, tiles)
            else:
                assert tiles[2] == (2 * tiles[1] if split else tiles[1]), (geo, tiles)
    finally:
        native.set_isa_mask(old)
