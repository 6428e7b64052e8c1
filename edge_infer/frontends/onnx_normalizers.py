"""ONNX frontend, per-op normalizers: old opset forms and attributes that newer opsets moved to
inputs become the IR's (latest-opset) form. ``NORMALIZERS`` maps an ONNX op to its normalizer;
``frontends/onnx.py`` (the converter) calls them."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

import numpy as np

from ..errors import ConversionError
from ..ir.graph import DTYPES
from .onnx_common import IR_OPSET, ONNX_TO_DTYPE, Converter as _Converter, contiguous as _contiguous, schema as _schema


# -- per-op normalizers --------------------------------------------------------
# Each takes (converter, onnx node, attrs with the model-opset defaults filled,
# attrs explicitly given, schema at the model's opset) and emits IR nodes.

Normalizer = Callable[["_Converter", object, Dict[str, object], Dict[str, object], object], None]


def _ins(node) -> List[str]:
    return list(node.input)


def _outs(node) -> List[str]:
    return list(node.output)


def _norm_default(c: _Converter, node, attrs, given, schema) -> None:
    for k, v in attrs.items():
        if not isinstance(v, (int, float, str, list)):
            raise ConversionError(f"node {c.node_name!r} ({node.op_type}): tensor attribute "
                                  f"{k!r} is not supported")
    c.emit(node.op_type, _ins(node), _outs(node), attrs, schema)


def _pad_inputs(inputs: List[str], n: int) -> List[str]:
    return inputs + [""] * (n - len(inputs))


def _trim_inputs(inputs: List[str]) -> List[str]:
    while inputs and not inputs[-1]:
        inputs.pop()
    return inputs


def _norm_constant(c: _Converter, node, attrs, given, schema) -> None:
    out = node.output[0]
    what = f"constant {out!r}"
    if "value" in given:
        arr = c._tensor_array(given["value"], what)
    elif "sparse_value" in given:
        arr = c._sparse_array(given["sparse_value"], what)
    elif "value_float" in given:
        arr = np.array(given["value_float"], np.float32)
    elif "value_floats" in given:
        arr = np.array(given["value_floats"], np.float32)
    elif "value_int" in given:
        arr = np.array(given["value_int"], np.int64)
    elif "value_ints" in given:
        arr = np.array(given["value_ints"], np.int64)
    elif "value_string" in given or "value_strings" in given:
        raise ConversionError(f"{what}: dtype STRING is not supported (supported: {', '.join(DTYPES)})")
    else:
        raise ConversionError(f"node {c.node_name!r} (Constant) has no value attribute")
    if out in c.graph.tensors:
        raise ConversionError(f"{c.label}: malformed model: tensor {out!r} is produced twice")
    c.graph.add_tensor(out, arr.dtype.name, arr.shape, _contiguous(arr))


def _norm_constant_of_shape(c: _Converter, node, attrs, given, schema) -> None:
    value, dtype = 0.0, "float32"
    t = given.get("value")
    if t is not None:
        arr = c._tensor_array(t, f"node {c.node_name!r} (ConstantOfShape) value of {node.output[0]!r}")
        if arr.size != 1:
            raise ConversionError(f"node {c.node_name!r} (ConstantOfShape): value must hold one element")
        dtype = arr.dtype.name
        value = arr.reshape(-1)[0].item()
    c.emit("ConstantOfShape", _ins(node), _outs(node), {"value": value, "dtype": dtype},
           final=True)


def _norm_clip(c: _Converter, node, attrs, given, schema) -> None:
    ins = _ins(node)
    if c.opset < 11:
        dt = c.elem_dtype(ins[0])
        lo = c.add_const("min", given["min"], dt) if "min" in given else ""
        hi = c.add_const("max", given["max"], dt) if "max" in given else ""
        ins = _trim_inputs([ins[0], lo, hi])
    c.emit("Clip", ins, _outs(node), {})


def _norm_pad(c: _Converter, node, attrs, given, schema) -> None:
    ins = _ins(node)
    mode = attrs.get("mode", "constant")
    if c.opset < 11:
        pads = c.add_const("pads", attrs["pads"], "int64")
        value = ""
        if mode == "constant" and float(attrs.get("value", 0.0)) != 0.0:
            value = c.add_const("value", attrs["value"], c.elem_dtype(ins[0]))
        ins = _trim_inputs([ins[0], pads, value])
    c.emit("Pad", ins, _outs(node), {"mode": mode})


def _norm_split(c: _Converter, node, attrs, given, schema) -> None:
    ins = _ins(node)
    out = {"axis": attrs.get("axis", 0)}
    if c.opset < 13 and "split" in given:
        ins = [ins[0], c.add_const("split", given["split"], "int64")]
    if "num_outputs" in given:
        out["num_outputs"] = given["num_outputs"]
    elif len(ins) < 2 or not ins[1]:
        # without sizes, old opsets split into len(outputs) equal parts
        out["num_outputs"] = len(node.output)
    c.emit("Split", ins, _outs(node), out)


#: the opset at which each reduce op's ``axes`` became an input
REDUCE_AXES_INPUT = {op: 18 for op in (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}
REDUCE_AXES_INPUT["ReduceSum"] = 13


def _norm_reduce(c: _Converter, node, attrs, given, schema) -> None:
    op = node.op_type
    ins = _ins(node)
    attrs = dict(attrs)
    if c.opset < REDUCE_AXES_INPUT[op]:
        axes = attrs.pop("axes", None)
        ins = [ins[0]] + ([c.add_const("axes", axes, "int64")] if axes is not None else [])
    c.emit(op, ins, _outs(node), attrs, schema)


def _norm_squeeze(c: _Converter, node, attrs, given, schema) -> None:
    op = node.op_type
    ins = _ins(node)
    if c.opset < 13:
        axes = given.get("axes")
        if axes is not None:
            ins = [ins[0], c.add_const("axes", axes, "int64")]
    c.emit(op, ins, _outs(node), {})


def _norm_slice(c: _Converter, node, attrs, given, schema) -> None:
    ins = _ins(node)
    if c.opset < 10:
        ins = [ins[0], c.add_const("starts", given["starts"], "int64"),
               c.add_const("ends", given["ends"], "int64")]
        if "axes" in given:
            ins.append(c.add_const("axes", given["axes"], "int64"))
    c.emit("Slice", ins, _outs(node), {})


def _norm_topk(c: _Converter, node, attrs, given, schema) -> None:
    ins = _ins(node)
    attrs = dict(attrs)
    if c.opset < 10:
        ins = [ins[0], c.add_const("k", [attrs.pop("k")], "int64")]
    c.emit("TopK", ins, _outs(node), attrs, schema)


def _norm_dropout(c: _Converter, node, attrs, given, schema) -> None:
    ins = _ins(node)
    out = {}
    if "seed" in given:
        out["seed"] = given["seed"]
    if c.opset < 12 and "ratio" in given:
        ins = [ins[0], c.add_const("ratio", given["ratio"], c.elem_dtype(ins[0]))]
    c.emit("Dropout", ins, _outs(node), out)


def _norm_softmax(c: _Converter, node, attrs, given, schema) -> None:
    op = node.op_type
    axis = int(attrs.get("axis", -1))
    x, y = node.input[0], node.output[0]
    if c.opset >= 13:
        c.emit(op, [x], [y], {"axis": axis})
        return
    # opset < 13: input coerced to 2-D [prod(d<axis), prod(d>=axis)], normalized
    # along dim 1. Same as the opset-13 op exactly when axis is the last dim.
    rank = c.rank(x)
    if axis == -1 or (rank is not None and rank > 0 and axis % rank == rank - 1):
        c.emit(op, [x], [y], {"axis": -1})
        return
    shape = c.new_name(f"{c.node_name}_shape")
    flat = c.new_name(f"{c.node_name}_2d")
    y2 = c.new_name(f"{c.node_name}_out2d")
    c.emit("Shape", [x], [shape], {})
    c.emit("Flatten", [x], [flat], {"axis": axis})
    c.emit(op, [flat], [y2], {"axis": -1})
    c.emit("Reshape", [y2, shape], [y], {})


def _resize_nearest_mode(scales: Optional[np.ndarray]) -> str:
    # Upsample and Resize-10 compute x_in = x_out / scale and, in nearest mode,
    # truncate (onnxruntime's "simple" mode rounds up when downsampling).
    if scales is not None and scales.size and np.all(scales <= 1) and np.any(scales < 1):
        return "ceil"
    return "floor"


def _norm_upsample(c: _Converter, node, attrs, given, schema) -> None:
    ins = _ins(node)
    mode = attrs.get("mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    if c.opset < 9 or "scales" in given:
        scales_arr = np.asarray(given["scales"], np.float32)
        scales = c.add_const("scales", scales_arr, "float32")
    else:
        scales = ins[1]
        scales_arr = c.const(scales)
    c.emit("Resize", [ins[0], "", scales], _outs(node), {
        "mode": mode, "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": _resize_nearest_mode(scales_arr)})


def _norm_resize(c: _Converter, node, attrs, given, schema) -> None:
    ins = _pad_inputs(_ins(node), 4)
    if c.opset < 11:
        # Resize-10: (X, scales), asymmetric coordinates like Upsample
        scales = ins[1]
        c.emit("Resize", [ins[0], "", scales], _outs(node), {
            "mode": attrs.get("mode", "nearest"), "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": _resize_nearest_mode(c.const(scales))})
        return
    attrs = dict(attrs)
    if attrs.get("coordinate_transformation_mode") == "tf_half_pixel_for_nn":
        raise ConversionError(f"node {c.node_name!r} (Resize): coordinate_transformation_mode "
                              "'tf_half_pixel_for_nn' (opset 11 only) is not supported")
    # opset 11/12 demanded roi and scales inputs even when unused; an empty
    # constant means "absent" in the opset-13+ form
    for k in (1, 2):
        v = c.const(ins[k])
        if v is not None and v.size == 0:
            ins[k] = ""
    c.emit("Resize", _trim_inputs(ins), _outs(node), attrs, schema)


def _norm_batchnorm(c: _Converter, node, attrs, given, schema) -> None:
    outs = _outs(node)
    attrs = dict(attrs)
    if c.opset < 14 and len(outs) > 1:
        # extra outputs only exist in training mode: drop them when unused
        used = {i for n in c.model.graph.node for i in n.input} | {o.name for o in c.model.graph.output}
        if any(o in used for o in outs[1:] if o):
            raise ConversionError(f"node {c.node_name!r} (BatchNormalization): training-mode "
                                  "outputs (running mean/var) are not supported")
        outs = outs[:1]
    attrs.pop("is_test", None)
    attrs.pop("consumed_inputs", None)
    c.emit("BatchNormalization", _ins(node), outs, attrs, schema)


def _norm_scatter(c: _Converter, node, attrs, given, schema) -> None:
    # Scatter (opset 9-10) was renamed ScatterElements in opset 11
    c.emit("ScatterElements", _ins(node), _outs(node), {"axis": attrs.get("axis", 0)})


def _spatial_rank(c: _Converter, node, attrs) -> Optional[int]:
    if "kernel_shape" in attrs:
        return len(attrs["kernel_shape"])
    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1:
        r = c.rank(node.input[1])
        if r is not None:
            return r - 2
    r = c.rank(node.input[0])
    return None if r is None else r - 2


def _norm_window(c: _Converter, node, attrs, given, schema) -> None:
    """Conv, ConvTranspose and the pools: fill the rank-dependent defaults."""
    op = node.op_type
    attrs = dict(attrs)
    n = _spatial_rank(c, node, attrs)
    if n is not None and n >= 0:
        if "kernel_shape" not in attrs and op in ("Conv", "ConvTranspose"):
            w = c.const(node.input[1])
            wshape = tuple(w.shape) if w is not None else c.static_shape(node.input[1])
            if wshape is not None:
                attrs["kernel_shape"] = [int(d) for d in wshape[2:]]
        s21 = _schema(c.onnx, op, IR_OPSET)
        names = set(s21.attributes) if s21 is not None else set()
        attrs.setdefault("strides", [1] * n)
        if "dilations" in names:
            attrs.setdefault("dilations", [1] * n)
        attrs.setdefault("pads", [0] * (2 * n))
        if op == "ConvTranspose":
            attrs.setdefault("output_padding", [0] * n)
    c.emit(op, _ins(node), _outs(node), attrs, schema)


def _norm_transpose(c: _Converter, node, attrs, given, schema) -> None:
    attrs = dict(attrs)
    if "perm" not in attrs:
        r = c.rank(node.input[0])
        if r is not None:
            attrs["perm"] = list(range(r - 1, -1, -1))
    c.emit("Transpose", _ins(node), _outs(node), attrs, schema)


def _norm_castlike(c: _Converter, node, attrs, given, schema) -> None:
    from .. import ops
    like = node.input[1]
    info = c.types.get(like)
    if not ops.supported("CastLike") and info is not None and info[0] in ONNX_TO_DTYPE:
        c.emit("Cast", [node.input[0]], _outs(node), {"to": info[0]})
        return
    c.emit("CastLike", _ins(node), _outs(node), attrs, schema)


NORMALIZERS: Dict[str, Normalizer] = {
    "Constant": _norm_constant,
    "ConstantOfShape": _norm_constant_of_shape,
    "Clip": _norm_clip,
    "Pad": _norm_pad,
    "Split": _norm_split,
    "Squeeze": _norm_squeeze,
    "Unsqueeze": _norm_squeeze,
    "Slice": _norm_slice,
    "TopK": _norm_topk,
    "Dropout": _norm_dropout,
    "Softmax": _norm_softmax,
    "LogSoftmax": _norm_softmax,
    "Hardmax": _norm_softmax,
    "Upsample": _norm_upsample,
    "Resize": _norm_resize,
    "BatchNormalization": _norm_batchnorm,
    "Scatter": _norm_scatter,
    "Conv": _norm_window,
    "ConvTranspose": _norm_window,
    "MaxPool": _norm_window,
    "AveragePool": _norm_window,
    "LpPool": _norm_window,
    "Transpose": _norm_transpose,
    "CastLike": _norm_castlike,
}
NORMALIZERS.update({op: _norm_reduce for op in REDUCE_AXES_INPUT})
