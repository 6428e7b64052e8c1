"""The TFLite exporter's activations, element-wise ops and data-movement ops: mixins of
``export_tflite._Exporter`` (``self`` is the exporter: tensors, ids, the model writer)."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from . import export_tflite_xnnpack as xnn
from .export_tflite_common import (_ELEMENTWISE, _FIXED_OUT, _FUSABLE, _REDUCE, _UNARY, ExportError,
                                   _nearest_as_tflite, _q8, _same_params)
from .ir import Node
from .tflite_format import ACT_NONE, ACT_RELU, ACT_RELU6


class ActivationOps:
    """Fused activations, activation ops and the element-wise ops."""

    # -- activations ---------------------------------------------------------------------------
    def fused_act(self, node: Node) -> Tuple[int, Optional[Tuple[str, list]]]:
        """(TFLite fused activation, rest) of a fused node's epilogue: the rest is an
        activation written as its own op after the node (None when it is fused)."""
        act = str(node.attrs.get("activation", "") or "")
        params = tuple(float(p) for p in (node.attrs.get("activation_params") or []))
        if not act:
            return ACT_NONE, None
        key = (act, params if act == "Clip" else ())
        if key in _FUSABLE:
            return _FUSABLE[key], None
        return ACT_NONE, (act, list(params))

    def activation_op(self, act: str, params: list, x: int, y: int, yname: str) -> None:
        """Activation ``act`` from TFLite tensor x to y (an epilogue that is not fused)."""
        yt = self.g.tensors[yname]
        if act == "Relu":
            if not xnn.int8_clamp(self, "RELU", x, y, yt):
                self.w.op("RELU", [x], [y])
        elif act == "Clip":
            self.clip(x, y, params[0] if params else None, params[1] if len(params) > 1 else None, yt)
        elif act in ("Sigmoid", "Tanh", "HardSwish"):
            self.unary_fixed(act, x, y, yname)
        elif act == "LeakyRelu":
            self.w.op("LEAKY_RELU", [x], [y], {"alpha": float(params[0])})
        elif act in ("Gelu", "GeluTanh"):
            self.w.op("GELU", [x], [y], {"approximate": act == "GeluTanh"})
        elif act == "SiLU":
            s = self.temp("silu_sigmoid", yname, quant={"scale": [1 / 256], "zero_point": [-128]}
                          if _q8(yt) else None)
            self.w.op("LOGISTIC", [x], [s])
            self.w.op("MUL", [x, s], [y], {"fused_activation_function": ACT_NONE})
        elif act == "HardSigmoid":
            a, b = (params + [0.2, 0.5])[:2] if len(params) < 2 else params[:2]
            if _q8(yt):
                self.hard_sigmoid_int8(float(a), float(b), x, y, yt)
                return
            xnn.hard_sigmoid_float(self, float(a), float(b), x, y, yname)
        else:
            raise ExportError(f"activation {act!r} has no TFLite form")

    def hard_sigmoid_int8(self, alpha: float, beta: float, x: int, y: int, yt) -> None:
        """int8 clip(alpha x + beta, 0, 1) as builtins LiteRT runs in int8 (XNNPACK too):
        ADD(x, beta / alpha) into u at (s_y / alpha, zp_y), so u holds y's very integers
        (one rounding, as the IR's table), clamped to [0, 1 / alpha] (fused RELU6 when
        1 / alpha = 6, PyTorch's hardsigmoid; else RELU + MINIMUM), then MUL by alpha
        quantized exactly (127 s_c = alpha): multiplier 1/127 on 127 (u - zp_y), an identity."""
        if alpha <= 0:
            raise ExportError(f"int8 HardSigmoid with alpha {alpha} <= 0 has no TFLite form")
        s_y, z_y = float(yt.quant["scale"][0]), int(yt.quant["zero_point"][0])
        shape = self.w.tensors[y]["shape"]
        uq = {"scale": [float(np.float32(s_y / alpha))], "zero_point": [z_y], "axis": 0}

        def exact(v: float) -> Tuple[np.ndarray, dict]:
            # a scalar int8 constant holding v exactly: 127 steps of |v| / 127
            return (np.int8(127 if v >= 0 else -127),
                    {"scale": [float(np.float32(abs(v) / 127.0 or 1.0))], "zero_point": [0], "axis": 0})
        cv, cq = exact(beta / alpha)
        u = self.w.tensor(f"hsig_u_{self.k}", "int8", shape, None, uq)
        six = abs(1.0 / alpha - 6.0) < 1e-6
        self.w.op("ADD", [x, self.const("hsig_shift", cv, "int8", cq)], [u],
                  {"fused_activation_function": ACT_RELU6 if six else ACT_RELU})
        if not six:
            top = np.int8(np.clip(round(1.0 / alpha / float(uq["scale"][0])) + z_y, -128, 127))
            u2 = self.w.tensor(f"hsig_u_{self.k}_top", "int8", shape, None, uq)
            self.w.op("MINIMUM", [u, self.const("hsig_top", top, "int8", uq)], [u2])
            u = u2
        av, aq = exact(alpha)
        self.w.op("MUL", [u, self.const("hsig_alpha", av, "int8", aq)], [y], {"fused_activation_function": ACT_NONE})

    def clip(self, x: int, y: int, lo, hi, yt) -> None:
        lo = None if lo is None or not np.isfinite(lo) else float(lo)
        hi = None if hi is None or not np.isfinite(hi) else float(hi)
        named = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1", (0.0, 1.0): "RELU_0_TO_1", (0.0, None): "RELU"}
        if (lo, hi) in named:
            if not xnn.int8_clamp(self, named[(lo, hi)], x, y, yt):
                self.w.op(named[(lo, hi)], [x], [y])
            return
        cur = x
        for bound, opname in ((lo, "MAXIMUM"), (hi, "MINIMUM")):
            if bound is None:
                continue
            last = bound is hi or hi is None
            dst = y if last else self.w.tensor(f"clip_{self.k}", yt.dtype, self.w.tensors[y]["shape"],
                                                None, self.w.tensors[y]["quant"])
            if _q8(yt):
                s, z = float(yt.quant["scale"][0]), int(yt.quant["zero_point"][0])
                c = self.const("clip_bound", np.int8(np.clip(np.round(bound / s) + z, -128, 127)), "int8",
                               self.tq(yt.quant))
            else:
                c = self.const("clip_bound", np.float32(bound))
            self.w.op(opname, [cur, c], [dst])
            cur = dst

    def unary_fixed(self, op: str, x: int, y: int, yname: str) -> None:
        """LOGISTIC / TANH / HARD_SWISH, meeting int8 LOGISTIC / TANH's fixed output parameters."""
        name = {"Sigmoid": "LOGISTIC", "Tanh": "TANH", "HardSwish": "HARD_SWISH"}[op]
        yt = self.g.tensors[yname]
        if _q8(yt) and op in _FIXED_OUT:
            s, z = _FIXED_OUT[op]
            if not _same_params(yt.quant, {"scale": [s], "zero_point": [z]}):
                mid = self.temp(name.lower(), yname, quant={"scale": [s], "zero_point": [z]})
                self.w.op(name, [x], [mid])
                self.w.op("QUANTIZE", [mid], [y])
                return
        if op == "HardSwish" and _q8(yt):
            xnn.hard_swish_int8(self, x, y, yname)
            return
        self.w.op(name, [x], [y])

    def reduce(self, node: Node) -> None:
        xs = self.shape(node.inputs[0])
        axes = self.cval(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("axes")
        if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
            axes = list(range(len(xs)))
        axes = sorted({int(v) % len(xs) for v in np.asarray(axes).reshape(-1)})
        self.w.op(_REDUCE[node.op], [self.tid(node.inputs[0]), self.ints(axes, "axes")], self.out_ids(node),
                  {"keep_dims": bool(node.attrs.get("keepdims", 1))})

    def elementwise(self, node: Node) -> None:
        name = _ELEMENTWISE[node.op]
        ins = [self.tid(i) for i in node.inputs]
        opts = {"fused_activation_function": ACT_NONE} if name in ("ADD", "SUB", "MUL", "DIV") else None
        if name == "POW" and _q8(self.g.tensors[node.outputs[0]]):
            raise ExportError(f"node {node.name!r}: int8 Pow has no TFLite form")
        self.w.op(name, ins, self.out_ids(node), opts)

    def unary(self, node: Node) -> None:
        if node.op in ("Sigmoid", "Tanh", "HardSwish"):
            self.unary_fixed(node.op, self.tid(node.inputs[0]), self.tid(node.outputs[0]), node.outputs[0])
            return
        if node.op == "Elu" and float(node.attrs.get("alpha", 1.0)) != 1.0:
            raise ExportError(f"node {node.name!r}: TFLite ELU has alpha 1")
        if node.op == "Relu":
            self.op_Relu(node)
            return
        self.w.op(_UNARY[node.op], [self.tid(node.inputs[0])], self.out_ids(node))

    def op_Clip(self, node: Node) -> None:
        lo = self.cval(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        hi = self.cval(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        for nm, v in ((1, lo), (2, hi)):
            if len(node.inputs) > nm and node.inputs[nm] and v is None:
                raise ExportError(f"node {node.name!r}: Clip bounds must be constants")
            if v is not None and self.g.tensors[node.inputs[nm]].quant is not None:
                raise ExportError(f"node {node.name!r}: quantized Clip bounds are not supported")
        xt, yt = self.g.tensors[node.inputs[0]], self.g.tensors[node.outputs[0]]
        x, y = self.tid(node.inputs[0]), self.tid(node.outputs[0])
        if lo is None and hi is None:          # a bare copy (in int8: a requantization)
            if _q8(xt) and not _same_params(xt.quant, yt.quant):
                self.w.op("QUANTIZE", [x], [y])
            else:
                self.w.op("RESHAPE", [x, self.ints(self.shape(node.outputs[0]))], [y],
                          {"new_shape": list(self.shape(node.outputs[0]))})
            return
        if _q8(xt) and not _same_params(xt.quant, yt.quant):
            mid = self.temp(node.name + "_rq", node.outputs[0])
            self.w.op("QUANTIZE", [x], [mid])
            x = mid
        self.clip(x, y, None if lo is None else float(lo.reshape(-1)[0]),
                  None if hi is None else float(hi.reshape(-1)[0]), yt)

    def op_Relu(self, node: Node) -> None:
        xt, yt = self.g.tensors[node.inputs[0]], self.g.tensors[node.outputs[0]]
        x = self.tid(node.inputs[0])
        if _q8(xt) and not _same_params(xt.quant, yt.quant):
            mid = self.temp(node.name + "_rq", node.outputs[0])
            self.w.op("QUANTIZE", [x], [mid])
            x = mid
        if not xnn.int8_clamp(self, "RELU", x, self.tid(node.outputs[0]), yt):
            self.w.op("RELU", [x], self.out_ids(node))

    def op_LeakyRelu(self, node: Node) -> None:
        self.w.op("LEAKY_RELU", [self.tid(node.inputs[0])], self.out_ids(node),
                  {"alpha": float(node.attrs.get("alpha", 0.01))})

    def op_PRelu(self, node: Node) -> None:
        self.w.op("PRELU", [self.tid(node.inputs[0]), self.tid(node.inputs[1])], self.out_ids(node))

    def op_Gelu(self, node: Node) -> None:
        self.w.op("GELU", [self.tid(node.inputs[0])], self.out_ids(node),
                  {"approximate": node.attrs.get("approximate", "none") == "tanh"})

    def op_SiLU(self, node: Node) -> None:
        self.activation_op("SiLU", [], self.tid(node.inputs[0]), self.tid(node.outputs[0]), node.outputs[0])

    def op_HardSigmoid(self, node: Node) -> None:
        self.activation_op("HardSigmoid", [float(node.attrs.get("alpha", 0.2)), float(node.attrs.get("beta", 0.5))],
                           self.tid(node.inputs[0]), self.tid(node.outputs[0]), node.outputs[0])

    def op_Reciprocal(self, node: Node) -> None:
        if _q8(self.g.tensors[node.outputs[0]]):
            raise ExportError(f"node {node.name!r}: int8 Reciprocal has no TFLite form")
        self.w.op("DIV", [self.const("one", np.float32(1.0)), self.tid(node.inputs[0])], self.out_ids(node),
                  {"fused_activation_function": ACT_NONE})

    def softmax(self, node: Node, name: str) -> None:
        xs = self.shape(node.inputs[0])
        axis = int(node.attrs.get("axis", -1)) % len(xs)
        x, yname = self.tid(node.inputs[0]), node.outputs[0]
        y = self.tid(yname)
        opts = {"beta": 1.0} if name == "SOFTMAX" else None
        if axis == len(xs) - 1:
            xnn.softmax(self, name, x, y, opts)
            return
        perm = list(range(len(xs)))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        ts = tuple(xs[p] for p in perm)
        a = self.temp("softmax_in", node.inputs[0], shape=ts)
        b = self.temp("softmax_out", yname, shape=ts)
        self.w.op("TRANSPOSE", [x, self.ints(perm, "perm")], [a])
        xnn.softmax(self, name, a, b, opts)
        self.w.op("TRANSPOSE", [b, self.ints(perm, "perm")], [y])

    def op_Softmax(self, node: Node) -> None:
        self.softmax(node, "SOFTMAX")

    def op_LogSoftmax(self, node: Node) -> None:
        self.softmax(node, "LOG_SOFTMAX")


class TensorOps:
    """Concat, views, Transpose, Pad, Slice, Split, Gather, Resize, Cast, ArgMax, Q/DQ, BatchNormalization."""

    def op_Concat(self, node: Node) -> None:
        yname = node.outputs[0]
        yt = self.g.tensors[yname]
        rank = len(self.shape(yname))
        ins = []
        for i in node.inputs:
            t = self.g.tensors[i]
            x = self.tid(i)
            if _q8(yt) and _q8(t) and not _same_params(t.quant, yt.quant):
                mid = self.temp(i + "_rq", i, quant=yt.quant)           # TFLite int8 concat: equal params
                self.w.op("QUANTIZE", [x], [mid])
                x = mid
            ins.append(x)
        self.w.op("CONCATENATION", ins, [self.tid(yname)],
                  {"axis": int(node.attrs.get("axis", 0)) % rank, "fused_activation_function": ACT_NONE})

    def reshape(self, node: Node) -> None:
        ys = self.shape(node.outputs[0])
        self.w.op("RESHAPE", [self.tid(node.inputs[0]), self.ints(ys)], self.out_ids(node), {"new_shape": list(ys)})

    op_Reshape = op_Flatten = op_Squeeze = op_Unsqueeze = reshape

    def op_Identity(self, node: Node) -> None:
        src, dst = node.inputs[0], node.outputs[0]
        if dst in self.g.outputs or src in self.g.inputs and dst in self.g.outputs:
            self.reshape(node)
        else:
            self.alias[dst] = self.alias.get(src, src)

    def op_Dropout(self, node: Node) -> None:
        if len(node.outputs) > 1 and node.outputs[1]:
            raise ExportError(f"node {node.name!r}: Dropout mask output has no TFLite form")
        self.op_Identity(node)

    def op_Transpose(self, node: Node) -> None:
        xs = self.shape(node.inputs[0])
        perm = node.attrs.get("perm") or list(range(len(xs)))[::-1]
        self.w.op("TRANSPOSE", [self.tid(node.inputs[0]), self.ints(perm, "perm")], self.out_ids(node))

    def op_Pad(self, node: Node) -> None:
        xs = self.shape(node.inputs[0])
        r = len(xs)
        pads = self.cval(node.inputs[1])
        if pads is None:
            raise ExportError(f"node {node.name!r}: Pad pads must be a constant")
        pads = [int(p) for p in pads.reshape(-1)]
        axes_name = node.inputs[3] if len(node.inputs) > 3 else ""
        axes = [int(a) % r for a in self.cval(axes_name).reshape(-1)] if axes_name else list(range(r))
        full = [[0, 0] for _ in range(r)]
        for j, a in enumerate(axes):
            full[a] = [pads[j], pads[j + len(axes)]]
        if min(min(p) for p in full) < 0:
            raise ExportError(f"node {node.name!r}: negative pads have no TFLite PAD form")
        paddings = self.const("paddings", np.array(full, np.int32), "int32")
        mode = node.attrs.get("mode", "constant")
        x = self.tid(node.inputs[0])
        if mode == "reflect":
            self.w.op("MIRROR_PAD", [x, paddings], self.out_ids(node), {"mode": 0})
            return
        if mode != "constant":
            raise ExportError(f"node {node.name!r}: Pad mode {mode!r} has no TFLite form")
        cname = node.inputs[2] if len(node.inputs) > 2 else ""
        xt = self.g.tensors[node.inputs[0]]
        value = self.cval(cname) if cname else np.zeros((), xt.dtype)
        if value is None:
            raise ExportError(f"node {node.name!r}: Pad value must be a constant")
        value = np.asarray(value, xt.dtype).reshape(())
        if _q8(xt) and int(value) == int(xt.quant["zero_point"][0]) or not _q8(xt) and float(value) == 0.0:
            self.w.op("PAD", [x, paddings], self.out_ids(node))
        else:
            v = self.const("pad_value", value, xt.dtype, self.tq(xt.quant))
            self.w.op("PADV2", [x, paddings, v], self.out_ids(node))

    def op_Slice(self, node: Node) -> None:
        xs = self.shape(node.inputs[0])
        r = len(xs)
        vals = [self.cval(n) if len(node.inputs) > k and node.inputs[k] else None
                for k, n in enumerate(list(node.inputs[1:5]) + [""] * (4 - len(node.inputs[1:5])), start=1)]
        starts, ends, axes, steps = vals
        if starts is None or ends is None:
            raise ExportError(f"node {node.name!r}: Slice starts/ends must be constants")
        axes = list(range(len(starts))) if axes is None else [int(a) % r for a in axes.reshape(-1)]
        steps = [1] * len(axes) if steps is None else [int(s) for s in steps.reshape(-1)]
        begin, end, stride = [0] * r, list(xs), [1] * r
        end_mask = 0
        for j, a in enumerate(axes):
            s = steps[j]
            st = int(max(min(int(starts.reshape(-1)[j]), 2 ** 62), -2 ** 62))
            en = int(max(min(int(ends.reshape(-1)[j]), 2 ** 62), -2 ** 62))
            b, e, s = slice(st, en, s).indices(xs[a])
            begin[a], end[a], stride[a] = b, e, s
            if s < 0 and e < 0:
                end_mask |= 1 << a
                end[a] = 0
        self.w.op("STRIDED_SLICE", [self.tid(node.inputs[0]), self.ints(begin, "begin"), self.ints(end, "end"),
                                    self.ints(stride, "strides")], self.out_ids(node),
                  {"begin_mask": 0, "end_mask": end_mask, "ellipsis_mask": 0, "new_axis_mask": 0,
                   "shrink_axis_mask": 0, "offset": False})

    def op_Split(self, node: Node) -> None:
        xs = self.shape(node.inputs[0])
        axis = int(node.attrs.get("axis", 0)) % len(xs)
        sizes = [self.shape(o)[axis] for o in node.outputs]
        outs = [self.tid(o) if o else self.temp("unused", node.inputs[0], shape=tuple(
            xs[:axis]) + (sizes[k],) + tuple(xs[axis + 1:])) for k, o in enumerate(node.outputs)]
        xnn.split(self, self.tid(node.inputs[0]), xs, axis, sizes, outs)

    def op_Gather(self, node: Node) -> None:
        r = len(self.shape(node.inputs[0]))
        idx = self.cval(node.inputs[1])
        iid = self.ints(idx, "indices") if idx is not None else self.tid(node.inputs[1])
        if idx is not None and idx.ndim == 0:
            iid = self.const("indices", np.asarray(idx, np.int32).reshape(()), "int32")
        self.w.op("GATHER", [self.tid(node.inputs[0]), iid], self.out_ids(node),
                  {"axis": int(node.attrs.get("axis", 0)) % r, "batch_dims": 0})

    def op_Resize(self, node: Node) -> None:
        a = node.attrs
        xs, ys = self.shape(node.inputs[0]), self.shape(node.outputs[0])
        if len(xs) != 4:
            raise ExportError(f"node {node.name!r}: only 4-D Resize exports")
        changed = [i for i in range(4) if xs[i] != ys[i]]
        if set(changed) <= {1, 2}:
            nhwc = True
        elif set(changed) <= {2, 3}:
            nhwc = False
        else:
            raise ExportError(f"node {node.name!r}: Resize of axes {changed} has no TFLite form")
        mode = a.get("mode", "nearest")
        ctm = a.get("coordinate_transformation_mode", "half_pixel")
        nearest = a.get("nearest_mode", "round_prefer_floor")
        if mode == "linear":
            table = {"align_corners": (True, False), "half_pixel": (False, True), "asymmetric": (False, False),
                     "pytorch_half_pixel": (False, True)}
            if ctm == "pytorch_half_pixel" and min(ys[1:3] if nhwc else ys[2:]) == 1:
                raise ExportError(f"node {node.name!r}: pytorch_half_pixel to size 1 differs from TFLite")
            name = "RESIZE_BILINEAR"
        elif mode == "nearest":
            table = {("asymmetric", "floor"): (False, False), ("align_corners", "round_prefer_ceil"): (True, False),
                     ("tf_half_pixel_for_nn", "floor"): (False, True)}
            ctm = (ctm, nearest)
            name = "RESIZE_NEAREST_NEIGHBOR"
        else:
            raise ExportError(f"node {node.name!r}: Resize mode {mode!r} has no TFLite form")
        if ctm not in table and mode == "nearest":
            found = _nearest_as_tflite(a, xs[1:3] if nhwc else xs[2:], ys[1:3] if nhwc else ys[2:],
                                       self.cval(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None,
                                       1 if nhwc else 2)
            if found is not None:
                table[ctm] = found
        if ctm not in table:
            raise ExportError(f"node {node.name!r}: Resize {mode} with {ctm} has no TFLite form")
        align, half = table[ctm]
        x, y = self.tid(node.inputs[0]), self.tid(node.outputs[0])
        size = self.ints(ys[1:3] if nhwc else ys[2:], "size")
        opts = {"align_corners": align, "half_pixel_centers": half}
        if nhwc:
            if mode != "nearest" or not xnn.nearest_upsample(self, x, y, xs, ys, align, half, node.outputs[0]):
                self.w.op(name, [x, size], [y], opts)
            return
        xt = self.temp("resize_in", node.inputs[0], shape=(xs[0], xs[2], xs[3], xs[1]))
        yt = self.temp("resize_out", node.outputs[0], shape=(ys[0], ys[2], ys[3], ys[1]))
        self.w.op("TRANSPOSE", [x, self.ints([0, 2, 3, 1], "perm")], [xt])
        xs_l, ys_l = (xs[0], xs[2], xs[3], xs[1]), (ys[0], ys[2], ys[3], ys[1])
        if mode != "nearest" or not xnn.nearest_upsample(self, xt, yt, xs_l, ys_l, align, half, node.outputs[0]):
            self.w.op(name, [xt, size], [yt], opts)
        self.w.op("TRANSPOSE", [yt, self.ints([0, 3, 1, 2], "perm")], [y])

    def op_Cast(self, node: Node) -> None:
        self.w.op("CAST", [self.tid(node.inputs[0])], self.out_ids(node))

    def op_ArgMax(self, node: Node) -> None:
        xs = self.shape(node.inputs[0])
        axis = int(node.attrs.get("axis", 0)) % len(xs)
        if int(node.attrs.get("select_last_index", 0)):
            raise ExportError(f"node {node.name!r}: ArgMax select_last_index has no TFLite form")
        ys = self.shape(node.outputs[0])
        y = self.tid(node.outputs[0])
        if int(node.attrs.get("keepdims", 1)):
            mid = self.temp("argmax", node.outputs[0], shape=tuple(d for i, d in enumerate(xs) if i != axis))
            self.w.op("ARG_MAX", [self.tid(node.inputs[0]), self.ints([axis], "axis")], [mid], {"output_type": 4})
            self.w.op("RESHAPE", [mid, self.ints(ys)], [y], {"new_shape": list(ys)})
        else:
            self.w.op("ARG_MAX", [self.tid(node.inputs[0]), self.ints([axis], "axis")], [y], {"output_type": 4})

    def op_QuantizeLinear(self, node: Node) -> None:
        yt = self.g.tensors[node.outputs[0]]
        if yt.quant is None:
            s = self.cval(node.inputs[1])
            z = self.cval(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros_like(s, np.int8)
            if s is None or z is None or s.size != 1:
                raise ExportError(f"node {node.name!r}: QuantizeLinear needs constant per-tensor parameters")
            q = {"scale": [float(s.reshape(-1)[0])], "zero_point": [int(z.reshape(-1)[0])], "axis": None}
            self.w.tensors[self.tid(node.outputs[0])]["quant"] = self.tq(q)   # (a uint8 graph output)
        self.w.op("QUANTIZE", [self.tid(node.inputs[0])], self.out_ids(node))

    def op_DequantizeLinear(self, node: Node) -> None:
        xt = self.g.tensors[node.inputs[0]]
        if xt.is_const:
            s = np.asarray(self.cval(node.inputs[1]), np.float32)
            z = self.cval(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(s.shape)
            x = np.asarray(self.cval(node.inputs[0])).astype(np.float32)
            if s.size > 1:
                shp = [1] * x.ndim
                shp[int(node.attrs.get("axis", 1)) % x.ndim] = s.size
                s, z = s.reshape(shp), np.asarray(z).reshape(shp)
            val = ((x - np.asarray(z, np.float32)) * s).astype(np.float32)
            self.ids[node.outputs[0]] = self.const(node.outputs[0], val)
            return
        if xt.quant is None:
            s = self.cval(node.inputs[1])
            z = self.cval(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros_like(s, np.int8)
            if s is None or z is None or s.size != 1:
                raise ExportError(f"node {node.name!r}: DequantizeLinear needs constant per-tensor parameters")
            q = {"scale": [float(s.reshape(-1)[0])], "zero_point": [int(z.reshape(-1)[0])], "axis": None}
            self.w.tensors[self.tid(node.inputs[0])]["quant"] = self.tq(q)    # (a uint8 graph input)
        self.w.op("DEQUANTIZE", [self.tid(node.inputs[0])], self.out_ids(node))

    def op_BatchNormalization(self, node: Node) -> None:
        vals = [self.cval(i) for i in node.inputs[1:5]]
        if any(v is None for v in vals) or _q8(self.g.tensors[node.inputs[0]]):
            raise ExportError(f"node {node.name!r}: BatchNormalization needs constant float parameters")
        s, b, mean, var = (np.asarray(v, np.float64) for v in vals)
        k = s / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        xs = self.shape(node.inputs[0])
        last = (node.attrs.get("data_layout") or "NCHW") == "NHWC"
        shp = (-1,) if last else (-1,) + (1,) * (len(xs) - 2)
        mid = self.temp("bn", node.outputs[0])
        self.w.op("MUL", [self.tid(node.inputs[0]), self.const("bn_scale", k.reshape(shp).astype(np.float32))],
                  [mid], {"fused_activation_function": ACT_NONE})
        self.w.op("ADD", [mid, self.const("bn_shift", (b - mean * k).reshape(shp).astype(np.float32))],
                  self.out_ids(node)[:1], {"fused_activation_function": ACT_NONE})
