"""OpenCL backend: kernels against the numpy CPU backend (fp32 within 1e-4 relative, int8 bit
for bit) on odd sizes, both layouts and every conv algorithm; the kernel cache (built once,
loaded from disk, rebuilt when a source changes); availability and device choice; whole
models (the digits CNN fp32 and int8, ONNX light zoo models) marked slow. The rest of the zoo
(Inception-v1/v2, ResNet-50, DenseNet-121; AlexNet, ZFNet, VGG-19 with --all) is checked by
benchmarks/opencl_vs_cpu.py, which checks the same parity before timing (ResNet-50 alone takes
~6 s here idle, ~35 s on the loaded shared machine).

Runs on any OpenCL device (PoCL's CPU device here); skipped when there is none.
"""
import os
import sys

import numpy as np
import pytest

from edge_infer.backends.cpu import CpuBackend
from edge_infer.backends.opencl import OpenCLBackend
from edge_infer.errors import UnsupportedOpError
from edge_infer.ir import Graph
from edge_infer.runtime import Runtime, specialize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_OK, _WHY = OpenCLBackend().available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"no OpenCL device: {_WHY}")

RTOL = 1e-4


def rel_err(ref: np.ndarray, got: np.ndarray) -> float:
    """max |ref - got| / max |ref| (float64)."""
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    assert ref.shape == got.shape
    return float(np.abs(ref - got).max() / max(np.abs(ref).max(), 1e-30)) if ref.size else 0.0


def both(g: Graph, feeds, **options):
    """Run ``g`` on the CPU and the OpenCL backends: (cpu outputs, opencl outputs, executable)."""
    sg = specialize(g, {k: v.shape for k, v in feeds.items()})
    ref = CpuBackend().prepare(sg).run(feeds)
    ex = OpenCLBackend().prepare(sg, **options)
    return ref, ex.run(feeds), ex


def check_f32(g, feeds, **options):
    ref, got, ex = both(g, feeds, **options)
    for k in ref:
        assert got[k].dtype == ref[k].dtype
        assert rel_err(ref[k], got[k]) <= RTOL, (k, rel_err(ref[k], got[k]), ex.notes)
    return ex


def check_exact(g, feeds, **options):
    ref, got, ex = both(g, feeds, **options)
    for k in ref:
        assert got[k].dtype == ref[k].dtype
        np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{k}: {ex.notes}")
    return ex


def one_node(op, inputs, attrs=None, consts=(), n_out=1):
    """A one-node fp32 graph; ``inputs`` [(name, array)], those named in ``consts`` constant."""
    g = Graph("t")
    feeds = {}
    for name, arr in inputs:
        if not name:
            continue
        if name in consts:
            g.add_tensor(name, arr.dtype.name, arr.shape, arr)
        else:
            g.add_input(name, arr.dtype.name, arr.shape)
            feeds[name] = arr
    outs = [f"y{i}" for i in range(n_out)]
    g.add_node(op, [n for n, _ in inputs], outs, **(attrs or {}))
    g.outputs = outs
    return g, feeds


R = np.random.default_rng(7)


def randn(*shape):
    return R.standard_normal(shape).astype(np.float32)


# -- GEMM --------------------------------------------------------------------------------------

GEMMS = ["tiled", "cpu"]        # local-memory tiles (GPUs) and the CPU-driver variant


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 33, 65), (33, 17, 5), (64, 96, 31)])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("gemm", GEMMS)
def test_gemm_odd_sizes_and_transposes(m, k, n, ta, tb, gemm):
    a = randn(k, m) if ta else randn(m, k)
    b = randn(n, k) if tb else randn(k, n)
    c = randn(n)
    g, f = one_node("Gemm", [("a", a), ("b", b), ("c", c)], dict(transA=ta, transB=tb, alpha=0.5, beta=2.0),
                    consts=("c",))
    check_f32(g, f, gemm=gemm)
    g, f = one_node("Gemm", [("a", a), ("b", b), ("c", c)], dict(transA=ta, transB=tb, alpha=1.5), consts=("b", "c"))
    check_f32(g, f, gemm=gemm)


@pytest.mark.parametrize("cshape", [(), (1,), (9,), (5, 1), (5, 9)])
def test_gemm_bias_broadcast_and_fused_activation(cshape):
    a, b, c = randn(5, 12), randn(12, 9), randn(*cshape) if cshape else np.float32(0.3).reshape(())
    g, f = one_node("FusedGemm", [("a", a), ("b", b), ("c", np.asarray(c, np.float32))],
                    dict(activation="Relu"), consts=("b", "c"))
    check_f32(g, f)


@pytest.mark.parametrize("sa,sb", [((2, 3, 5, 7), (7, 9)), ((2, 5, 7), (2, 7, 3)), ((1, 35, 40), (40, 3)),
                                   ((3, 4, 6), (1, 6, 5))])
def test_matmul_batched(sa, sb):
    g, f = one_node("MatMul", [("a", randn(*sa)), ("b", randn(*sb))])
    for gemm in GEMMS:
        check_f32(g, f, gemm=gemm)


def test_fused_matmul_bias_activation():
    g, f = one_node("FusedMatMul", [("a", randn(3, 10, 17)), ("b", randn(17, 6)), ("bias", randn(6))],
                    dict(activation="LeakyRelu", activation_params=[0.1]), consts=("b", "bias"))
    check_f32(g, f)


# -- convolution ---------------------------------------------------------------------------------

CONV_CASES = [
    # (C, M, group, kernel, strides, pads, dilations, H, W)
    (3, 8, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 9, 11),
    (5, 7, 1, (3, 2), (2, 1), (0, 1, 2, 0), (1, 2), 13, 10),
    (4, 6, 2, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 7, 7),
    (6, 6, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 10, 9),      # depthwise
    (4, 8, 4, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 11, 12),     # depthwise, multiplier 2
    (16, 12, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 6, 5),     # pointwise
    (8, 12, 4, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 5, 5),      # grouped pointwise
    (3, 5, 1, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 15, 17),
]


def conv_graph(C, M, group, kernel, strides, pads, dil, H, W, last, op="Conv", act="", params=(), residual=False,
               bias=True, n=1):
    w = randn(M, C // group, *kernel)
    xs = (n, H, W, C) if last else (n, C, H, W)
    oh = (H + pads[0] + pads[2] - dil[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (W + pads[1] + pads[3] - dil[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    ins = [("x", randn(*xs)), ("w", w), ("b", randn(M) if bias else None)]
    attrs = dict(group=group, kernel_shape=list(kernel), strides=list(strides), pads=list(pads),
                 dilations=list(dil))
    if last:
        attrs["data_layout"] = "NHWC"
    if op == "FusedConv":
        attrs.update(activation=act, activation_params=list(params))
        if residual:
            ins.append(("z", randn(*((n, oh, ow, M) if last else (n, M, oh, ow)))))
    ins = [(nm, a) if a is not None else ("", None) for nm, a in ins]
    return one_node(op, ins, attrs, consts=("w", "b"))


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("last", [False, True])
def test_conv_every_algorithm_both_layouts(case, last):
    for algo, gemm in (("auto", "cpu"), ("direct", "cpu"), ("gemm", "cpu"), ("gemm", "tiled")):
        g, f = conv_graph(*case, last=last)
        ex = check_f32(g, f, conv_algorithm=algo, gemm=gemm)
        note = next(iter(ex.notes.values()))
        assert ("direct" in note) == (algo == "direct" or (algo == "auto" and "direct" in note))


@pytest.mark.parametrize("act,params", [("Relu", []), ("Clip", [0.0, 6.0]), ("HardSwish", []),
                                        ("LeakyRelu", [0.2]), ("Sigmoid", []), ("Tanh", [])])
@pytest.mark.parametrize("last", [False, True])
def test_fused_conv_residual_and_activation(act, params, last):
    for case in (CONV_CASES[0], CONV_CASES[3], CONV_CASES[6]):
        for algo, gemm in (("direct", "cpu"), ("gemm", "cpu"), ("gemm", "tiled")):
            g, f = conv_graph(*case, last=last, op="FusedConv", act=act, params=params, residual=True, n=2)
            check_f32(g, f, conv_algorithm=algo, gemm=gemm)


def test_conv_1d_and_no_bias():
    g, f = one_node("Conv", [("x", randn(2, 5, 19)), ("w", randn(4, 5, 3))],
                    dict(kernel_shape=[3], strides=[2], pads=[1, 2]), consts=("w",))
    check_f32(g, f)
    g, f = conv_graph(*CONV_CASES[1], last=True, bias=False)
    check_f32(g, f)


# -- pools, normalisation, softmax -----------------------------------------------------------------

@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2]),
                                   dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], ceil_mode=1),
                                   dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                                        count_include_pad=1),
                                   dict(kernel_shape=[3, 3], strides=[1, 1], dilations=[2, 1], pads=[2, 1, 2, 1])])
def test_windowed_pools(op, last, attrs):
    a = dict(attrs)
    if op == "MaxPool":
        a.pop("count_include_pad", None)
    if last:
        a["data_layout"] = "NHWC"
    g, f = one_node(op, [("x", randn(*((2, 11, 13, 5) if last else (2, 5, 11, 13))))], a)
    check_f32(g, f)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("last", [False, True])
def test_global_pools(op, last):
    g, f = one_node(op, [("x", randn(*((3, 7, 9, 11) if last else (3, 11, 7, 9))))],
                    dict(data_layout="NHWC") if last else {})
    check_f32(g, f)


@pytest.mark.parametrize("last", [False, True])
def test_batchnorm_lrn(last):
    c = 13
    x = randn(*((2, 5, 7, c) if last else (2, c, 5, 7)))
    stats = [randn(c), randn(c), randn(c), np.abs(randn(c)) + 0.1]
    lay = dict(data_layout="NHWC") if last else {}
    g, f = one_node("BatchNormalization", [("x", x)] + [(f"s{i}", s) for i, s in enumerate(stats)],
                    dict(epsilon=1e-3, **lay), consts=("s0", "s1", "s2", "s3"))
    check_f32(g, f)
    g, f = one_node("LRN", [("x", x)], dict(size=5, alpha=1e-2, beta=0.75, bias=2.0, **lay))
    check_f32(g, f)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(op, axis):
    g, f = one_node(op, [("x", randn(3, 37, 5) * 4)], dict(axis=axis))
    check_f32(g, f)


# -- element-wise ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu"])
@pytest.mark.parametrize("sa,sb", [((2, 3, 5), (2, 3, 5)), ((2, 3, 5), (5,)), ((2, 1, 5), (3, 1)),
                                   ((4, 1, 3, 1), (1, 5, 1, 7)), ((7,), ())])
def test_binary_broadcast(op, sa, sb):
    a = randn(*sa)
    b = randn(*sb) if sb else np.float32(1.7).reshape(())
    if op == "Div":
        b = np.where(np.abs(b) < 0.2, np.float32(0.5), b).astype(np.float32)
    if op == "PRelu" and np.broadcast_shapes(sa, sb) != sa:
        return                                 # PRelu's slope broadcasts one way only
    g, f = one_node(op, [("a", a), ("b", b)])
    check_f32(g, f)


UNARY_CASES = [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", dict(alpha=0.3)),
               ("HardSigmoid", dict(alpha=0.3, beta=0.4)), ("HardSwish", {}), ("Elu", dict(alpha=0.7)),
               ("Selu", {}), ("Softplus", {}), ("Softsign", {}), ("Erf", {}), ("Gelu", {}),
               ("Gelu", dict(approximate="tanh")), ("Abs", {}), ("Neg", {}), ("Exp", {}), ("Floor", {}),
               ("Ceil", {}), ("SiLU", {})]


@pytest.mark.parametrize("op,attrs", UNARY_CASES)
def test_unary(op, attrs):
    g, f = one_node(op, [("x", randn(3, 1001) * 3)], attrs)
    check_f32(g, f)


def test_unary_needing_positive_inputs_and_clip():
    x = np.abs(randn(5, 77)) + 0.05
    for op in ("Sqrt", "Log", "Reciprocal"):
        g, f = one_node(op, [("x", x)])
        check_f32(g, f)
    g, f = one_node("Clip", [("x", randn(5, 77)), ("lo", np.float32(-0.5).reshape(())),
                             ("hi", np.float32(0.7).reshape(()))], consts=("lo", "hi"))
    check_f32(g, f)


def test_binary_activation_fusion_and_in_place_chain():
    g = Graph("t")
    g.add_input("x", "float32", (2, 9, 9, 6))
    g.add_tensor("s", "float32", (6,), randn(6))
    g.add_tensor("t", "float32", (6,), randn(6))
    g.add_node("Mul", ["x", "s"], ["m"])
    g.add_node("Add", ["m", "t"], ["a"])
    g.add_node("Relu", ["a"], ["r"])
    g.add_node("Reshape", ["r", "shape"], ["y"])
    g.add_tensor("shape", "int64", (2,), np.array([2, -1], np.int64))
    g.outputs = ["y"]
    ex = check_f32(g, {"x": randn(2, 9, 9, 6)})
    assert any("fused Relu" in v for v in ex.notes.values())
    assert len(ex.steps) == 2                      # Mul, Add+Relu; the Reshape is a view
    assert [n.op for n in ex.nodes] == ["Mul", "Add", "Relu", "Reshape"]


# -- data movement -------------------------------------------------------------------------------

def test_transpose_concat_slice_split_expand():
    x = randn(2, 3, 5, 7)
    for perm in ([0, 2, 3, 1], [3, 1, 0, 2], None):
        g, f = one_node("Transpose", [("x", x)], dict(perm=perm) if perm else {})
        check_exact(g, f)
    for axis in (0, 1, 3, -1):
        g, f = one_node("Concat", [("a", x), ("b", x * 2), ("c", x[..., :1] if axis in (3, -1) else x)],
                        dict(axis=axis))
        if axis in (3, -1):
            check_exact(g, f)
        else:
            g, f = one_node("Concat", [("a", x), ("b", x * 2)], dict(axis=axis))
            check_exact(g, f)
    g, f = one_node("Slice", [("x", x), ("st", np.array([1, -1], np.int64)), ("en", np.array([5, -8], np.int64)),
                              ("ax", np.array([3, 2], np.int64)), ("sp", np.array([2, -2], np.int64))],
                    consts=("st", "en", "ax", "sp"))
    check_exact(g, f)
    g, f = one_node("Split", [("x", x), ("sp", np.array([2, 5], np.int64))], dict(axis=3), consts=("sp",), n_out=2)
    check_exact(g, f)
    g, f = one_node("Expand", [("x", randn(3, 1, 5)), ("s", np.array([2, 3, 4, 5], np.int64))], consts=("s",))
    check_exact(g, f)


def test_pad_and_reductions():
    x = randn(2, 3, 5, 7)
    g, f = one_node("Pad", [("x", x), ("p", np.array([0, 1, 2, 0, 1, 0, 1, 3], np.int64)),
                            ("v", np.float32(-1.5).reshape(()))], consts=("p", "v"))
    check_exact(g, f)
    for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"):
        for axes, keep in (([1], 1), ([2, 3], 0), ([-1], 1), ([0, 1, 2, 3], 0)):
            g, f = one_node(op, [("x", x), ("ax", np.array(axes, np.int64))], dict(keepdims=keep), consts=("ax",))
            check_f32(g, f)
    g, f = one_node("ReduceMean", [("x", x), ("ax", np.array([1, 3], np.int64))], consts=("ax",))
    sg = specialize(g, {"x": x.shape})
    assert not OpenCLBackend().supports(sg.nodes[0], sg)         # not one block of axes: refused


@pytest.mark.parametrize("attrs", [dict(mode="nearest"), dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                                              nearest_mode="floor"),
                                   dict(mode="linear"), dict(mode="linear", coordinate_transformation_mode="align_corners"),
                                   dict(mode="cubic")])
def test_resize(attrs):
    g, f = one_node("Resize", [("x", randn(1, 3, 7, 9)), ("", None), ("sc", np.array([1, 1, 2.0, 1.5], np.float32))],
                    attrs, consts=("sc",))
    check_f32(g, f)
    if attrs["mode"] == "nearest":                           # int8 activations: the same gather
        g, f = one_node("Resize", [("x", i8(1, 5, 6, 3)), ("", None), ("sc", np.array([1, 0.5, 2.0, 1], np.float32))],
                        attrs, consts=("sc",))
        check_exact(g, f)


# -- int8 (bit-exact) ------------------------------------------------------------------------------

def qd(scale, zp, axis=None):
    return {"scale": [float(np.float32(v)) for v in np.atleast_1d(scale)],
            "zero_point": [int(v) for v in np.atleast_1d(zp)], "axis": axis}


def rq():
    return float(np.float32(R.uniform(0.01, 0.1))), int(R.integers(-30, 30))


def i8(*shape):
    return R.integers(-128, 128, shape).astype(np.int8)


def int8_graph(op, inputs, out_q, attrs=None, n_out_shape=None):
    """inputs: [(name, array, quant, is_const)] -> graph with int8 output y (quant out_q)."""
    g = Graph("t")
    feeds = {}
    for name, arr, q, const in inputs:
        if not name:
            continue
        if const:
            g.add_tensor(name, arr.dtype.name, arr.shape, arr, q)
        else:
            g.add_input(name, arr.dtype.name, arr.shape).quant = q
            feeds[name] = arr
    g.add_node(op, [i[0] for i in inputs], ["y"], **(attrs or {}))
    g.tensors["y"].dtype = "int8"
    g.tensors["y"].quant = out_q
    g.outputs = ["y"]
    return g, feeds


def int8_conv_graph(C, M, group, kernel, strides, pads, dil, H, W, last, act="", residual=False, per_channel=True,
                    requant="fixed"):
    s_x, zp_x = rq()
    s_y, zp_y = rq()
    w = R.integers(-127, 128, (M, C // group, *kernel)).astype(np.int8)
    s_w = R.uniform(0.002, 0.02, M if per_channel else 1).astype(np.float32)
    bias = R.integers(-3000, 3000, M).astype(np.int32)
    xs = (2, H, W, C) if last else (2, C, H, W)
    attrs = dict(group=group, kernel_shape=list(kernel), strides=list(strides), pads=list(pads), dilations=list(dil),
                 requant=requant)
    if last:
        attrs["data_layout"] = "NHWC"
    ins = [("x", i8(*xs), qd(s_x, zp_x), False), ("w", w, qd(s_w, [0] * s_w.size, 0), True),
           ("b", bias, qd(s_x * s_w, [0] * s_w.size, 0), True)]
    op = "Conv"
    if act or residual:
        op = "FusedConv"
        attrs.update(activation=act, activation_params=[0.0, 6.0] if act == "Clip" else [])
        if residual:
            oh = (H + pads[0] + pads[2] - dil[0] * (kernel[0] - 1) - 1) // strides[0] + 1
            ow = (W + pads[1] + pads[3] - dil[1] * (kernel[1] - 1) - 1) // strides[1] + 1
            ins.append(("z", i8(*((2, oh, ow, M) if last else (2, M, oh, ow))), qd(*rq()), False))
    return int8_graph(op, ins, qd(s_y, zp_y), attrs)


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("last", [False, True])
def test_int8_conv_bit_exact(case, last):
    for algo, gemm, act, residual, requant in (("auto", "cpu", "", False, "fp32"),
                                               ("direct", "cpu", "Relu", True, "fp32"),
                                               ("gemm", "cpu", "Clip", True, "fixed"),
                                               ("gemm", "tiled", "Relu", True, "fp32")):
        g, f = int8_conv_graph(*case, last=last, act=act, residual=residual, per_channel=gemm != "tiled",
                               requant=requant)
        check_exact(g, f, conv_algorithm=algo, gemm=gemm)


@pytest.mark.parametrize("requant", ["fixed", "fp32"])
@pytest.mark.parametrize("b_const", [True, False])
def test_int8_gemm_and_matmul_bit_exact(b_const, requant):
    s_a, zp_a = rq()
    s_b = R.uniform(0.002, 0.02, 9).astype(np.float32) if b_const else np.float32(0.01)
    bq = qd(s_b, [0] * np.size(s_b), 1) if b_const else qd(s_b, 5)
    ins = [("a", i8(13, 40), qd(s_a, zp_a), False), ("b", i8(40, 9), bq, b_const)]
    if b_const:
        ins.append(("c", R.integers(-500, 500, 9).astype(np.int32), qd(s_a * s_b, [0] * 9, 0), True))
    g, f = int8_graph("FusedGemm" if b_const else "Gemm", ins, qd(*rq()),
                      dict(activation="Relu", requant=requant) if b_const else dict(requant=requant))
    for gemm in GEMMS:
        check_exact(g, f, gemm=gemm)
    g, f = int8_graph("MatMul", [("a", i8(3, 7, 40), qd(s_a, zp_a), False), ("b", i8(40, 9), bq, b_const)], qd(*rq()),
                      dict(requant=requant))
    for gemm in GEMMS:
        check_exact(g, f, gemm=gemm)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Mul:fp32"])
@pytest.mark.parametrize("sb", [(2, 5, 6, 7), (7,), (5, 1, 1)])
def test_int8_binary_bit_exact(op, sb):
    op, _, requant = op.partition(":")
    for b_const in (False, True):
        g, f = int8_graph(op, [("a", i8(2, 5, 6, 7), qd(*rq()), False), ("b", i8(*sb), qd(*rq()), b_const)], qd(*rq()),
                          {"requant": requant} if requant else None)
        check_exact(g, f)


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "Relu", "Clip"])
def test_int8_unary_bit_exact(op):
    s, zp = rq()
    for out_q in (qd(s, zp), qd(*rq())):
        ins = [("x", i8(3, 50), qd(s, zp), False)]
        if op == "Clip":
            ins += [("lo", np.float32(-0.3).reshape(()), None, True), ("hi", np.float32(0.9).reshape(()), None, True)]
        g, f = int8_graph(op, ins, out_q)
        check_exact(g, f)


def test_int8_softmax_bit_exact():
    """int8 Softmax (fixed output 1/256, -128) on rows of several lengths: OpenCL == CPU bit for bit."""
    for shape in ((4, 10), (2, 3, 257), (1, 1)):
        g, f = int8_graph("Softmax", [("x", i8(*shape), qd(float(R.uniform(0.02, 0.3)), int(R.integers(-20, 20))), False)],
                          qd(1.0 / 256.0, -128), dict(axis=-1))
        check_exact(g, f)


@pytest.mark.parametrize("last", [False, True])
def test_int8_pools_concat_bit_exact(last):
    s, zp = rq()
    xs = (2, 9, 11, 6) if last else (2, 6, 9, 11)
    lay = dict(data_layout="NHWC") if last else {}
    for out_q in (qd(s, zp), qd(*rq())):
        for attrs in (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                      dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 1, 0, 1], count_include_pad=1)):
            g, f = int8_graph("AveragePool", [("x", i8(*xs), qd(s, zp), False)], out_q, dict(attrs, **lay))
            check_exact(g, f)
        g, f = int8_graph("GlobalAveragePool", [("x", i8(*xs), qd(s, zp), False)], out_q, lay)
        check_exact(g, f)
    g, f = int8_graph("MaxPool", [("x", i8(*xs), qd(s, zp), False)], qd(s, zp),
                      dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], **lay))
    check_exact(g, f)
    axis = 3 if last else 1
    g, f = int8_graph("Concat", [("a", i8(*xs), qd(s, zp), False), ("b", i8(*xs), qd(*rq()), False)],
                      qd(s, zp), dict(axis=axis))
    check_exact(g, f)


def test_quantize_dequantize_bit_exact():
    g = Graph("t")
    g.add_input("x", "float32", (3, 4, 50))
    g.add_const("s", np.float32(0.023))
    g.add_const("zp", np.int8(-7))
    g.add_const("sc", R.uniform(0.01, 0.05, 4).astype(np.float32))
    g.add_const("zc", R.integers(-9, 9, 4).astype(np.int8))
    g.add_node("QuantizeLinear", ["x", "s", "zp"], ["q"])
    g.add_node("DequantizeLinear", ["q", "sc", "zc"], ["y"], axis=1)
    g.outputs = ["q", "y"]
    x = randn(3, 4, 50) * 2
    x[0, 0, :6] = np.float32(0.023) * np.array([0.5, 1.5, -2.5, 2.5, 300, -300], np.float32)  # ties, saturation
    check_exact(g, {"x": x})


# -- coverage: what the backend does not run, it says so -------------------------------------------

def test_unsupported_nodes_are_refused_not_miscomputed():
    be = OpenCLBackend()
    cases = [one_node("Conv", [("x", randn(1, 2, 4, 4, 4)), ("w", randn(3, 2, 2, 2, 2))], consts=("w",)),  # 3-D
             one_node("MaxPool", [("x", randn(1, 2, 6, 6))], dict(kernel_shape=[2, 2]), n_out=2),        # Indices
             one_node("ConvTranspose", [("x", randn(1, 2, 4, 4)), ("w", randn(2, 3, 3, 3))], consts=("w",)),
             one_node("TopK", [("x", randn(3, 9)), ("k", np.array([2], np.int64))], consts=("k",), n_out=2),
             one_node("Add", [("a", np.arange(6, dtype=np.int64)), ("b", np.arange(6, dtype=np.int64))]),
             one_node("MatMul", [("a", randn(2, 1, 3, 4)), ("b", randn(1, 5, 4, 2))]),          # partial broadcast
             one_node("Dropout", [("x", randn(3, 4))], n_out=2)]                                 # the mask
    for g, f in cases:
        sg = specialize(g, {k: v.shape for k, v in f.items()})
        node = sg.nodes[0]
        assert not be.supports(node, sg), node.op
        with pytest.raises(UnsupportedOpError):
            be.prepare(sg)
    g, f = one_node("Relu", [("x", randn(2, 3))])
    sg = specialize(g, {"x": (2, 3)})
    assert be.supports(sg.nodes[0], sg)
    # an unspecialised graph (symbolic batch) is checked with the batch pinned to 1
    for rank, ok in ((4, True), (5, False)):
        g = Graph("sym")
        g.add_input("x", "float32", ("N", 2) + (6,) * (rank - 2))
        g.add_tensor("w", "float32", (3, 2) + (3,) * (rank - 2), randn(3, 2, *(3,) * (rank - 2)))
        g.add_node("Conv", ["x", "w"], ["y"])
        g.outputs = ["y"]
        from edge_infer.ir.shape_inference import infer_shapes
        infer_shapes(g)
        assert g.tensors["y"].shape[0] == "N"
        assert be.supports(g.nodes[0], g) is ok
    assert {"Conv", "FusedConv", "Gemm", "MaxPool", "QuantizeLinear", "Concat"} <= set(be.supported_ops())


# -- availability, device choice -----------------------------------------------------------------

def test_available_and_device_choice(monkeypatch):
    be = OpenCLBackend()
    ok, why = be.available()
    assert ok and why
    monkeypatch.setenv("EDGE_INFER_OPENCL_DEVICE", "0")
    assert be.available()[0]
    monkeypatch.setenv("EDGE_INFER_OPENCL_DEVICE", "no-such-device-xyz")
    ok, why = be.available()
    assert not ok and "no-such-device-xyz" in why
    monkeypatch.setenv("EDGE_INFER_OPENCL_DEVICE", "99")
    assert not be.available()[0]
    monkeypatch.delenv("EDGE_INFER_OPENCL_DEVICE")
    monkeypatch.setitem(sys.modules, "pyopencl", None)          # import pyopencl -> ImportError
    ok, why = be.available()
    assert not ok and "pyopencl" in why


# -- kernel cache ------------------------------------------------------------------------------------

def test_kernel_cache_built_once_and_invalidated_by_source_change(tmp_path, monkeypatch):
    from edge_infer.backends.opencl import _runtime, build
    monkeypatch.setenv("EDGE_INFER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_built", {})
    dev, ctx, _ = _runtime()
    build.program(ctx, dev, "elementwise")
    assert build.last_origin["elementwise"] == "source"
    files = sorted(os.listdir(tmp_path / "opencl"))
    assert len(files) == 1 and files[0].endswith(".bin")
    build.program(ctx, dev, "elementwise")
    assert build.last_origin["elementwise"] == "memory"
    monkeypatch.setattr(build, "_built", {})                  # a new process: loads the binary
    build.program(ctx, dev, "elementwise")
    assert build.last_origin["elementwise"] == "disk"
    (tmp_path / "opencl" / files[0]).write_bytes(b"not a program binary")
    monkeypatch.setattr(build, "_built", {})                  # a corrupt binary: rebuilt, replaced
    build.program(ctx, dev, "elementwise")
    assert build.last_origin["elementwise"] == "source"
    assert (tmp_path / "opencl" / files[0]).read_bytes() != b"not a program binary"

    # change the kernel source: a rebuild, a second cache file, and the new code is what runs
    original = build.source
    monkeypatch.setattr(build, "source", lambda name: original(name).replace(
        "case ACT_NEG: return -v;", "case ACT_NEG: return -2.0f * v;"))
    g, f = one_node("Neg", [("x", randn(4, 5))])
    ex = OpenCLBackend().prepare(specialize(g, {"x": (4, 5)}))
    assert build.last_origin["elementwise"] == "source"
    assert len(os.listdir(tmp_path / "opencl")) == 2
    np.testing.assert_array_equal(ex.run(f)["y0"], -2 * f["x"])
    monkeypatch.setattr(build, "source", original)
    ex = OpenCLBackend().prepare(specialize(g, {"x": (4, 5)}))
    assert build.last_origin["elementwise"] in ("memory", "disk")
    np.testing.assert_array_equal(ex.run(f)["y0"], -f["x"])


def test_plan_one_arena_and_resident_constants():
    g, f = conv_graph(*CONV_CASES[0], last=True, op="FusedConv", act="Relu", residual=True)
    sg = specialize(g, {k: v.shape for k, v in f.items()})
    ex = OpenCLBackend().prepare(sg)
    assert ex.arena.size >= ex.arena_plan.size > 0
    assert ex.constant_bytes >= sg.tensors["w"].nbytes
    a = ex.run(f)["y0"]
    b = ex.run(f)["y0"]                                      # runs repeat: nothing left over
    np.testing.assert_array_equal(a, b)
    assert a is not b
    out, prof = ex.run_profiled(f)
    np.testing.assert_array_equal(out["y0"], a)
    assert [p[1] for p in prof] == ["FusedConv"]
    ex2 = OpenCLBackend().prepare(sg)                         # a second plan of the same graph
    assert ex2.constant_bytes < sg.tensors["w"].nbytes        # shares the weights on the device
    assert ex2.arena is not ex.arena
    np.testing.assert_array_equal(ex2.run(f)["y0"], a)


def test_concurrent_runs_through_runtime():
    from concurrent.futures import ThreadPoolExecutor
    g, f = conv_graph(*CONV_CASES[2], last=False, op="FusedConv", act="Relu", residual=True, n=2)
    rt = Runtime(g, backend="opencl")
    xs = [{k: v + np.float32(i) for k, v in f.items()} for i in range(8)]
    ref = [Runtime(g, backend="cpu").run(x)["y0"] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: rt.run(x)["y0"], xs))
    for r, o in zip(ref, got):
        assert rel_err(r, o) <= RTOL


# -- whole models ------------------------------------------------------------------------------------

def _with_probe_outputs(g, int8: bool):
    """Graph outputs plus the Softmax inputs (logits) and, for int8, every int8 activation."""
    extra = [n.inputs[0] for n in g.nodes if n.op == "Softmax"]
    if int8:
        extra += [n.outputs[0] for n in g.nodes
                  if n.outputs and g.tensors[n.outputs[0]].dtype == "int8" and not g.tensors[n.outputs[0]].is_const]
    g.outputs = list(dict.fromkeys(list(g.outputs) + extra))
    return g


def _model_parity(path, int8=False, batch=1):
    from edge_infer.artifact import load_artifact
    g, _ = load_artifact(path)
    shapes = {i: tuple(d if isinstance(d, int) else batch for d in g.tensors[i].shape) for i in g.inputs}
    sg = _with_probe_outputs(specialize(g, shapes), int8)
    be = OpenCLBackend()
    assert all(be.supports(n, sg) for n in sg.nodes), [n.op for n in sg.nodes if not be.supports(n, sg)]
    feeds = {i: np.random.default_rng(3).standard_normal(s).astype(np.float32) for i, s in shapes.items()}
    ref = Runtime(sg, backend="cpu").run(feeds)
    got = Runtime(sg, backend="opencl").run(feeds)
    n_int8 = 0
    for k in ref:
        if ref[k].dtype == np.int8 or (int8 and sg.tensors[k].dtype == "float32" and
                                       any(n.op == "DequantizeLinear" and n.outputs[0] == k for n in sg.nodes)):
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
            n_int8 += ref[k].dtype == np.int8
        else:
            assert rel_err(ref[k], got[k]) <= RTOL, (k, rel_err(ref[k], got[k]))
    return n_int8


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Converted models, made on first use: name -> .eim path."""
    import edge_infer
    from edge_infer.data import digits_model_path, load_digits_samples
    root = tmp_path_factory.mktemp("opencl_models")
    made = {}

    def get(name):
        if name in made:
            return made[name]
        import onnx_models as M
        path = str(root / f"{name}.eim")
        base, _, kind = name.partition(":")
        kw = {}
        if "nchw" in kind:
            kw["layout"] = "nchw"
        if "int8" in kind:
            kw.update(quantize="int8", calib=load_digits_samples()[0][:64] if base == "digits" else "random",
                      calib_samples=None if base == "digits" else 2)
        src = digits_model_path() if base == "digits" else M.randomized_light_model_path(base)
        edge_infer.convert(src, path, **kw)
        made[name] = path
        return path
    return get


@pytest.mark.slow
@pytest.mark.parametrize("name", ["digits", "digits:nchw", "digits:int8", "digits:int8,nchw"])
def test_digits_parity(models, name):
    path = models(name)
    n = _model_parity(path, int8="int8" in name, batch=5)
    if "int8" in name:
        assert n >= 8
    from edge_infer.data import load_digits_samples
    x, y = load_digits_samples()
    a = Runtime(path, backend="opencl").run(x[:64])
    b = Runtime(path, backend="cpu").run(x[:64])
    for k in b:
        if "int8" in name:
            np.testing.assert_array_equal(a[k], b[k])
        else:
            assert rel_err(b[k], a[k]) <= RTOL
    assert (a["logits"].argmax(1) == y[:64]).mean() > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "shufflenet:nchw", "squeezenet:int8",
                                  "shufflenet:int8"])
def test_zoo_parity(models, name):
    n = _model_parity(models(name), int8="int8" in name)
    if "int8" in name:
        assert n >= 30
