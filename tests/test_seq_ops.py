"""Transformer and recurrent ops against onnxruntime: LayerNormalization,
GroupNormalization, Einsum, Gelu, Erf, LSTM, GRU, RNN on randomized attributes (every
LSTM/GRU/RNN attribute: direction, layout, sequence_lens, initial states, peepholes,
activation lists with alpha/beta, clip, input_forget, linear_before_reset, omitted
outputs), their validation, and the recognition of exporter-decomposed LayerNorm.

Whole models (a ViT-style block stack, a CRNN) are in test_seq_models.py.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from onnx_models import ort_run  # noqa: E402
from seq_model_builders import decomposed_layer_norm  # noqa: E402

from edge_infer.errors import ConversionError, UnsupportedOpError  # noqa: E402
from edge_infer.frontends.onnx import load_onnx  # noqa: E402
from edge_infer.ops import validate_graph  # noqa: E402
from edge_infer.ops.sequence import RNN_ACTIVATIONS  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def make_model(nodes, inputs, outputs, inits=(), opset=21):
    """A model from nodes; ``inputs``: (name, array) fed at run time; ``inits``: (name, array)."""
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
          for n, a in inputs]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    g = helper.make_graph(nodes, "g", vi, outs, [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def check_parity(model, feeds, rtol=RTOL, atol=ATOL):
    """Our CPU backend (after schema validation) against onnxruntime, every output."""
    graph = load_onnx(model)
    validate_graph(graph, "convert")
    ours = Runtime(graph, backend="cpu").run(feeds)
    ref = ort_run(model, feeds)
    for name, want in ref.items():
        got = ours[name]
        assert got.shape == want.shape, (name, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)
    return ours


# -- normalization, Einsum, Gelu ---------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_layer_norm_random_attributes(seed):
    rng = np.random.default_rng(seed)
    r = int(rng.integers(2, 5))
    shape = tuple(int(d) for d in rng.integers(1, 6, r))
    axis = int(rng.integers(-r, r))
    norm = shape[axis % r:]
    eps = float(rng.choice([1e-5, 1e-6, 1e-3]))
    dt = np.float16 if seed >= 6 else np.float32       # float16 data, float32 statistics (stash_type 1)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dt)
    scale = rng.standard_normal(norm).astype(dt)
    bias = rng.standard_normal(norm).astype(dt)
    with_bias, stats = bool(rng.integers(2)), bool(rng.integers(2))
    outs = ["Y"] + (["Mean", "InvStdDev"] if stats else [])
    node = helper.make_node("LayerNormalization", ["X", "S"] + (["B"] if with_bias else []), outs,
                            axis=axis, epsilon=eps)
    # scale as a graph input half of the time: the kernel broadcasts a computed one per run
    feeds = {"X": x}
    inits = [("B", bias)] if with_bias else []
    if seed % 2:
        feeds["S"] = scale
    else:
        inits.append(("S", scale))
    model = make_model([node], list(feeds.items()), outs, inits, opset=17)
    if dt == np.float16:
        model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    check_parity(model, feeds, *((2e-3, 2e-3) if dt == np.float16 else ()))


@pytest.mark.parametrize("opset,const_scale", [(21, True), (21, False), (18, True), (18, False)])
def test_group_norm(opset, const_scale):
    rng = np.random.default_rng(opset + const_scale)
    n, c, g = 2, 6, 3
    x = rng.standard_normal((n, c, 4, 5)).astype(np.float32)
    k = c if opset >= 21 else g
    scale, bias = rng.standard_normal(k).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    node = helper.make_node("GroupNormalization", ["X", "S", "B"], ["Y"], num_groups=g, epsilon=1e-4)
    feeds = {"X": x}
    inits = [("S", scale), ("B", bias)]
    if not const_scale:
        feeds.update(S=scale, B=bias)
        inits = []
    model = make_model([node], list(feeds.items()), ["Y"], inits, opset=opset)
    if opset == 18:
        # onnxruntime dropped GroupNormalization-18: its per-group scale, by hand
        xg = x.reshape(n, g, -1).astype(np.float64)
        y = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-4)
        want = (y * scale[None, :, None] + bias[None, :, None]).reshape(x.shape)
        graph = load_onnx(model)
        validate_graph(graph, "convert")
        got = Runtime(graph, backend="cpu").run(feeds)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        check_parity(model, feeds)


EINSUM_CASES = [
    ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]),      # attention scores
    ("bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 5)]),      # attention context
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]),
    ("bid,jd->bij", [(2, 4, 5), (3, 5)]),                   # linear layer, weights (out, in)
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij,jk", [(3, 4), (4, 5)]),                            # implicit output
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),        # bilinear, three operands
    ("i,i", [(7,), (7,)]),
    ("b i d , b j d -> b i j", [(2, 3, 4), (2, 5, 4)]),     # spaces
    ("ii->i", [(4, 4)]),                                    # a diagonal
]


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum(eq, shapes):
    rng = np.random.default_rng(len(eq))
    names = [f"x{k}" for k in range(len(shapes))]
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    model = make_model([helper.make_node("Einsum", names, ["Y"], equation=eq)], list(feeds.items()),
                       ["Y"], opset=12)
    check_parity(model, feeds)


@pytest.mark.parametrize("eq,n,why", [
    ("ij,jk->ik,", 2, "only letters"), ("ij->ii", 1, "repeats"), ("ij->k", 1, "no operand"),
    ("ijk->ik", 1, "rank"), ("ij,jk,kl->il", 2, "operand"), ("__import__('os')", 1, "only letters")])
def test_einsum_equation_is_validated(eq, n, why):
    x = np.ones((3, 3), np.float32)
    feeds = [(f"x{k}", x) for k in range(n)]
    model = make_model([helper.make_node("Einsum", [f for f, _ in feeds], ["Y"], equation=eq)],
                       feeds, ["Y"], opset=12)
    with pytest.raises(ConversionError, match=why):
        validate_graph(load_onnx(model), "convert")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_erf(approximate):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 33)) * 3).astype(np.float32)
    nodes = [helper.make_node("Gelu", ["X"], ["Y"], approximate=approximate),
             helper.make_node("Erf", ["X"], ["E"])]
    check_parity(make_model(nodes, [("X", x)], ["Y", "E"], opset=20), {"X": x})


# -- LSTM, GRU, RNN ----------------------------------------------------------------

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _activation_attrs(rng, op, nd):
    """A random activation list with exactly the alpha/beta values it consumes."""
    per = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    names = [str(rng.choice(sorted(RNN_ACTIVATIONS))) for _ in range(per * nd)]
    alphas = [float(rng.uniform(0.5, 1.5)) for a in names if RNN_ACTIVATIONS[a][0]]
    betas = [float(rng.uniform(-0.5, 0.5)) for a in names if RNN_ACTIVATIONS[a][1]]
    attrs = {"activations": names}
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    return attrs


def recurrent_case(op, seed):
    """(model, feeds) of one randomized LSTM/GRU/RNN node."""
    rng = np.random.default_rng(seed)
    direction = ["forward", "reverse", "bidirectional"][seed % 3]
    nd = 2 if direction == "bidirectional" else 1
    layout = int(rng.integers(2))
    seq, batch, n_in, hidden = (int(v) for v in rng.integers(1, 6, 4))
    g = GATES[op]
    f32 = lambda *s: (rng.standard_normal(s) * 0.6).astype(np.float32)  # noqa: E731
    x = f32(*((batch, seq, n_in) if layout else (seq, batch, n_in)))
    attrs = dict(hidden_size=hidden, direction=direction, layout=layout)
    if seed % 4 == 1:
        attrs.update(_activation_attrs(rng, op, nd))
    if rng.integers(2):
        attrs["clip"] = float(rng.uniform(0.3, 2.0))
    if op == "LSTM" and rng.integers(2):
        attrs["input_forget"] = 1
    if op == "GRU":
        attrs["linear_before_reset"] = int(rng.integers(2))
    state = (batch, nd, hidden) if layout else (nd, batch, hidden)
    values = {"X": x, "W": f32(nd, g * hidden, n_in), "R": f32(nd, g * hidden, hidden)}
    optional = {"B": f32(nd, 2 * g * hidden),
                "sequence_lens": rng.integers(1, seq + 1, batch).astype(np.int32),
                "initial_h": f32(*state)}
    if op == "LSTM":
        optional.update(initial_c=f32(*state), P=f32(nd, 3 * hidden))
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][:8 if op == "LSTM" else 6]
    ins = []
    for name in order:
        if name in values or rng.integers(3):          # each optional input present 2/3 of the time
            values.setdefault(name, optional.get(name))
            ins.append(name)
        else:
            ins.append("")
    while not ins[-1]:
        ins.pop()
    n_out = 3 if op == "LSTM" else 2
    outs = [o if rng.integers(3) else "" for o in ["Y", "Y_h", "Y_c"][:n_out]]
    if not any(outs):
        outs[1] = "Y_h"
    while not outs[-1]:
        outs.pop()
    # weights as initializers (as exporters write them) or fed (as ONNX's node tests do)
    fed = {"X"} | ({"W", "R", "B"} if seed % 5 == 2 else set()) | ({"sequence_lens"} if seed % 2 else set())

    def build(layout_attr, batch_major):
        vals = dict(values)
        if batch_major != layout:          # the same data in the other layout
            for k in ("X", "initial_h", "initial_c"):
                if k in vals and vals[k] is not None:
                    vals[k] = np.ascontiguousarray(vals[k].transpose(1, 0, 2))
        node = helper.make_node(op, ins, outs, **dict(attrs, layout=layout_attr))
        feeds = {n: vals[n] for n in ins if n and n in fed}
        inits = [(n, vals[n]) for n in ins if n and n not in fed]
        return make_model([node], list(feeds.items()), [o for o in outs if o], inits, opset=14), feeds
    return build(layout, layout), build(0, 0)


def _to_batch_major(name, arr):
    return arr.transpose(2, 0, 1, 3) if name == "Y" else arr.transpose(1, 0, 2)


@pytest.mark.parametrize("use_native", [True, False], ids=["native", "numpy"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("seed", range(16))
def test_recurrent_random_attributes(op, seed, use_native, monkeypatch):
    """Both the native recurrence (src/recurrent.c) and the numpy step loop."""
    from edge_infer.backends.cpu import native
    if use_native and native.lib is None:
        pytest.skip("native kernels not built")
    if not use_native:
        monkeypatch.setattr(native, "lib", None)
    from edge_infer.backends.cpu.kernels import recurrent_native
    calls, direction_call = [], recurrent_native.direction_call
    monkeypatch.setattr(recurrent_native, "direction_call",
                        lambda *a, **k: calls.append(a[0]) or direction_call(*a, **k))
    (model, feeds), (ref_model, ref_feeds) = recurrent_case(op, seed)
    graph = load_onnx(model)
    validate_graph(graph, "convert")
    ours = Runtime(graph, backend="cpu").run(feeds)
    softplus = "Softplus" in str(model.graph.node[0])
    assert bool(calls) == (use_native and not softplus), "native path taken: " + str(bool(calls))
    # onnxruntime has no layout=1 (batch-major): it runs the same data sequence-major
    layout = helper.get_attribute_value(next(a for a in model.graph.node[0].attribute if a.name == "layout"))
    ref = ort_run(ref_model, ref_feeds)
    assert set(ref) == set(ours)
    for name, want in ref.items():
        want = _to_batch_major(name, want) if layout else want
        assert ours[name].shape == want.shape, (name, ours[name].shape, want.shape)
        np.testing.assert_allclose(ours[name], want, rtol=RTOL, atol=ATOL, err_msg=name)


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


def test_recurrent_cases_cover_every_attribute():
    """The randomized cases above do exercise each attribute and optional input."""
    seen = set()
    for op in ("LSTM", "GRU", "RNN"):
        for seed in range(16):
            (model, _), _ = recurrent_case(op, seed)
            node = model.graph.node[0]
            seen |= {f"{op}.{a.name}={_text(helper.get_attribute_value(a))}" if a.name in
                     ("direction", "layout", "input_forget", "linear_before_reset") else f"{op}.{a.name}"
                     for a in node.attribute}
            seen |= {f"{op}.in{k}" for k, i in enumerate(node.input) if i}
            seen |= {f"{op}.out{k}" for k, o in enumerate(node.output) if o}
    for op, extra in (("LSTM", ["input_forget=1", "in6", "in7", "out2"]), ("GRU", ["linear_before_reset=0",
                      "linear_before_reset=1"]), ("RNN", [])):
        for a in ["direction=forward", "direction=reverse", "direction=bidirectional", "layout=0",
                  "layout=1", "clip", "activations", "activation_alpha", "in3", "in4", "in5",
                  "out0", "out1"] + extra:
            assert f"{op}.{a}" in seen, f"{op}.{a} never drawn"


def test_recurrent_validation_names_the_problem():
    x = np.zeros((2, 1, 3), np.float32)
    bad = [(dict(hidden_size=4, activations=["Sigmoid", "Tanh"]), "activations"),
           (dict(hidden_size=4, activations=["Sigmoid", "Tanh", "Swish"]), "Swish"),
           (dict(hidden_size=5), "W")]
    for attrs, what in bad:
        node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], **attrs)
        model = make_model([node], [("X", x)], ["Y"], [("W", np.zeros((1, 16, 3), np.float32)),
                                                      ("R", np.zeros((1, 16, 4), np.float32))], opset=14)
        with pytest.raises(ConversionError, match=what):
            validate_graph(load_onnx(model), "convert")


def test_fed_sequence_lens_are_checked_per_run():
    (model, feeds), _ = recurrent_case("GRU", 1)     # odd seeds: sequence_lens fed
    if "sequence_lens" not in feeds:
        pytest.skip("this draw has no sequence_lens")
    rt = Runtime(load_onnx(model), backend="cpu")
    feeds = dict(feeds, sequence_lens=np.full_like(feeds["sequence_lens"], 99))
    with pytest.raises(Exception, match="sequence_lens"):
        rt.run(feeds)


# -- ONNX Attention (opset 23: torch.onnx's scaled_dot_product_attention) ----------------

@pytest.mark.parametrize("rank,gqa,mask,causal,past", [
    (3, False, None, 1, False), (3, True, "bool", 0, False), (4, False, "float", 0, True),
    (4, True, None, 1, True), (4, False, "bool", 1, False)])
def test_onnx_attention_op(rank, gqa, mask, causal, past):
    rng = np.random.default_rng(rank * 10 + gqa)
    batch, s, kv, heads, head = 2, 4, 6 if not causal else 4, 4, 8
    kv_heads = 2 if gqa else heads
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    if rank == 3:
        feeds = {"Q": f32(batch, s, heads * head), "K": f32(batch, kv, kv_heads * head),
                 "V": f32(batch, kv, kv_heads * head)}
        attrs = dict(q_num_heads=heads, kv_num_heads=kv_heads)
    else:
        feeds = {"Q": f32(batch, heads, s, head), "K": f32(batch, kv_heads, kv, head),
                 "V": f32(batch, kv_heads, kv, head)}
        attrs = {}
    total = kv + (3 if past else 0)
    ins, outs = ["Q", "K", "V", ""], ["Y"]
    if mask == "bool":
        m = rng.random((batch, 1, s, total)) > 0.3
        m[..., 0] = True
        feeds["M"], ins[3] = m, "M"
    elif mask == "float":
        feeds["M"], ins[3] = f32(1, 1, s, total), "M"
    if past:
        feeds.update(PK=f32(batch, kv_heads, 3, head), PV=f32(batch, kv_heads, 3, head))
        ins += ["PK", "PV"]
        outs += ["present_key", "present_value"]
    while not ins[-1]:
        ins.pop()
    node = helper.make_node("Attention", ins, outs, is_causal=causal, **attrs)
    check_parity(make_model([node], list(feeds.items()), outs, opset=23), feeds)


# -- onnxruntime contrib ops (com.microsoft), lowered by the frontend --------------------

def contrib_model(nodes, inputs, outputs, inits=()):
    model = make_model(nodes, inputs, outputs, inits, opset=17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def _mask_value(kind, rng, batch, q_len, kv_len):
    if kind == "lengths":
        return rng.integers(1, kv_len + 1, batch).astype(np.int32)
    shape = (batch, kv_len) if kind == "2d" else (batch, q_len, kv_len)
    m = (rng.random(shape) > 0.3).astype(np.int32)
    m[..., 0] = 1                       # no fully masked row (both sides then average garbage)
    return m


@pytest.mark.parametrize("bias,mask,uni,sizes,scale,attn_bias", [
    (True, None, 0, None, None, False), (False, "2d", 0, None, 0.3, False),
    (True, "3d", 0, [16, 16, 8], None, True), (True, "lengths", 1, None, None, False),
    (True, None, 1, None, None, True)])
def test_contrib_attention(bias, mask, uni, sizes, scale, attn_bias):
    rng = np.random.default_rng(int(uni) + 2 * bool(mask))
    batch, seq, d_in, heads = 2, 5, 12, 4
    total = sum(sizes) if sizes else 48
    x = rng.standard_normal((batch, seq, d_in)).astype(np.float32)
    inits = [("W", (rng.standard_normal((d_in, total)) * 0.3).astype(np.float32))]
    ins = ["X", "W", ""]
    feeds = {"X": x}
    if bias:
        inits.append(("B", rng.standard_normal(total).astype(np.float32)))
        ins[2] = "B"
    if mask or attn_bias:
        ins.append("M" if mask else "")
    if mask:
        feeds["M"] = _mask_value(mask, rng, batch, seq, seq)
    if attn_bias:
        ins += ["", "AB"]
        feeds["AB"] = rng.standard_normal((1, heads, seq, seq)).astype(np.float32)
    attrs = dict(num_heads=heads, unidirectional=uni)
    if sizes:
        attrs["qkv_hidden_sizes"] = sizes
    if scale:
        attrs["scale"] = scale
    node = helper.make_node("Attention", ins, ["Y"], domain="com.microsoft", **attrs)
    check_parity(contrib_model([node], list(feeds.items()), ["Y"], inits), feeds)


@pytest.mark.parametrize("kv_len,bias,mask,uni,attn_bias", [
    (5, True, None, 0, False), (7, False, "2d", 0, True), (7, True, "lengths", 0, False),
    (5, True, "3d", 1, False)])
def test_contrib_multi_head_attention(kv_len, bias, mask, uni, attn_bias):
    rng = np.random.default_rng(kv_len + int(bias))
    batch, seq, d, dv, heads = 2, 5, 16, 8, 2
    feeds = {"Q": rng.standard_normal((batch, seq, d)).astype(np.float32),
             "K": rng.standard_normal((batch, kv_len, d)).astype(np.float32),
             "V": rng.standard_normal((batch, kv_len, dv)).astype(np.float32)}
    ins, inits = ["Q", "K", "V", ""], []
    if bias:
        inits.append(("B", rng.standard_normal(2 * d + dv).astype(np.float32)))
        ins[3] = "B"
    if mask or attn_bias:
        ins.append("M" if mask else "")
    if mask:
        feeds["M"] = _mask_value(mask, rng, batch, seq, kv_len)
    if attn_bias:
        ins.append("AB")
        feeds["AB"] = rng.standard_normal((batch, 1, seq, kv_len)).astype(np.float32)
    node = helper.make_node("MultiHeadAttention", ins, ["Y"], domain="com.microsoft", num_heads=heads,
                            unidirectional=uni)
    check_parity(contrib_model([node], list(feeds.items()), ["Y"], inits), feeds)


def test_contrib_multi_head_attention_float16():
    """A half-precision model (what onnxruntime's optimizer often saves): the lowering's
    constants (scale, mask fill, causal bias) take the model's dtype."""
    rng = np.random.default_rng(9)
    feeds = {n: rng.standard_normal((2, 5, 16)).astype(np.float16) for n in "QKV"}
    m = (rng.random((2, 5)) > 0.3).astype(np.int32)
    m[:, 0] = 1
    feeds["M"] = m
    node = helper.make_node("MultiHeadAttention", ["Q", "K", "V", "", "M"], ["Y"], domain="com.microsoft",
                            num_heads=2, unidirectional=1)
    model = contrib_model([node], list(feeds.items()), ["Y"])
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    check_parity(model, feeds, 2e-3, 2e-3)


@pytest.mark.parametrize("op,bias", [("Gelu", False), ("BiasGelu", True), ("FastGelu", True),
                                     ("FastGelu", False)])
def test_contrib_gelus(op, bias):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 16)) * 2).astype(np.float32)
    inits = [("B", rng.standard_normal(16).astype(np.float32))] if bias else []
    node = helper.make_node(op, ["X"] + (["B"] if bias else []), ["Y"], domain="com.microsoft")
    check_parity(contrib_model([node], [("X", x)], ["Y"], inits), {"X": x})


@pytest.mark.parametrize("beta,bias,extra_outputs", [(True, True, True), (False, False, False),
                                                     (True, False, True)])
def test_contrib_skip_layer_norm(beta, bias, extra_outputs):
    rng = np.random.default_rng(2)
    x, skip = (rng.standard_normal((2, 4, 8)).astype(np.float32) for _ in range(2))
    inits = [("G", rng.standard_normal(8).astype(np.float32))]
    ins = ["X", "S", "G", "BE" if beta else "", "BI" if bias else ""]
    inits += [("BE", rng.standard_normal(8).astype(np.float32))] if beta else []
    inits += [("BI", rng.standard_normal(8).astype(np.float32))] if bias else []
    while not ins[-1]:
        ins.pop()
    outs = ["Y", "", "", "SUM"] if extra_outputs else ["Y"]
    node = helper.make_node("SkipLayerNormalization", ins, outs, domain="com.microsoft", epsilon=1e-5)
    check_parity(contrib_model([node], [("X", x), ("S", skip)], [o for o in outs if o], inits),
                 {"X": x, "S": skip})


def test_contrib_refusals_name_the_problem():
    x = np.zeros((1, 4, 8), np.float32)
    w = [("W", np.zeros((8, 24), np.float32))]
    past = helper.make_node("Attention", ["X", "W", "", "", "P"], ["Y"], domain="com.microsoft", num_heads=2)
    model = contrib_model([past], [("X", x), ("P", np.zeros((2, 1, 2, 3, 4), np.float32))], ["Y"], w)
    with pytest.raises(ConversionError, match="past"):
        load_onnx(model)
    other = helper.make_node("EmbedLayerNormalization", ["X"], ["Y"], domain="com.microsoft")
    with pytest.raises(UnsupportedOpError, match="com.microsoft.EmbedLayerNormalization.*contrib"):
        load_onnx(contrib_model([other], [("X", x)], ["Y"]))


# -- recognition of exporter-decomposed LayerNorm ---------------------------------------

@pytest.mark.parametrize("k,square,divide,affine", [
    (1, "Pow", "Div", True), (2, "Mul", "Div", True), (1, "Pow", "Reciprocal", False),
    (1, "Mul", "Reciprocal", True)])
def test_decomposed_layer_norm_becomes_one_op(k, square, divide, affine):
    from edge_infer.convert import optimize_verified
    rng = np.random.default_rng(k)
    shape = (2, 5, 8)
    x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
    nodes, inits = decomposed_layer_norm("X", "Y", shape, k, rng, square, divide, affine)
    model = make_model(nodes, [("X", x)], ["Y"], inits, opset=18)
    graph, _ = optimize_verified(load_onnx(model), 3)
    ops = [n.op for n in graph.nodes]
    assert ops == ["LayerNormalization"], ops
    assert graph.nodes[0].attrs["axis"] == 3 - k
    got = Runtime(graph, backend="cpu").run({"X": x})["Y"]
    np.testing.assert_allclose(got, ort_run(model, {"X": x})["Y"], rtol=1e-5, atol=1e-5)


def test_layer_norm_chain_over_a_middle_axis_is_left_alone():
    """ReduceMean over axis 1 of 3 is no LayerNorm (its axes are not the trailing ones)."""
    from edge_infer.convert import optimize_verified
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    nodes, inits = decomposed_layer_norm("X", "Y", (2, 5, 8), 1, rng, affine=False)
    inits[0] = ("ln_axes", np.array([1], np.int64))
    model = make_model(nodes, [("X", x)], ["Y"], inits, opset=18)
    graph, _ = optimize_verified(load_onnx(model), 3)
    assert "LayerNormalization" not in [n.op for n in graph.nodes]
    got = Runtime(graph, backend="cpu").run({"X": x})["Y"]
    np.testing.assert_allclose(got, ort_run(model, {"X": x})["Y"], rtol=1e-5, atol=1e-5)


def test_ops_command_lists_the_new_ops(capsys):
    import json

    from edge_infer.cli import main
    assert main(["ops", "--json"]) == 0
    cpu = json.loads(capsys.readouterr().out)["cpu"]["ops"]
    for op in ("LayerNormalization", "GroupNormalization", "Einsum", "LSTM", "GRU", "RNN", "Gelu", "Erf"):
        assert op in cpu, op
    assert main(["ops"]) == 0                  # the text form also names the lowered ops
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("ONNX import lowers") and "Attention" in last
    assert "com.microsoft.MultiHeadAttention" in last


def test_cost_counts_recurrent_and_einsum_flops():
    from edge_infer.ir.cost import graph_cost
    (model, _), _ = recurrent_case("LSTM", 2)
    x = next(i for i in model.graph.input if i.name == "X").type.tensor_type.shape.dim
    node = model.graph.node[0]
    hidden = helper.get_attribute_value(next(a for a in node.attribute if a.name == "hidden_size"))
    nd = 2 if b"bidirectional" == helper.get_attribute_value(
        next(a for a in node.attribute if a.name == "direction")) else 1
    gemm = 2 * x[0].dim_value * x[1].dim_value * nd * 4 * hidden * (x[2].dim_value + hidden)
    assert graph_cost(load_onnx(model))["flops"] >= gemm
    feeds = [("a", np.ones((2, 3, 4), np.float32)), ("b", np.ones((2, 4, 5), np.float32))]
    model = make_model([helper.make_node("Einsum", ["a", "b"], ["Y"], equation="bij,bjk->bik")], feeds, ["Y"],
                       opset=12)
    assert graph_cost(load_onnx(model))["flops"] == 2 * 2 * 3 * 4 * 5


HOSTILE = [-1048576, -1, 0, 1, 3, 2 ** 62, 1.5, float("nan"), "x", "bidirectional", [], ["Tanh"], None, True]


def _hostile_graphs():
    rng = np.random.default_rng(0)
    out = []
    for op, seed in (("LSTM", 3), ("GRU", 1), ("RNN", 2)):
        (m, feeds), _ = recurrent_case(op, seed)
        out.append((m, feeds))
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x4 = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    out.append((make_model([helper.make_node("LayerNormalization", ["X", "S", "B"], ["Y", "M", "I"])],
                           [("X", x)], ["Y", "M", "I"], [("S", ones), ("B", zeros)], opset=17), {"X": x}))
    out.append((make_model([helper.make_node("GroupNormalization", ["X", "S", "B"], ["Y"], num_groups=2)],
                           [("X", x4)], ["Y"], [("S", ones), ("B", zeros)], opset=21), {"X": x4}))
    xt = np.ascontiguousarray(x.transpose(0, 2, 1))
    out.append((make_model([helper.make_node("Einsum", ["A", "B"], ["Y"], equation="bij,bjk->bik")],
                           [("A", x), ("B", xt)], ["Y"], opset=12), {"A": x, "B": xt}))
    return out


def test_hostile_attributes_give_edge_infer_errors():
    """Every attribute of the new ops set to hostile values (as a crafted artifact could):
    the load-time validation or the runtime refuses with an edge_infer error, never a raw
    exception from numpy or the kernels."""
    from edge_infer.errors import EdgeInferError
    raw = []
    for model, feeds in _hostile_graphs():
        g0 = load_onnx(model)
        extra = {"hidden_size", "activation_alpha", "stash_type", "data_layout"}
        keys = sorted(set(g0.nodes[0].attrs) | extra)
        for key in keys:
            for value in HOSTILE:
                g = g0.copy()
                g.nodes[0].attrs = dict(g.nodes[0].attrs, **{key: value})
                try:
                    validate_graph(g, "load")
                    Runtime(g, backend="cpu").run(feeds)
                except EdgeInferError:
                    pass
                except Exception as e:  # noqa: BLE001  (what the test is looking for)
                    raw.append(f"{g.nodes[0].op}.{key}={value!r}: {type(e).__name__}: {e}"[:200])
    assert not raw, "\n".join(raw[:10])
