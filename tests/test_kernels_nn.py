"""NN kernels and shape rules (Conv, ConvTranspose, pools, Gemm/MatMul, norms,
Softmax, Dropout, Resize/Upsample) checked against onnxruntime and the ONNX
reference evaluator on seeded random shapes and attributes."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import run_graph
from edge_infer.errors import ShapeError, UnsupportedOpError
from edge_infer.ir import Graph, infer_shapes

ort = pytest.importorskip("onnxruntime")

OPSET = 21
_NP2ONNX = {np.dtype("float32"): TensorProto.FLOAT, np.dtype("int64"): TensorProto.INT64,
            np.dtype("float64"): TensorProto.DOUBLE, np.dtype("bool"): TensorProto.BOOL,
            np.dtype("int32"): TensorProto.INT32, np.dtype("uint8"): TensorProto.UINT8}


def onnx_model(op, inputs, attrs, n_out=1, opset=OPSET):
    """A one-node ONNX model; ``inputs`` is a list of (name, array-or-None)."""
    names = [n if a is not None else "" for n, a in inputs]
    outs = ["y"] + [f"y{i}" for i in range(1, n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    vis = [helper.make_tensor_value_info(n, _NP2ONNX[a.dtype], a.shape) for n, a in inputs if a is not None]
    ovis = [onnx.ValueInfoProto(name=o) for o in outs]
    g = helper.make_graph([node], "g", vis, ovis)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run_ort(op, inputs, attrs, n_out=1, opset=OPSET, threads=1):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(onnx_model(op, inputs, attrs, n_out, opset).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in inputs if a is not None})


def run_ref(op, inputs, attrs, n_out=1, opset=OPSET):
    from onnx.reference import ReferenceEvaluator
    ev = ReferenceEvaluator(onnx_model(op, inputs, attrs, n_out, opset))
    return ev.run(None, {n: a for n, a in inputs if a is not None})


def run_ours(op, inputs, attrs, n_out=1, dynamic=()):
    """First input is the graph input; the others are constants unless named in ``dynamic``."""
    g = Graph()
    feeds = {}
    names = []
    for k, (n, a) in enumerate(inputs):
        if a is None:
            names.append("")
        elif k == 0 or n in dynamic:
            g.add_input(n, a.dtype.name, a.shape)
            feeds[n] = a
            names.append(n)
        else:
            g.add_const(n, a)
            names.append(n)
    outs = ["y"] + [f"y{i}" for i in range(1, n_out)]
    g.add_node(op, names, outs, **attrs)
    g.outputs = outs
    res = run_graph(g, feeds)
    return [res[o] for o in outs]


def check(op, inputs, attrs, against="ort", rtol=1e-5, atol=1e-5, n_out=1, dynamic=()):
    ours = run_ours(op, inputs, attrs, n_out, dynamic)
    refs = (run_ort if against == "ort" else run_ref)(op, inputs, attrs, n_out)
    for o, r in zip(ours, refs):
        assert o.shape == r.shape, (o.shape, r.shape)
        assert o.dtype == r.dtype, (o.dtype, r.dtype)
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
    return ours


def conv_oracle(attrs):
    """onnxruntime, except where it refuses: dilations with SAME auto_pad."""
    same = attrs.get("auto_pad", "NOTSET").startswith("SAME")
    return "ref" if same and any(d > 1 for d in attrs.get("dilations", [])) else "ort"


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- Conv -----------------------------------------------------------------------------------

CONV_CASES = [
    # (x shape, (M, Cg, *k), attrs, bias)
    ((1, 8, 12, 12), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]), True),
    ((2, 8, 12, 12), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]), True),                   # batch 2
    ((1, 6, 13, 11), (5, 6, 3, 3), dict(strides=[2, 2], pads=[0, 1, 2, 1]), False),  # asymmetric pads
    ((1, 4, 15, 15), (8, 4, 3, 3), dict(dilations=[2, 3], pads=[2, 3, 2, 3]), True),
    ((1, 4, 9, 10), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True),            # groups
    ((2, 6, 9, 9), (9, 2, 2, 3), dict(group=3, strides=[2, 1]), True),
    ((1, 8, 10, 10), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1]), True),            # depthwise
    ((2, 4, 11, 10), (8, 1, 3, 3), dict(group=4, strides=[2, 2], pads=[1, 0, 1, 2]), True),  # multiplier 2
    ((1, 3, 12, 12), (9, 1, 5, 5), dict(group=3, dilations=[2, 2], auto_pad="SAME_UPPER"), False),
    ((1, 5, 10, 9), (4, 5, 4, 4), dict(strides=[2, 2], auto_pad="SAME_UPPER"), True),
    ((1, 5, 10, 9), (4, 5, 4, 4), dict(strides=[2, 2], auto_pad="SAME_LOWER"), True),
    ((1, 5, 10, 9), (4, 5, 3, 2), dict(strides=[3, 2], auto_pad="VALID"), True),
    ((1, 16, 7, 7), (8, 16, 1, 1), {}, False),                                         # pointwise
    ((3, 16, 7, 5), (8, 16, 1, 1), {}, True),                                          # pointwise batch 3
    ((1, 16, 8, 8), (8, 16, 1, 1), dict(strides=[2, 2]), True),                        # strided 1x1
    ((2, 8, 6, 6), (8, 2, 1, 1), dict(group=4), True),                                 # grouped 1x1
    ((1, 4, 9, 9), (4, 4, 1, 5), dict(pads=[0, 2, 0, 2]), True),                       # 1x5
    ((2, 3, 20), (5, 3, 3), dict(pads=[1, 2], strides=[2]), True),                     # 1-D
    ((1, 4, 20), (4, 1, 5), dict(group=4, dilations=[2], auto_pad="SAME_LOWER"), True),  # 1-D depthwise
    ((1, 2, 6, 7, 5), (4, 2, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1]), True),           # 3-D
    ((2, 4, 5, 6, 7), (6, 2, 2, 3, 1), dict(group=2, strides=[1, 2, 2], pads=[0, 1, 0, 1, 0, 0]), True),
    ((1, 3, 5, 5), (2, 3, 5, 5), {}, False),                                           # 1x1 output
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_cases(case):
    rng = np.random.default_rng(case)
    xs, ws, attrs, bias = CONV_CASES[case]
    x, w = randn(rng, *xs), randn(rng, *ws)
    b = randn(rng, ws[0]) if bias else None
    check("Conv", [("x", x), ("w", w), ("b", b)], attrs, against=conv_oracle(attrs), rtol=1e-4, atol=1e-4)


def _random_conv(rng):
    nsp = int(rng.choice([1, 2, 2, 2, 3]))
    n = int(rng.integers(1, 3))
    kind = rng.choice(["dense", "group", "depthwise"])
    k = [int(rng.integers(1, 4)) for _ in range(nsp)]
    d = [int(rng.integers(1, 3)) for _ in range(nsp)]
    s = [int(rng.integers(1, 3)) for _ in range(nsp)]
    if kind == "dense":
        g, cg, m = 1, int(rng.integers(1, 6)), int(rng.integers(1, 7))
    elif kind == "group":
        g, cg = int(rng.integers(2, 4)), int(rng.integers(1, 4))
        m = g * int(rng.integers(1, 3))
    else:
        g, cg = int(rng.integers(2, 6)), 1
        m = g * int(rng.integers(1, 3))
    sp = [int(rng.integers((k[i] - 1) * d[i] + 1, 12)) for i in range(nsp)]
    attrs = dict(group=g, strides=s, dilations=d, kernel_shape=k)
    ap = rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"], p=[0.55, 0.15, 0.15, 0.15])
    if ap == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, 3)) for _ in range(2 * nsp)]
    else:
        attrs["auto_pad"] = str(ap)
    x = randn(rng, n, g * cg, *sp)
    w = randn(rng, m, cg, *k)
    b = randn(rng, m) if rng.random() < 0.5 else None
    return x, w, b, attrs


@pytest.mark.parametrize("seed", range(40))
def test_conv_random(seed):
    rng = np.random.default_rng(1000 + seed)
    x, w, b, attrs = _random_conv(rng)
    check("Conv", [("x", x), ("w", w), ("b", b)], attrs, against=conv_oracle(attrs), rtol=1e-4, atol=1e-4)


def test_conv_against_reference_and_dynamic_weights():
    rng = np.random.default_rng(7)
    x, w, b = randn(rng, 2, 4, 7, 6), randn(rng, 6, 2, 3, 2), randn(rng, 6)
    attrs = dict(group=2, strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2])
    ref = run_ref("Conv", [("x", x), ("w", w), ("b", b)], attrs)[0]
    for dyn in ((), ("w", "b")):
        ours = run_ours("Conv", [("x", x), ("w", w), ("b", b)], attrs, dynamic=dyn)[0]
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)
    # depthwise with a weight fed at run time
    x, w = randn(rng, 1, 3, 8, 8), randn(rng, 6, 1, 3, 3)
    attrs = dict(group=3, pads=[1, 1, 1, 1])
    ref = run_ref("Conv", [("x", x), ("w", w)], attrs)[0]
    ours = run_ours("Conv", [("x", x), ("w", w)], attrs, dynamic=("w",))[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def test_conv_algorithm_notes():
    from edge_infer.runtime import Runtime
    g = Graph()
    g.add_input("x", "float32", (1, 8, 10, 10))
    g.add_const("w1", np.ones((8, 8, 1, 1), np.float32))
    g.add_const("w2", np.ones((8, 1, 3, 3), np.float32))
    g.add_const("w3", np.ones((4, 8, 3, 3), np.float32))
    g.add_const("w4", np.ones((4, 2, 3, 3), np.float32))
    g.add_node("Conv", ["x", "w1"], ["a"], name="pw")
    g.add_node("Conv", ["a", "w2"], ["b"], name="dw", group=8, pads=[1, 1, 1, 1])
    g.add_node("Conv", ["b", "w3"], ["c"], name="dense", pads=[1, 1, 1, 1])
    g.add_node("Conv", ["b", "w4"], ["d"], name="grouped", group=4)
    g.outputs = ["c", "d"]
    notes = Runtime(g, backend="cpu").plan({"x": (1, 8, 10, 10)}).notes
    assert notes["pw"].startswith("pointwise")
    assert notes["dw"].startswith("depthwise")
    assert notes["dense"].startswith("im2col 3x3")
    assert notes["grouped"].startswith("grouped im2col")


# -- ConvTranspose ----------------------------------------------------------------------------

CONVT_CASES = [
    ((1, 4, 5, 5), (4, 3, 3, 3), dict(), True),
    ((2, 4, 5, 6), (4, 3, 2, 2), dict(strides=[2, 2]), True),
    ((1, 4, 5, 5), (4, 2, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), False),
    ((1, 6, 4, 5), (6, 2, 3, 3), dict(group=3, strides=[2, 1], pads=[0, 1, 1, 0], dilations=[1, 2]), True),
    ((1, 4, 5, 5), (4, 2, 4, 4), dict(strides=[2, 2], output_shape=[10, 11]), True),
    ((1, 4, 5, 5), (4, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER"), True),
    ((1, 4, 5, 5), (4, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER"), True),
    ((2, 3, 9), (3, 2, 4), dict(strides=[3], pads=[1, 2]), True),                    # 1-D
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 0, 0, 1, 1]), True),  # 3-D
    ((1, 4, 4, 4), (4, 1, 3, 3), dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), True),
]


@pytest.mark.parametrize("case", range(len(CONVT_CASES)))
def test_conv_transpose(case):
    rng = np.random.default_rng(50 + case)
    xs, ws, attrs, bias = CONVT_CASES[case]
    x, w = randn(rng, *xs), randn(rng, *ws)
    b = randn(rng, ws[1] * attrs.get("group", 1)) if bias else None
    inputs = [("x", x), ("w", w), ("b", b)]
    ours = check("ConvTranspose", inputs, attrs, against="ort", rtol=1e-4, atol=1e-4)[0]
    # the reference mishandles group > 1 and output_shape without auto_pad
    if attrs.get("group", 1) == 1 and "output_shape" not in attrs:
        np.testing.assert_allclose(ours, run_ref("ConvTranspose", inputs, attrs)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", range(20))
def test_conv_transpose_random(seed):
    rng = np.random.default_rng(2000 + seed)
    nsp = int(rng.choice([1, 2, 2, 3]))
    g = int(rng.choice([1, 1, 2, 3]))
    cg, mg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    k = [int(rng.integers(1, 4)) for _ in range(nsp)]
    s = [int(rng.integers(1, 4)) for _ in range(nsp)]
    d = [int(rng.integers(1, 3)) for _ in range(nsp)]
    attrs = dict(group=g, strides=s, dilations=d)
    if rng.random() < 0.6:
        attrs["pads"] = [int(rng.integers(0, k[i % nsp])) for i in range(2 * nsp)]
    attrs["output_padding"] = [int(rng.integers(0, s[i])) for i in range(nsp)]   # below the stride
    x = randn(rng, int(rng.integers(1, 3)), g * cg, *[int(rng.integers(1, 6)) for _ in range(nsp)])
    w = randn(rng, g * cg, mg, *k)
    b = randn(rng, g * mg) if rng.random() < 0.5 else None
    pads = attrs.get("pads", [0] * (2 * nsp))
    out = [s[i] * (x.shape[2 + i] - 1) + attrs["output_padding"][i] + (k[i] - 1) * d[i] + 1 - pads[i] - pads[i + nsp]
           for i in range(nsp)]
    if min(out) < 1:
        with pytest.raises(ShapeError):
            run_ours("ConvTranspose", [("x", x), ("w", w), ("b", b)], attrs)
        return
    check("ConvTranspose", [("x", x), ("w", w), ("b", b)], attrs, against="ort", rtol=1e-4, atol=1e-4)


# -- pools ------------------------------------------------------------------------------------

POOL_CASES = [
    ((1, 3, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 8, 7), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 2, 10, 11), dict(kernel_shape=[3, 2], strides=[2, 3], ceil_mode=1)),
    ((1, 2, 10, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1)),
    ((1, 2, 9, 9), dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 9, 10), dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 1], auto_pad="VALID")),
    ((2, 3, 13), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),                 # 1-D
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[0, 1, 0, 1, 1, 1])),  # 3-D
    ((1, 2, 5, 5), dict(kernel_shape=[5, 5])),
]


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pools(op, case):
    rng = np.random.default_rng(case)
    xs, attrs = POOL_CASES[case]
    x = randn(rng, *xs)
    variants = [dict(attrs)]
    if op == "AveragePool":
        variants.append(dict(attrs, count_include_pad=1))
    for a in variants:
        check(op, [("x", x)], a, against="ort")
        if not (op == "MaxPool" and a.get("auto_pad") == "SAME_LOWER"):   # reference gets its shape wrong
            check(op, [("x", x)], a, against="ref")


@pytest.mark.parametrize("seed", range(6))
def test_maxpool_dilations_and_indices(seed):
    rng = np.random.default_rng(seed)
    x = randn(rng, 2, 3, int(rng.integers(8, 12)), int(rng.integers(8, 12)))
    attrs = dict(kernel_shape=[2, 3], strides=[int(rng.integers(1, 3)), 2], dilations=[2, 1],
                 pads=[1, 0, 0, 1], ceil_mode=int(seed % 2), storage_order=int(seed // 3))
    check("MaxPool", [("x", x)], attrs, against="ort", n_out=2)
    # average pool with dilations
    a = dict(kernel_shape=[2, 2], strides=[1, 2], dilations=[2, 2], pads=[1, 1, 0, 1],
             count_include_pad=int(seed % 2))
    check("AveragePool", [("x", x)], a, against="ref")


@pytest.mark.parametrize("seed", range(24))
def test_pools_random(seed):
    rng = np.random.default_rng(3000 + seed)
    nsp = int(rng.choice([1, 2, 2, 3]))
    op = ["MaxPool", "AveragePool"][seed % 2]
    k = [int(rng.integers(1, 4)) for _ in range(nsp)]
    s = [int(rng.integers(1, 4)) for _ in range(nsp)]
    attrs = dict(kernel_shape=k, strides=s)
    if op == "MaxPool" and rng.random() < 0.5:
        attrs["dilations"] = [int(rng.integers(1, 3)) for _ in range(nsp)]
    d = attrs.get("dilations", [1] * nsp)
    if rng.random() < 0.25:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
        if any(di > 1 for di in d):
            attrs["auto_pad"] = "VALID"
    else:
        # pads must be smaller than the kernel
        attrs["pads"] = [int(rng.integers(0, k[i % nsp])) for i in range(2 * nsp)]
        attrs["ceil_mode"] = int(rng.random() < 0.5)
    if op == "AveragePool":
        attrs["count_include_pad"] = int(rng.random() < 0.5)
    sp = [int(rng.integers((k[i] - 1) * d[i] + 1, 10)) for i in range(nsp)]
    x = randn(rng, int(rng.integers(1, 3)), int(rng.integers(1, 4)), *sp)
    check(op, [("x", x)], attrs, against="ort")


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 4, 7), (1, 2, 3, 4, 5)])
def test_global_pools(op, shape):
    x = randn(np.random.default_rng(1), *shape)
    check(op, [("x", x)], {})


# -- Gemm / MatMul ----------------------------------------------------------------------------

@pytest.mark.parametrize("ta", [0, 1])
@pytest.mark.parametrize("tb", [0, 1])
@pytest.mark.parametrize("cshape", [None, (), (7,), (1, 7), (5, 1), (5, 7)])
def test_gemm(ta, tb, cshape):
    rng = np.random.default_rng(ta * 2 + tb)
    a = randn(rng, *((6, 5) if ta else (5, 6)))
    b = randn(rng, *((7, 6) if tb else (6, 7)))
    c = None if cshape is None else randn(rng, *cshape)
    for alpha, beta in [(1.0, 1.0), (0.5, -2.0)]:
        attrs = dict(transA=ta, transB=tb, alpha=alpha, beta=beta)
        check("Gemm", [("a", a), ("b", b), ("c", c)], attrs, rtol=1e-4, atol=1e-5)
    if c is not None:   # A, B and C all fed at run time
        attrs = dict(transA=ta, transB=tb, alpha=0.5, beta=-2.0)
        check("Gemm", [("a", a), ("b", b), ("c", c)], attrs, rtol=1e-4, atol=1e-5, dynamic=("b", "c"))


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((4, 3), (3, 5)),
                                   ((2, 4, 3), (3, 5)), ((2, 1, 4, 3), (3, 3, 5)), ((5,), (2, 5, 3)),
                                   ((2, 3, 4, 6), (6,))])
def test_matmul(sa, sb):
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    a, b = randn(rng, *sa), randn(rng, *sb)
    check("MatMul", [("a", a), ("b", b)], {}, rtol=1e-4, atol=1e-5)
    check("MatMul", [("a", a), ("b", b)], {}, rtol=1e-4, atol=1e-5, dynamic=("b",))


# -- normalisation, softmax, dropout ------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 4), (1, 2, 3, 4, 2)])
def test_batch_norm(shape):
    rng = np.random.default_rng(3)
    c = shape[1]
    x = randn(rng, *shape)
    s, b, m = randn(rng, c), randn(rng, c), randn(rng, c)
    v = rng.random(c).astype(np.float32) + 0.5
    ins = [("x", x), ("s", s), ("b", b), ("m", m), ("v", v)]
    check("BatchNormalization", ins, dict(epsilon=1e-3))
    check("BatchNormalization", ins, dict(epsilon=1e-3), dynamic=("s", "b", "m", "v"))


def test_batch_norm_training_mode():
    rng = np.random.default_rng(8)
    x = randn(rng, 3, 4, 5, 2)
    s, b, m = randn(rng, 4), randn(rng, 4), randn(rng, 4)
    v = rng.random(4).astype(np.float32) + 0.5
    ins = [("x", x), ("s", s), ("b", b), ("m", m), ("v", v)]
    attrs = dict(epsilon=1e-2, momentum=0.8, training_mode=1)
    check("BatchNormalization", ins, attrs, against="ref", n_out=3, rtol=1e-4, atol=1e-5)
    check("BatchNormalization", ins, attrs, against="ref", n_out=1, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_lrn(size):
    attrs = dict(size=size, alpha=0.01, beta=0.75, bias=1.5)
    if size % 2:   # onnxruntime takes odd sizes only
        check("LRN", [("x", randn(np.random.default_rng(size), 2, 7, 4, 5))], attrs)
    # the ONNX reference loops its channel index over the batch dim: right only when N == C
    check("LRN", [("x", randn(np.random.default_rng(size), 6, 6, 3, 2))], attrs, against="ref")


def test_instance_norm():
    rng = np.random.default_rng(4)
    x, s, b = randn(rng, 2, 3, 5, 6), randn(rng, 3), randn(rng, 3)
    check("InstanceNormalization", [("x", x), ("s", s), ("b", b)], dict(epsilon=1e-4), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_softmax(op, axis):
    x = randn(np.random.default_rng(axis + 5), 3, 4, 5) * 30   # large values: needs the max shift
    check(op, [("x", x)], dict(axis=axis), rtol=1e-5, atol=1e-5)


def test_dropout():
    x = randn(np.random.default_rng(0), 3, 4)
    ours = run_ours("Dropout", [("x", x), ("r", np.array(0.5, np.float32))], {}, n_out=2)
    np.testing.assert_array_equal(ours[0], x)
    assert ours[1].dtype == bool and ours[1].all()
    ours = run_ours("Dropout", [("x", x)], {}, n_out=1)
    np.testing.assert_array_equal(ours[0], x)
    with pytest.raises(UnsupportedOpError):
        run_ours("Dropout", [("x", x), ("r", np.array(0.5, np.float32)), ("t", np.array(True))], {})
    # training mode with ratio 0 is the identity, also when both are fed at run time
    ins = [("x", x), ("r", np.array(0.0, np.float32)), ("t", np.array(True))]
    for dyn in ((), ("r", "t")):
        ours = run_ours("Dropout", ins, {}, n_out=2, dynamic=dyn)
        np.testing.assert_array_equal(ours[0], x)
        assert ours[1].all()
    with pytest.raises(UnsupportedOpError):
        run_ours("Dropout", [("x", x), ("r", np.array(0.3, np.float32)), ("t", np.array(True))], {},
                 dynamic=("r", "t"))


# -- Resize / Upsample ----------------------------------------------------------------------------

def _resize_inputs(x, scales=None, sizes=None, roi=None):
    return [("x", x), ("roi", roi), ("scales", scales), ("sizes", sizes)]


NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]


@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_modes(mode, ctm):
    # Scales are exact in float32 (sizes give exact ratios too): a coordinate that
    # lands exactly on a rounding tie is then computed exactly by every
    # implementation, so nearest modes are comparable; inexact ties (e.g. 7 -> 4)
    # resolve by float rounding and legitimately differ between implementations.
    rng = np.random.default_rng(len(ctm) + len(mode))
    x = randn(rng, 2, 3, 4, 8)
    cases = [dict(scales=np.array([1, 1, 2.0, 1.5], np.float32)),        # upsample
             dict(scales=np.array([1, 1, 0.5, 0.625], np.float32)),      # downsample
             dict(sizes=np.array([2, 3, 9, 3], np.int64)),               # 2.25 and 0.375
             dict(sizes=np.array([2, 3, 1, 5], np.int64))]                # length-1 output axis
    for k, inp in enumerate(cases):
        modes = NEAREST_MODES if mode == "nearest" else [None]
        for nm in modes:
            attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
            if nm:
                attrs["nearest_mode"] = nm
            if mode == "cubic" and k % 2:
                attrs["exclude_outside"] = 1
                attrs["cubic_coeff_a"] = -0.5
            # the reference maps a length-1 pytorch_half_pixel output to -0.5, the spec and ORT to 0
            if not (ctm == "pytorch_half_pixel" and k == 3 and mode == "cubic"):
                check("Resize", _resize_inputs(x, **inp), attrs, against="ref", rtol=1e-5, atol=1e-5)
            check("Resize", _resize_inputs(x, **inp), attrs, against="ort", rtol=1e-4, atol=1e-4)


def test_resize_inexact_scales_match_onnxruntime():
    # non-power-of-two ratios: half_pixel_symmetric with a fractional output size and
    # align_corners with scales, where the reference's float output width differs from ORT
    rng = np.random.default_rng(11)
    x = randn(rng, 1, 2, 5, 7)
    for ctm in ["half_pixel_symmetric", "align_corners", "half_pixel"]:
        for sc in ([1, 1, 1.3, 1.5], [1, 1, 0.7, 0.6]):
            for mode in ["linear", "cubic"]:
                attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
                check("Resize", _resize_inputs(x, scales=np.array(sc, np.float32)), attrs, against="ort",
                      rtol=1e-4, atol=1e-4)


def test_resize_axes_keep_aspect_tf_crop_antialias():
    rng = np.random.default_rng(9)
    x = randn(rng, 1, 2, 6, 8)
    sizes = np.array([9, 9], np.int64)
    for policy in ["stretch", "not_larger", "not_smaller"]:
        for mode in ["nearest", "linear"]:
            attrs = dict(mode=mode, axes=[2, 3], keep_aspect_ratio_policy=policy)
            check("Resize", _resize_inputs(x, sizes=sizes), attrs, against="ref")
    attrs = dict(mode="linear", axes=[3])
    check("Resize", _resize_inputs(x, scales=np.array([2.5], np.float32)), attrs, against="ref")
    # 3-D (trilinear) and 1-D inputs
    x3 = randn(rng, 1, 2, 3, 4, 5)
    check("Resize", _resize_inputs(x3, scales=np.array([1, 1, 2, 1.5, 0.8], np.float32)),
          dict(mode="linear"), against="ref")
    check("Resize", _resize_inputs(x3, scales=np.array([1, 1, 2, 1.5, 0.8], np.float32)),
          dict(mode="nearest", nearest_mode="floor", coordinate_transformation_mode="asymmetric"),
          against="ort")
    x1 = randn(rng, 3, 9)
    check("Resize", _resize_inputs(x1, sizes=np.array([3, 4], np.int64)), dict(mode="cubic"), against="ref")
    # tf_crop_and_resize with extrapolation
    roi = np.array([0, 0, -0.2, 0.1, 1, 1, 0.7, 1.3], np.float32)
    for mode in ["nearest", "linear", "cubic"]:
        attrs = dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0)
        check("Resize", _resize_inputs(x, roi=roi, sizes=np.array([1, 2, 7, 5], np.int64)), attrs,
              against="ref")
    # antialiased downsampling
    for mode in ["linear", "cubic"]:
        attrs = dict(mode=mode, antialias=1)
        check("Resize", _resize_inputs(x, scales=np.array([1, 1, 0.5, 0.35], np.float32)), attrs,
              against="ref", rtol=1e-4, atol=1e-5)
    # integer data with nearest
    xi = rng.integers(0, 255, (1, 1, 3, 4)).astype(np.uint8)
    check("Resize", _resize_inputs(xi, scales=np.array([1, 1, 2, 2], np.float32)), dict(mode="nearest"),
          against="ref")


def test_resize_tf_half_pixel_for_nn_opset11():
    x = randn(np.random.default_rng(3), 1, 2, 4, 6)
    for sc in ([1, 1, 2, 1.5], [1, 1, 0.5, 0.5]):
        ins = _resize_inputs(x, roi=np.zeros(0, np.float32), scales=np.array(sc, np.float32))
        attrs = dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn")
        ref = run_ort("Resize", ins, attrs, opset=11)[0]
        ours = run_ours("Resize", ins, attrs)[0]
        np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    rng = np.random.default_rng(2)
    x = randn(rng, 1, 2, 3, 4)
    scales = np.array([1, 1, 2, 3], np.float32)
    ours = run_ours("Upsample", [("x", x), ("s", scales)], dict(mode=mode))[0]
    ref = run_ort("Upsample", [("x", x), ("s", scales)], dict(mode=mode), opset=9)[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


# -- shape rules ------------------------------------------------------------------------------------

def _infer(op, ins, attrs, n_out=1):
    g = Graph()
    names = []
    for n, spec in ins:
        if spec is None:
            names.append("")
        elif isinstance(spec, np.ndarray):
            g.add_const(n, spec)
            names.append(n)
        else:
            g.add_input(n, "float32", spec)
            names.append(n)
    outs = ["y"] + [f"y{i}" for i in range(1, n_out)]
    g.add_node(op, names, outs, **attrs)
    infer_shapes(g)
    return [g.tensors[o].shape for o in outs]


def test_shape_rules_symbolic():
    w = np.zeros((8, 3, 3, 3), np.float32)
    assert _infer("Conv", [("x", ("N", 3, 32, 32)), ("w", w)], dict(pads=[1, 1, 1, 1], strides=[2, 2]))[0] \
        == ("N", 8, 16, 16)
    assert _infer("Conv", [("x", ("N", 3, "H", 32)), ("w", w)], dict(pads=[1, 1, 1, 1]))[0] == ("N", 8, "y_d2", 32)
    assert _infer("Conv", [("x", ("N", 3, 10)), ("w", np.zeros((4, 3, 3), np.float32))],
                  dict(auto_pad="SAME_UPPER", strides=[3]))[0] == ("N", 4, 4)
    with pytest.raises(ShapeError):
        _infer("Conv", [("x", (1, 4, 8, 8)), ("w", w)], {})
    wt = np.zeros((3, 2, 4, 4), np.float32)
    assert _infer("ConvTranspose", [("x", ("B", 3, 5, "W")), ("w", wt)], dict(strides=[2, 2], pads=[1, 1, 1, 1]))[0] \
        == ("B", 2, 10, "y_d3")
    assert _infer("MaxPool", [("x", ("N", 3, 11, 11))], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
                  n_out=2) == [("N", 3, 5, 5), ("N", 3, 5, 5)]
    assert _infer("AveragePool", [("x", ("N", "C", "H", 8))], dict(kernel_shape=[2, 2], strides=[2, 2]))[0] \
        == ("N", "C", "y_d2", 4)
    assert _infer("GlobalAveragePool", [("x", ("N", 7, "H", "W"))], {})[0] == ("N", 7, 1, 1)
    assert _infer("Gemm", [("a", ("N", 5)), ("b", (7, 5)), ("c", (7,))], dict(transB=1))[0] == ("N", 7)
    with pytest.raises(ShapeError):
        _infer("Gemm", [("a", (3, 5)), ("b", (6, 7))], {})
    assert _infer("MatMul", [("a", ("B", "S", 16)), ("b", (16, 4))], {})[0] == ("B", "S", 4)
    assert _infer("MatMul", [("a", (16,)), ("b", ("B", 16, 4))], {})[0] == ("B", 4)
    assert _infer("MatMul", [("a", (2, 1, 3, 4)), ("b", (5, 4, 6))], {})[0] == (2, 5, 3, 6)
    assert _infer("Resize", [("x", ("N", 3, 10, 10)), ("r", None), ("s", np.array([1, 1, 2, 2], np.float32))],
                  dict(mode="nearest"))[0] == ("N", 3, 20, 20)
    assert _infer("Resize", [("x", ("N", 3, "H", 10)), ("r", None), ("s", None),
                             ("z", np.array([64, 64], np.int64))], dict(axes=[2, 3]))[0] == ("N", 3, 64, 64)
    assert _infer("Resize", [("x", ("N", 3, "H", 10)), ("r", None), ("s", np.array([1, 1, 2, 2], np.float32))],
                  {})[0] == ("N", 3, "y_d2", 20)
    assert _infer("Resize", [("x", (1, 3, 10, 10)), ("r", None), ("s", None), ("z", (4,))], {})[0] \
        == ("y_d0", "y_d1", "y_d2", "y_d3")
    assert _infer("Upsample", [("x", ("N", 3, 4, 5)), ("s", np.array([1, 1, 2, 2], np.float32))], {})[0] \
        == ("N", 3, 8, 10)
    assert _infer("Dropout", [("x", ("N", 3))], {}, n_out=2) == [("N", 3), ("N", 3)]
    assert _infer("Softmax", [("x", ("N", 3))], {})[0] == ("N", 3)


@pytest.mark.parametrize("dtype,cols", [(np.float32, 4), (np.float64, 8), (np.float32, 3), (np.int32, 4)])
def test_negative_on_strided_columns(dtype, cols):
    """The kernels' negation on a column of a wider array, in place and into a strided out: the
    pattern on which numpy 2.4's np.negative returns wrong values."""
    from edge_infer.backends.cpu.kernels.elementwise import negative
    for n in (3, 8, 17, 100):
        a = (np.random.default_rng(n).random((n, cols)) * 100 - 50).astype(dtype)
        v = a[:, :1]
        want = -(v.copy())
        out = np.zeros((n, cols), dtype)[:, 1:2]
        negative(v, out=out)
        negative(v, out=v)
        assert np.array_equal(out, want) and np.array_equal(v, want), n
