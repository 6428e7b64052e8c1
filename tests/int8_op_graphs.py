"""Small ONNX graphs with the ops of the MobileNetV3 / DB text detector / YOLO families (seeded
weights), for the int8 op tests until tests/model_families.py (branch ``families``) is used.

* ``mnv3_block``: conv + HardSwish, depthwise, squeeze-excite (GlobalAveragePool -> 1x1 conv ->
  Relu -> 1x1 conv -> HardSigmoid -> broadcast Mul), projection, residual Add, classifier head
  with Softmax;
* ``db_head``: conv + Relu6, FPN-style nearest and bilinear Resize + Concat, ConvTranspose
  (k2 s2) + PRelu, Sigmoid map;
* ``yolo_head``: conv + SiLU (x*sigmoid(x)), Split / Slice, LeakyRelu, Tanh, nearest upsample +
  Concat, a DFL-style Softmax over 16 bins.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from onnx_models import make_model, vi


class _B:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def const(self, arr, base="c"):
        n = self.name(base)
        a = np.asarray(arr)
        self.inits.append(numpy_helper.from_array(a if a.dtype == np.int64 else a.astype(np.float32), n))
        return n

    def node(self, op, ins, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(ins), outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x, cin, cout, k=1, s=1, group=1, bias=True):
        w = self.rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) * np.sqrt(2.0 / (cin // group * k * k))
        ins = [x, self.const(w, "w")]
        if bias:
            ins.append(self.const(self.rng.standard_normal(cout) * 0.1, "b"))
        return self.node("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=group)

    def model(self, inputs, outputs):
        return make_model(self.nodes, inputs, outputs, opset=17, initializers=self.inits)


def mnv3_block(seed: int = 0, hw=(16, 16), c: int = 16, classes: int = 10):
    b = _B(seed)
    x = b.node("HardSwish", [b.conv("input", 3, c, 3, 2)])
    d = b.node("HardSwish", [b.conv(x, c, c, 3, 1, group=c)])
    se = b.node("GlobalAveragePool", [d])
    se = b.node("Relu", [b.conv(se, c, c // 4)])
    se = b.node("HardSigmoid", [b.conv(se, c // 4, c)], alpha=1 / 6, beta=0.5)
    d = b.node("Mul", [d, se])
    p = b.conv(d, c, c)
    y = b.node("Add", [x, p])
    y = b.node("Clip", [b.conv(y, c, 2 * c), b.const(0.0), b.const(6.0)])
    g = b.node("Flatten", [b.node("GlobalAveragePool", [y])])
    w = b.const(b.rng.standard_normal((2 * c, classes)) * 0.3)
    logits = b.node("Add", [b.node("MatMul", [g, w]), b.const(b.rng.standard_normal(classes) * 0.1)])
    prob = b.node("Softmax", [logits], axis=-1)
    m = b.model([vi("input", [1, 3, *hw])], [vi(prob, None)])
    return m


def db_head(seed: int = 1, hw=(32, 32), c: int = 8):
    b = _B(seed)
    f1 = b.node("Clip", [b.conv("input", 3, c, 3, 2), b.const(0.0), b.const(6.0)])       # /2
    f2 = b.node("Relu", [b.conv(f1, c, 2 * c, 3, 2)])                                    # /4
    up = b.node("Resize", [f2, "", b.const([1, 1, 2, 2], "scales")], mode="nearest",
                coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    upb = b.node("Resize", [f2, "", b.const([1, 1, 2, 2], "scales")], mode="linear",
                 coordinate_transformation_mode="half_pixel")
    cat = b.node("Concat", [f1, up, upb], axis=1)
    h = b.node("Relu", [b.conv(cat, 5 * c, c, 3)])
    w = b.rng.standard_normal((c, c // 2, 2, 2)).astype(np.float32) * 0.4
    t = b.node("ConvTranspose", [h, b.const(w, "wt"), b.const(b.rng.standard_normal(c // 2) * 0.1)],
               kernel_shape=[2, 2], strides=[2, 2])
    t = b.node("PRelu", [t, b.const(np.abs(b.rng.standard_normal((c // 2, 1, 1))) * 0.25, "slope")])
    y = b.node("Sigmoid", [b.conv(t, c // 2, 1, 3)])
    return b.model([vi("input", [1, 3, *hw])], [vi(y, None)])


def yolo_head(seed: int = 2, hw=(32, 32), c: int = 16, bins: int = 16):
    b = _B(seed)

    def silu(v):
        return b.node("Mul", [v, b.node("Sigmoid", [v])])
    x = silu(b.conv("input", 3, c, 3, 2))
    p1, p2 = b.node("Split", [x, b.const(np.array([c // 2, c // 2], np.int64), "split")], n_out=2, axis=1)
    q = silu(b.conv(p2, c // 2, c // 2, 3))
    cat = b.node("Concat", [p1, q, b.node("LeakyRelu", [p2], alpha=0.1)], axis=1)
    x2 = silu(b.conv(cat, 3 * c // 2, c, 3, 2))
    up = b.node("Resize", [x2, "", b.const([1, 1, 2, 2], "scales")], mode="nearest")
    f = b.node("Concat", [up, x], axis=1)
    f = b.node("Tanh", [b.conv(f, 2 * c, c, 1)])
    box = b.conv(f, c, 4 * bins, 1)
    n = (hw[0] // 2) * (hw[1] // 2)
    box = b.node("Reshape", [box, b.const(np.array([1, 4, bins, n], np.int64), "shape")])
    box = b.node("Softmax", [b.node("Transpose", [box], perm=[0, 3, 1, 2])], axis=-1)
    cls = b.node("Sigmoid", [b.node("Slice", [b.conv(f, c, 8, 1), b.const(np.array([0], np.int64), "st"),
                                              b.const(np.array([5], np.int64), "en"),
                                              b.const(np.array([1], np.int64), "ax")])])
    return b.model([vi("input", [1, 3, *hw])], [vi(box, None), vi(cls, None)])


FAMILIES = {"mnv3": mnv3_block, "db": db_head, "yolo": yolo_head}


def quantized_family(tmp_path, make, shape, n: int):
    """(int8 artifact path, input name, ``n`` seeded feeds) of the graph ``make()``: saved as
    ONNX, converted with ``quantize="int8"`` calibrated on the first 4 feeds (uniform [-1, 1])."""
    import onnx
    import edge_infer
    src = str(tmp_path / "m.onnx")
    onnx.save(make(), src)
    in_name = onnx.load(src).graph.input[0].name
    rng = np.random.default_rng(0)
    xs = [{in_name: rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(n)]
    eim = str(tmp_path / "q.eim")
    edge_infer.convert(src, eim, quantize="int8", calib=xs[:4], allow_drift=True)
    return eim, in_name, xs
