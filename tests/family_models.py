"""ONNX models of the families edge users deploy, at realistic layer sizes, with seeded random
weights (built with onnx.helper; nothing downloaded). Used by tests/test_family_models.py and the
benchmarks (benchmarks/compare.py --families, benchmarks/native_bench.py).

* ``mobilenetv3_classifier``: MobileNetV3-small (torchvision's block table): stem conv +
  HardSwish, inverted residual blocks (1x1 expand, depthwise 3x3/5x5, squeeze-excite
  GlobalAveragePool -> 1x1 conv -> Relu -> 1x1 conv -> HardSigmoid -> broadcast Mul, 1x1
  project, residual Add), Relu and HardSwish mixed as in the paper, 1x1 conv + GAP + 1x1 conv +
  HardSwish + Gemm head. ``hw=(48, 192), width=0.35, classes=2`` is the text-direction
  classifier of OCR pipelines (``text_direction_classifier``); ``mobilenetv3_large_classifier``
  the large one (its block table, last conv 960, head 1280).
* ``db_text_detector``: a DB text detector (PP-OCR-style): MobileNetV3-large x0.5 backbone,
  FPN (1x1 lateral convs, nearest Resize x2 + Add top-down, 3x3 smoothing, the four levels
  upsampled to 1/4 and concatenated), DB probability head (3x3 conv - BatchNormalization - Relu,
  ConvTranspose k2 s2 - BN - Relu, ConvTranspose k2 s2, Sigmoid): a [1, 1, H, W] map.
* ``yolo_detector``: YOLOv8n (widths 16..256, C2f repeats 1/2/2/1): Conv = conv + SiLU written
  ``x * Sigmoid(x)`` as the exporters write it, C2f (1x1 conv, Split, bottlenecks with residual
  Add, Concat, 1x1 conv), SPPF (three chained 5x5 MaxPools + Concat), PAN neck (nearest Resize
  + Concat up, strided conv + Concat down), decoupled head per stride 8/16/32, DFL (Reshape,
  Transpose, Softmax over 16 bins, 1x1 Conv with weights 0..15), box decoding ``anchor -+
  distance`` times the stride, and the exporters' output ``Concat`` of pixel boxes (cx, cy, w, h)
  and sigmoid class probabilities: [1, 4 + nc, anchors].

Weights: He-drawn convolutions with biases (BatchNorm folded, as exporters emit, except the DB
head which keeps its BatchNormalization nodes), each then rescaled so its output has unit
standard deviation on a random input (half for the last conv of a residual branch), as a trained
network's folded BatchNorm makes it (``_normalized``): activations stay O(1) through the
network. The YOLO class logits carry the exporters' prior bias (most probabilities near 0).
Every builder takes the input shape and ``seed``; ``width`` scales channel counts (the tests
build narrow, small models). Building needs onnxruntime (the rescaling runs the model).
"""
from __future__ import annotations

import math
from typing import Callable, List, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
PROXY = 96                  # input size (per side, at most) the weight scales are measured at


def _divisible(v: float, d: int = 8) -> int:
    """MobileNet's channel rounding: a multiple of ``d``, never more than 10% below ``v``."""
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


class _Builder:
    """Accumulates nodes and seeded initializers of one graph."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.count = 0
        self.targets = {}           # conv output -> (weight, bias or "", target std), see _normalized

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, arr, base: str = "const") -> str:
        a = np.asarray(arr)
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(a if a.dtype == np.int64 else a.astype(np.float32), n))
        return n

    def node(self, op: str, ins: Sequence[str], n_out: int = 1, **attrs):
        nm = self.name(op)
        outs = [f"{nm}_out{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(ins), outs, name=nm, **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x: str, cin: int, cout: int, k: int = 1, s: int = 1, group: int = 1,
             std: float = 1.0, bias: bool = True) -> str:
        """A conv with He-drawn weights (channel ranges spread), its output rescaled to ``std``
        by ``_normalized``."""
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * math.sqrt(2.0 / fan_in)
        w *= np.exp(0.3 * self.rng.standard_normal((cout, 1, 1, 1)))      # channels of unequal range
        ins = [x, self.const(w, "weight")]
        if bias:
            ins.append(self.const(self.rng.standard_normal(cout) * 0.2, "bias"))
        y = self.node("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=group)
        self.targets[y] = (ins[1], ins[2] if bias else "", std)
        return y

    def act(self, x: str, kind: str) -> str:
        if kind == "HS":
            y = self.node("HardSwish", [x])
        elif kind == "RE":
            y = self.node("Relu", [x])
        else:
            y = self.node("Mul", [x, self.node("Sigmoid", [x])])
        return y

    def batchnorm(self, x: str, c: int) -> str:
        r = self.rng
        return self.node("BatchNormalization",
                         [x, self.const(1 + 0.1 * r.standard_normal(c), "bn_scale"),
                          self.const(0.05 * r.standard_normal(c), "bn_bias"),
                          self.const(0.05 * r.standard_normal(c), "bn_mean"),
                          self.const(1 + 0.1 * np.abs(r.standard_normal(c)), "bn_var")], epsilon=1e-5)

    def upsample(self, x: str, factor: int) -> str:
        return self.node("Resize", [x, "", self.const([1.0, 1.0, factor, factor], "scales")], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    def model(self, name: str, inp: str, in_shape, outputs: Sequence[Tuple[str, list]]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(inp, TensorProto.FLOAT, in_shape)],
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, s) for o, s in outputs],
                                  self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="family_models")
        m.ir_version = IR_VERSION
        return m


def _normalized(build: Callable[[Tuple[int, int]], Tuple[onnx.ModelProto, dict]], hw: Tuple[int, int],
                seed: int) -> onnx.ModelProto:
    """``build(hw)``'s model with each conv's weight and bias rescaled so that its output has
    the target standard deviation on a random input, as BatchNorm folded into the conv gives a
    trained network (LSUV initialisation, Mishkin & Matas 2016). The scales are measured on the
    same model built at a small ``PROXY`` input (same weights: the builders draw nothing that
    depends on the input size), run by onnxruntime with the conv parameters as inputs: one run
    per wave of convs whose upstream convs are all final, so each scale is exact."""
    import onnxruntime as ort
    proxy = tuple(min(v, PROXY) for v in hw)
    small, targets = build(proxy)
    params = {n for w, b, _ in targets.values() for n in (w, b) if n}
    values = {t.name: numpy_helper.to_array(t) for t in small.graph.initializer if t.name in params}
    g = small.graph
    keep = [t for t in g.initializer if t.name not in params]
    del g.initializer[:]
    g.initializer.extend(keep)
    g.input.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in values.items())
    g.output.extend(helper.make_tensor_value_info(y, TensorProto.FLOAT, None) for y in targets)
    upstream = {}                   # tensor -> conv outputs it depends on
    for nd in g.node:
        up = set().union(*(upstream.get(i, set()) | ({i} if i in targets else set()) for i in nd.input))
        upstream.update((o, up) for o in nd.output)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(small.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(seed + 1).standard_normal([1, 3, *proxy]).astype(np.float32)
    factor = dict.fromkeys(values, 1.0)
    done: set = set()
    while len(done) < len(targets):
        outs = dict(zip(targets, sess.run(list(targets), {g.input[0].name: x, **values})))
        wave = [y for y in targets if y not in done and upstream[y] <= done]
        for y in wave:
            w, b, target = targets[y]
            f = target / max(float(np.std(outs[y])), 1e-12)
            for n in (w, b) if b else (w,):
                values[n] = values[n] * np.float32(f)
                factor[n] *= f
        done.update(wave)
    model, _ = build(hw)
    for t in model.graph.initializer:
        if t.name in factor:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor[t.name]), t.name))
    return model


# -- MobileNetV3 ------------------------------------------------------------------------------

#: (kernel, expanded, out, squeeze-excite, activation, stride) per block
MNV3_SMALL = [(3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
              (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
              (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
              (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1)]
MNV3_LARGE = [(3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
              (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
              (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
              (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
              (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1)]


def _squeeze_excite(b: _Builder, x: str, c: int) -> str:
    s = b.node("GlobalAveragePool", [x])
    s = b.act(b.conv(s, c, _divisible(c / 4)), "RE")
    s = b.node("HardSigmoid", [b.conv(s, _divisible(c / 4), c)], alpha=1 / 6, beta=0.5)
    return b.node("Mul", [x, s])


def _mnv3_backbone(b: _Builder, x: str, table, width: float) -> Tuple[str, int, List[Tuple[str, int]]]:
    """Stem + inverted residual blocks; returns (output, channels, [(tensor, channels) before
    each stride-2 block and at the end])."""
    c = _divisible(16 * width)
    x = b.act(b.conv(x, 3, c, 3, 2), "HS")
    taps = []
    for k, exp, out, se, nl, s in table:
        exp, out = _divisible(exp * width), _divisible(out * width)
        if s == 2:
            taps.append((x, c))
        y = b.act(b.conv(x, c, exp), nl) if exp != c else x
        y = b.act(b.conv(y, exp, exp, k, s, group=exp), nl)
        if se:
            y = _squeeze_excite(b, y, exp)
        residual = s == 1 and c == out
        y = b.conv(y, exp, out, std=0.5 if residual else 1.0)
        x = b.node("Add", [x, y]) if residual else y
        c = out
    taps.append((x, c))
    return x, c, taps


def mobilenetv3_classifier(hw: Tuple[int, int] = (224, 224), width: float = 1.0, classes: int = 1000,
                           seed: int = 0) -> onnx.ModelProto:
    """MobileNetV3-small at ``width``: input ``input`` [1, 3, *hw] (multiples of 32), output
    [1, classes] (logits)."""
    return _normalized(lambda size: _mnv3_graph(size, width, classes, seed), hw, seed)


def mobilenetv3_large_classifier(hw: Tuple[int, int] = (224, 224), width: float = 1.0, classes: int = 1000,
                                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV3-large at ``width`` (torchvision's table: last conv 960, head 1280), as
    ``mobilenetv3_classifier``."""
    return _normalized(lambda size: _mnv3_graph(size, width, classes, seed, MNV3_LARGE, 960, 1280), hw, seed)


def _mnv3_graph(hw, width, classes, seed, table=MNV3_SMALL, last=576, head=1024):
    b = _Builder(seed)
    x, c, _ = _mnv3_backbone(b, "input", table, width)
    last = _divisible(last * width)
    x = b.act(b.conv(x, c, last), "HS")
    x = b.node("GlobalAveragePool", [x])
    x = b.act(b.conv(x, last, head), "HS")          # torchvision: Linear 1024 / 1280, as a 1x1 conv here
    x = b.node("Flatten", [x], axis=1)
    w = b.const(b.rng.standard_normal((classes, head)) * math.sqrt(1 / head), "fc_weight")
    y = b.node("Gemm", [x, w, b.const(np.zeros(classes), "fc_bias")], transB=1)
    name = "mobilenetv3_small" if table is MNV3_SMALL else "mobilenetv3_large"
    return b.model(name, "input", [1, 3, *hw], [(y, [1, classes])]), b.targets


def text_direction_classifier(hw: Tuple[int, int] = (48, 192), seed: int = 0) -> onnx.ModelProto:
    """The OCR text-direction classifier: MobileNetV3-small x0.35, 2 classes, 48x192 lines."""
    return mobilenetv3_classifier(hw, width=0.35, classes=2, seed=seed)


# -- DB text detector -------------------------------------------------------------------------

def db_text_detector(hw: Tuple[int, int] = (640, 640), width: float = 0.5, fpn: int = 96,
                     seed: int = 0) -> onnx.ModelProto:
    """DB text detector: MobileNetV3-large x``width`` backbone, FPN of ``fpn`` channels, DB
    probability head. Input ``input`` [1, 3, *hw] (multiples of 32), output [1, 1, *hw]."""
    return _normalized(lambda size: _db_graph(size, width, fpn, seed), hw, seed)


def _db_graph(hw, width, fpn, seed):
    b = _Builder(seed)
    x, c, taps = _mnv3_backbone(b, "input", MNV3_LARGE, width)
    c5 = _divisible(960 * width)
    x = b.act(b.conv(x, c, c5), "HS")
    # strides 4, 8, 16, 32: the inputs of the stride-2 blocks after the first, and the last conv
    feats = [taps[1], taps[2], taps[3], (x, c5)]
    lat = [b.conv(t, ch, fpn, bias=False) for t, ch in feats]
    top = [lat[3]]
    for lvl in (2, 1, 0):
        top.insert(0, b.node("Add", [lat[lvl], b.upsample(top[0], 2)]))
    smooth = [b.conv(t, fpn, fpn // 4, 3, bias=False) for t in top]
    ups = [smooth[0]] + [b.upsample(smooth[i], 2 ** i) for i in (1, 2, 3)]
    fuse = b.node("Concat", ups[::-1], axis=1)
    h = b.act(b.batchnorm(b.conv(fuse, fpn, fpn // 4, 3, bias=False), fpn // 4), "RE")
    wt = b.rng.standard_normal((fpn // 4, fpn // 4, 2, 2)) * math.sqrt(2.0 / (fpn // 4))
    h = b.node("ConvTranspose", [h, b.const(wt, "deconv_weight"), b.const(np.zeros(fpn // 4), "deconv_bias")],
               kernel_shape=[2, 2], strides=[2, 2])
    h = b.act(b.batchnorm(h, fpn // 4), "RE")
    wt = b.rng.standard_normal((fpn // 4, 1, 2, 2)) * math.sqrt(1.0 / (fpn // 4))
    h = b.node("ConvTranspose", [h, b.const(wt, "deconv_weight"), b.const([-1.0], "deconv_bias")],
               kernel_shape=[2, 2], strides=[2, 2])
    y = b.node("Sigmoid", [h])
    return b.model("db_text_detector", "input", [1, 3, *hw], [(y, [1, 1, *hw])]), b.targets


# -- YOLOv8 -----------------------------------------------------------------------------------

def _c2f(b: _Builder, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
    c = cout // 2
    y = b.act(b.conv(x, cin, 2 * c), "SiLU")
    parts = list(b.node("Split", [y, b.const(np.array([c, c], np.int64), "split")], n_out=2, axis=1))
    for _ in range(n):
        h = b.act(b.conv(parts[-1], c, c, 3), "SiLU")
        h = b.act(b.conv(h, c, c, 3), "SiLU")
        parts.append(b.node("Add", [parts[-1], h]) if shortcut else h)
    return b.act(b.conv(b.node("Concat", parts, axis=1), (2 + n) * c, cout), "SiLU")


def _sppf(b: _Builder, x: str, c: int) -> str:
    ys = [b.act(b.conv(x, c, c // 2), "SiLU")]
    for _ in range(3):
        ys.append(b.node("MaxPool", [ys[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return b.act(b.conv(b.node("Concat", ys, axis=1), 2 * c, c), "SiLU")


def yolo_anchors(hw: Tuple[int, int], strides=(8, 16, 32)) -> Tuple[np.ndarray, np.ndarray]:
    """Anchor points (grid cell centres, grid units) [A, 2] and their strides [A]."""
    pts, st = [], []
    for s in strides:
        gy, gx = np.meshgrid(np.arange(hw[0] // s) + 0.5, np.arange(hw[1] // s) + 0.5, indexing="ij")
        pts.append(np.stack([gx.ravel(), gy.ravel()], 1))
        st.append(np.full(gx.size, s, np.float32))
    return np.concatenate(pts).astype(np.float32), np.concatenate(st)


def yolo_detector(hw=320, width: float = 0.25, classes: int = 80, seed: int = 0) -> onnx.ModelProto:
    """YOLOv8 at ``width`` (0.25: YOLOv8n) for a square ``hw`` (or (h, w)) input ``images``
    [1, 3, h, w] (multiples of 32); output ``output0`` [1, 4 + classes, anchors]."""
    hw = (hw, hw) if isinstance(hw, int) else tuple(hw)
    return _normalized(lambda size: _yolo_graph(size, width, classes, seed), hw, seed)


def _yolo_graph(hw, width, classes, seed):
    b = _Builder(seed)
    ch = [min(int(v * width), int(1024 * width)) for v in (64, 128, 256, 512, 1024)]
    rep = [max(1, round(v / 3)) for v in (3, 6, 6, 3)]          # depth 0.33
    conv = lambda x, ci, co, k=1, s=1: b.act(b.conv(x, ci, co, k, s), "SiLU")  # noqa: E731
    x = conv(conv("images", 3, ch[0], 3, 2), ch[0], ch[1], 3, 2)
    x = _c2f(b, x, ch[1], ch[1], rep[0], True)
    p3 = _c2f(b, conv(x, ch[1], ch[2], 3, 2), ch[2], ch[2], rep[1], True)
    p4 = _c2f(b, conv(p3, ch[2], ch[3], 3, 2), ch[3], ch[3], rep[2], True)
    p5 = _sppf(b, _c2f(b, conv(p4, ch[3], ch[4], 3, 2), ch[4], ch[4], rep[3], True), ch[4])
    n4 = _c2f(b, b.node("Concat", [b.upsample(p5, 2), p4], axis=1), ch[4] + ch[3], ch[3], 1, False)
    o3 = _c2f(b, b.node("Concat", [b.upsample(n4, 2), p3], axis=1), ch[3] + ch[2], ch[2], 1, False)
    o4 = _c2f(b, b.node("Concat", [conv(o3, ch[2], ch[2], 3, 2), n4], axis=1), ch[2] + ch[3], ch[3], 1, False)
    o5 = _c2f(b, b.node("Concat", [conv(o4, ch[3], ch[3], 3, 2), p5], axis=1), ch[3] + ch[4], ch[4], 1, False)
    reg = 16
    c2, c3 = max(16, ch[2] // 4, 4 * reg), max(ch[2], min(classes, 100))
    flat = []
    for o, co, s in zip((o3, o4, o5), (ch[2], ch[3], ch[4]), (8, 16, 32)):
        box = b.conv(conv(conv(o, co, c2, 3), c2, c2, 3), c2, 4 * reg, std=2.0)     # peaked DFL bins
        cls = b.conv(conv(conv(o, co, c3, 3), c3, c3, 3), c3, classes)
        # the exporters' class-bias prior: about 5 objects per image at this stride
        b.inits[-1].CopyFrom(numpy_helper.from_array(
            np.full(classes, math.log(5 / classes / (640 / s) ** 2), np.float32), b.inits[-1].name))
        b.targets[cls] = b.targets[cls][:1] + ("", 3.0)      # a few anchors fire: p > 0.5
        cat = b.node("Concat", [box, cls], axis=1)
        flat.append(b.node("Reshape", [cat, b.const(np.array([0, 4 * reg + classes, -1], np.int64), "shape")]))
    allx = b.node("Concat", flat, axis=2)
    box, cls = b.node("Split", [allx, b.const(np.array([4 * reg, classes], np.int64), "split")], n_out=2, axis=1)
    d = b.node("Reshape", [box, b.const(np.array([0, 4, reg, -1], np.int64), "shape")])
    d = b.node("Softmax", [b.node("Transpose", [d], perm=[0, 2, 1, 3])], axis=1)
    d = b.node("Conv", [d, b.const(np.arange(reg, dtype=np.float32).reshape(1, reg, 1, 1), "dfl_weight")],
               kernel_shape=[1, 1])
    d = b.node("Reshape", [d, b.const(np.array([0, 4, -1], np.int64), "shape")])
    lt, rb = (b.node("Slice", [d, b.const(np.array([lo], np.int64), "starts"),
                               b.const(np.array([hi], np.int64), "ends"), b.const(np.array([1], np.int64), "axes")])
              for lo, hi in ((0, 2), (2, 4)))
    pts, strides = yolo_anchors(hw)
    anc = b.const(pts.T[None], "anchors")
    x1y1, x2y2 = b.node("Sub", [anc, lt]), b.node("Add", [anc, rb])
    cxy = b.node("Div", [b.node("Add", [x1y1, x2y2]), b.const(2.0, "two")])
    wh = b.node("Sub", [x2y2, x1y1])
    dbox = b.node("Mul", [b.node("Concat", [cxy, wh], axis=1), b.const(strides[None, None], "strides")])
    b.nodes.append(helper.make_node("Concat", [dbox, b.node("Sigmoid", [cls])], ["output0"], name="output_concat",
                                    axis=1))
    return b.model("yolov8", "images", [1, 3, *hw], [("output0", [1, 4 + classes, len(strides)])]), b.targets


#: benchmark name -> builder call; the names benchmarks/compare.py and native_bench.py accept
FAMILIES = {
    "mnv3": lambda: mobilenetv3_classifier((224, 224)),
    "mnv3_textdir": lambda: text_direction_classifier((48, 192)),
    "mnv3_large": lambda: mobilenetv3_large_classifier((224, 224)),
    "db640": lambda: db_text_detector((640, 640)),
    "yolo320": lambda: yolo_detector(320),
    "yolo640": lambda: yolo_detector(640),
}
