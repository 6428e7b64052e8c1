"""onnxruntime's fused contrib ops (domain ``com.microsoft``), lowered into standard ops.

onnxruntime's transformer optimizer writes these into the models it saves; each becomes the
chain an exporter would have written, so every later stage (passes, int8, the kernels)
sees ops it knows:

* ``Attention`` (fused QKV projection) and ``MultiHeadAttention`` (separate 3-D query, key,
  value: self or cross attention): MatMul (+ bias), Reshape/Transpose into heads,
  ``Q K^T * scale`` (+ attention_bias) (+ mask), Softmax, ``@ V``, heads merged back.
  Masks: the raw (batch, kv_len) and (batch, q_len, kv_len) 0/1 forms and the right-padding
  lengths (batch,), as ``mask_filter_value`` where masked (the same for ``unidirectional``).
  Refused, naming the input or attribute: past/present state (decoding caches),
  ``do_rotary``, packed QKV/KV and 4-D key/value, the other mask_index encodings, the qk output;
* ``Gelu``, ``BiasGelu`` (erf GELU of x + bias), ``FastGelu`` (tanh GELU, optional bias);
* ``SkipLayerNormalization``: LayerNormalization of input + skip (+ bias), its optional
  mean / inv_std_var outputs and the sum output.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import numpy as np

from ..errors import ConversionError


def _fail(c, op: str, what: str, msg: str):
    raise ConversionError(f"node {c.node_name!r} (com.microsoft.{op}): {what}: {msg}")


def _in(node, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


def _out(node, k: int) -> str:
    return node.output[k] if len(node.output) > k else ""


def _last_dim(c, name: str) -> Optional[int]:
    v = c.const(name)
    if v is not None:
        return int(v.shape[-1])
    info = c.types.get(name)
    if info is None or not info[1] or not isinstance(info[1][-1], int):
        return None
    return int(info[1][-1])


def _dims(c, name: str) -> Optional[tuple]:
    info = c.types.get(name)
    return None if info is None else info[1]


def _tmp(c, base: str) -> str:
    return c.new_name(f"{c.node_name}_{base}")


def _op(c, op: str, inputs: List[str], attrs: Optional[dict] = None, out: str = "", base: str = "") -> str:
    out = out or _tmp(c, base or op.lower())
    c.emit(op, inputs, [out], attrs or {})
    return out


def _refuse_extras(c, node, op: str, inputs: Dict[int, str], outputs: Dict[int, str]) -> None:
    for k, what in inputs.items():
        if _in(node, k):
            _fail(c, op, f"input {k} ({what})", "is not supported (no decoding caches or packed forms)")
    for k, what in outputs.items():
        if _out(node, k):
            _fail(c, op, f"output {k} ({what})", "is not supported")


def _mask(c, op: str, mask: str, q_len, kv_len, filter_value: float, dt: str) -> Optional[str]:
    """An additive mask broadcasting onto the scores (batch, heads, q_len, kv_len), or None."""
    if not mask:
        return None
    dims = _dims(c, mask)
    if dims is None:
        _fail(c, op, "mask", "its rank is unknown")
    zero, fill = c.add_const("mask_zero", 0.0, dt), c.add_const("mask_fill", filter_value, dt)
    if len(dims) == 1:                       # right padding: valid lengths per batch row
        if not isinstance(kv_len, int):
            _fail(c, op, "mask", "length masks need a static key length")
        lens = _op(c, "Unsqueeze", [mask, c.add_const("axis1", np.array([1], np.int64))])
        keep = _op(c, "Less", [c.add_const("positions", np.arange(kv_len, dtype=np.int32)),
                               _op(c, "Cast", [lens], {"to": "int32"})])
    elif len(dims) in (2, 3):
        as_int = _op(c, "Cast", [mask], {"to": "int32"})
        keep = _op(c, "Greater", [as_int, c.add_const("zero_i", np.int32(0))])
    else:
        _fail(c, op, "mask", f"rank {len(dims)}: only (batch,), (batch, kv_len) and (batch, q_len, kv_len)")
    add = _op(c, "Where", [keep, zero, fill], base="mask_add")
    axes = [1, 2] if len(dims) <= 2 else [1]
    return _op(c, "Unsqueeze", [add, c.add_const("mask_axes", np.array(axes, np.int64))])


def _causal(c, op: str, q_len, kv_len, filter_value: float, dt: str) -> str:
    if not (isinstance(q_len, int) and isinstance(kv_len, int)):
        _fail(c, op, "attribute 'unidirectional'", "needs static sequence lengths")
    j = np.arange(kv_len)[None, :]
    i = np.arange(q_len)[:, None] + (kv_len - q_len)
    return c.add_const("causal", np.where(j > i, filter_value, 0.0)[None, None], dt)


def _heads(c, x: str, n: int, perm: List[int]) -> str:
    r = _op(c, "Reshape", [x, c.add_const("heads_shape", np.array([0, 0, n, -1], np.int64))])
    return _op(c, "Transpose", [r], {"perm": perm})


def _attend(c, op: str, q: str, k: str, v: str, out: str, n: int, head: int, attrs: dict,
            q_len, kv_len, mask: str, bias: str, dt: str) -> None:
    """Scaled dot-product attention of 3-D (batch, len, hidden) q, k, v into ``out``; the
    constants in ``dt`` (the model's float type)."""
    scale = float(attrs.get("scale") or 1.0 / math.sqrt(head))
    fill = float(attrs.get("mask_filter_value", -10000.0))
    scores = _op(c, "MatMul", [_heads(c, q, n, [0, 2, 1, 3]), _heads(c, k, n, [0, 2, 3, 1])])
    scores = _op(c, "Mul", [scores, c.add_const("scale", scale, dt)])
    if bias:
        scores = _op(c, "Add", [scores, bias])
    additive = _mask(c, op, mask, q_len, kv_len, fill, dt)
    if int(attrs.get("unidirectional", 0)):
        causal = _causal(c, op, q_len, kv_len, fill, dt)
        additive = causal if additive is None else _op(c, "Min", [additive, causal])
    if additive is not None:
        scores = _op(c, "Add", [scores, additive])
    probs = _op(c, "Softmax", [scores], {"axis": -1})
    ctx = _op(c, "MatMul", [probs, _heads(c, v, n, [0, 2, 1, 3])])
    ctx = _op(c, "Transpose", [ctx], {"perm": [0, 2, 1, 3]})
    _op(c, "Reshape", [ctx, c.add_const("merge_shape", np.array([0, 0, -1], np.int64))], out=out)


def _num_heads(c, op: str, attrs: dict, *hidden: Optional[int]) -> int:
    n = attrs.get("num_heads")
    if not isinstance(n, int) or n < 1:
        _fail(c, op, "attribute 'num_heads'", f"{n!r} is not a positive integer")
    for h in hidden:
        if h is None or h % n:
            _fail(c, op, "attribute 'num_heads'", f"hidden size {h} is unknown or not a multiple of {n}")
    return n


def _seq_len(c, name: str):
    dims = _dims(c, name)
    return dims[1] if dims is not None and len(dims) == 3 else None


def lower_attention(c, node, attrs: dict) -> None:
    op = "Attention"
    _refuse_extras(c, node, op, {4: "past", 6: "past_sequence_length"}, {1: "present"})
    for a in ("do_rotary", "past_present_share_buffer"):
        if attrs.get(a, 0):
            _fail(c, op, f"attribute {a!r}", "is not supported")
    w = c.const(node.input[1])
    if w is None or w.ndim != 2:
        _fail(c, op, "input 1 (weights)", "must be a constant (input_hidden, q + k + v hidden) matrix")
    sizes = attrs.get("qkv_hidden_sizes") or [w.shape[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != w.shape[1] or sizes[0] != sizes[1]:
        _fail(c, op, "attribute 'qkv_hidden_sizes'", f"{sizes} does not split {w.shape[1]} as q = k, v")
    n = _num_heads(c, op, attrs, sizes[0], sizes[2])
    qkv = _op(c, "MatMul", [node.input[0], node.input[1]])
    if _in(node, 2):
        qkv = _op(c, "Add", [qkv, node.input[2]])
    q, k, v = (_tmp(c, s) for s in "qkv")
    c.emit("Split", [qkv, c.add_const("qkv_sizes", np.array(sizes, np.int64))], [q, k, v], {"axis": -1})
    s = _seq_len(c, node.input[0])
    _attend(c, op, q, k, v, node.output[0], n, sizes[0] // n, attrs, s, s, _in(node, 3), _in(node, 5),
            c.elem_dtype(node.input[0]))


def lower_multi_head_attention(c, node, attrs: dict) -> None:
    op = "MultiHeadAttention"
    _refuse_extras(c, node, op, {6: "past_key", 7: "past_value", 8: "past_sequence_length",
                                 9: "cache_indirection"}, {1: "present_key", 2: "present_value", 3: "qk"})
    q, k, v = node.input[0], _in(node, 1), _in(node, 2)
    for name, what in ((q, "query"), (k, "key"), (v, "value")):
        dims = _dims(c, name) if name else None
        if dims is None or len(dims) != 3:
            _fail(c, op, what, "must be a 3-D (batch, length, hidden) tensor (packed and 4-D forms are "
                               "not supported)")
    d, dv = _last_dim(c, q), _last_dim(c, v)
    n = _num_heads(c, op, attrs, d, dv)
    if _in(node, 3):
        bq, bk, bv = (_tmp(c, f"bias_{s}") for s in "qkv")
        c.emit("Split", [node.input[3], c.add_const("bias_sizes", np.array([d, d, dv], np.int64))],
               [bq, bk, bv], {"axis": 0})
        q, k, v = _op(c, "Add", [q, bq]), _op(c, "Add", [k, bk]), _op(c, "Add", [v, bv])
    _attend(c, op, q, k, v, node.output[0], n, d // n, attrs, _seq_len(c, node.input[0]),
            _seq_len(c, node.input[1]), _in(node, 4), _in(node, 5), c.elem_dtype(node.input[0]))


def lower_gelu(c, node, attrs: dict) -> None:
    x = node.input[0]
    if node.op_type in ("BiasGelu", "FastGelu") and _in(node, 1):
        x = _op(c, "Add", [x, node.input[1]])
    c.emit("Gelu", [x], [node.output[0]], {"approximate": "tanh" if node.op_type == "FastGelu" else "none"})


def lower_skip_layer_norm(c, node, attrs: dict) -> None:
    s = _op(c, "Add", [node.input[0], node.input[1]], out="" if len(node.input) > 4 and node.input[4]
            else _out(node, 3))
    if _in(node, 4):
        s = _op(c, "Add", [s, node.input[4]], out=_out(node, 3))
    ins = [s, node.input[2]] + ([node.input[3]] if _in(node, 3) else [])
    outs = [node.output[0], _out(node, 1), _out(node, 2)]
    while not outs[-1]:
        outs.pop()
    c.emit("LayerNormalization", ins, outs, {"axis": -1, "epsilon": float(attrs.get("epsilon", 1e-12))})


LOWERINGS = {"Attention": lower_attention, "MultiHeadAttention": lower_multi_head_attention,
             "Gelu": lower_gelu, "BiasGelu": lower_gelu, "FastGelu": lower_gelu,
             "SkipLayerNormalization": lower_skip_layer_norm}
