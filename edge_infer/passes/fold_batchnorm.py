"""Fold inference-mode BatchNormalization away.

BN(y) = y * s + t with s = gamma / sqrt(var + eps), t = beta - mean * s (per channel).

* After a Conv / ConvTranspose / Gemm (or a MatMul with a constant 2-D B, whose
  2-D output's channel axis is the last) whose output only the BN reads:
  W' = W * s along the output channel, b' = b * s + t (a bias is created when the
  producer had none). Folding is done in float64 and cast once.
* Any other BN with constant statistics (after a Concat, an Add, a pool, a
  pre-activation BN, or a conv whose output is also read elsewhere) becomes
  ``Mul(x, s) -> Add(., t)`` with s, t of shape (C, 1, ..., 1): bit for bit what
  the BN kernel computes (it precomputes the same float32 s and t), at the same
  cost (two in-place passes), but made of ops the later passes understand, so it
  may fold further (a following Conv without padding absorbs it via
  fold_scale_bias) and no BatchNormalization op survives optimization.

BNs in training mode, with computed statistics, or with unknown input rank stay.
A BN in NHWC (``data_layout``, from the layout pass) folds into a conv of the same
layout, or becomes Mul+Add with (C,) constants (channels last).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .rewrite import Rewriter, channels_last, const, fold_affine_into, new_const, static_shape

FOLD_INTO = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def bn_scale_shift(graph: Graph, node: Node):
    """(scale, shift) float64 vectors of an inference BN with constant statistics, else None."""
    if node.attrs.get("training_mode", 0) or any(o for o in node.outputs[1:]) or len(node.inputs) < 5:
        return None
    vals = [const(graph, n) for n in node.inputs[1:5]]
    if any(v is None or v.dtype.kind != "f" for v in vals):
        return None
    gamma, beta, mean, var = (v.astype(np.float64).reshape(-1) for v in vals)
    if not (gamma.size == beta.size == mean.size == var.size):
        return None
    eps = float(node.attrs.get("epsilon", 1e-5))
    with np.errstate(all="ignore"):
        scale = gamma / np.sqrt(var + eps)
        shift = beta - mean * scale
    if not (np.all(np.isfinite(scale)) and np.all(np.isfinite(shift))):
        return None
    return scale, shift


def fold_batchnorm(graph: Graph) -> int:
    rw = Rewriter(graph)
    for bn in list(graph.nodes):
        if bn.op != "BatchNormalization" or not rw.alive(bn):
            continue
        ss = bn_scale_shift(graph, bn)
        if ss is None:
            continue
        scale, shift = ss
        x, y = bn.inputs[0], bn.outputs[0]
        if graph.tensors[x].dtype not in ("float32", "float64"):
            continue
        p = rw.producer(x, *FOLD_INTO)
        same_layout = p is not None and channels_last(p) == channels_last(bn)
        if p is not None and same_layout and rw.private(x, bn) \
                and (p.op in ("Conv", "ConvTranspose") or len(static_shape(graph, x) or ()) == 2):
            if fold_affine_into(graph, p, scale, shift):
                p.outputs[0] = y
                rw.replace([bn], [], anchor=bn)
                continue
        # standalone: Mul + Add with the BN kernel's own float32 scale and shift
        shape = static_shape(graph, x)
        if shape is None or len(shape) < 2:
            continue
        c = scale.size
        axis = len(shape) - 1 if channels_last(bn) else 1
        if isinstance(shape[axis], int) and shape[axis] != c:
            continue
        dt = graph.tensors[x].dtype
        cshape = (c,) if channels_last(bn) else (c,) + (1,) * (len(shape) - 2)
        s_name = new_const(graph, f"{bn.inputs[1]}_bnscale", scale.astype(dt).reshape(cshape))
        t_name = new_const(graph, f"{bn.inputs[2]}_bnshift", shift.astype(dt).reshape(cshape))
        mid = graph.unique_name(f"{y}_scaled")
        graph.add_tensor(mid, dt, shape)
        mul = Node("Mul", [x, s_name], [mid], {}, graph.unique_node_name(f"{bn.name}_mul"))
        add = Node("Add", [mid, t_name], [y], {}, bn.name)
        rw.replace([bn], [mul, add], anchor=bn)
    return rw.commit()
