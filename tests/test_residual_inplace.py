"""A conv whose fused epilogue adds a residual may write its output over that residual when
the residual has no later reader (conv_native.residual_in_place, memory/arena.py): the
planner aliases them, and the result still equals onnxruntime's, on every path the kernel
may take (one K block, Winograd, and the forced alias past one K block, where the kernel
refuses it and works on a copy)."""
import numpy as np
import pytest

import edge_infer
from edge_infer.backends.cpu import executor as cpu_executor
from edge_infer.backends.cpu import native
from edge_infer.backends.cpu.kernels import conv_native
from edge_infer.runtime import Runtime

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(c: int, k: int, hw: int = 12, seed: int = 0):
    """x -> A = Conv1x1(x), B = Conv1x1(x) (c channels); Sigmoid(Conv_kxk(B) + A): the Add is
    fused into the conv as its residual, A's last reader."""
    rng = np.random.default_rng(seed)
    m = 24
    inits, nodes = [], []

    def conv(name, x, cin, cout, ks, out):
        w = (rng.standard_normal((cout, cin, ks, ks)) / np.sqrt(cin * ks * ks)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32) * 0.1
        inits.extend([numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")])
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [out], name=name,
                                      pads=[ks // 2] * 4, kernel_shape=[ks, ks]))
    conv("ca", "x", 8, m, 1, "A")
    conv("cb", "x", 8, c, 1, "B")
    conv("cc", "B", c, m, k, "C")
    nodes.append(helper.make_node("Add", ["C", "A"], ["S"], name="add"))
    nodes.append(helper.make_node("Sigmoid", ["S"], ["y"], name="sig"))
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, hw, hw])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(tmp_path, c, k):
    model = _model(c, k)
    src, eim = str(tmp_path / "m.onnx"), str(tmp_path / "m.eim")
    onnx.save(model, src)
    edge_infer.convert(src, eim, verify_samples=1)
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    rt = Runtime(eim, backend="cpu")
    got = rt.run(x)["y"]
    ex = rt.plan({"x": x.shape})
    fused = [n for n in ex.nodes if n.op == "FusedConv" and len(n.inputs) > 3 and n.inputs[3]]
    assert len(fused) == 1, [n.op for n in ex.nodes]
    aliased = ex.arena_plan.aliases.get(fused[0].outputs[0]) == fused[0].inputs[3]
    return got, want, aliased


@pytest.mark.skipif(native.lib is None, reason="the alias is planned for the native conv only")
@pytest.mark.parametrize("c,k", [(conv_native.K_BLOCK, 1), (16, 3), (32, 3)])
def test_conv_writes_over_its_dying_residual(tmp_path, c, k):
    """K = c*k*k within one K block (the largest, K_BLOCK, included): planned in place, and
    the same output as onnxruntime."""
    got, want, aliased = _run(tmp_path, c, k)
    assert aliased
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(native.lib is None, reason="the alias is planned for the native conv only")
def test_residual_past_one_k_block_is_not_aliased(tmp_path):
    got, want, aliased = _run(tmp_path, conv_native.K_BLOCK + 1, 1)
    assert not aliased
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c,k", [(conv_native.K_BLOCK + 1, 1), (48, 3)])
def test_forced_alias_the_kernel_cannot_take_reads_a_copy(tmp_path, monkeypatch, c, k):
    """Planned over the residual although its kernel would store partial sums first (more
    than one K block; or no native library): the kernel refuses the alias and the numpy
    conv adds a copy of the residual taken before the conv writes (fused.fused_conv)."""
    monkeypatch.setattr(cpu_executor, "residual_in_place", lambda n, g: (3,) if n.op == "FusedConv" else ())
    got, want, aliased = _run(tmp_path, c, k)
    assert aliased
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_int8_conv_writes_over_its_dying_residual_bit_exact(tmp_path, monkeypatch):
    """int8: the residual's bytes taken over (the kernels sum in their own accumulators and
    read each Z element right before storing that element of y): the same int8 output, bit for
    bit, as the plan that keeps Z apart."""
    model = _model(16, 3)
    src, eim = str(tmp_path / "m.onnx"), str(tmp_path / "q.eim")
    onnx.save(model, src)
    rng = np.random.default_rng(3)
    calib = [{"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)} for _ in range(4)]
    edge_infer.convert(src, eim, quantize="int8", calib=calib, verify_samples=1, allow_drift=True)
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    rt = Runtime(eim, backend="cpu")
    got = rt.run(x)["y"]
    ex = rt.plan({"x": x.shape})
    fused = [n for n in ex.nodes if n.op == "FusedConv" and len(n.inputs) > 3 and n.inputs[3]]
    assert len(fused) == 1 and ex.graph.tensors[fused[0].outputs[0]].dtype == "int8"
    assert ex.arena_plan.aliases.get(fused[0].outputs[0]) == fused[0].inputs[3]
    monkeypatch.setattr(cpu_executor, "residual_in_place", lambda n, g: ())
    apart = Runtime(eim, backend="cpu")
    assert not apart.plan({"x": x.shape}).arena_plan.aliases.get(fused[0].outputs[0])
    np.testing.assert_array_equal(got, apart.run(x)["y"])
