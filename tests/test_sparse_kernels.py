"""Sparse kernels equal the dense kernels on the same pruned weights: fp32 within 1e-6
(relative to the output's scale), int8 bit-exact; both the native and the numpy path."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from edge_infer.backends.cpu import CpuBackend
from edge_infer.backends.cpu.kernels import sparse as sk
from edge_infer.ir import Graph, Node
from edge_infer.sparse.encodings import encode_bcsr, encode_bitmask, encode_csr

ENCODERS = {
    "csr8": lambda w: encode_csr(w, np.uint8),
    "csr16": lambda w: encode_csr(w, np.uint16),
    "bitmask": encode_bitmask,
    "bcsr1x4": lambda w: encode_bcsr(w, (1, 4), np.uint8),
    "bcsr4x1": lambda w: encode_bcsr(w, (4, 1), np.uint16),
}


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    monkeypatch.setenv("EDGE_INFER_SPARSE", "always")
    if request.param == "numpy":
        monkeypatch.setattr(sk, "_native", lambda: None)
    elif sk._native() is None:
        pytest.skip("native library not built (or has no ei_sparse_mm)")
    return request.param


def pruned(rng, shape, sparsity, dtype, block=None):
    if dtype == "int8":
        w = rng.integers(-127, 128, shape).astype(np.int8)
    else:
        w = rng.standard_normal(shape).astype(np.float32)
    m = w.reshape(shape[0], -1)
    if block and m.shape[0] % block[0] == 0 and m.shape[1] % block[1] == 0:
        keep = rng.random((m.shape[0] // block[0], m.shape[1] // block[1])) >= sparsity
        keep = np.repeat(np.repeat(keep, block[0], 0), block[1], 1)
    else:
        keep = rng.random(m.shape) >= sparsity
    m[~keep] = 0
    return w


def q(scale, zp=0, axis=None):
    s = np.atleast_1d(np.asarray(scale, np.float32)).tolist()
    z = [int(zp)] * len(s) if np.ndim(zp) == 0 else list(zp)
    return {"scale": s, "zero_point": z, "axis": axis}


def one_node(op, x_shape, w, y_shape, attrs, dtype, bias=None, extra_inputs=(), rng=None):
    """A graph of one node: input x, constant weight w (input 1), optional bias."""
    g = Graph(op)
    int8 = dtype == "int8"
    waxis = attrs.pop("_waxis", 0)
    attrs.pop("_gemm_kn", None)
    g.add_tensor("x", dtype, x_shape, quant=q(0.05, 3) if int8 else None)
    g.add_tensor("w", w.dtype.name, w.shape, data=w,
                 quant=q(rng.uniform(0.002, 0.02, w.shape[waxis]), 0, waxis) if int8 else None)
    inputs = ["x", "w"]
    if bias is not None:
        g.add_tensor("b", bias.dtype.name, bias.shape, data=bias)
        inputs.append("b")
    for name, shape in extra_inputs:
        g.add_tensor(name, dtype, shape, quant=q(0.07, -5) if int8 else None)
        inputs.append(name)
        g.inputs.append(name)
    g.add_tensor("y", dtype, y_shape, quant=q(0.3, -2) if int8 else None)
    g.nodes.append(Node(op, inputs, ["y"], attrs, "n"))
    g.inputs.insert(0, "x")
    g.outputs = ["y"]
    return g


def run_both(g, encoder, feeds):
    """(sparse-kernel output, dense-kernel output, note) for graph g whose weight is dense."""
    dense = CpuBackend().prepare(g)
    want = dense.run(feeds)["y"]
    gs = g.copy()
    gs.tensors["w"].data = encoder(g.tensors["w"].data)
    ex = CpuBackend().prepare(gs, threads=2)          # pixel tiles split over two threads
    got = ex.run(feeds)["y"]
    return got, want, ex.notes.get("n", "")


def check(got, want, dtype, note):
    assert "sparse" in note and "densified" not in note, note
    if dtype == "int8":
        np.testing.assert_array_equal(got, want)
    else:
        scale = max(float(np.abs(want).max()), 1e-30)
        assert float(np.abs(got - want).max()) <= 1e-6 * scale, note


def feeds_for(g, rng):
    out = {}
    for name in g.inputs:
        t = g.tensors[name]
        out[name] = (rng.integers(-128, 128, t.shape).astype(np.int8) if t.dtype == "int8"
                     else rng.standard_normal(t.shape).astype(np.float32))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 2), c=st.sampled_from([4, 8, 13, 32]), m=st.sampled_from([4, 12, 16, 33]),
       hw=st.sampled_from([(1, 1), (3, 5), (7, 7), (9, 8)]), sparsity=st.sampled_from([0.5, 0.8, 0.95]),
       enc=st.sampled_from(sorted(ENCODERS)), dtype=st.sampled_from(["float32", "int8"]),
       layout=st.sampled_from(["NCHW", "NHWC"]), fused=st.booleans(), seed=st.integers(0, 999))
def test_pointwise_conv(path, n, c, m, hw, sparsity, enc, dtype, layout, fused, seed):
    rng = np.random.default_rng(seed)
    w = pruned(rng, (m, c, 1, 1), sparsity, dtype, block=(4, 1) if "4x1" in enc else (1, 4))
    if ENCODERS[enc](w) is None:
        return
    last = layout == "NHWC"
    xs = (n, *hw, c) if last else (n, c, *hw)
    ys = (n, *hw, m) if last else (n, m, *hw)
    bias = (rng.integers(-5000, 5000, m).astype(np.int32) if dtype == "int8"
            else rng.standard_normal(m).astype(np.float32))
    attrs = {"kernel_shape": [1, 1]}
    if last:
        attrs["data_layout"] = "NHWC"
    op, extra = "Conv", ()
    if fused:
        op = "FusedConv"
        attrs.update(activation="Relu", activation_params=[])
        extra = [("z", ys)]
    g = one_node(op, xs, w, ys, attrs, dtype, bias, extra, rng)
    got, want, note = run_both(g, ENCODERS[enc], feeds_for(g, rng))
    check(got, want, dtype, note)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.sampled_from([1, 3, 17]), k=st.sampled_from([8, 20, 64]), nout=st.sampled_from([4, 12, 40]),
       sparsity=st.sampled_from([0.5, 0.8, 0.95]), enc=st.sampled_from(sorted(ENCODERS)),
       dtype=st.sampled_from(["float32", "int8"]), op=st.sampled_from(["Gemm", "GemmT", "MatMul", "FusedGemm",
                                                                        "FusedMatMul"]),
       seed=st.integers(0, 999))
def test_gemm_and_matmul(path, rows, k, nout, sparsity, enc, dtype, op, seed):
    rng = np.random.default_rng(seed)
    trans_b = op in ("GemmT", "FusedGemm")
    wshape = (nout, k) if trans_b else (k, nout)
    w = pruned(rng, wshape, sparsity, dtype, block=(4, 1) if "4x1" in enc else (1, 4))
    if ENCODERS[enc](w) is None:
        return
    attrs = {}
    if op.startswith("Gemm") or op == "FusedGemm":
        attrs["transB"] = int(trans_b)
        attrs["_waxis"] = 0 if trans_b else 1
        attrs["_gemm_kn"] = not trans_b
    else:
        attrs["_waxis"] = 1
        attrs["_gemm_kn"] = True
    if op.startswith("Fused"):
        attrs.update(activation="Relu", activation_params=[])
    real_op = "Gemm" if op == "GemmT" else op
    bias = None
    if real_op != "MatMul":
        bias = (rng.integers(-3000, 3000, nout).astype(np.int32) if dtype == "int8"
                else rng.standard_normal(nout).astype(np.float32))
    x_shape = (rows, k) if real_op != "FusedMatMul" else (2, rows, k)
    y_shape = x_shape[:-1] + (nout,)
    g = one_node(real_op, x_shape, w, y_shape, attrs, dtype, bias, (), rng)
    got, want, note = run_both(g, ENCODERS[enc], feeds_for(g, rng))
    check(got, want, dtype, note)


def test_dense_kernel_is_chosen_below_the_crossover(monkeypatch):
    monkeypatch.setenv("EDGE_INFER_SPARSE", "auto")
    rng = np.random.default_rng(0)
    w = pruned(rng, (16, 64, 1, 1), 0.3, "float32")
    g = one_node("Conv", (1, 64, 4, 4), w, (1, 16, 4, 4), {"kernel_shape": [1, 1]}, "float32")
    got, want, note = run_both(g, encode_csr, feeds_for(g, rng))
    assert "densified" in note and "crossover" in note, note
    np.testing.assert_array_equal(got, want)
    # few inputs per output: the dense kernel whatever the sparsity
    w = pruned(rng, (16, 24, 1, 1), 0.9, "float32")
    g = one_node("Conv", (1, 24, 4, 4), w, (1, 16, 4, 4), {"kernel_shape": [1, 1]}, "float32")
    got, want, note = run_both(g, encode_csr, feeds_for(g, rng))
    assert "densified" in note and "min_k" in note, note
    np.testing.assert_array_equal(got, want)


def test_non_pointwise_conv_with_a_sparse_weight_runs_dense(monkeypatch):
    monkeypatch.setenv("EDGE_INFER_SPARSE", "always")
    rng = np.random.default_rng(1)
    w = pruned(rng, (8, 4, 3, 3), 0.8, "float32")
    g = one_node("Conv", (1, 4, 6, 6), w, (1, 8, 4, 4), {"kernel_shape": [3, 3]}, "float32")
    got, want, note = run_both(g, encode_csr, feeds_for(g, rng))
    assert "densified" in note
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("attrs, c_shape", [({"transB": 1, "alpha": 0.5, "beta": 2.0}, (24,)),
                                            ({"transB": 1, "transA": 1}, (3, 24)),
                                            ({"transB": 0, "beta": 0.5}, (1, 24))])
def test_gemm_alpha_beta_trans(path, attrs, c_shape):
    rng = np.random.default_rng(7)
    ta, tb = attrs.get("transA", 0), attrs.get("transB", 0)
    w = pruned(rng, (24, 64) if tb else (64, 24), 0.85, "float32")
    g = Graph("gemm")
    g.add_tensor("x", "float32", (64, 3) if ta else (3, 64))
    g.add_tensor("w", "float32", w.shape, data=w)
    g.add_tensor("c", "float32", c_shape, data=rng.standard_normal(c_shape).astype(np.float32))
    g.add_tensor("y", "float32", (3, 24))
    g.nodes.append(Node("Gemm", ["x", "w", "c"], ["y"], dict(attrs), "n"))
    g.inputs, g.outputs = ["x"], ["y"]
    for enc in ("csr8", "bitmask", "bcsr4x1"):
        got, want, note = run_both(g, ENCODERS[enc], feeds_for(g, rng))
        check(got, want, "float32", note)
