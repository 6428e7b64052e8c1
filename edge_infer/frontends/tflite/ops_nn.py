"""TFLite convolution, matmul, element-wise, reduction, pooling, resize and softmax ops -> IR
(methods of the importer: ``self`` is ``importer._Importer``)."""
from __future__ import annotations

from typing import List

import numpy as np

from ...errors import UnsupportedOpError
from ...tflite_format import ACT_NONE, SAME, VALID
from .reader import _Malformed, _opt, _options
from .tables import _BINARY, _REDUCE, _UNARY


class NnOps:
    def op_conv_2d(self, op, ins, outs) -> None:
        self.conv(op, ins, outs, depthwise=False)

    def op_depthwise_conv_2d(self, op, ins, outs) -> None:
        self.conv(op, ins, outs, depthwise=True)

    def conv(self, op, ins, outs, depthwise: bool) -> None:
        name = "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"
        self.need(ins, 2, name)
        o = _options(op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
        x = self.value(ins[0])
        xs = self.shape_of(ins[0])
        w, wq, exact = self.weights(ins[1])
        if w.ndim != 4 or len(xs) != 4:
            raise UnsupportedOpError(f"{name}: only 2-D convolutions on 4-D NHWC tensors are supported")
        c_in = xs[3]
        if depthwise:
            if w.shape[0] != 1:
                raise _Malformed(f"{name}: filter shape {w.shape} is not 1HWC")
            wir = np.ascontiguousarray(w[0].transpose(2, 0, 1)[:, None])     # (C*M, 1, H, W)
            group = c_in
            axis_map = lambda a: 0 if a == 3 else a                           # noqa: E731
        else:
            wir = w.transpose(0, 3, 1, 2)                                     # OHWI -> OIHW
            if w.shape[3] == 0 or c_in % w.shape[3]:
                raise _Malformed(f"{name}: input has {c_in} channels, filter {w.shape}")
            group = c_in // w.shape[3]
            axis_map = lambda a: {0: 0, 1: 2, 2: 3, 3: 1}[a]                 # noqa: E731
        if wir.shape[0] % group:
            raise _Malformed(f"{name}: {wir.shape[0]} output channels for {group} groups")
        wname = self.weight_const(ins[1], wir, wq, axis_map)
        hybrid = self.g.tensors[x].quant is None and wq is not None     # float input, int8 weights
        if hybrid:
            wname = self.float_of(wname)
        b = self.bias(ins[2] if len(ins) > 2 else -1, wq is None or hybrid)
        y = self.output(outs[0])
        attrs = dict(kernel_shape=[int(wir.shape[2]), int(wir.shape[3])],
                     strides=[int(_opt(o, "StrideH", 1)), int(_opt(o, "StrideW", 1))],
                     dilations=[int(_opt(o, "DilationHFactor", 1)), int(_opt(o, "DilationWFactor", 1))],
                     pads=[0, 0, 0, 0], auto_pad=self.padding(_opt(o, "Padding", SAME)), group=int(group),
                     data_layout="NHWC")
        if min(attrs["strides"] + attrs["dilations"]) < 1:
            raise _Malformed(f"{name}: strides and dilations must be positive")
        self.emit("Conv", [x, wname, b], y, int(_opt(o, "FusedActivationFunction", 0)), **attrs)

    def padding(self, p: int) -> str:
        if p == SAME:
            return "SAME_UPPER"
        if p == VALID:
            return "VALID"
        raise _Malformed(f"unknown padding {p}")

    def op_transpose_conv(self, op, ins, outs) -> None:
        self.need(ins, 3, "TRANSPOSE_CONV")
        o = _options(op, "TransposeConvOptions")
        out_shape = self.const_ints(ins[0], "TRANSPOSE_CONV output shape")
        self.transpose_conv(ins[2], ins[1], ins[3] if len(ins) > 3 else -1, outs[0], out_shape,
                            int(_opt(o, "StrideH", 1)), int(_opt(o, "StrideW", 1)),
                            _opt(o, "Padding", SAME) == VALID, int(_opt(o, "FusedActivationFunction", 0)))

    def transpose_conv(self, x_i: int, w_i: int, b_i: int, y_i: int, out_shape, sh: int, sw: int,
                       valid: bool, act: int, what: str = "TRANSPOSE_CONV") -> None:
        """A 2-D transposed convolution (TRANSPOSE_CONV, MediaPipe's Convolution2DTransposeBias):
        weights OHWI, NHWC activations, output of ``out_shape``."""
        w, wq, _ = self.weights(w_i)                                          # (O, H, W, I)
        x = self.value(x_i)
        xs = self.shape_of(x_i)
        if w.ndim != 4 or len(out_shape) != 4 or len(xs) != 4:
            raise UnsupportedOpError(f"{what}: only 2-D on 4-D NHWC tensors is supported")
        if min(sh, sw) < 1:
            raise _Malformed(f"{what}: strides must be positive")
        kh, kw = w.shape[1], w.shape[2]
        pads, opad = [], []
        for ins_, out_, k, s in ((xs[1], out_shape[1], kh, sh), (xs[2], out_shape[2], kw, sw)):
            full = s * (ins_ - 1) + k
            total = full - out_
            if valid and total > 0:
                total = max(0, total)                 # VALID: the output keeps the first out_ rows
                pads.append((0, total))
                opad.append(0)
            elif total >= 0:
                pads.append((total // 2, total - total // 2))
                opad.append(0)
            else:
                pads.append((0, 0))
                opad.append(-total)
        wir = np.ascontiguousarray(w.transpose(3, 0, 1, 2))                   # (I, O, H, W)
        wname = self.weight_const(w_i, wir, wq, lambda a: 1 if a == 0 else a)
        b = self.bias(b_i, True)
        y = self.output(y_i)
        xf = self.float_of(x)
        wf = self.float_of(wname)
        xn = self.temp(xf, "_nchw", "float32", None)
        self.node("Transpose", [xf], [xn], perm=[0, 3, 1, 2])
        yn = self.g.unique_name(y + "_nchw")
        self.g.add_tensor(yn, "float32")
        self.node("ConvTranspose", [xn, wf, b], [yn], kernel_shape=[int(kh), int(kw)], strides=[sh, sw],
                  dilations=[1, 1], pads=[pads[0][0], pads[1][0], pads[0][1], pads[1][1]],
                  output_padding=opad, auto_pad="NOTSET", group=1)
        if self.g.tensors[y].quant is not None:
            yf = self.temp(y, "_float", "float32", None)
            self._emit_float("Transpose", [yn], yf, act, {"perm": [0, 2, 3, 1]})
            self.quantize(yf, y)
        else:
            self._emit_float("Transpose", [yn], y, act, {"perm": [0, 2, 3, 1]})

    def op_fully_connected(self, op, ins, outs) -> None:
        self.need(ins, 2, "FULLY_CONNECTED")
        o = _options(op, "FullyConnectedOptions")
        if int(_opt(o, "WeightsFormat", 0)) != 0:
            raise UnsupportedOpError("FULLY_CONNECTED: shuffled weights formats are not supported")
        x = self.value(ins[0])
        xs = self.shape_of(ins[0])
        w, wq, _ = self.weights(ins[1])                                      # (O, K)
        if w.ndim != 2 or not xs or w.shape[1] == 0 or int(np.prod(xs)) % w.shape[1]:
            raise _Malformed(f"FULLY_CONNECTED: input {xs} and weights {w.shape} disagree")
        k = int(w.shape[1])
        wname = self.weight_const(ins[1], w, wq, lambda a: a)
        hybrid = self.g.tensors[x].quant is None and wq is not None     # float input, int8 weights
        if hybrid:
            wname = self.float_of(wname)
        b = self.bias(ins[2] if len(ins) > 2 else -1, wq is None or hybrid)
        y = self.output(outs[0])
        ys = self.shape_of(outs[0])
        if len(xs) != 2 or xs[1] != k:
            x2 = self.temp(x, "_2d")
            self.node("Reshape", [x, self.const("fc_shape", np.array([-1, k], np.int64))], [x2], allowzero=0)
            x = x2
        act = int(_opt(o, "FusedActivationFunction", 0))
        if len(ys) == 2:
            self.emit("Gemm", [x, wname, b], y, act, alpha=1.0, beta=1.0, transA=0, transB=1)
        else:
            mid = self.temp(y, "_2d")
            self.emit("Gemm", [x, wname, b], mid, act, alpha=1.0, beta=1.0, transA=0, transB=1)
            self.node("Reshape", [mid, self.const("fc_out_shape", np.array(ys, np.int64))], [y], allowzero=0)

    def op_batch_matmul(self, op, ins, outs) -> None:
        self.need(ins, 2, "BATCH_MATMUL")
        o = _options(op, "BatchMatMulOptions")
        a, b = self.value(ins[0]), self.value(ins[1])
        for flag, idx in (("AdjX", 0), ("AdjY", 1)):
            if _opt(o, flag, False):
                r = len(self.shape_of(ins[idx]))
                src = a if idx == 0 else b
                t = self.temp(src, "_adj")
                self.node("Transpose", [src], [t], perm=list(range(r - 2)) + [r - 1, r - 2])
                a, b = (t, b) if idx == 0 else (a, t)
        self.emit("MatMul", [a, b], self.output(outs[0]))

    def unary(self, name: str, op, ins, outs) -> None:
        self.need(ins, 1, name)
        x = self.value(ins[0])
        y = self.output(outs[0])
        ir = _UNARY[name]
        if name == "RSQRT":
            mid = self.temp(y, "_sqrt", quant=None)
            self.node("Sqrt", [self.float_of(x)], [mid])
            self._finish_float("Reciprocal", [mid], y)
        elif name == "SQUARE":
            self.emit("Mul", [x, x], y)
        elif ir == "Clip":
            lo, hi = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}[name]
            self.emit("Clip", [x, self.const("clip_min", np.float32(lo)), self.const("clip_max", np.float32(hi))], y)
        elif name == "LEAKY_RELU":
            self.emit("LeakyRelu", [x], y, alpha=float(_opt(_options(op, "LeakyReluOptions"), "Alpha", 0.2)))
        elif name == "ELU":
            self.emit("Elu", [x], y, alpha=1.0)
        elif name == "GELU":
            approx = bool(_opt(_options(op, "GeluOptions"), "Approximate", False))
            self.emit("Gelu", [x], y, approximate="tanh" if approx else "none")
        else:
            self.emit(ir, [x], y)

    def _finish_float(self, op: str, fins: List[str], y: str) -> None:
        """``op`` on float inputs writing ``y`` (quantizing when ``y`` is int8)."""
        if self.g.tensors[y].quant is not None:
            f = self.temp(y, "_float", "float32", None)
            self.node(op, fins, [f])
            self.quantize(f, y)
        else:
            self.node(op, fins, [y])

    def binary(self, name: str, op, ins, outs) -> None:
        self.need(ins, 2, name)
        a, b = self.value(ins[0]), self.value(ins[1])
        y = self.output(outs[0])
        table = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions"}.get(name)
        act = int(_opt(_options(op, table), "FusedActivationFunction", 0)) if table else ACT_NONE
        if name == "SQUARED_DIFFERENCE":
            d = self.temp(y, "_diff", "float32", None)
            self.node("Sub", [self.float_of(a), self.float_of(b)], [d])
            self._finish_float("Mul", [d, d], y)
            return
        self.emit(_BINARY[name], [a, b], y, act)

    def reduce(self, name: str, op, ins, outs) -> None:
        self.need(ins, 2, name)
        x = self.value(ins[0])
        xs = self.shape_of(ins[0])
        axes = sorted({a % len(xs) for a in self.const_ints(ins[1], f"{name} axes")}) if xs else []
        keep = bool(_opt(_options(op, "ReducerOptions"), "KeepDims", False))
        if name == "MEAN" and len(xs) == 4 and axes == [1, 2]:
            # a global average pool. The IR's int8 mean is TFLite MEAN's (zp_y + MBQM(sum,
            # s_x / (n s_y))) when the output parameters differ from the input's, and
            # AVERAGE_POOL_2D's rounded division when they are equal, where TFLite's MEAN still
            # requantizes. Then the mean goes to a tensor whose zero point is one step off
            # (the requantizing path) and an exact +-1 table (Clip between the two parameter
            # sets) moves it back: TFLite's result, except that the one extreme value on the
            # far side of the shift saturates one step early.
            y = self.output(outs[0])
            qx, qy = self.g.tensors[x].quant, self.g.tensors[y].quant
            src = x
            if qx is not None and qy is not None and np.float32(qx["scale"][0]) == np.float32(qy["scale"][0]) \
                    and qx["zero_point"][0] == qy["zero_point"][0]:
                zp = int(qy["zero_point"][0])
                shifted = self.temp(y, "_mean", quant=dict(qy, zero_point=[zp + 1 if zp <= 0 else zp - 1]))
                self.node("GlobalAveragePool", [x], [shifted], data_layout="NHWC")
                src, gap = shifted, False
            else:
                gap = True
            target = y if keep else self.temp(y, "_keep")
            if gap:
                self.emit("GlobalAveragePool", [src], target, data_layout="NHWC")
            else:
                self.node("Clip", [src], [target])
            if not keep:
                self.node("Reshape", [target, self.const("mean_shape", np.array([xs[0], xs[3]], np.int64))], [y],
                          allowzero=0)
            return
        y = self.output(outs[0])
        self.emit(_REDUCE[name], [x, self.const(f"{name.lower()}_axes", np.array(axes, np.int64))], y,
                  keepdims=int(keep), noop_with_empty_axes=0)

    def op_concatenation(self, op, ins, outs) -> None:
        o = _options(op, "ConcatenationOptions")
        if not ins:
            raise _Malformed("CONCATENATION without inputs")
        xs = [self.value(i) for i in ins]
        rank = len(self.shape_of(ins[0]))
        axis = int(_opt(o, "Axis", 0))
        if not -rank <= axis < max(rank, 1):
            raise _Malformed(f"CONCATENATION axis {axis} for rank {rank}")
        # the options carry a fused activation, but LiteRT's kernels never apply it: neither do we
        self.emit("Concat", xs, self.output(outs[0]), axis=axis % max(rank, 1))

    def reshape_to(self, x_i: int, y_i: int) -> None:
        x = self.value(x_i)
        y = self.output(y_i)
        shape = self.shape_of(y_i)
        self.emit("Reshape", [x, self.const("shape", np.array(shape, np.int64))], y, allowzero=0)

    def op_reshape(self, op, ins, outs) -> None:
        self.need(ins, 1, "RESHAPE")
        self.reshape_to(ins[0], outs[0])

    op_squeeze = op_reshape
    op_expand_dims = op_reshape

    def op_pad(self, op, ins, outs, mode: str = "constant") -> None:
        self.need(ins, 2, "PAD")
        x = self.value(ins[0])
        pads = self.const_ints(ins[1], "PAD paddings")
        r = len(self.shape_of(ins[0]))
        if len(pads) != 2 * r or min(pads) < 0:
            raise _Malformed(f"PAD: paddings {pads} for rank {r}")
        onnx_pads = pads[0::2] + pads[1::2]
        y = self.output(outs[0])
        t = self.g.tensors[y]
        cv = ""
        if mode == "constant":
            if len(ins) > 2 and ins[2] >= 0:
                cv = self.value(ins[2])
            elif t.quant is not None:
                cv = self.const("pad_value", np.int8(t.quant["zero_point"][0]), dict(t.quant))
        self.emit("Pad", [x, self.const("pads", np.array(onnx_pads, np.int64)), cv], y, mode=mode)

    def op_padv2(self, op, ins, outs) -> None:
        self.op_pad(op, ins, outs)

    def op_mirror_pad(self, op, ins, outs) -> None:
        mode = int(_opt(_options(op, "MirrorPadOptions"), "Mode", 0))
        if mode != 0:
            raise UnsupportedOpError("MIRROR_PAD: SYMMETRIC mode is not supported (REFLECT is)")
        self.op_pad(op, ins[:2], outs, mode="reflect")

    def pool(self, op, ins, outs, ir: str) -> None:
        self.need(ins, 1, ir)
        o = _options(op, "Pool2DOptions")
        x = self.value(ins[0])
        if len(self.shape_of(ins[0])) != 4:
            raise UnsupportedOpError(f"{ir}: only 4-D NHWC input is supported")
        k = [int(_opt(o, "FilterHeight", 1)), int(_opt(o, "FilterWidth", 1))]
        s = [int(_opt(o, "StrideH", 1)), int(_opt(o, "StrideW", 1))]
        if min(k + s) < 1:
            raise _Malformed(f"{ir}: filter and strides must be positive")
        attrs = dict(kernel_shape=k, strides=s, pads=[0, 0, 0, 0], auto_pad=self.padding(_opt(o, "Padding", SAME)),
                     ceil_mode=0, data_layout="NHWC", dilations=[1, 1])
        if ir == "AveragePool":
            attrs["count_include_pad"] = 0
        else:
            attrs["storage_order"] = 0
        self.emit(ir, [x], self.output(outs[0]), int(_opt(o, "FusedActivationFunction", 0)), **attrs)

    def op_max_pool_2d(self, op, ins, outs) -> None:
        self.pool(op, ins, outs, "MaxPool")

    def op_average_pool_2d(self, op, ins, outs) -> None:
        self.pool(op, ins, outs, "AveragePool")

    def resize(self, op, ins, outs, bilinear: bool) -> None:
        self.need(ins, 2, "RESIZE")
        o = _options(op, "ResizeBilinearOptions" if bilinear else "ResizeNearestNeighborOptions")
        x = self.value(ins[0])
        xs = self.shape_of(ins[0])
        size = self.const_ints(ins[1], "RESIZE size")
        if len(xs) != 4 or len(size) != 2 or min(size) < 1:
            raise _Malformed(f"RESIZE: input {xs}, size {size}")
        align = bool(_opt(o, "AlignCorners", False))
        half = bool(_opt(o, "HalfPixelCenters", False))
        if bilinear:
            ctm = "align_corners" if align else ("half_pixel" if half else "asymmetric")
            nearest = "round_prefer_floor"
        else:
            ctm = "align_corners" if align else ("tf_half_pixel_for_nn" if half else "asymmetric")
            nearest = "round_prefer_ceil" if align else "floor"
        sizes = self.const("sizes", np.array([xs[0], size[0], size[1], xs[3]], np.int64))
        self.emit("Resize", [x, "", "", sizes], self.output(outs[0]), mode="linear" if bilinear else "nearest",
                  coordinate_transformation_mode=ctm, nearest_mode=nearest, cubic_coeff_a=-0.75,
                  exclude_outside=0, extrapolation_value=0.0, antialias=0, keep_aspect_ratio_policy="stretch")

    def op_resize_bilinear(self, op, ins, outs) -> None:
        self.resize(op, ins, outs, True)

    def op_resize_nearest_neighbor(self, op, ins, outs) -> None:
        self.resize(op, ins, outs, False)

    def softmax(self, op, ins, outs, ir: str) -> None:
        self.need(ins, 1, ir)
        x = self.value(ins[0])
        y = self.output(outs[0])
        beta = float(_opt(_options(op, "SoftmaxOptions"), "Beta", 1.0)) if ir == "Softmax" else 1.0
        xf = self.float_of(x)
        if beta != 1.0:
            scaled = self.temp(xf, "_beta", "float32", None)
            self.node("Mul", [xf, self.const("beta", np.float32(beta))], [scaled])
            xf = scaled
        self._softmax_out(ir, xf, y)

    def _softmax_out(self, ir: str, xf: str, y: str) -> None:
        if self.g.tensors[y].quant is not None:
            f = self.temp(y, "_float", "float32", None)
            self.node(ir, [xf], [f], axis=-1)
            self.quantize(f, y)
        else:
            self.node(ir, [xf], [y], axis=-1)

    def op_softmax(self, op, ins, outs) -> None:
        self.softmax(op, ins, outs, "Softmax")

    def op_log_softmax(self, op, ins, outs) -> None:
        self.softmax(op, ins, outs, "LogSoftmax")
