"""ONNX normalizers of the recurrent and normalization ops (registered into
``onnx.NORMALIZERS``):

* LSTM / GRU / RNN: ``activations`` always explicit, its entries for each direction (RNN's
  schema default has two names whatever the direction); an omitted Y (first output "")
  gets a fresh name, so the IR node always has its first output (Y_h / Y_c stay optional);
* GroupNormalization before opset 21 had one scale and bias per *group*; opset 21 (the
  IR's) has them per channel: a constant is repeated here, a computed one is expanded by
  Reshape/Expand/Reshape nodes.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from ..errors import ConversionError
from ..ops.sequence import DEFAULT_ACTIVATIONS


def _norm_recurrent(c, node, attrs, given, schema) -> None:
    if "activations" not in given:
        # RNN's schema default lists two names whatever the direction: spell out the op's own
        nd = 2 if attrs.get("direction") == "bidirectional" else 1
        attrs = dict(attrs, activations=DEFAULT_ACTIVATIONS[node.op_type] * nd)
    outs = list(node.output) or [""]
    if not outs[0]:
        outs[0] = c.new_name(f"{c.node_name}_Y")
    c.emit(node.op_type, list(node.input), outs, attrs, schema)


def _norm_group_norm(c, node, attrs, given, schema) -> None:
    ins = list(node.input)
    if schema.since_version >= 21:
        c.emit("GroupNormalization", ins, list(node.output), attrs, schema)
        return
    g = int(attrs.get("num_groups", 0))
    xs = c.static_shape(ins[0])
    if xs is None or len(xs) < 2 or g <= 0 or xs[1] % g:
        raise ConversionError(f"node {c.node_name!r} (GroupNormalization, opset {c.opset}): per-group "
                              "scale/bias need a static channel count divisible by num_groups")
    per = xs[1] // g
    for k in (1, 2):
        v = c.const(ins[k])
        if v is not None:
            if v.size != g:
                raise ConversionError(f"node {c.node_name!r} (GroupNormalization): input {k} has "
                                      f"{v.size} values for {g} groups")
            ins[k] = c.add_const("per_channel", np.repeat(v.reshape(-1), per))
            continue
        col = c.new_name(f"{c.node_name}_group_col{k}")
        grid = c.new_name(f"{c.node_name}_group_grid{k}")
        flat = c.new_name(f"{c.node_name}_per_channel{k}")
        c.emit("Reshape", [ins[k], c.add_const("col_shape", [g, 1], "int64")], [col], {})
        c.emit("Expand", [col, c.add_const("grid_shape", [g, per], "int64")], [grid], {})
        c.emit("Reshape", [grid, c.add_const("flat_shape", [g * per], "int64")], [flat], {})
        ins[k] = flat
    attrs = {k: v for k, v in attrs.items() if k != "stash_type"}
    c.emit("GroupNormalization", ins, list(node.output), attrs)


NORMALIZERS: Dict[str, object] = {
    "LSTM": _norm_recurrent, "GRU": _norm_recurrent, "RNN": _norm_recurrent,
    "GroupNormalization": _norm_group_norm,
}
