"""Element-wise, tensor and reduction ops: CPU kernels against ONNX's reference
evaluator (or onnxruntime, where its behaviour is the one models rely on),
plus shape inference with symbolic dims and folding of shape arithmetic."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from conftest import run_graph  # noqa: E402
from edge_infer.backends.cpu import fold_node  # noqa: E402
from edge_infer.errors import ShapeError  # noqa: E402
from edge_infer.ir import Graph, infer_shapes  # noqa: E402

I64_MAX, I64_MIN = 2 ** 63 - 1, -2 ** 63
TRANSCENDENTAL = {"Sigmoid", "Tanh", "Softplus", "Exp", "Log", "Erf", "Sin", "Cos", "Tan", "Atan",
                  "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Mish", "Gelu", "Elu",
                  "Selu", "Celu", "Pow", "Sqrt", "ReduceLogSumExp", "ReduceLogSum", "ReduceL2",
                  "Mean", "ReduceMean", "HardSwish", "HardSigmoid"}


def _seed(*parts):
    return np.random.default_rng(abs(hash(repr(parts))) % (2 ** 32))


# -- running one node three ways ---------------------------------------------------------

def onnx_model(op, inputs, attrs, n_out=1):
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs if a is not None]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, [n if a is not None else "" for n, a in inputs], outs, **attrs)
    graph = helper.make_graph([node], "t", vis, [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def run_ref(op, inputs, attrs, n_out=1):
    model = onnx_model(op, inputs, attrs, n_out)
    return ReferenceEvaluator(model).run(None, {n: a for n, a in inputs if a is not None})


def run_ort(op, inputs, attrs, n_out=1):
    ort = pytest.importorskip("onnxruntime")
    model = onnx_model(op, inputs, attrs, n_out)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in inputs if a is not None})


def run_ir(op, inputs, attrs, n_out=1, consts=()):
    """Run one IR node; inputs named in ``consts`` become constants, the rest graph inputs."""
    g = Graph()
    feeds, names = {}, []
    for n, a in inputs:
        if a is None:
            names.append("")
        elif n in consts:
            g.add_const(n, a)
            names.append(n)
        else:
            g.add_input(n, a.dtype.name, a.shape)
            feeds[n] = a
            names.append(n)
    outs = [f"y{i}" for i in range(n_out)]
    g.add_node(op, names, outs, **attrs)
    g.outputs = outs
    res = run_graph(g, feeds)
    return [res[o] for o in outs]


def assert_same(got, want, op=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{op}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{op}: shape {got.shape} != {want.shape}"
    if got.dtype.kind in "f":
        rtol = 1e-5 if op in TRANSCENDENTAL else 1e-6
        atol = 1e-6 if got.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=op)
    else:
        np.testing.assert_array_equal(got, want, err_msg=op)


def check(op, inputs, attrs=None, ir_attrs=None, consts=(), n_out=1, oracle="ref"):
    attrs = attrs or {}
    inputs = [(n, None if a is None else np.asarray(a)) for n, a in inputs]
    if oracle == "ort":
        want = run_ort(op, inputs, attrs, n_out)
    else:
        try:
            want = run_ref(op, inputs, attrs, n_out)
        except Exception:          # the reference evaluator trips on a few 0-d cases
            want = run_ort(op, inputs, attrs, n_out)
    got = run_ir(op, inputs, attrs if ir_attrs is None else ir_attrs, n_out, consts)
    for g, w in zip(got, want):
        assert_same(g, w, op)
    return got


def _i64(*v):
    return np.array(v, np.int64)


# -- unary -----------------------------------------------------------------------------

UNARY_DOMAIN = {
    "Sqrt": lambda x: np.abs(x), "Log": lambda x: np.abs(x) + 0.1, "Reciprocal": lambda x: x + 0.05,
    "Asin": lambda x: np.tanh(x), "Acos": lambda x: np.tanh(x), "Atanh": lambda x: np.tanh(x) * 0.9,
    "Acosh": lambda x: np.abs(x) + 1, "Tan": lambda x: np.tanh(x),
}
UNARY = ["Relu", "Sigmoid", "Tanh", "Softplus", "Softsign", "Sqrt", "Exp", "Log", "Neg", "Abs",
         "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Erf", "Sin", "Cos", "Tan", "Atan", "Asin",
         "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "HardSwish", "Mish", "Identity", "IsNaN",
         "Selu", "Elu", "HardSigmoid", "Gelu", "Softplus"]


@pytest.mark.parametrize("shape", [(3, 4, 5), (), (0, 3)])
@pytest.mark.parametrize("op", UNARY)
def test_unary_float(op, shape):
    rng = _seed(op, shape)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x = np.asarray(UNARY_DOMAIN.get(op, lambda v: v)(x), np.float32)
    if op == "Round" and x.size >= 6:
        x.reshape(-1)[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]   # half-to-even
    check(op, [("x", x)])


def test_erf_and_gelu_wide_range():
    # both branches of the erf approximation, their seam, tails and specials
    x = np.concatenate([np.linspace(-6, 6, 2001), [0.4999, 0.5, 0.5001, -0.5, 1e-8, -1e-8, 0.0,
                                                   -0.0, 30.0, -30.0]]).astype(np.float32)
    for op, attrs in [("Erf", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})]:
        check(op, [("x", x)], attrs)
    check("Erf", [("x", x.astype(np.float64))])
    got = run_ir("Erf", [("x", np.array([np.inf, -np.inf, np.nan], np.float32))], {})[0]
    np.testing.assert_array_equal(got, [1, -1, np.nan])


@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 1.5}), ("LeakyRelu", {"alpha": -0.3}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
    ("Selu", {"alpha": 1.2, "gamma": 0.9}), ("Celu", {"alpha": 2.0}), ("Gelu", {"approximate": "tanh"}),
    ("ThresholdedRelu", {"alpha": 0.5}), ("Shrink", {"lambd": 0.7, "bias": 0.2}),
    ("IsInf", {}), ("IsInf", {"detect_negative": 0}), ("IsInf", {"detect_positive": 0}),
])
def test_activation_attrs(op, attrs):
    x = (_seed(op, attrs).standard_normal((4, 5)) * 3).astype(np.float32)
    if op == "IsInf":
        x[0, :3] = [np.inf, -np.inf, np.nan]
    check(op, [("x", x)], attrs)


@pytest.mark.parametrize("slope_shape", [(3, 1, 1), (1,), (5,), (4, 5), ()])
def test_prelu_unidirectional(slope_shape):
    rng = _seed(slope_shape)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    slope = rng.standard_normal(slope_shape).astype(np.float32)
    check("PRelu", [("x", x), ("s", slope)], consts={"s"})
    check("PRelu", [("x", x), ("s", slope)])


def test_not_and_bitwise_not():
    b = _seed("not").random((3, 4)) > 0.5
    check("Not", [("x", b)])
    check("BitwiseNot", [("x", np.arange(-5, 7, dtype=np.int32).reshape(3, 4))])


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint8"])
@pytest.mark.parametrize("bounds", [(2, 7), (2, None), (None, 7), (None, None), (9, 3)])
@pytest.mark.parametrize("const", [True, False])
def test_clip(dtype, bounds, const):
    x = np.arange(12, dtype=dtype).reshape(3, 4)
    ins = [("x", x)] + [(n, None if v is None else np.array(v, dtype)) for n, v in zip("lh", bounds)]
    check("Clip", ins, consts={"l", "h"} if const else ())


# -- binary and variadic ---------------------------------------------------------------

SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (3,)), ((0, 3), (1, 3)),
               ((5,), ())]


@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
@pytest.mark.parametrize("op,attrs", [("Add", {}), ("Sub", {}), ("Mul", {}), ("Div", {}), ("Pow", {}),
                                      ("Max", {}), ("Min", {}), ("Mod", {"fmod": 1}), ("Sum", {}),
                                      ("Mean", {})])
def test_binary_float(op, attrs, shapes):
    rng = _seed(op, shapes)
    a = rng.standard_normal(shapes[0]).astype(np.float32)
    b = rng.standard_normal(shapes[1]).astype(np.float32)
    if op == "Pow":
        a = np.abs(a) + 0.1
    if op in ("Div", "Mod"):
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    check(op, [("a", a), ("b", b)], attrs)
    check(op, [("a", a), ("b", b)], attrs, consts={"b"})


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
@pytest.mark.parametrize("op,attrs", [("Add", {}), ("Sub", {}), ("Mul", {}), ("Div", {}), ("Max", {}),
                                      ("Min", {}), ("Mod", {}), ("Mod", {"fmod": 1}), ("Pow", {})])
def test_binary_int(op, attrs, dtype):
    rng = _seed(op, attrs, dtype)
    lo = 0 if dtype == "uint8" else -20
    a = rng.integers(lo, 20, (4, 6)).astype(dtype)
    b = rng.integers(lo, 20, (6,)).astype(dtype)
    if op in ("Div", "Mod"):
        b[b == 0] = 3
    if op == "Pow":
        a, b = np.clip(a, -3, 3).astype(dtype), (np.abs(b) % 4).astype(dtype)
    if dtype == "uint8" and op in ("Sub", "Add", "Mul"):
        a, b = a // 2 + 60, b // 2     # stay in range: wrap-around is not what this tests
    check(op, [("a", a), ("b", b)], attrs)
    # truncating division and both Mod conventions as onnxruntime implements them
    if op in ("Div", "Mod"):
        check(op, [("a", a), ("b", b)], attrs, oracle="ort")


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_compare(op, dtype):
    rng = _seed(op, dtype)
    a = rng.integers(-3, 3, (2, 3, 4)).astype(dtype)      # small range: plenty of ties
    b = rng.integers(-3, 3, (3, 1)).astype(dtype)
    check(op, [("a", a), ("b", b)])
    check(op, [("a", a), ("b", b)], consts={"b"})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op):
    rng = _seed(op)
    check(op, [("a", rng.random((2, 3, 4)) > 0.5), ("b", rng.random((4,)) > 0.5)])


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise(op):
    rng = _seed(op)
    check(op, [("a", rng.integers(-100, 100, (3, 4)).astype(np.int32)),
               ("b", rng.integers(-100, 100, (4,)).astype(np.int32))])


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["uint8", "uint32", "uint64"])
def test_bitshift(direction, dtype):
    rng = _seed(direction, dtype)
    check("BitShift", [("a", rng.integers(0, 200, (3, 4)).astype(dtype)),
                       ("b", rng.integers(0, 4, (4,)).astype(dtype))], {"direction": direction})


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic(op):
    rng = _seed(op)
    ins = [("a", rng.standard_normal((3, 1, 4)).astype(np.float32)),
           ("b", rng.standard_normal((1, 5, 1)).astype(np.float32)),
           ("c", rng.standard_normal((4,)).astype(np.float32))]
    check(op, ins)
    check(op, ins, consts={"c"})
    check(op, ins[:1])


def test_where():
    rng = _seed("where")
    cond = rng.random((2, 1, 4)) > 0.5
    a = rng.standard_normal((3, 1)).astype(np.float32)
    b = rng.standard_normal((2, 3, 4)).astype(np.float32)
    check("Where", [("c", cond), ("a", a), ("b", b)])
    check("Where", [("c", cond), ("a", a), ("b", b)], consts={"c", "b"})
    check("Where", [("c", cond), ("a", a.astype(np.int64)), ("b", b.astype(np.int64))], consts={"a"})


def test_constants_do_not_upcast():
    """A float64 constant beside float32 data computes (and returns) float32."""
    x = _seed("up").standard_normal((3, 4)).astype(np.float32)
    c = np.array([0.1, 0.2, 0.3, 0.4])                       # float64
    for op, f in [("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract)]:
        got = run_ir(op, [("x", x), ("c", c)], {}, consts={"c"})[0]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, f(x, c.astype(np.float32)))
    got = run_ir("Clip", [("x", x), ("l", np.array(-0.5)), ("h", np.array(0.5))], {}, consts={"l", "h"})[0]
    assert got.dtype == np.float32
    got = run_ir("Pow", [("x", np.abs(x)), ("e", np.array(2, np.int64))], {}, consts={"e"})[0]
    np.testing.assert_array_equal(got, np.square(np.abs(x)))


def test_pow_mixed_types():
    x = np.abs(_seed("pow").standard_normal((3, 4))).astype(np.float32)
    check("Pow", [("x", x), ("e", np.array(3, np.int64))], consts={"e"})
    check("Pow", [("x", x), ("e", np.array([0.5, 1.5, 2.0, 3.0], np.float32))])
    check("Pow", [("x", np.arange(6, dtype=np.int32)), ("e", np.array(2.5, np.float32))], oracle="ort")


# -- shape manipulation ---------------------------------------------------------------

@pytest.mark.parametrize("shape,target,allowzero", [
    ((2, 3, 4), [0, -1], 0), ((2, 3, 4), [-1], 0), ((2, 3, 4), [4, 0, 2], 0), ((2, 3, 4), [1, -1, 2, 1], 0),
    ((0, 3), [3, 0], 1), ((0, 3), [-1, 3], 0), ((6,), [2, 3], 1), ((), [1, 1], 0), ((1,), [], 0),
])
def test_reshape(shape, target, allowzero):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    check("Reshape", [("x", x), ("s", np.array(target, np.int64))], {"allowzero": allowzero}, consts={"s"})


def test_reshape_errors():
    g = Graph()
    g.add_input("x", "float32", (2, 3))
    g.add_const("s", _i64(4, -1))
    g.add_node("Reshape", ["x", "s"], ["y"])
    with pytest.raises(ShapeError):
        infer_shapes(g)


@pytest.mark.parametrize("axis", [-3, -1, 0, 1, 2, 3])
def test_flatten(axis):
    check("Flatten", [("x", np.arange(24, dtype=np.float32).reshape(2, 3, 4))], {"axis": axis})


@pytest.mark.parametrize("perm", [None, [0, 2, 1, 3], [3, 1, 0, 2], [0, 1, 2, 3]])
def test_transpose(perm):
    x = _seed(perm).standard_normal((2, 3, 4, 5)).astype(np.float32)
    attrs = {} if perm is None else {"perm": perm}
    check("Transpose", [("x", x)], attrs)
    check("Transpose", [("x", np.zeros((0, 3, 1, 2), np.int64))], attrs)


@pytest.mark.parametrize("axes", [None, [0], [-1], [0, -1]])
def test_squeeze(axes):
    x = np.arange(6, dtype=np.int64).reshape(1, 6, 1)
    check("Squeeze", [("x", x), ("a", None if axes is None else np.array(axes, np.int64))], consts={"a"})


@pytest.mark.parametrize("shape,axes", [((3, 4), [0]), ((3, 4), [-1]), ((3, 4), [0, 3]), ((3, 4), [-1, 1]),
                                        ((), [0]), ((2,), [-3, -1])])
def test_unsqueeze(shape, axes):
    x = np.ones(shape, np.float32)
    check("Unsqueeze", [("x", x), ("a", np.array(axes, np.int64))], consts={"a"})


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_concat(axis):
    rng = _seed(axis)
    shapes = [(2, 3), (2, 3), (2, 3)]
    shapes = [tuple(s[k] if k != axis % 2 else n for k in range(2)) for s, n in zip(shapes, [1, 0, 4])]
    ins = [(f"x{i}", rng.standard_normal(s).astype(np.float32)) for i, s in enumerate(shapes)]
    check("Concat", ins, {"axis": axis})
    check("Concat", ins, {"axis": axis}, consts={"x1"})


@pytest.mark.parametrize("axis,split,num,n_out", [(1, [2, 3, 1], None, 3), (-1, None, 3, 3), (1, None, 4, 4),
                                                   (0, None, None, 2), (1, [6], None, 1), (1, [0, 6], None, 2)])
def test_split(axis, split, num, n_out):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    attrs = {"axis": axis}
    if num is not None:
        attrs["num_outputs"] = num
    ins = [("x", x), ("s", None if split is None else np.array(split, np.int64))]
    check("Split", ins, attrs, consts={"s"}, n_out=n_out)


def test_unnamed_outputs():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    g = Graph()
    g.add_input("x", "float32", (4, 6))
    g.add_node("Split", ["x"], ["", "b", ""], axis=1, num_outputs=3)
    g.add_const("k", _i64(2))
    g.add_node("TopK", ["x", "k"], ["", "idx"], axis=1)
    g.outputs = ["b", "idx"]
    out = run_graph(g, {"x": x})
    np.testing.assert_array_equal(out["b"], x[:, 2:4])
    np.testing.assert_array_equal(out["idx"], np.tile([5, 4], (4, 1)))


def test_slice_randomized():
    rng = np.random.default_rng(1234)
    picks = [-9, -5, -3, -2, -1, 0, 1, 2, 3, 5, 9, I64_MAX, I64_MIN]
    for case in range(150):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(d) for d in rng.integers(0, 6, rank))
        x = rng.standard_normal(shape).astype(np.float32)
        k = int(rng.integers(1, rank + 1))
        axes = [int(a) - (rank if rng.random() < 0.5 else 0) for a in rng.permutation(rank)[:k]]
        starts = [int(rng.choice(picks)) for _ in range(k)]
        ends = [int(rng.choice(picks)) for _ in range(k)]
        steps = [int(rng.choice([-3, -2, -1, 1, 2, 3])) for _ in range(k)]
        ins = [("x", x), ("s", np.array(starts, np.int64)), ("e", np.array(ends, np.int64)),
               ("a", np.array(axes, np.int64)), ("t", np.array(steps, np.int64))]
        want = run_ort("Slice", ins, {})[0]
        got = run_ir("Slice", ins, {}, consts={"s", "e", "a", "t"})[0]
        assert_same(got, want, f"Slice case {case}: {shape} {starts} {ends} {axes} {steps}")


def test_slice_default_axes_steps():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    check("Slice", [("x", x), ("s", _i64(1, -3)), ("e", _i64(I64_MAX, -1))], consts={"s", "e"})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [([1, 2, 2, 1], None), ([0, 0, 0, 0], None), ([2, 1], [-1]),
                                       ([0, 1, 3, 0, 2, 1], [0, 1, 2]), ([1, 0], [1])])
def test_pad(mode, pads, axes):
    rng = _seed(mode, pads, axes)
    shape = (3, 4) if len(pads) == 4 or (axes and len(axes) == 1) else (2, 3, 4)
    x = rng.standard_normal(shape).astype(np.float32)
    ins = [("x", x), ("p", np.array(pads, np.int64)), ("v", np.array(1.5, np.float32) if mode == "constant" else None),
           ("a", None if axes is None else np.array(axes, np.int64))]
    check("Pad", ins, {"mode": mode}, consts={"p", "a"}, oracle="ort")
    if mode == "constant":
        check("Pad", ins, {"mode": mode}, consts={"p", "a", "v"}, oracle="ort")
        check("Pad", ins[:2] + [("v", None)] + ins[3:], {"mode": mode}, consts={"p", "a"}, oracle="ort")


def test_pad_negative_crops():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    got = run_ir("Pad", [("x", x), ("p", _i64(-1, 2, 1, -2))], {"mode": "constant"}, consts={"p"})[0]
    want = np.pad(x[1:, :3], ((0, 1), (2, 0)))
    np.testing.assert_array_equal(got, want)
    got = run_ir("Pad", [("x", x), ("p", _i64(-1, 2, 1, -2))], {"mode": "edge"}, consts={"p"})[0]
    np.testing.assert_array_equal(got, np.pad(x[1:, :3], ((0, 1), (2, 0)), mode="edge"))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx_shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("const", [True, False])
def test_gather(axis, idx_shape, const):
    rng = _seed(axis, idx_shape, const)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    n = x.shape[axis]
    idx = rng.integers(-n, n, idx_shape).astype(np.int64)
    check("Gather", [("x", x), ("i", idx)], {"axis": axis}, consts={"i"} if const else ())
    check("Gather", [("x", x), ("i", idx.astype(np.int32))], {"axis": axis})


def test_gather_elements():
    rng = _seed("ge")
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for axis in (0, 1, -1):
        n = x.shape[axis]
        idx = rng.integers(-n, n, (3, 4) if axis == 0 else (3, 2)).astype(np.int64)
        check("GatherElements", [("x", x), ("i", idx)], {"axis": axis})
        check("GatherElements", [("x", x), ("i", idx)], {"axis": axis}, consts={"i"})


@pytest.mark.parametrize("shape,target", [((3, 1), [2, 1, 4]), ((3, 4), [1, 1]), ((), [2, 3]), ((1,), [0]),
                                          ((2, 1, 3), [2, 5, 3])])
def test_expand(shape, target):
    x = _seed(shape).standard_normal(shape).astype(np.float32)
    check("Expand", [("x", x), ("s", np.array(target, np.int64))], consts={"s"})


@pytest.mark.parametrize("shape,reps", [((2, 3), [2, 3]), ((2, 3), [1, 1]), ((3,), [4]), ((2, 0), [2, 2]),
                                        ((1, 2, 3), [3, 1, 2])])
def test_tile(shape, reps):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    check("Tile", [("x", x), ("r", np.array(reps, np.int64))], consts={"r"})


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-2, None), (0, -1), (-10, 10), (3, 1)])
def test_shape_and_size(start, end):
    x = np.zeros((2, 3, 4, 5), np.float32)
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check("Shape", [("x", x)], attrs)
    check("Size", [("x", x)])


@pytest.mark.parametrize("value,dtype", [(0.0, "float32"), (3, "int64"), (True, "bool"), (-2.5, "float64")])
def test_constant_of_shape(value, dtype):
    shape = _i64(2, 3)
    tensor = onnx.numpy_helper.from_array(np.array([value], dtype))
    want = run_ref("ConstantOfShape", [("s", shape)], {"value": tensor})[0]
    got = run_ir("ConstantOfShape", [("s", shape)], {"value": value, "dtype": dtype}, consts={"s"})[0]
    assert_same(got, want, "ConstantOfShape")
    got = run_ir("ConstantOfShape", [("s", _i64())], {"value": value, "dtype": dtype}, consts={"s"})[0]
    assert got.shape == () and got.dtype == dtype


CAST_FROM = {
    "float32": np.array([-2.7, -1.5, -0.5, -0.0, 0.0, 0.3, 0.5, 1.5, 2.7, 100.9], np.float32),
    "float64": np.array([-2.7, -0.5, 0.0, 0.5, 1e10], np.float64),
    "int64": np.array([-3, -1, 0, 1, 2, 1000], np.int64),
    "int32": np.array([-3, 0, 7, 255], np.int32),
    "bool": np.array([True, False, True]),
    "uint8": np.array([0, 1, 200, 255], np.uint8),
}
CAST_TO = ["float32", "float16", "float64", "int32", "int64", "int8", "bool"]


@pytest.mark.parametrize("src", sorted(CAST_FROM))
@pytest.mark.parametrize("dst", CAST_TO)
def test_cast(src, dst):
    x = CAST_FROM[src]
    if dst == "int8" and src in ("float64", "int64", "int32", "uint8", "float32"):
        x = x[np.abs(x.astype(np.float64)) < 100]   # out-of-range casts are undefined
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    check("Cast", [("x", x)], {"to": to}, ir_attrs={"to": dst}, oracle="ort")


def test_cast_like():
    x = CAST_FROM["float32"]
    check("CastLike", [("x", x), ("t", np.zeros((), np.int32))], oracle="ort")


@pytest.mark.parametrize("start,limit,delta,dtype", [(0, 10, 3, "int64"), (10, -3, -4, "int32"), (5, 5, 1, "int64"),
                                                     (0.5, 3.1, 0.4, "float32"), (1.0, -1.0, -0.25, "float32"),
                                                     (3, 1, 1, "int64")])
def test_range(start, limit, delta, dtype):
    ins = [("s", np.array(start, dtype)), ("l", np.array(limit, dtype)), ("d", np.array(delta, dtype))]
    check("Range", ins, consts={"s", "l", "d"})


@pytest.mark.parametrize("op,mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"), ("SpaceToDepth", None)])
def test_depth_space(op, mode):
    shape = (2, 8, 3, 2) if op == "DepthToSpace" else (2, 3, 4, 6)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    attrs = {"blocksize": 2}
    if mode:
        attrs["mode"] = mode
    check(op, [("x", x)], attrs)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax(op, axis, keepdims, last):
    x = _seed(op, axis).integers(0, 3, (3, 4, 5)).astype(np.float32)   # ties on purpose
    check(op, [("x", x)], {"axis": axis, "keepdims": keepdims, "select_last_index": last})


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0])
def test_topk(largest, axis):
    x = _seed(largest, axis).integers(0, 4, (5, 6)).astype(np.float32)   # ties: lower index first
    check("TopK", [("x", x), ("k", _i64(3))], {"axis": axis, "largest": largest}, consts={"k"},
          n_out=2, oracle="ort")


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_cumsum(exclusive, reverse, axis, dtype):
    x = _seed(exclusive, reverse, axis).integers(-5, 5, (3, 4)).astype(dtype)
    check("CumSum", [("x", x), ("a", np.array(axis, np.int64))], {"exclusive": exclusive, "reverse": reverse},
          consts={"a"})


# -- reductions ---------------------------------------------------------------------------

REDUCE = ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceL2", "ReduceL1",
          "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum"]


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes", [None, [1], [-1, 0], []])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce(op, axes, keepdims, noop):
    rng = _seed(op, axes, keepdims, noop)
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    if op not in ("ReduceLogSum", "ReduceProd"):
        x = (x - 1) * 4
    ins = [("x", x), ("a", None if axes is None else np.array(axes, np.int64))]
    check(op, ins, {"keepdims": keepdims, "noop_with_empty_axes": noop}, consts={"a"})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"])
def test_reduce_int(op):
    x = _seed(op).integers(-7, 7, (3, 4)).astype(np.int32)
    check(op, [("x", x), ("a", _i64(1))], {"keepdims": 0}, consts={"a"}, oracle="ort")


def test_reduce_empty_and_scalar():
    x = np.zeros((0, 3), np.float32)
    s = run_ir("ReduceSum", [("x", x), ("a", _i64(0))], {"keepdims": 0}, consts={"a"})[0]
    np.testing.assert_array_equal(s, np.zeros(3, np.float32))
    m = run_ir("ReduceMax", [("x", x), ("a", _i64(0))], {"keepdims": 1}, consts={"a"})[0]
    assert m.shape == (1, 3) and np.all(m == -np.inf)
    lse = run_ir("ReduceLogSumExp", [("x", x), ("a", _i64(0))], {"keepdims": 0}, consts={"a"})[0]
    assert np.all(lse == -np.inf)
    check("ReduceSum", [("x", np.array(2.5, np.float32)), ("a", None)], {"keepdims": 1})


def test_reduce_logsumexp_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, -np.inf]], np.float32)
    got = run_ir("ReduceLogSumExp", [("x", x), ("a", _i64(1))], {"keepdims": 0}, consts={"a"})[0]
    np.testing.assert_allclose(got, [1000 + np.log(2), -1000], rtol=1e-6)


# -- empty tensors and scalars through the copy kernels ------------------------------------

def test_empty_and_scalar_tensors():
    z = np.zeros((2, 0, 3), np.float32)
    check("Transpose", [("x", z)], {"perm": [2, 0, 1]})
    check("Relu", [("x", z)])
    check("Add", [("a", z), ("b", np.ones((3,), np.float32))])
    check("Concat", [("a", z), ("b", np.ones((2, 2, 3), np.float32))], {"axis": 1})
    check("Gather", [("x", np.ones((4, 3), np.float32)), ("i", np.zeros((0,), np.int64))])
    check("Identity", [("x", np.array(3.0, np.float32))])
    check("Reshape", [("x", np.array(3.0, np.float32)), ("s", _i64(1))], consts={"s"})


# -- folding shape arithmetic ------------------------------------------------------------

def _shape_chain_graph(shape):
    g = Graph()
    g.add_input("x", "float32", shape)
    g.add_const("zero", np.array(0, np.int64))
    g.add_const("ax0", _i64(0))
    g.add_const("minus1", _i64(-1))
    g.add_node("Shape", ["x"], ["shp"])
    g.add_node("Gather", ["shp", "zero"], ["batch"], axis=0)
    g.add_node("Unsqueeze", ["batch", "ax0"], ["batch1"])
    g.add_node("Concat", ["batch1", "minus1"], ["target"], axis=0)
    g.add_node("Reshape", ["x", "target"], ["y"])
    g.outputs = ["y"]
    return g


def test_shape_arithmetic_folds_to_constants():
    g = _shape_chain_graph((2, 3, 4, 5))
    infer_shapes(g, fold=fold_node)
    assert g.tensors["target"].is_const
    np.testing.assert_array_equal(g.tensors["target"].data, [2, -1])
    assert g.tensors["target"].data.dtype == np.int64
    assert g.tensors["y"].shape == (2, 60)
    x = _seed("fold").standard_normal((2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(run_graph(_shape_chain_graph((2, 3, 4, 5)), {"x": x})["y"], x.reshape(2, 60))
    # with a symbolic batch the runtime specialises per input shape
    y = run_graph(_shape_chain_graph(("N", 3, 4, 5)), {"x": x})["y"]
    np.testing.assert_array_equal(y, x.reshape(2, 60))


def _const_subgraph():
    g = Graph()
    g.add_input("x", "float32", (2, 3))
    g.add_const("s", np.array(0, np.int64))
    g.add_const("l", np.array(6, np.int64))
    g.add_const("d", np.array(1, np.int64))
    g.add_node("Range", ["s", "l", "d"], ["r"])
    g.add_node("Cast", ["r"], ["rf"], to="float32")
    g.add_const("shape", _i64(2, 3))
    g.add_node("Reshape", ["rf", "shape"], ["rr"])
    g.add_node("Add", ["x", "rr"], ["y"])
    g.outputs = ["y"]
    return g


def test_fold_constant_subgraph():
    g = _const_subgraph()
    infer_shapes(g, fold=fold_node)
    assert g.tensors["rr"].is_const and g.tensors["rr"].dtype == "float32"
    np.testing.assert_array_equal(g.tensors["rr"].data, np.arange(6).reshape(2, 3))
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(run_graph(_const_subgraph(), {"x": x})["y"], x + np.arange(6).reshape(2, 3))


# -- symbolic shape inference ------------------------------------------------------------

def _infer(build):
    g = Graph()
    build(g)
    infer_shapes(g)
    return g


def test_symbolic_broadcast_transpose_concat():
    def build(g):
        g.add_input("a", "float32", ("N", 1, 4))
        g.add_input("b", "float32", (3, 1))
        g.add_input("c", "float32", ("N", "S", 4))
        g.add_node("Add", ["a", "b"], ["ab"])
        g.add_node("Transpose", ["c"], ["ct"], perm=[2, 0, 1])
        g.add_node("Concat", ["ab", "c"], ["cat"], axis=1)
        g.add_node("Concat", ["c", "c", "ab"], ["cat2"], axis=-2)
        g.add_node("Equal", ["a", "b"], ["eq"])
    g = _infer(build)
    t = g.tensors
    assert t["ab"].shape == ("N", 3, 4)
    assert t["ct"].shape == (4, "N", "S")
    assert t["cat"].shape == ("N", "S+3", 4)
    assert t["cat2"].shape == ("N", "S+S+3", 4)
    assert t["eq"].dtype == "bool" and t["eq"].shape == ("N", 3, 4)


def test_symbolic_reshape_flatten():
    def build(g):
        g.add_input("x", "float32", ("N", 3, 4))
        g.add_const("s1", _i64(0, -1))
        g.add_const("s2", _i64(-1, 12))
        g.add_const("s3", _i64(-1))
        g.add_const("s4", _i64(-1, 3, 4))
        g.add_input("dyn", "int64", (3,))
        g.add_node("Reshape", ["x", "s1"], ["r1"])
        g.add_node("Reshape", ["x", "s2"], ["r2"])
        g.add_node("Reshape", ["x", "s3"], ["r3"])
        g.add_node("Reshape", ["r3", "s4"], ["r4"])
        g.add_node("Reshape", ["x", "dyn"], ["r5"])
        g.add_node("Flatten", ["x"], ["f1"], axis=1)
        g.add_node("Flatten", ["x"], ["f0"], axis=0)
    t = _infer(build).tensors
    assert t["r1"].shape == ("N", 12)
    assert t["r2"].shape == ("N", 12)
    assert t["r3"].shape == ("12*N",)
    assert t["r4"].shape == ("N", 3, 4)
    assert t["r5"].shape == ("r5_d0", "r5_d1", "r5_d2")
    assert t["f1"].shape == ("N", 12)
    assert t["f0"].shape == (1, "12*N")


def test_symbolic_slice_gather_reduce_shape():
    def build(g):
        g.add_input("x", "float32", ("N", "T", 8))
        g.add_input("i", "int64", ("K",))
        g.add_input("dyn", "int64", (1,))
        g.add_const("s", _i64(1, -2, 0))
        g.add_const("e", _i64(I64_MAX, I64_MAX, 4))
        g.add_const("a", _i64(0, 1, 2))
        g.add_const("ax", _i64(-1))
        g.add_node("Slice", ["x", "s", "e", "a"], ["sl"])
        g.add_node("Slice", ["x", "dyn", "e"], ["sd"])
        g.add_node("Gather", ["x", "i"], ["ga"], axis=1)
        g.add_node("ReduceMean", ["x", "ax"], ["rm"], keepdims=1)
        g.add_node("ReduceSum", ["x", "dyn"], ["rs"], keepdims=0)
        g.add_node("Shape", ["x"], ["shp"], start=1)
        g.add_node("Unsqueeze", ["x", "ax"], ["un"])
        g.add_node("Split", ["x"], ["p0", "p1"], axis=2, num_outputs=2)
        g.add_node("Split", ["x"], ["q0", "q1"], axis=1, num_outputs=2)
        g.add_node("Pad", ["x", "pads"], ["pd"])
        g.add_const("pads", _i64(0, 1, 0, 0, 2, 0))
        g.add_node("Expand", ["x", "dyn3"], ["ex"])
        g.add_input("dyn3", "int64", (3,))
        g.add_node("ConstantOfShape", ["dyn3"], ["cs"], value=0, dtype="int64")
    t = _infer(build).tensors
    assert t["sl"].shape == ("N-1", 2, 4)
    assert t["sd"].shape == ("sd_d0", "T", 8)
    assert t["ga"].shape == ("N", "K", 8)
    assert t["rm"].shape == ("N", "T", 1)
    assert t["rs"].shape == ("rs_d0", "rs_d1")
    assert t["shp"].shape == (2,) and t["shp"].dtype == "int64"
    assert t["un"].shape == ("N", "T", 8, 1)
    assert t["p0"].shape == t["p1"].shape == ("N", "T", 4)
    assert t["q0"].shape == ("N", "q0_d1", 8) and t["q1"].shape == ("N", "q1_d1", 8)
    assert t["pd"].shape == ("N", "T+3", 8)
    assert t["ex"].shape == ("ex_d0", "ex_d1", 8)
    assert t["cs"].shape == ("cs_d0", "cs_d1", "cs_d2") and t["cs"].dtype == "int64"


def test_unknown_rank_propagates_as_none():
    def build(g):
        g.add_input("x", "float32", None)
        g.add_input("y", "float32", (3,))
        g.add_node("Add", ["x", "y"], ["z"])
        g.add_node("Relu", ["x"], ["r"])
        g.add_node("Shape", ["x"], ["s"])
    t = _infer(build).tensors
    assert t["z"].shape is None and t["r"].shape is None
    assert t["s"].shape == ("s_d0",)


def test_shape_errors():
    for build in [
        lambda g: (g.add_input("a", "float32", (2, 3)), g.add_input("b", "float32", (4,)),
                   g.add_node("Add", ["a", "b"], ["c"])),
        lambda g: (g.add_input("a", "float32", (2, 3)), g.add_const("ax", _i64(0)),
                   g.add_node("Squeeze", ["a", "ax"], ["c"])),
        lambda g: (g.add_input("a", "float32", (2, 3)), g.add_input("b", "float32", (2, 4)),
                   g.add_node("Concat", ["a", "b"], ["c"], axis=0)),
    ]:
        with pytest.raises(ShapeError):
            _infer(build)


# -- in-place safety and other dtypes --------------------------------------------------------

def _inplace_inputs(op):
    rng = _seed("inplace", op)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    if op in ("And", "Or", "Xor", "Not"):
        return rng.random((3, 4)) > 0.5, rng.random((4,)) > 0.5
    if op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitShift", "Mod"):
        return rng.integers(1, 50, (3, 4)).astype(np.uint32), rng.integers(1, 4, (4,)).astype(np.uint32)
    if op in ("Sqrt", "Log", "Pow", "Acosh"):
        x = np.abs(x) + 1.1
    if op in ("Asin", "Acos", "Atanh"):
        x = np.tanh(x) * 0.9
    return x.astype(np.float32), (rng.standard_normal((4,)) + 3).astype(np.float32)


def test_inplace_safe_kernels_tolerate_aliasing():
    """Kernels in INPLACE_SAFE give the same result when the output buffer is input 0's."""
    from edge_infer.backends.cpu.executor import PrepareContext, prepare_node
    from edge_infer.backends.cpu.kernels.elementwise import INPLACE_SAFE
    binary = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "Sum", "Max", "Min", "Mean", "PRelu",
              "Clip", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Equal", "Less", "Greater",
              "LessOrEqual", "GreaterOrEqual"}
    for op in sorted(INPLACE_SAFE):
        a, b = _inplace_inputs(op)
        g = Graph()
        g.add_input("x", a.dtype.name, a.shape)
        ins = ["x"]
        if op in binary:
            g.add_const("b", b)
            ins.append("b")
        g.add_node(op, ins, ["y"])
        infer_shapes(g)
        if g.tensors["y"].dtype != a.dtype.name:
            continue                                  # never aliased: types differ
        want = run_ir(op, [("x", a), ("b", b)][:len(ins)], {}, consts={"b"})[0]
        buf = a.copy()
        prepare_node(g.nodes[0], PrepareContext(g, {"x": buf, "y": buf}))()
        np.testing.assert_array_equal(buf, want, err_msg=op)


@pytest.mark.parametrize("op", ["Add", "Mul", "Sigmoid", "Gelu", "Erf", "Relu", "ReduceSum", "ReduceMean",
                                "Transpose", "Concat", "Where"])
def test_float16(op):
    rng = _seed("f16", op)
    x = rng.standard_normal((4, 64)).astype(np.float16)
    y = rng.standard_normal((4, 64)).astype(np.float16)
    ins = {"Add": [("a", x), ("b", y)], "Mul": [("a", x), ("b", y)], "Concat": [("a", x), ("b", y)],
           "ReduceSum": [("x", x), ("a", _i64(1))], "ReduceMean": [("x", x), ("a", _i64(1))],
           "Where": [("c", x > 0), ("a", x), ("b", y)]}.get(op, [("x", x)])
    want = run_ort(op, ins, {"axis": 0} if op == "Concat" else {})[0]
    got = run_ir(op, ins, {"axis": 0} if op == "Concat" else {}, consts={"a"} if op.startswith("Reduce") else ())[0]
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
