"""A ~1M-parameter text detector as an ONNX model with seeded weights, for the artifact size tests
(issue #19, compact artifacts): a MobileNetV3-large backbone at scale 0.5 (conv + BatchNormalization
+ HardSwish/Relu, depthwise convs, squeeze-excite) and a DB head (FPN neck with nearest upsampling,
ConvTranspose, Sigmoid), the shape of PaddleOCR's mobile detector. Names follow paddle2onnx
(``conv2d_12.w_0``, ``batch_norm_12.tmp_2``, nodes ``p2o.Conv.12``), whose length is what bloated
the artifacts the issue measured.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from onnx_models import make_model, vi

# kernel, expansion, output channels, squeeze-excite, activation, stride (MobileNetV3-large)
_BLOCKS = [(3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
           (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
           (3, 240, 80, False, "hs", 2), (3, 200, 80, False, "hs", 1), (3, 184, 80, False, "hs", 1),
           (3, 184, 80, False, "hs", 1), (3, 480, 112, True, "hs", 1), (3, 672, 112, True, "hs", 1),
           (5, 672, 160, True, "hs", 2), (5, 960, 160, True, "hs", 1), (5, 960, 160, True, "hs", 1)]


def _div8(v: float) -> int:
    return max(8, int(v + 4) // 8 * 8)


class _Net:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = {}

    def _k(self, kind: str) -> int:
        self.count[kind] = self.count.get(kind, -1) + 1
        return self.count[kind]

    def init(self, name: str, arr) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def node(self, op: str, ins, kind: str, **attrs) -> str:
        out = f"{kind}_{self._k(kind)}.tmp_0"
        self.nodes.append(helper.make_node(op, list(ins), [out], name=f"p2o.{op}.{self._k(op)}", **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, s: int = 1, group: int = 1, act=None) -> str:
        kc = self._k("conv2d")
        fan = cin // group * k * k
        w = self.init(f"conv2d_{kc}.w_0", self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan))
        y = f"conv2d_{kc}.tmp_0"
        self.nodes.append(helper.make_node("Conv", [x, w], [y], name=f"p2o.Conv.{self._k('Conv')}", kernel_shape=[k, k],
                                           strides=[s, s], pads=[k // 2] * 4, group=group, dilations=[1, 1]))
        kb = self._k("batch_norm")
        p = [self.init(f"batch_norm_{kb}.w_0", 1 + 0.1 * self.rng.standard_normal(cout)),
             self.init(f"batch_norm_{kb}.b_0", 0.1 * self.rng.standard_normal(cout)),
             self.init(f"batch_norm_{kb}.w_1", 0.1 * self.rng.standard_normal(cout)),
             self.init(f"batch_norm_{kb}.w_2", 1 + 0.1 * self.rng.random(cout))]
        out = f"batch_norm_{kb}.tmp_2"
        self.nodes.append(helper.make_node("BatchNormalization", [y] + p, [out], name=f"p2o.BatchNormalization.{kb}",
                                           epsilon=1e-5))
        if act == "relu":
            out = self.node("Relu", [out], "relu")
        elif act == "hs":
            out = self.node("HardSwish", [out], "hardswish")
        return out

    def se(self, x: str, c: int) -> str:
        mid = _div8(c / 4)
        p = self.node("GlobalAveragePool", [x], "pool2d")
        ka = self._k("conv2d")
        h = self.node("Conv", [p, self.init(f"conv2d_{ka}.w_0", self.rng.standard_normal((mid, c, 1, 1)) * np.sqrt(2 / c)),
                               self.init(f"conv2d_{ka}.b_0", 0.1 * self.rng.standard_normal(mid))], "conv2d_se", kernel_shape=[1, 1])
        h = self.node("Relu", [h], "relu")
        kb = self._k("conv2d")
        h = self.node("Conv", [h, self.init(f"conv2d_{kb}.w_0", self.rng.standard_normal((c, mid, 1, 1)) * np.sqrt(2 / mid)),
                               self.init(f"conv2d_{kb}.b_0", 0.1 * self.rng.standard_normal(c))], "conv2d_se", kernel_shape=[1, 1])
        h = self.node("HardSigmoid", [h], "hard_sigmoid", alpha=0.2, beta=0.5)
        return self.node("Mul", [x, h], "elementwise_mul")


def text_detector(seed: int = 0, hw=(64, 64), scale: float = 0.5):
    """The detector as an ONNX ModelProto: input ``x`` [1, 3, *hw] (multiples of 32), output ``maps``."""
    n = _Net(seed)
    c = _div8(16 * scale)
    x = n.conv_bn("x", 3, c, 3, 2, act="hs")
    feats = []
    for k, exp, out, se, act, s in _BLOCKS:
        e, o = _div8(exp * scale), _div8(out * scale)
        if s == 2 and c != _div8(16 * scale):
            feats.append((x, c))
        h = n.conv_bn(x, c, e, 1, act=act) if e != c else x
        h = n.conv_bn(h, e, e, k, s, group=e, act=act)
        if se:
            h = n.se(h, e)
        h = n.conv_bn(h, e, o, 1)
        x = n.node("Add", [x, h], "elementwise_add") if s == 1 and c == o else h
        c = o
    x = n.conv_bn(x, c, _div8(960 * scale), 1, act="hs")
    feats.append((x, _div8(960 * scale)))
    inner = 96
    lat = [n.conv_bn(f, cf, inner, 1) for f, cf in feats]
    up = lat[-1]
    outs = [up]
    for f in reversed(lat[:-1]):
        up = n.node("Add", [f, n.node("Resize", [up, "", n.init(f"scales_{len(outs)}", [1, 1, 2, 2])], "nearest_interp",
                                      mode="nearest")], "elementwise_add")
        outs.append(up)
    ps = [n.conv_bn(o, inner, inner // 4, 3) for o in outs]
    ps = [n.node("Resize", [p, "", n.init(f"scales_p{k}", [1, 1, 2 ** (3 - k), 2 ** (3 - k)])], "nearest_interp",
                 mode="nearest") if k < 3 else p for k, p in enumerate(ps)]
    fuse = n.node("Concat", ps, "concat", axis=1)
    h = n.conv_bn(fuse, inner, inner // 4, 3, act="relu")
    kt = n._k("conv2d_transpose")
    h = n.node("ConvTranspose", [h, n.init(f"conv2d_transpose_{kt}.w_0", n.rng.standard_normal((24, 24, 2, 2)) * 0.2),
                                 n.init(f"conv2d_transpose_{kt}.b_0", 0.1 * n.rng.standard_normal(24))],
               "conv2d_transpose", kernel_shape=[2, 2], strides=[2, 2])
    h = n.node("Relu", [h], "relu")
    kt = n._k("conv2d_transpose")
    h = n.node("ConvTranspose", [h, n.init(f"conv2d_transpose_{kt}.w_0", n.rng.standard_normal((24, 1, 2, 2)) * 0.2),
                                 n.init(f"conv2d_transpose_{kt}.b_0", 0.1 * n.rng.standard_normal(1))],
               "conv2d_transpose", kernel_shape=[2, 2], strides=[2, 2])
    y = n.node("Sigmoid", [h], "sigmoid")
    n.nodes.append(helper.make_node("Identity", [y], ["maps"], name="p2o.Identity.0"))
    return make_model(n.nodes, [vi("x", [1, 3, *hw])], [vi("maps", None)], opset=17, initializers=n.inits,
                      name="det_mv3_db")
