"""The custom ops LiteRT's XNNPACK delegate runs for MediaPipe-style segmentation and pose
models -> IR (methods of the importer: ``self`` is ``importer._Importer``).

Their options are raw C structs, not flatbuffers: ``TfLitePoolParams`` (padding, stride w/h,
filter w/h, activation; int32 each) and ``TfLiteTransposeConvParams`` (padding, stride w/h),
where padding is TfLitePadding (1 SAME, 2 VALID; not the schema's 0/1).

* ``Convolution2DTransposeBias`` (input, OHWI weights, bias) is TRANSPOSE_CONV with a bias and
  the output shape of its output tensor;
* ``MaxPoolingWithArgmax2D`` -> MaxPool with an Indices output (run in NCHW between
  transposes). XNNPACK writes uint32 window positions into a float32 tensor; here the indices
  stay an internal int64 tensor that only ``MaxUnpooling2D`` may read (as a graph output it is
  refused: its bits would not match);
* ``MaxUnpooling2D`` (values, indices) -> MaxUnpool back to the pool's input shape.
"""
from __future__ import annotations

import struct
from typing import Dict, List, Tuple

import numpy as np

from ...errors import UnsupportedOpError
from .reader import _Malformed

#: TfLitePadding -> is VALID
_PADDING = {1: False, 2: True}


class CustomOps:
    #: custom code -> converter method
    CUSTOM_CONVERTERS = {"Convolution2DTransposeBias": "custom_transpose_conv_bias",
                         "MaxPoolingWithArgmax2D": "custom_max_pool_argmax",
                         "MaxUnpooling2D": "custom_max_unpool"}

    def custom_params(self, op, code: str, n: int) -> Tuple[int, ...]:
        raw = self.f.vec(op, "CustomOptions", np.uint8).tobytes()
        if len(raw) < 4 * n:
            raise _Malformed(f"{code}: custom options are {len(raw)} bytes, need {4 * n}")
        vals = struct.unpack_from(f"<{n}i", raw)
        if vals[0] not in _PADDING:
            raise _Malformed(f"{code}: padding {vals[0]} is neither SAME (1) nor VALID (2)")
        if min(vals[1:]) < 1:
            raise _Malformed(f"{code}: strides and filter sizes must be positive, got {list(vals[1:])}")
        return vals

    def custom_transpose_conv_bias(self, op, ins: List[int], outs: List[int]) -> None:
        self.need(ins, 3, "Convolution2DTransposeBias")
        padding, sw, sh = self.custom_params(op, "Convolution2DTransposeBias", 3)
        out_shape = self.shape_of(outs[0])
        self.transpose_conv(ins[0], ins[1], ins[2], outs[0], list(out_shape), sh, sw, _PADDING[padding], 0,
                            what="Convolution2DTransposeBias")

    def _pool_attrs(self, op, code: str) -> Dict:
        padding, sw, sh, fw, fh = self.custom_params(op, code, 5)
        return dict(kernel_shape=[fh, fw], strides=[sh, sw], dilations=[1, 1], pads=[0, 0, 0, 0],
                    auto_pad="VALID" if _PADDING[padding] else "SAME_UPPER")

    def custom_max_pool_argmax(self, op, ins: List[int], outs: List[int]) -> None:
        self.need(ins, 1, "MaxPoolingWithArgmax2D")
        if len(outs) != 2:
            raise _Malformed(f"MaxPoolingWithArgmax2D has {len(outs)} outputs, expected 2")
        if len(self.shape_of(ins[0])) != 4:
            raise UnsupportedOpError("MaxPoolingWithArgmax2D: only 4-D NHWC input is supported")
        attrs = self._pool_attrs(op, "MaxPoolingWithArgmax2D")
        x = self.float_of(self.value(ins[0]))
        xn = self.temp(x, "_nchw", "float32", None)
        self.node("Transpose", [x], [xn], perm=[0, 3, 1, 2])
        y = self.output(outs[0])
        yn = self.temp(y, "_nchw", "float32", None)
        idx = self.g.unique_name(self.tname(outs[1]) + "_int64")
        self.g.add_tensor(idx, "int64")
        self.node("MaxPool", [xn], [yn, idx], ceil_mode=0, storage_order=0, **attrs)
        self._finish_nhwc(yn, y)
        self.argmax_of[outs[1]] = (idx, xn)
        self.names[outs[1]] = idx            # read by MaxUnpooling2D only (graph_output refuses it)

    def custom_max_unpool(self, op, ins: List[int], outs: List[int]) -> None:
        self.need(ins, 2, "MaxUnpooling2D")
        if ins[1] not in self.argmax_of:
            raise UnsupportedOpError("MaxUnpooling2D: its indices must come from MaxPoolingWithArgmax2D")
        idx, pooled_input = self.argmax_of[ins[1]]
        attrs = self._pool_attrs(op, "MaxUnpooling2D")
        attrs.pop("auto_pad"), attrs.pop("dilations")
        x = self.float_of(self.value(ins[0]))
        xn = self.temp(x, "_nchw", "float32", None)
        self.node("Transpose", [x], [xn], perm=[0, 3, 1, 2])
        y = self.output(outs[0])
        n, h, w, c = self.shape_of(outs[0])
        pin = self.g.tensors[pooled_input].shape
        if pin is not None and tuple(pin) != (n, c, h, w):
            raise UnsupportedOpError(f"MaxUnpooling2D: output {(n, h, w, c)} differs from the pooled input "
                                     f"{(pin[0], pin[2], pin[3], pin[1])} (NHWC)")
        shape = self.const(y + "_shape", np.array([n, c, h, w], np.int64))
        yn = self.temp(y, "_nchw", "float32", None)
        self.node("MaxUnpool", [xn, idx, shape], [yn], **attrs)
        self._finish_nhwc(yn, y)

    def _finish_nhwc(self, yn: str, y: str) -> None:
        """``y`` (NHWC, maybe int8) from the float NCHW ``yn``."""
        if self.g.tensors[y].quant is not None:
            yf = self.temp(y, "_float", "float32", None)
            self.node("Transpose", [yn], [yf], perm=[0, 2, 3, 1])
            self.quantize(yf, y)
        else:
            self.node("Transpose", [yn], [y], perm=[0, 2, 3, 1])
