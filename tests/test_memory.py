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
