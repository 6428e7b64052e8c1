"""ONNX ``Attention`` (opset 23/24, what torch.onnx writes for scaled_dot_product_attention)
lowered into the chain an exporter writes by hand, so the passes, int8 and the kernels see
MatMul / Softmax they know:

* 3-D Q/K/V (with ``q_num_heads`` / ``kv_num_heads``) split into heads, or 4-D as they are;
* past_key / past_value concatenated in front of K / V (the present outputs);
* grouped-query attention: each K/V head repeated for its group of query heads;
* ``Q K^T * scale`` (default 1/sqrt(head size)), ``softcap * tanh(. / softcap)``, then the
  mask (boolean: -inf where False; float: added) and ``is_causal`` (bottom-right aligned:
  query i sees key j <= i + past length), Softmax; a fully masked row gives zeros, not NaN;
* ``qk_matmul_output`` at the stage ``qk_matmul_output_mode`` names (0: scaled QK, 1: after
  softcap, 2: after the mask, 3: after Softmax).

* ``nonpad_kv_seqlen`` (an external cache): keys past each row's count masked, the causal
  frontier shifted to ``nonpad - q_len``; local windows (opset 25) around the same frontier;
* an attn_mask shorter than the keys padded with -inf.

Refused, naming it: positional masks (causal, windows, nonpad) over symbolic lengths,
past_key together with nonpad_kv_seqlen.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ConversionError


def _fail(c, what: str, msg: str):
    raise ConversionError(f"node {c.node_name!r} (Attention): {what}: {msg}")


def _op(c, op, inputs, attrs=None, out="", base=""):
    out = out or c.new_name(f"{c.node_name}_{base or op.lower()}")
    c.emit(op, inputs, [out], attrs or {})
    return out


def _shape(c, name):
    info = c.types.get(name)
    return None if info is None else info[1]


def _static(c, name, k):
    s = _shape(c, name)
    if s is None or not isinstance(s[k], int):
        _fail(c, f"input {name!r}", "needs a static shape here")
    return s[k]


def _heads(c, x, n):
    r = _op(c, "Reshape", [x, c.add_const("heads_shape", np.array([0, 0, n, -1], np.int64))])
    return _op(c, "Transpose", [r], {"perm": [0, 2, 1, 3]})


def _repeat_heads(c, x, kv_heads, rep, head):
    """(B, kv, L, d) -> (B, kv * rep, L, d), each head repeated ``rep`` times in a row."""
    u = _op(c, "Unsqueeze", [x, c.add_const("axis2", np.array([2], np.int64))])
    e = _op(c, "Expand", [u, c.add_const("rep_shape", np.array([1, 1, rep, 1, 1], np.int64))])
    return _op(c, "Reshape", [e, c.add_const("merged", np.array([0, kv_heads * rep, -1, head], np.int64))])


def norm_attention(c, node, attrs, given, schema) -> None:
    ins = list(node.input) + [""] * (7 - len(node.input))
    outs = list(node.output) + [""] * (4 - len(node.output))
    q, k, v, mask, past_k, past_v, nonpad = ins[:7]
    if nonpad and past_k:
        _fail(c, "input 6 (nonpad_kv_seqlen)", "goes with an external cache, not with past_key")
    windows = (int(given.get("left_window_size", -1)), int(given.get("right_window_size", -1)))
    if bool(past_k) != bool(past_v):
        _fail(c, "inputs 4/5", "past_key and past_value go together")
    dt = c.elem_dtype(q)
    const = lambda base, v: c.add_const(base, np.asarray(v, dt))  # noqa: E731
    rank = c.rank(q)
    if rank == 3:
        qn, kvn = given.get("q_num_heads"), given.get("kv_num_heads")
        if not (isinstance(qn, int) and isinstance(kvn, int) and qn > 0 and kvn > 0):
            _fail(c, "attributes 'q_num_heads'/'kv_num_heads'", "required with 3-D inputs")
        head, head_v = _static(c, q, 2) // qn, _static(c, v, 2) // kvn
        qh, kh, vh = _heads(c, q, qn), _heads(c, k, kvn), _heads(c, v, kvn)
    elif rank == 4:
        qn, kvn = _static(c, q, 1), _static(c, k, 1)
        head, head_v = _static(c, q, 3), _static(c, v, 3)
        qh, kh, vh = q, k, v
    else:
        _fail(c, "input 0 (Q)", f"rank {rank}; expected 3 or 4")
    if qn % kvn:
        _fail(c, "heads", f"{qn} query heads are not a multiple of {kvn} key/value heads")
    past_len = 0
    if past_k:
        past_len = _static(c, past_k, 2)
        kh = _op(c, "Concat", [past_k, kh], {"axis": 2}, out=outs[1])
        vh = _op(c, "Concat", [past_v, vh], {"axis": 2}, out=outs[2])
    else:
        for o, src in ((outs[1], kh), (outs[2], vh)):
            if o:
                _op(c, "Identity", [src], out=o)
    if qn != kvn:
        kh = _repeat_heads(c, kh, kvn, qn // kvn, head)
        vh = _repeat_heads(c, vh, kvn, qn // kvn, head_v)
    scale = attrs.get("scale")
    scale = float(scale) if scale else 1.0 / math.sqrt(head)
    mode = int(attrs.get("qk_matmul_output_mode", 0))
    stages = {}
    kt = _op(c, "Transpose", [kh], {"perm": [0, 1, 3, 2]})
    scores = _op(c, "Mul", [_op(c, "MatMul", [qh, kt]), const("scale", scale)])
    stages[0] = scores
    softcap = float(attrs.get("softcap", 0.0) or 0.0)
    if softcap > 0:
        t = _op(c, "Tanh", [_op(c, "Div", [scores, const("softcap", softcap)])])
        scores = _op(c, "Mul", [t, const("softcap", softcap)])
    stages[1] = scores
    masked = False
    s_q = _shape(c, q)[1 if rank == 3 else 2] if _shape(c, q) else None
    kv = _shape(c, k)[1 if rank == 3 else 2] if _shape(c, k) else None
    total = kv + past_len if isinstance(kv, int) else None
    if mask:
        if c.elem_dtype(mask, dt) == "bool":
            mask = _op(c, "Where", [mask, const("zero", 0.0), const("neg_inf", -np.inf)])
        m = _shape(c, ins[3])
        if m and isinstance(m[-1], int) and isinstance(total, int) and m[-1] not in (1, total):
            # a shorter mask is padded to the key length with -inf
            pads = [0] * (2 * len(m) - 1) + [total - m[-1]]
            pads = c.add_const("pads", np.array(pads, np.int64))
            mask = _op(c, "Pad", [mask, pads, const("neg_inf", -np.inf)], {"mode": "constant"})
        scores = _op(c, "Add", [scores, mask])
        masked = True
    causal = int(attrs.get("is_causal", 0))
    if nonpad or causal or windows != (-1, -1):
        if not (isinstance(s_q, int) and isinstance(total, int)):
            _fail(c, "is_causal / windows / nonpad_kv_seqlen", "need static sequence lengths")
        bias = _position_bias(c, s_q, total, past_len, nonpad, causal, windows, const)
        scores = _op(c, "Add", [scores, bias])
        masked = True
    stages[2] = scores
    probs = _op(c, "Softmax", [scores], {"axis": -1})
    if masked:          # a row with every key masked: exp(-inf - -inf) is NaN; ONNX wants zeros
        probs = _op(c, "Where", [_op(c, "IsNaN", [probs]), const("zero", 0.0), probs])
    stages[3] = probs
    if outs[3]:
        if mode not in stages:
            _fail(c, "attribute 'qk_matmul_output_mode'", f"{mode} is not 0..3")
        _op(c, "Identity", [stages[mode]], out=outs[3])
    y = _op(c, "MatMul", [probs, vh])
    if rank == 3:
        y = _op(c, "Transpose", [y], {"perm": [0, 2, 1, 3]})
        _op(c, "Reshape", [y, c.add_const("merge_shape", np.array([0, 0, -1], np.int64))], out=outs[0])
    else:
        _op(c, "Identity", [y], out=outs[0])


def _position_bias(c, s_q, total, past_len, nonpad, causal, windows, const):
    """Additive bias from positions: query i sits at i + offset (offset: the past length, or
    nonpad[b] - S for an external cache, whose keys j >= nonpad[b] are padding); causal keeps
    keys j <= i + offset, windows keep offset - left <= j - i <= offset + right."""
    d = np.arange(total)[None, :] - np.arange(s_q)[:, None]                  # j - i
    left, right = windows
    bounds = []                                  # (op, offset shift): d <= off + r, d >= off - l
    if causal:
        bounds.append(("LessOrEqual", 0))
    if right >= 0:
        bounds.append(("LessOrEqual", right))
    if left >= 0:
        bounds.append(("GreaterOrEqual", -left))
    if not nonpad:
        keep = np.ones((s_q, total), bool)
        for op, shift in bounds:
            keep &= d <= past_len + shift if op == "LessOrEqual" else d >= past_len + shift
        return const("positions", np.where(keep, 0.0, -np.inf))
    n = _op(c, "Reshape", [_op(c, "Cast", [nonpad], {"to": "int64"}),
                           c.add_const("per_batch", np.array([-1, 1, 1, 1], np.int64))])
    keep = _op(c, "Less", [c.add_const("key_pos", np.arange(total, dtype=np.int64)), n])     # (B,1,1,T)
    offset = _op(c, "Sub", [n, c.add_const("s_q", np.int64(s_q))])
    for op, shift in bounds:
        edge = _op(c, "Add", [offset, c.add_const("shift", np.int64(shift))])
        keep = _op(c, "And", [keep, _op(c, op, [c.add_const("j_minus_i", d.astype(np.int64)), edge])])
    return _op(c, "Where", [keep, const("zero", 0.0), const("neg_inf", -np.inf)])


NORMALIZERS = {"Attention": norm_attention}
