"""NHWC layout: the channels-last kernels against their NCHW twins, and the layout pass
(passes/convert_layout.py) on hand-built graphs, the bundled digits model and real
ONNX architectures: same outputs (1e-5 relative), fewest transposes, idempotent."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_graph
from edge_infer.errors import EdgeInferError, ShapeError, UnsupportedOpError
from edge_infer.ir import Graph, infer_shapes
from edge_infer.passes.cancel_transposes import cancel_transposes
from edge_infer.passes.convert_layout import convert_layout, preferred_layout, resolve_layout
from edge_infer.passes.layout_perms import NHWC, reshape_layout
from edge_infer.passes.eliminate_dead_code import eliminate_dead_code
from edge_infer.verify import compare, random_inputs

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
HYP = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- kernels: NHWC vs NCHW ------------------------------------------------------------------

def _single(op, feeds, consts, attrs, layout, n_out=1, live=("x",)):
    """One ``op`` node reading ``feeds`` (graph inputs) then ``consts``, in ``layout``:
    the 4-D inputs named in ``live`` are transposed to NHWC for the NHWC twin."""
    g = Graph(op)
    names = []
    run_feeds = {}
    for name, arr in feeds.items():
        if layout == "NHWC" and name in live:
            arr = np.ascontiguousarray(arr.transpose(TO_NHWC))
        g.add_input(name, arr.dtype.name, arr.shape)
        run_feeds[name] = arr
        names.append(name)
    for name, arr in consts.items():
        if arr is None:
            names.append("")
            continue
        g.add_const(name, arr)
        names.append(name)
    outs = [f"y{k}" for k in range(n_out)]
    g.add_node(op, names, outs, **dict(attrs, data_layout=layout))
    g.outputs = outs
    return run_graph(g, run_feeds)


def _twins(op, feeds, consts, attrs, n_out=1, live=("x",), rtol=1e-5):
    a = _single(op, feeds, consts, attrs, "NCHW", n_out, live)
    b = _single(op, feeds, consts, attrs, "NHWC", n_out, live)
    for k in range(n_out):
        ya, yb = a[f"y{k}"], b[f"y{k}"]
        if ya.ndim == 4:
            yb = yb.transpose(TO_NCHW)
        assert ya.shape == yb.shape
        scale = max(float(np.abs(ya).max()), 1e-30)
        np.testing.assert_allclose(yb, ya, rtol=0, atol=rtol * scale)
    return a, b


@st.composite
def conv_case(draw):
    n = draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["dense", "depthwise", "grouped", "pointwise"]))
    c = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    if kind == "depthwise":
        group, m = c, c * draw(st.sampled_from([1, 2]))
    elif kind == "grouped" and c % 2 == 0:
        group, m = 2, 2 * draw(st.integers(1, 3))
    else:
        group, m = 1, draw(st.integers(1, 9))
    k = [1, 1] if kind == "pointwise" else [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    h, w = draw(st.integers(4, 9)), draw(st.integers(4, 9))
    strides = [1, 1] if kind == "pointwise" else [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    dil = [1, 1] if kind == "pointwise" else [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    auto_pad = "NOTSET" if kind == "pointwise" else draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER",
                                                                          "SAME_LOWER", "VALID"]))
    pads = [0] * 4 if kind == "pointwise" or auto_pad != "NOTSET" else \
        [draw(st.integers(0, 2)) for _ in range(4)]
    bias = draw(st.booleans())
    live_w = draw(st.booleans())
    return dict(n=n, c=c, m=m, group=group, k=k, h=h, w=w, strides=strides, dil=dil, pads=pads,
                auto_pad=auto_pad, bias=bias, live_w=live_w, seed=draw(st.integers(0, 2**16)),
                dtype=draw(st.sampled_from(["float32", "float32", "float64"])))   # float64: verify


@HYP
@given(conv_case())
def test_conv_nhwc_matches_nchw(case):
    rng = np.random.default_rng(case["seed"])
    c, m, group, k = case["c"], case["m"], case["group"], case["k"]
    dt = case["dtype"]
    x = rng.standard_normal((case["n"], c, case["h"], case["w"])).astype(dt)
    w = rng.standard_normal((m, c // group, *k)).astype(dt)
    b = rng.standard_normal(m).astype(dt) if case["bias"] else None
    attrs = dict(kernel_shape=k, strides=case["strides"], dilations=case["dil"], group=group)
    attrs.update(auto_pad=case["auto_pad"]) if case["auto_pad"] != "NOTSET" else attrs.update(pads=case["pads"])
    eff = [(k[i] - 1) * case["dil"][i] + 1 for i in range(2)]
    sp = [case["h"], case["w"]]
    if case["auto_pad"] in ("NOTSET", "VALID"):
        pads = case["pads"] if case["auto_pad"] == "NOTSET" else [0] * 4
        if any(sp[i] + pads[i] + pads[i + 2] < eff[i] for i in range(2)):
            return                                   # window larger than the input
    feeds, consts = {"x": x}, {}
    if case["live_w"]:
        feeds["w"] = w
    else:
        consts["w"] = w
    consts["b"] = b
    if b is None:
        consts.pop("b")
    _twins("Conv", feeds, consts, attrs)


@pytest.mark.parametrize("activation,params,residual", [
    ("Relu", [], True), ("Clip", [0.0, 6.0], False), ("", [], True), ("HardSwish", [], True)])
@pytest.mark.parametrize("group", [1, 4])
def test_fused_conv_nhwc_matches_nchw(activation, params, residual, group):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4 // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    feeds = {"x": x}
    consts = {"w": w, "b": b}
    if residual:
        feeds["z"] = rng.standard_normal((1, 4, 7, 6)).astype(np.float32)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=group, activation=activation,
                 activation_params=params)
    a = _fused(feeds, consts, attrs, "NCHW")
    bb = _fused(feeds, consts, attrs, "NHWC")
    np.testing.assert_allclose(bb.transpose(TO_NCHW), a, rtol=0, atol=1e-5 * np.abs(a).max())


def _fused(feeds, consts, attrs, layout):
    """FusedConv(x, w, b, z) in ``layout`` (x and the residual z transposed for NHWC)."""
    g = Graph("fused")
    run = {}
    for name, arr in feeds.items():
        arr = np.ascontiguousarray(arr.transpose(TO_NHWC)) if layout == "NHWC" else arr
        g.add_input(name, "float32", arr.shape)
        run[name] = arr
    for name, arr in consts.items():
        g.add_const(name, arr)
    g.add_node("FusedConv", ["x", "w", "b", "z" if "z" in feeds else ""], ["y"], **dict(attrs, data_layout=layout))
    g.outputs = ["y"]
    return run_graph(g, run)["y"]


@st.composite
def pool_case(draw):
    op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    k = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    strides = [draw(st.integers(1, 3)), draw(st.integers(1, 2))]
    pads = [draw(st.integers(0, k[i % 2] - 1)) for i in range(4)]
    attrs = dict(kernel_shape=k, strides=strides, pads=pads, ceil_mode=int(draw(st.booleans())))
    if op == "MaxPool":
        attrs["dilations"] = [draw(st.integers(1, 2)), 1]
    else:
        attrs["count_include_pad"] = int(draw(st.booleans()))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 5)), draw(st.integers(5, 9)), draw(st.integers(5, 9)))
    return op, attrs, shape, draw(st.integers(0, 2**16))


@HYP
@given(pool_case())
def test_pool_nhwc_matches_nchw(case):
    op, attrs, shape, seed = case
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    _twins(op, {"x": x}, {}, attrs)


@pytest.mark.parametrize("op,attrs,n_params", [
    ("GlobalAveragePool", {}, 0), ("GlobalMaxPool", {}, 0),
    ("BatchNormalization", {"epsilon": 1e-3}, 4),
    ("InstanceNormalization", {"epsilon": 1e-5}, 2),
    ("LRN", {"size": 3, "alpha": 1e-3, "beta": 0.75, "bias": 1.0}, 0),
    ("LRN", {"size": 4, "alpha": 2e-2, "beta": 0.5, "bias": 2.0}, 0)])
@pytest.mark.parametrize("shape", [(1, 5, 4, 3), (2, 3, 1, 6)])
def test_channel_ops_nhwc_match_nchw(op, attrs, n_params, shape):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    c = shape[1]
    consts = {f"p{k}": (rng.random(c) + 0.5).astype(np.float32) for k in range(n_params)}
    _twins(op, {"x": x}, consts, attrs)


def test_batchnorm_nhwc_with_computed_statistics_and_training_mode():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    stats = {f"s{k}": (rng.random(3) + 0.5).astype(np.float32) for k in range(4)}
    _twins("BatchNormalization", {"x": x, **stats}, {}, {"epsilon": 1e-5})
    _twins("BatchNormalization", {"x": x, **stats}, {}, {"epsilon": 1e-5, "training_mode": 1, "momentum": 0.9})


def test_nhwc_shape_rules_and_errors():
    g = Graph("s")
    g.add_input("x", "float32", ("N", 9, 10, 3))
    g.add_const("w", np.zeros((8, 3, 3, 3), np.float32))
    g.add_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], strides=[2, 2], data_layout="NHWC")
    g.add_node("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, data_layout="NHWC")
    g.add_node("GlobalAveragePool", ["p"], ["gap"], data_layout="NHWC")
    g.add_node("LRN", ["c"], ["l"], size=3, data_layout="NHWC")
    infer_shapes(g)
    assert g.tensors["c"].shape == ("N", 4, 4, 8)
    assert g.tensors["p"].shape == ("N", 2, 2, 8)
    assert g.tensors["gap"].shape == ("N", 1, 1, 8)
    assert g.tensors["l"].shape == ("N", 4, 4, 8)
    g.nodes[0].attrs["data_layout"] = "CHWN"
    with pytest.raises(ShapeError, match="data_layout"):
        infer_shapes(g)


def test_maxpool_indices_need_nchw():
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(UnsupportedOpError, match="Indices"):
        _single("MaxPool", {"x": x}, {}, {"kernel_shape": [2, 2]}, "NHWC", n_out=2)


# -- the pass on hand-built graphs ------------------------------------------------------------

def _c(g, rng, name, shape, scale=0.3):
    g.add_const(name, (rng.standard_normal(shape) * scale).astype(np.float32))
    return name


def _nhwc(g: Graph, layout="NHWC") -> Graph:
    """Run the layout pass (then the cleanup that LEVELS[3] runs after it) on a copy."""
    h = g.copy()
    if layout is not None:
        h.metadata["preferred_layout"] = layout
    convert_layout(h)
    while cancel_transposes(h) + eliminate_dead_code(h):
        pass
    h.validate()
    infer_shapes(h)
    return h


def _check(g: Graph, h: Graph, shapes=None, tol=1e-5):
    feeds = [random_inputs(g, s, shapes) for s in range(2)]
    err = compare(h, g, feeds)
    assert err <= tol, err
    again = h.copy()
    assert convert_layout(again) == 0                       # idempotent
    assert [(n.op, n.inputs, n.outputs, n.attrs) for n in again.nodes] == \
        [(n.op, n.inputs, n.outputs, n.attrs) for n in h.nodes]
    assert h.inputs == g.inputs and h.outputs == g.outputs
    for name in g.inputs + g.outputs:
        assert h.tensors[name].shape == g.tensors[name].shape


def _ops(g):
    return Counter(n.op for n in g.nodes)


def _conv_stack(batch="N"):
    rng = np.random.default_rng(0)
    g = Graph("stack")
    g.add_input("x", "float32", (batch, 3, 16, 16))
    g.add_node("Conv", ["x", _c(g, rng, "w1", (8, 3, 3, 3)), _c(g, rng, "b1", (8,))], ["y1"],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g.add_node("Relu", ["y1"], ["r1"])
    g.add_node("Conv", ["r1", _c(g, rng, "w2", (8, 1, 3, 3))], ["y2"], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1], group=8)
    g.add_node("Add", ["y2", "r1"], ["a"])
    g.add_node("Mul", ["a", _c(g, rng, "s", (8, 1, 1))], ["m"])
    g.add_node("BatchNormalization", ["m", *(_c(g, rng, f"bn{k}", (8,)) for k in range(2)),
                                      _c(g, rng, "bnm", (8,)),
                                      g.add_const("bnv", np.full(8, 1.5, np.float32)).name], ["bn"])
    g.add_node("MaxPool", ["bn"], ["p"], kernel_shape=[2, 2], strides=[2, 2])
    g.add_node("Conv", ["p", _c(g, rng, "w3", (16, 8, 1, 1))], ["y3"], kernel_shape=[1, 1])
    g.add_node("Clip", ["y3", g.add_const("lo", np.float32(0)).name, g.add_const("hi", np.float32(6)).name],
               ["r3"])
    g.add_node("GlobalAveragePool", ["r3"], ["gap"])
    g.add_node("Flatten", ["gap"], ["f"], axis=1)
    g.add_node("Gemm", ["f", _c(g, rng, "fw", (10, 16))], ["out"], transB=1)
    g.outputs = ["out"]
    g.validate()
    infer_shapes(g)
    return g


def test_conv_stack_keeps_one_transpose_at_the_input():
    g = _conv_stack()
    h = _nhwc(g)
    assert _ops(h)["Transpose"] == 1
    (tr,) = [n for n in h.nodes if n.op == "Transpose"]
    assert tr.inputs == ["x"] and tr.attrs["perm"] == list(TO_NHWC)
    spatial = [n for n in h.nodes if n.op in ("Conv", "MaxPool", "GlobalAveragePool", "BatchNormalization")]
    assert len(spatial) == 6 and all(n.attrs["data_layout"] == "NHWC" for n in spatial)
    assert "Flatten" not in _ops(h)                        # a Reshape of the stored (N,1,1,C) data
    _check(g, h, {"x": (2, 3, 16, 16)})


def test_preferred_layout_nchw_is_a_no_op_and_the_default_is_nhwc():
    g = _conv_stack()
    h = g.copy()
    h.metadata["preferred_layout"] = "NCHW"
    assert convert_layout(h) == 0
    assert [n.attrs for n in h.nodes] == [n.attrs for n in g.nodes]
    assert preferred_layout(Graph()) == "NHWC"
    assert resolve_layout("auto") == "NHWC"
    assert resolve_layout("nchw") == "NCHW" and resolve_layout("NHWC") == "NHWC"
    assert resolve_layout("auto", {"preferred_layout": "nchw"}) == "NCHW"
    with pytest.raises(EdgeInferError, match="layout"):
        resolve_layout("hwcn")


def test_graph_outputs_keep_nchw_and_intermediate_outputs_are_transposed_back():
    g = _conv_stack(batch=2)
    g.outputs = ["out", "r1", "p"]                       # two NHWC tensors are also outputs
    h = _nhwc(g)
    assert _ops(h)["Transpose"] == 3
    _check(g, h)


def _agnostic_graph():
    """Convs around every layout-agnostic op the pass remaps."""
    rng = np.random.default_rng(1)
    g = Graph("agnostic")
    g.add_input("x", "float32", (1, 4, 12, 10))
    g.add_input("side", "float32", (1, 6, 12, 10))
    conv = lambda i, o, cin, cout, k=1, **a: g.add_node(   # noqa: E731
        "Conv", [i, _c(g, rng, f"w_{o}", (cout, cin, k, k))], [o], kernel_shape=[k, k],
        pads=[k // 2] * 4, **a)
    conv("x", "c1", 4, 6, 3)
    conv("x", "c2", 4, 6, 1)
    g.add_node("Concat", ["c1", "c2", "side"], ["cat"], axis=1)                  # (1, 18, 12, 10)
    g.add_node("Split", ["cat", g.add_const("sp", np.array([8, 10], np.int64)).name], ["s1", "s2"], axis=-3)
    g.add_node("Softmax", ["s1"], ["sm"], axis=1)
    g.add_node("Sub", [g.add_const("one", np.float32(1)).name, "sm"], ["sub"])
    g.add_node("Mul", ["sub", _c(g, rng, "hw", (12, 1))], ["mhw"])               # broadcasts over H
    g.add_node("Slice", ["s2", *(g.add_const(n, np.array(v, np.int64)).name for n, v in
                                  (("st", [1, 0]), ("en", [9, 100]), ("ax", [1, -1]), ("step", [2, 1])))],
               ["sl"])                                                           # (1, 4, 12, 10)
    g.add_node("Pad", ["sl", g.add_const("pads", np.array([0, 1, 2, 0, 0, 3, 0, 1], np.int64)).name],
               ["pad"], mode="reflect")                                          # (1, 7, 14, 11)
    g.add_node("Resize", ["pad", "", g.add_const("sc", np.array([1, 1, 2, 0.5], np.float32)).name],
               ["rs"], mode="linear")                                            # (1, 7, 28, 5)
    g.add_node("ReduceMean", ["rs", g.add_const("rax", np.array([2], np.int64)).name], ["rm"], keepdims=1)
    g.add_node("Gather", ["mhw", g.add_const("gi", np.array([0, 2, 5], np.int64)).name], ["ga"], axis=1)
    conv("ga", "c3", 3, 7, 3)
    g.add_node("Relu", ["c3"], ["r3"])                                           # (1, 7, 12, 10)
    g.add_node("MaxPool", ["r3"], ["mp"], kernel_shape=[2, 2], strides=[2, 2])   # (1, 7, 6, 5)
    g.add_node("ReduceMax", ["rs", g.add_const("rax2", np.array([1, 2], np.int64)).name], ["rmx"],
               keepdims=0)                                                       # (1, 5)
    g.add_node("ArgMax", ["mp"], ["am"], axis=1, keepdims=0)                     # (1, 6, 5) int64
    g.add_node("LogSoftmax", ["rm"], ["out1"], axis=-1)
    g.outputs = ["out1", "mp", "rmx", "am"]
    g.validate()
    infer_shapes(g)
    return g


def test_layout_agnostic_ops_follow_with_remapped_axes():
    g = _agnostic_graph()
    h = _nhwc(g)
    ops = _ops(h)
    # transposes: x and side in, out1 and mp out; rmx and am come out plain
    assert ops["Transpose"] == 4, [(n.inputs, n.outputs) for n in h.nodes if n.op == "Transpose"]
    by_out = {o: n for n in h.nodes for o in n.outputs}
    assert by_out["rmx"].op == "ReduceMax"                 # keepdims=0 over C, H: (N, W) either way
    assert by_out["am"].op == "ArgMax"                     # keepdims=0 over C: (N, H, W) either way
    cat = next(n for n in h.nodes if n.op == "Concat")
    assert cat.attrs["axis"] == 3
    _check(g, h)


def test_constants_and_broadcasting_operands_are_permuted():
    rng = np.random.default_rng(2)
    g = Graph("bcast")
    g.add_input("x", "float32", (2, 3, 5, 4))
    g.add_input("v", "float32", (2, 6, 5, 4))            # computed 4-D operand, plain
    g.add_input("q", "float32", (1,))                    # single element: used as is
    g.add_node("Conv", ["x", _c(g, rng, "w", (6, 3, 1, 1))], ["c"], kernel_shape=[1, 1])
    g.add_node("Add", ["c", _c(g, rng, "b4", (1, 6, 5, 1))], ["a1"])
    g.add_node("Mul", [_c(g, rng, "row", (4,)), "a1"], ["a2"])
    g.add_node("Where", [g.add_const("cond", rng.random((6, 1, 1)) < 0.5).name, "a2", "v"], ["wh"])
    g.add_node("PRelu", ["wh", _c(g, rng, "slope", (6, 1, 1))], ["pr"])
    g.add_node("Div", ["pr", "q"], ["d"])
    # computed lower-rank operands (a graph that computes its scales): a Reshape to the
    # permuted broadcast shape, plus a Transpose where the non-unit dims change order
    g.add_input("chan", "float32", (6, 1, 1))
    g.add_input("chw", "float32", (6, 5, 1))
    g.add_node("Mul", ["d", "chan"], ["e"])
    g.add_node("Add", ["chw", "e"], ["f"])
    g.add_node("Conv", ["f", _c(g, rng, "w2", (2, 6, 1, 1))], ["out"], kernel_shape=[1, 1])
    g.outputs = ["out"]
    infer_shapes(g)
    h = _nhwc(g)
    assert _ops(h)["Transpose"] == 4                       # x, v, chw in; out
    assert _ops(h)["Reshape"] == 2
    _check(g, h)


def test_reshapes_run_on_the_stored_data_when_contiguous():
    rng = np.random.default_rng(4)
    g = Graph("reshapes")
    g.add_input("x", "float32", (1, 8, 6, 4))
    g.add_node("Conv", ["x", _c(g, rng, "w", (8, 8, 1, 1))], ["c"], kernel_shape=[1, 1])
    # a channel shuffle (ShuffleNet): split C, swap the groups, merge back, conv again
    g.add_node("Reshape", ["c", g.add_const("s5", np.array([1, 2, 4, 6, 4], np.int64)).name], ["r5"])
    g.add_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4])
    g.add_node("Reshape", ["t5", g.add_const("s4", np.array([1, 8, 6, 4], np.int64)).name], ["sh"])
    g.add_node("Conv", ["sh", _c(g, rng, "w2", (8, 8, 1, 1))], ["c2"], kernel_shape=[1, 1])
    # spatial flatten to tokens, transposed to (N, HW, C): free in NHWC
    g.add_node("Reshape", ["c2", g.add_const("s3", np.array([1, 8, 24], np.int64)).name], ["tok"])
    g.add_node("Transpose", ["tok"], ["tokt"], perm=[0, 2, 1])
    g.add_node("MatMul", ["tokt", _c(g, rng, "mm", (8, 5))], ["out1"])
    # a flatten of the whole map (VGG classifier): needs the plain layout back
    g.add_node("Flatten", ["c2"], ["flat"], axis=1)
    g.add_node("Gemm", ["flat", _c(g, rng, "fc", (192, 3))], ["out2"])
    # Squeeze/Unsqueeze around a pooled map
    g.add_node("GlobalMaxPool", ["c2"], ["gmp"])
    g.add_node("Squeeze", ["gmp", g.add_const("sq", np.array([2, 3], np.int64)).name], ["sqz"])
    g.add_node("Unsqueeze", ["sqz", g.add_const("usq", np.array([1], np.int64)).name], ["out3"])
    g.add_node("Shape", ["c2"], ["out4"])
    g.outputs = ["out1", "out2", "out3", "out4"]
    infer_shapes(g)
    h = _nhwc(g)
    trs = [n for n in h.nodes if n.op == "Transpose"]
    # the input, the shuffle's own transpose (now on NHWC data), the full flatten
    assert len(trs) == 3, [(n.inputs, n.attrs["perm"]) for n in trs]
    assert next(n for n in h.nodes if n.op == "Flatten").inputs == ["c2"]     # the plain version
    assert "Squeeze" not in _ops(h)
    _check(g, h)


def test_reshape_layout_rules():
    # Flatten of a pooled NHWC map: stored order already right
    assert reshape_layout((1, 8, 1, 1), (1, 8), NHWC) == (None, (0, 1))
    # channel split: (N, C, H, W) -> (N, g, C/g, H, W), stored (N, H, W, g, C/g)
    assert reshape_layout((2, 8, 3, 3), (2, 2, 4, 3, 3), NHWC) == (None, (0, 3, 4, 1, 2))
    # flatten of a spatial map: C must come first, a transpose back to NCHW
    assert reshape_layout((2, 8, 3, 3), (2, 72), NHWC) == ((0, 1, 2, 3), (0, 1))
    # incompatible dims
    assert reshape_layout((2, 6, 3, 3), (2, 4, 27), NHWC) is None


def test_symbolic_batch_and_unconvertible_ops():
    rng = np.random.default_rng(5)
    g = Graph("mixed")
    g.add_input("x", "float32", ("B", 2, 6, 6))
    g.add_node("Conv", ["x", _c(g, rng, "w", (4, 2, 3, 3))], ["c"], kernel_shape=[3, 3], pads=[1] * 4)
    g.add_node("MaxPool", ["c"], ["mp", "idx"], kernel_shape=[2, 2], strides=[2, 2])   # Indices: NCHW only
    g.add_node("ConvTranspose", ["mp", _c(g, rng, "wt", (4, 3, 2, 2))], ["up"], kernel_shape=[2, 2],
               strides=[2, 2])
    g.add_node("DepthToSpace", ["c"], ["d2s"], blocksize=2)
    g.add_node("Conv", ["up", _c(g, rng, "w2", (3, 3, 1, 1))], ["out"], kernel_shape=[1, 1])
    g.outputs = ["out", "idx", "d2s"]
    infer_shapes(g)
    h = _nhwc(g)
    kinds = {n.op: n.attrs.get("data_layout", "NCHW") for n in h.nodes}
    assert kinds["MaxPool"] == "NCHW" and kinds["Conv"] == "NHWC"
    _check(g, h, {"x": (3, 2, 6, 6)})


def test_fused_conv_with_residual_after_level2(tmp_path):
    from edge_infer.passes import optimize
    rng = np.random.default_rng(6)
    g = Graph("res")
    g.add_input("x", "float32", (1, 4, 8, 8))
    g.add_node("Conv", ["x", _c(g, rng, "w1", (4, 4, 3, 3))], ["a"], kernel_shape=[3, 3], pads=[1] * 4)
    g.add_node("Relu", ["a"], ["ra"])
    g.add_node("Conv", ["ra", _c(g, rng, "w2", (4, 4, 3, 3))], ["b"], kernel_shape=[3, 3], pads=[1] * 4)
    g.add_node("Add", ["b", "x"], ["s"])
    g.add_node("Relu", ["s"], ["out"])
    g.outputs = ["out"]
    infer_shapes(g)
    opt = g.copy()
    optimize(opt, level=2)
    assert _ops(opt)["FusedConv"] == 2
    h = _nhwc(opt)
    assert _ops(h)["Transpose"] == 2 and all(n.attrs.get("data_layout") == "NHWC"
                                             for n in h.nodes if n.op == "FusedConv")
    _check(g, h)


def test_level3_pipeline_reaches_a_fixed_point(monkeypatch):
    """As the pass manager will run it (LEVELS[3] = [convert_layout]; cancel_transposes
    is level 1, so the next round runs it), level-1/2 passes run again on the NHWC
    graph: still verified, no churn."""
    from edge_infer import passes
    from edge_infer.convert import optimize_verified
    from edge_infer.data import digits_model_path
    from edge_infer.frontends import load_model
    monkeypatch.setitem(passes.LEVELS, 3, [convert_layout])
    monkeypatch.setitem(passes.ALL_PASSES, "convert_layout", convert_layout)
    g = load_model(digits_model_path())
    g.metadata["preferred_layout"] = "NHWC"
    opt, rep = optimize_verified(g, 3, tolerance=1e-6)
    assert rep["max_relative_error"] <= 1e-6
    assert _ops(opt)["Transpose"] == 1
    assert sum(1 for e in rep["passes"] if e["pass"] == "convert_layout") == 1


# -- real models ---------------------------------------------------------------------------------

def _model(name):
    from edge_infer.frontends import load_model
    if name == "digits":
        from edge_infer.data import digits_model_path
        return load_model(digits_model_path())
    onnx_models = pytest.importorskip("onnx_models")
    return load_model(onnx_models.randomized_light_model_path(name))


@pytest.mark.parametrize("name,level,transposes", [
    ("digits", 0, 1), ("digits", 2, 1),
    ("squeezenet", 2, 1),              # Concat of the fire modules
    ("inception_v1", 2, 1),            # Concat, LRN, AveragePool
    ("resnet50", 2, 1),                # residual FusedConvs, GAP + Reshape + Gemm
    ("shufflenet", 2, 17),             # 16 channel shuffles keep their own transpose, on NHWC data
])
def test_real_models(name, level, transposes):
    from edge_infer.passes import optimize
    g = _model(name)
    if level:
        optimize(g, level=level)
    h = _nhwc(g)
    ops = _ops(h)
    assert ops["Transpose"] == transposes
    assert ops["Transpose"] <= _ops(g)["Transpose"] + 1
    spatial = [n for n in h.nodes if n.op in ("Conv", "FusedConv", "MaxPool", "AveragePool",
                                              "GlobalAveragePool", "LRN", "BatchNormalization")]
    assert spatial and all(n.attrs.get("data_layout") == "NHWC" for n in spatial)
    feeds = [random_inputs(g, 0)]
    assert compare(h, g, feeds) <= 1e-5
    assert convert_layout(h) == 0


# -- convert / CLI ------------------------------------------------------------------------------

def test_convert_records_the_layout(tmp_path):
    from edge_infer.artifact import load_artifact
    from edge_infer.cli import main
    from edge_infer.convert import convert
    from edge_infer.data import digits_model_path
    convert(digits_model_path(), tmp_path / "a.eim", layout="nchw")
    graph, meta = load_artifact(str(tmp_path / "a.eim"))
    assert meta["provenance"]["options"]["layout"] == "nchw"
    assert graph.metadata["preferred_layout"] == "NCHW"
    assert main(["convert", digits_model_path(), "-o", str(tmp_path / "b.eim"), "--layout", "nhwc"]) == 0
    graph, meta = load_artifact(str(tmp_path / "b.eim"))
    assert meta["provenance"]["options"]["layout"] == "nhwc"
    assert graph.metadata["preferred_layout"] == "NHWC"
    with pytest.raises(SystemExit):
        main(["convert", digits_model_path(), "--layout", "hwcn"])
    with pytest.raises(EdgeInferError, match="layout"):
        convert(digits_model_path(), tmp_path / "c.eim", layout="hwcn")


def test_transposes_the_model_itself_makes_are_absorbed():
    """A model whose output is channels-last already (a TF-style head): the user's
    Transpose to NHWC cancels against the layout, leaving only the input transpose."""
    rng = np.random.default_rng(9)
    g = Graph("tf_head")
    g.add_input("x", "float32", (1, 3, 8, 8))
    g.add_node("Conv", ["x", _c(g, rng, "w", (5, 3, 3, 3))], ["c"], kernel_shape=[3, 3], pads=[1] * 4)
    g.add_node("Relu", ["c"], ["r"])
    g.add_node("Transpose", ["r"], ["out"], perm=[0, 2, 3, 1])
    g.outputs = ["out"]
    infer_shapes(g)
    h = _nhwc(g)
    assert _ops(h) == Counter({"Transpose": 1, "Conv": 1, "Relu": 1})
    assert next(n for n in h.nodes if n.op == "Relu").outputs == ["out"]
    _check(g, h)
