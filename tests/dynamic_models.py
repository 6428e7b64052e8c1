"""ONNX models with dynamic height and width, built with onnx.helper and seeded weights, shaped
like the exports of the popular detector and text-recognizer exporters (issue 20):

* ``yolo_style``: five stride-2 convs (stride 32), a nearest x2 upsample of the stride-32 map
  concatenated with the stride-16 map (needs H, W multiples of 32), a head per stride reshaped
  to ``[N, 4 + C, anchors]``, boxes in input pixels and class probabilities concatenated in
  one output (YOLOv8's layout);
* ``recognizer_style``: CRNN/SVTR-like: four stride-2 convs, a 3x3 AveragePool without padding
  (needs H/16 and W/16 >= 3), height averaged away, a per-column classifier and Softmax.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.k = 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def const(self, base: str, arr) -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def node(self, op: str, inputs, name: Optional[str] = None, **attrs) -> str:
        name = name or self.name(op.lower())
        out = name + "_out"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, act: bool = True,
             name: Optional[str] = None) -> str:
        w = self.rng.standard_normal((cout, cin, k, k)).astype(np.float32) * np.float32(np.sqrt(2.0 / (cin * k * k)))
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        y = self.node("Conv", [x, self.const("w", w), self.const("b", b)], name, kernel_shape=[k, k],
                      strides=[stride, stride], pads=[k // 2] * 4)
        if not act:
            return y
        return self.node("Mul", [y, self.node("Sigmoid", [y])])            # SiLU, as the exporters write it

    def model(self, inputs, outputs, opset: int = 13, metadata: Optional[Dict[str, str]] = None) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, "dynamic", inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        for k, v in (metadata or {}).items():
            m.metadata_props.add(key=k, value=v)
        onnx.checker.check_model(m)
        return m


def yolo_style(seed: int = 0, classes: int = 3, metadata: Optional[Dict[str, str]] = None,
               box_scale: float = 640.0) -> onnx.ModelProto:
    """Input ``images`` [batch, 3, height, width]; output ``output0`` [batch, 4 + classes, anchors]:
    sigmoid boxes times ``box_scale`` (pixels) concatenated with sigmoid class probabilities."""
    b = _Builder(seed)
    x = b.conv("images", 3, 8, stride=2)
    x = b.conv(x, 8, 16, stride=2)
    p3 = b.conv(x, 16, 16, stride=2)                                      # stride 8
    p4 = b.conv(p3, 16, 24, stride=2)                                     # stride 16
    p5 = b.conv(p4, 24, 32, stride=2)                                     # stride 32
    up = b.node("Resize", [p5, "", b.const("scales", np.array([1, 1, 2, 2], np.float32))], "/model.10/Resize",
                mode="nearest")
    n4 = b.conv(b.node("Concat", [up, p4], "/model.11/Concat", axis=1), 56, 24)
    up3 = b.node("Resize", [n4, "", b.const("scales", np.array([1, 1, 2, 2], np.float32))], "/model.13/Resize",
                 mode="nearest")
    n3 = b.conv(b.node("Concat", [up3, p3], "/model.14/Concat", axis=1), 40, 16)
    rows = 4 + classes
    heads = []
    for feat, cin in ((n3, 16), (n4, 24), (p5, 32)):
        h = b.conv(feat, cin, rows, k=1, act=False)
        heads.append(b.node("Reshape", [h, b.const("shape", np.array([0, rows, -1], np.int64))]))
    allh = b.node("Concat", heads, "/model.22/Concat", axis=2)
    box, cls = b.name("box"), b.name("cls")
    b.nodes.append(helper.make_node("Split", [allh, b.const("split", np.array([4, classes], np.int64))],
                                    [box, cls], name="/model.22/Split", axis=1))
    boxes = b.node("Mul", [b.node("Sigmoid", [box]), b.const("scale", np.float32(box_scale))], "/model.22/Mul")
    probs = b.node("Sigmoid", [cls], "/model.22/Sigmoid")
    b.nodes.append(helper.make_node("Concat", [boxes, probs], ["output0"], name="/model.22/Concat_out", axis=1))
    inp = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])
    out = helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", rows, "anchors"])
    return b.model([inp], [out], metadata=metadata)


def recognizer_style(seed: int = 1, classes: int = 37) -> onnx.ModelProto:
    """Input ``x`` [N, 3, H, W]; output ``probs`` [N, W/16 - 2, classes]."""
    b = _Builder(seed)
    x = b.conv("x", 3, 8, stride=2)
    x = b.conv(x, 8, 16, stride=2)
    x = b.conv(x, 16, 24, stride=2)
    x = b.conv(x, 24, 32, stride=2)                                       # stride 16
    x = b.node("AveragePool", [x], "p2o.AveragePool.0", kernel_shape=[3, 3], strides=[1, 1])
    x = b.node("ReduceMean", [x], "p2o.ReduceMean.0", axes=[2], keepdims=0)    # [N, 32, T]
    x = b.node("Transpose", [x], "p2o.Transpose.0", perm=[0, 2, 1])          # [N, T, 32]
    w = (b.rng.standard_normal((32, classes)) * 0.3).astype(np.float32)
    x = b.node("MatMul", [x, b.const("fc", w)], "p2o.MatMul.0")
    b.nodes.append(helper.make_node("Softmax", [x], ["probs"], name="p2o.Softmax.0", axis=2))
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    out = helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", "T", classes])
    return b.model([inp], [out])


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)
