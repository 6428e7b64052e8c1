"""Recurrent kernels: LSTM, GRU and RNN with every ONNX attribute.

Prepare transposes and splits the weights once (``x @ W^T`` becomes ``x @ WT`` with WT
contiguous; GRU's recurrent weights split into the z/r block and the h block, biases
pre-summed where the equations add them anyway) and plans every buffer: the input
projection of all time steps (one GEMM per direction), the gate block, the state, and
a view per time step of the outputs. The steps of a direction then run in one native call
(src/recurrent.c, float32, every activation but Softplus; ``recurrent_native.py``), else
as ufuncs into those buffers.
Weights that are computed, not constants (ONNX's node tests feed them as inputs), are
packed at the start of each run instead.

``sequence_lens``: a batch row past its length keeps its state and writes zeros to Y, so
Y_h / Y_c are the last valid states (the reverse direction starts at each row's own
end), as onnxruntime does. ``activation_alpha`` / ``activation_beta`` are consumed in
the order of the activation list, each by the activations that take one (as
onnxruntime does); missing ones take onnxruntime's defaults.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import numpy as np

from ....errors import InputError
from ....ir import Node
from ....ops.sequence import RNN_GATES, rnn_dims
from ....ops.sequence import DEFAULT_ACTIVATIONS, RNN_ACTIVATIONS
from ..registry import kernel
from . import recurrent_native
from .conv import view_as
from .elementwise import negative

#: (alpha, beta) an activation takes when the attribute lists run out (onnxruntime's values)
DEFAULT_PARAMS = {"LeakyRelu": (0.01, 0.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, 0.0),
                  "ThresholdedRelu": (0.0, 0.0), "Affine": (0.0, 0.0), "ScaledTanh": (0.0, 0.0)}

Act = Callable[[np.ndarray, np.ndarray], None]


def _sigmoid(a, t):
    # 0.5 * tanh(x / 2) + 0.5: no overflow for large |x|
    np.multiply(a, 0.5, out=a)
    np.tanh(a, out=a)
    np.multiply(a, 0.5, out=a)
    np.add(a, 0.5, out=a)


def _softplus(a, t):
    np.abs(a, out=t)                     # log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
    negative(t, out=t)
    np.exp(t, out=t)
    np.log1p(t, out=t)
    np.maximum(a, 0, out=a)
    np.add(a, t, out=a)


def _softsign(a, t):
    np.abs(a, out=t)
    np.add(t, 1, out=t)
    np.divide(a, t, out=a)


def activation(name: str, alpha: float, beta: float) -> Act:
    """``name`` as an in-place function of (values, scratch of the same shape)."""
    if name == "Relu":
        return lambda a, t: np.maximum(a, 0, out=a)
    if name == "Tanh":
        return lambda a, t: np.tanh(a, out=a)
    if name == "Sigmoid":
        return _sigmoid
    if name == "Softsign":
        return _softsign
    if name == "Softplus":
        return _softplus
    if name == "Affine":
        return lambda a, t: (np.multiply(a, alpha, out=a), np.add(a, beta, out=a))
    if name == "ScaledTanh":
        return lambda a, t: (np.multiply(a, beta, out=a), np.tanh(a, out=a), np.multiply(a, alpha, out=a))
    if name == "HardSigmoid":
        return lambda a, t: (np.multiply(a, alpha, out=a), np.add(a, beta, out=a), np.clip(a, 0, 1, out=a))
    if name == "LeakyRelu":
        return lambda a, t: (np.minimum(a, 0, out=t), np.multiply(t, alpha - 1.0, out=t),
                             np.add(a, t, out=a))
    if name == "ThresholdedRelu":
        return lambda a, t: (np.greater(a, alpha, out=t, casting="unsafe"), np.multiply(a, t, out=a))
    if name == "Elu":
        return lambda a, t: (np.minimum(a, 0, out=t), np.expm1(t, out=t), np.multiply(t, alpha, out=t),
                             np.maximum(a, 0, out=a), np.add(a, t, out=a))
    raise ValueError(f"unknown activation {name!r}")


def activation_specs(node: Node, nd: int) -> List[List[Tuple[str, float, float]]]:
    """Per direction, the op's activations as (name, alpha, beta)."""
    names = node.attrs.get("activations") or DEFAULT_ACTIVATIONS[node.op] * nd
    alphas = list(node.attrs.get("activation_alpha") or [])
    betas = list(node.attrs.get("activation_beta") or [])
    specs = []
    for name in names:
        uses_alpha, uses_beta = RNN_ACTIVATIONS[name]
        alpha, beta = DEFAULT_PARAMS.get(name, (0.0, 0.0))
        if uses_alpha and alphas:
            alpha = float(alphas.pop(0))
        if uses_beta and betas:
            beta = float(betas.pop(0))
        specs.append((name, alpha, beta))
    per = len(names) // nd
    return [specs[d * per:(d + 1) * per] for d in range(nd)]


def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def _opt_out(node: Node, i: int) -> str:
    return node.outputs[i] if len(node.outputs) > i else ""


def _clipper(clip: Optional[float]) -> Callable[[np.ndarray], None]:
    if clip is None:
        return lambda a: None
    return lambda a: np.clip(a, -clip, clip, out=a)


def _time_views(arr: Optional[np.ndarray], layout: int, seq: int, d: int) -> list:
    """Per time step, the (batch, H) slice of direction ``d`` of Y (None when Y is absent)."""
    if arr is None:
        return [None] * seq
    return [arr[:, t, d] if layout else arr[t, d] for t in range(seq)]


def _state_view(arr: Optional[np.ndarray], layout: int, d: int):
    if arr is None:
        return None
    return arr[:, d] if layout else arr[d]


def _packed_weights(ctx, node: Node, nd: int, hidden: int, n_in: int, dt):
    """Workspaces for x @ WT and h @ RT (GRU: R split into the z/r block and the h block),
    the summed biases, the peepholes, and the step that fills them from W, R, B, P."""
    op = node.op
    gh = RNN_GATES[op] * hidden
    w, r = ctx.value(node.inputs[1]), ctx.value(node.inputs[2])
    b = ctx.value(_opt(node, 3))
    p = ctx.value(_opt(node, 7)) if op == "LSTM" else None
    lbr = int(node.attrs.get("linear_before_reset", 0)) if op == "GRU" else 0
    packed = {"wt": ctx.workspace((nd, n_in, gh), dt), "bias": ctx.workspace((nd, gh), dt),
              "rt": ctx.workspace((nd, hidden, 2 * hidden if op == "GRU" else gh), dt),
              "rt_h": ctx.workspace((nd, hidden, hidden), dt) if op == "GRU" else None,
              "rb_h": ctx.workspace((nd, hidden), dt) if op == "GRU" else None,        # Rbh kept apart
              "peep": ctx.workspace((nd, 3, hidden), dt) if p is not None else None}
    wt, bias, rt, rt_h, rb_h, peep = (packed[k] for k in ("wt", "bias", "rt", "rt_h", "rb_h", "peep"))

    def pack():
        np.copyto(wt, w.transpose(0, 2, 1), casting="unsafe")
        np.copyto(rt, r[:, :rt.shape[2]].transpose(0, 2, 1), casting="unsafe")
        if rt_h is not None:
            np.copyto(rt_h, r[:, 2 * hidden:].transpose(0, 2, 1), casting="unsafe")
            rb_h.fill(0)
        if b is None:
            bias.fill(0)
        else:
            np.add(b[:, :gh], b[:, gh:], out=bias, casting="unsafe")
            if lbr:                            # Rbh goes inside r * (h @ Rh^T + Rbh)
                np.copyto(bias[:, 2 * hidden:], b[:, 2 * hidden:gh], casting="unsafe")
                np.copyto(rb_h, b[:, gh + 2 * hidden:], casting="unsafe")
        if peep is not None:
            np.copyto(peep, p.reshape(nd, 3, hidden), casting="unsafe")
    names = (node.inputs[1], node.inputs[2], _opt(node, 3), _opt(node, 7))
    constant = all(v is None or v is ctx.const(n) for v, n in zip((w, r, b, p), names))
    if constant:
        pack()
    return packed, (lambda: None) if constant else pack


def _numpy_steps(ctx, one, order, ys, h, c, lens, inactive, any_inactive):
    """The time loop of one direction in numpy: ``one(xp_t)`` per step; rows past their
    sequence_lens get their state back and zeros in Y."""
    hsave = ctx.workspace(h.shape, h.dtype) if lens is not None else None
    csave = ctx.workspace(c.shape, c.dtype) if lens is not None and c is not None else None

    def run(xp_t):
        for t in order:
            masked = lens is not None and any_inactive[t]
            if masked:
                np.copyto(hsave, h)
                if c is not None:
                    np.copyto(csave, c)
            one(xp_t[t])
            if masked:
                np.copyto(h, hsave, where=inactive[t])
                if c is not None:
                    np.copyto(c, csave, where=inactive[t])
            if ys[t] is not None:
                np.copyto(ys[t], h)
                if masked:
                    np.copyto(ys[t], 0, where=inactive[t])
    return run


@kernel("LSTM", "GRU", "RNN")
def recurrent(node: Node, ctx) -> Callable[[], None]:
    op = node.op
    x = ctx.value(node.inputs[0])
    dt = x.dtype
    layout = int(node.attrs.get("layout", 0))
    seq, batch, nd, hidden = (int(v) for v in rnn_dims(node, x.shape, ctx.value(node.inputs[2]).shape))
    gh = RNN_GATES[op] * hidden
    direction = node.attrs.get("direction") or "forward"
    specs = activation_specs(node, nd)
    clip = node.attrs.get("clip")
    clip = None if clip is None else float(clip)
    lbr = int(node.attrs.get("linear_before_reset", 0)) if op == "GRU" else 0
    input_forget = int(node.attrs.get("input_forget", 0)) if op == "LSTM" else 0
    lens = ctx.value(_opt(node, 4))
    h0 = ctx.value(_opt(node, 5))
    c0 = ctx.value(_opt(node, 6)) if op == "LSTM" else None
    y = ctx.value(_opt_out(node, 0))
    y_h = ctx.value(_opt_out(node, 1))
    y_c = ctx.value(_opt_out(node, 2)) if op == "LSTM" else None
    pk, pack = _packed_weights(ctx, node, nd, hidden, x.shape[2], dt)

    rows = seq * batch
    xp = ctx.workspace((rows, gh), dt)                     # x @ WT + biases, every step at once
    x2 = view_as(x, (rows, x.shape[2]))
    xp3 = view_as(xp, (batch, seq, gh) if layout else (seq, batch, gh))
    h = ctx.workspace((batch, hidden), dt)
    c = ctx.workspace((batch, hidden), dt) if op == "LSTM" else None
    native = recurrent_native.usable(dt, specs, lens)
    if native:
        scratch = ctx.workspace((4 * hidden,), dt)
    else:
        g, tmp = ctx.workspace((batch, gh), dt), ctx.workspace((batch, gh), dt)
        xp_t = [xp3[:, t] if layout else xp3[t] for t in range(seq)]
        inactive = ctx.workspace((seq, batch, 1), np.bool_) if lens is not None else None
        any_inactive = ctx.workspace((seq,), np.bool_) if lens is not None else None
    steps_col = np.arange(seq, dtype=np.int64).reshape(seq, 1, 1)

    def check_lens():
        if lens.size and (lens.min() < 0 or lens.max() > seq):
            raise InputError(f"node {node.name!r} ({op}): sequence_lens outside [0, {seq}]")
        if not native:
            np.greater_equal(steps_col, lens.reshape(1, batch, 1), out=inactive)
            np.any(inactive, axis=(1, 2), out=any_inactive)
    lens_fed = lens is not None and ctx.const(_opt(node, 4)) is None
    if lens is not None and not lens_fed:
        check_lens()

    dirs = []
    for d, backwards in enumerate({"forward": [False], "reverse": [True],
                                   "bidirectional": [False, True]}[direction]):
        per = dict(rt=pk["rt"][d], rt_h=None if pk["rt_h"] is None else pk["rt_h"][d],
                   rb_h=None if pk["rb_h"] is None else pk["rb_h"][d],
                   peep=None if pk["peep"] is None else pk["peep"][d])
        if native:
            y_sbh = None if y is None else (y[:, :, d].transpose(1, 0, 2) if layout else y[:, d])
            call = recurrent_native.direction_call(
                op, specs[d], backwards, xp3.transpose(1, 0, 2) if layout else xp3, y_sbh, h, c, per["rt"],
                per["rt_h"], per["rb_h"], per["peep"], lens, scratch, clip, input_forget, lbr)
            steps = lambda call=call: call()        # noqa: E731  (every step in one C call)
        else:
            step = {"LSTM": _lstm_step, "GRU": _gru_step, "RNN": _rnn_step}[op]
            one = step(h=h, c=c, g=g, tmp=tmp, hidden=hidden, clip=_clipper(clip),
                       fns=[activation(*sp) for sp in specs[d]], lbr=lbr, input_forget=input_forget, **per)
            order = list(range(seq))[::-1] if backwards else list(range(seq))
            loop = _numpy_steps(ctx, one, order, _time_views(y, layout, seq, d), h, c, lens, inactive,
                                any_inactive)
            steps = lambda loop=loop: loop(xp_t)    # noqa: E731
        dirs.append((pk["wt"][d], pk["bias"][d], steps, _state_view(h0, layout, d),
                     _state_view(c0, layout, d), _state_view(y_h, layout, d), _state_view(y_c, layout, d)))

    def run():
        pack()                                 # a no-op when the weights are constants
        if lens_fed:
            check_lens()
        for wt, bias, steps, h_init, c_init, h_out, c_out in dirs:
            np.matmul(x2, wt, out=xp)
            np.add(xp, bias, out=xp)
            _init_state(h, h_init)
            if c is not None:
                _init_state(c, c_init)
            steps()
            if h_out is not None:
                np.copyto(h_out, h)
            if c_out is not None:
                np.copyto(c_out, c)
    ctx.note(node, f"{direction} {op}, {seq} steps x batch {batch}, hidden {hidden}; input projection "
                   f"one GEMM per direction, steps {'in one native call' if native else 'as numpy ufuncs'}")
    return run


def _init_state(state: np.ndarray, init: Optional[np.ndarray]) -> None:
    if init is None:
        state.fill(0)
    else:
        np.copyto(state, init)


def _lstm_step(h, c, g, tmp, hidden, clip, fns, rt, peep, input_forget, **_):
    """One LSTM step: gates i, o, f, c (ONNX's order) in ``g``."""
    H = hidden
    f_act, g_act, h_act = fns
    gi, go, gf, gc = g[:, :H], g[:, H:2 * H], g[:, 2 * H:3 * H], g[:, 3 * H:]
    t1, t2 = tmp[:, :H], tmp[:, H:2 * H]
    pi, po, pf = (None, None, None) if peep is None else (peep[0], peep[1], peep[2])

    def one(xp):
        np.matmul(h, rt, out=g)
        np.add(g, xp, out=g)
        if peep is not None:
            np.multiply(c, pi, out=t1)
            np.add(gi, t1, out=gi)
            np.multiply(c, pf, out=t1)
            np.add(gf, t1, out=gf)
        clip(gi)
        clip(gf)
        clip(gc)
        f_act(gi, t1)
        if input_forget:
            np.subtract(1, gi, out=gf)
        else:
            f_act(gf, t1)
        g_act(gc, t1)
        np.multiply(gf, c, out=c)
        np.multiply(gi, gc, out=t1)
        np.add(c, t1, out=c)
        if peep is not None:
            np.multiply(c, po, out=t1)
            np.add(go, t1, out=go)
        clip(go)
        f_act(go, t1)
        np.copyto(t2, c)
        h_act(t2, t1)
        np.multiply(go, t2, out=h)
    return one


def _gru_step(h, g, tmp, hidden, clip, fns, rt, rt_h, rb_h, lbr, **_):
    """One GRU step: z and r in ``g[:, :2H]``, the candidate in ``g[:, 2H:]``."""
    H = hidden
    f_act, g_act = fns
    zr, z, rr, hh = g[:, :2 * H], g[:, :H], g[:, H:2 * H], g[:, 2 * H:]
    t_zr, t1 = tmp[:, :2 * H], tmp[:, 2 * H:]

    def one(xp):
        np.matmul(h, rt, out=zr)
        np.add(zr, xp[:, :2 * H], out=zr)
        clip(zr)
        f_act(zr, t_zr)
        if lbr:
            np.matmul(h, rt_h, out=hh)
            np.add(hh, rb_h, out=hh)
            np.multiply(hh, rr, out=hh)
        else:
            np.multiply(rr, h, out=t1)
            np.matmul(t1, rt_h, out=hh)
        np.add(hh, xp[:, 2 * H:], out=hh)
        clip(hh)
        g_act(hh, t1)
        np.subtract(h, hh, out=t1)        # h' = hh + z * (h - hh) = (1 - z) hh + z h
        np.multiply(t1, z, out=t1)
        np.add(hh, t1, out=h)
    return one


def _rnn_step(h, g, tmp, clip, fns, rt, **_):
    """One RNN step: h' = f(x W^T + h R^T + Wb + Rb)."""
    (f_act,) = fns

    def one(xp):
        np.matmul(h, rt, out=g)
        np.add(g, xp, out=g)
        clip(g)
        f_act(g, tmp)
        np.copyto(h, g)
    return one
