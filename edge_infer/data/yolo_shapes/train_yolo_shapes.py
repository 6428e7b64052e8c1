"""Train the bundled YOLO-style shapes detector and export it to ONNX by hand.

Regenerate (from the repository root; needs torch, onnx, onnxruntime):

    pip install torch==2.13.0 onnx onnxruntime
    python edge_infer/data/yolo_shapes/train_yolo_shapes.py

Writes, beside this file, ``yolo_shapes.onnx``: input ``images`` float32 [N,3,320,320] (RGB in
[0, 1]), output ``output0`` float32 [N,7,2100] = (cx, cy, w, h in input pixels, then the three
class probabilities) for 40x40 + 20x20 + 10x10 anchor points, exactly the layout the popular
YOLOv8 exporters write (box coordinates in pixels concatenated to sigmoid probabilities).

The network is a YOLOv8-style detector at a small width: Conv = conv + BatchNorm + SiLU
(exported as Conv -> Sigmoid -> Mul with the BatchNorm folded, as the exporters write it),
C2f blocks (Split, bottlenecks with residual Add, Concat), SPPF (three chained 5x5 MaxPools),
a PAN neck (nearest Resize x2 + Concat, strided convs + Concat) and a decoupled head per
stride (8, 16, 32): a box branch of 4 x 16 distribution logits (DFL: Softmax over 16 bins, a
1x1 Conv with weights 0..15) and a class branch. Boxes decode as ``anchor -+ distance * stride``.

Training data: scenes from ``scenes.make_scene`` with seeds 0..SCENES-1 (held-out evaluation
scenes use seeds from 1,000,000 up), augmented by the 8 flips/rotations of the square.
Assignment: an anchor point is positive for a box when it lies inside the box, within 2.5
strides of its centre, on the pyramid level of the box's size (FCOS-style ranges), the smallest
box winning ties; class targets are the IoU of the predicted box (quality-aware BCE), box loss
1 - GIoU plus the DFL cross-entropy (YOLOv8's gains 7.5 / 0.5 / 1.5). AdamW, cosine schedule.
"""
import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scenes import CLASSES, SIZE, eval_scenes, make_scene  # noqa: E402

SEED = 0
SCENES = 1600
STEPS = 1400
BATCH = 16
LR = 3e-3
WEIGHT_DECAY = 5e-4
REG_MAX = 16
NC = len(CLASSES)
STRIDES = (8, 16, 32)
WIDTHS = (8, 16, 24, 40, 56)        # stem, 1/4, P3, P4, P5
HEAD = 20                           # hidden width of each head branch
BN_EPS = 1e-3
LEVEL_RANGES = ((0, 32), (32, 64), (64, 1e9))   # max(l, t, r, b) in pixels per stride
OPSET = 13
IR_VERSION = 8


# -- the model ----------------------------------------------------------------------------------

def build_model():
    import torch
    import torch.nn as nn

    class Conv(nn.Module):
        def __init__(self, c1, c2, k=1, s=1):
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
            self.bn = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=0.03)

        def forward(self, x):
            return nn.functional.silu(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut=True):
            super().__init__()
            self.cv1, self.cv2 = Conv(c, c, 3), Conv(c, c, 3)
            self.add = shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, c1, c2, n=1, shortcut=True):
            super().__init__()
            self.c = c2 // 2
            self.cv1 = Conv(c1, 2 * self.c, 1)
            self.cv2 = Conv((2 + n) * self.c, c2, 1)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).chunk(2, 1))
            for m in self.m:
                y.append(m(y[-1]))
            return self.cv2(torch.cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, c1, c2):
            super().__init__()
            self.cv1 = Conv(c1, c1 // 2, 1)
            self.cv2 = Conv(c1 // 2 * 4, c2, 1)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            y = [self.cv1(x)]
            for _ in range(3):
                y.append(self.m(y[-1]))
            return self.cv2(torch.cat(y, 1))

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            c0, c1, c3, c4, c5 = WIDTHS
            self.b0 = Conv(3, c0, 3, 2)
            self.b1 = Conv(c0, c1, 3, 2)
            self.b2 = C2f(c1, c1)
            self.b3 = Conv(c1, c3, 3, 2)
            self.b4 = C2f(c3, c3, n=2)
            self.b5 = Conv(c3, c4, 3, 2)
            self.b6 = C2f(c4, c4, n=2)
            self.b7 = Conv(c4, c5, 3, 2)
            self.b8 = C2f(c5, c5)
            self.b9 = SPPF(c5, c5)
            self.n1 = C2f(c5 + c4, c4, shortcut=False)
            self.n2 = C2f(c4 + c3, c3, shortcut=False)
            self.n3 = Conv(c3, c3, 3, 2)
            self.n4 = C2f(c3 + c4, c4, shortcut=False)
            self.n5 = Conv(c4, c4, 3, 2)
            self.n6 = C2f(c4 + c5, c5, shortcut=False)
            self.box = nn.ModuleList(nn.Sequential(Conv(c, HEAD, 3), Conv(HEAD, HEAD, 3),
                                                   nn.Conv2d(HEAD, 4 * REG_MAX, 1)) for c in (c3, c4, c5))
            self.cls = nn.ModuleList(nn.Sequential(Conv(c, HEAD, 3), Conv(HEAD, HEAD, 3),
                                                   nn.Conv2d(HEAD, NC, 1)) for c in (c3, c4, c5))
            for b, c, s in zip(self.box, self.cls, STRIDES):      # YOLOv8's bias priors
                b[-1].bias.data[:] = 1.0
                c[-1].bias.data[:] = math.log(5 / NC / (SIZE / s) ** 2)

        def forward(self, x):
            up = nn.functional.interpolate
            x = self.b2(self.b1(self.b0(x)))
            p3 = self.b4(self.b3(x))
            p4 = self.b6(self.b5(p3))
            p5 = self.b9(self.b8(self.b7(p4)))
            n4 = self.n1(torch.cat([up(p5, scale_factor=2.0, mode="nearest"), p4], 1))
            o3 = self.n2(torch.cat([up(n4, scale_factor=2.0, mode="nearest"), p3], 1))
            o4 = self.n4(torch.cat([self.n3(o3), n4], 1))
            o5 = self.n6(torch.cat([self.n5(o4), p5], 1))
            return [torch.cat([b(o), c(o)], 1) for o, b, c in zip((o3, o4, o5), self.box, self.cls)]

    return Detector()


def anchors(size=SIZE):
    """Anchor points [A, 2] (pixel centres) and their strides [A], level by level, row-major."""
    pts, st = [], []
    for s in STRIDES:
        n = size // s
        yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) + 0.5
        pts.append(np.stack([xx.reshape(-1), yy.reshape(-1)], 1) * s)
        st.append(np.full(n * n, s, np.float32))
    return np.concatenate(pts), np.concatenate(st)


def decode(feats, anc, strides):
    """Training/eval decode in torch: raw level outputs -> (box logits [B,4,16,A], boxes xyxy
    [B,A,4] in pixels, class logits [B,A,NC])."""
    import torch
    x = torch.cat([f.flatten(2) for f in feats], 2)                  # [B, 64 + NC, A]
    b = x[:, :4 * REG_MAX].reshape(x.shape[0], 4, REG_MAX, -1)
    dist = (b.softmax(2) * torch.arange(REG_MAX, dtype=x.dtype).view(1, 1, -1, 1)).sum(2)   # [B,4,A]
    dist = dist.transpose(1, 2) * strides[None, :, None]
    boxes = torch.cat([anc[None] - dist[..., :2], anc[None] + dist[..., 2:]], 2)
    return b, boxes, x[:, 4 * REG_MAX:].transpose(1, 2)


# -- data ---------------------------------------------------------------------------------------

def make_pool(n):
    imgs = np.empty((n, 3, SIZE, SIZE), np.uint8)
    labels = []
    for k in range(n):
        im, b, c = make_scene(SEED + k)
        imgs[k] = np.rint(im * 255).astype(np.uint8)
        labels.append(np.concatenate([b, c[:, None].astype(np.float32)], 1))
    return imgs, labels


def augment(img, lab, t):
    """One of the 8 symmetries of the square (``t`` in 0..7) applied to an image and its boxes."""
    b = lab.copy()
    if t & 1:                                      # horizontal flip
        img = img[:, :, ::-1]
        b[:, [0, 2]] = SIZE - b[:, [2, 0]]
    if t & 2:                                      # vertical flip
        img = img[:, ::-1, :]
        b[:, [1, 3]] = SIZE - b[:, [3, 1]]
    if t & 4:                                      # transpose (x <-> y)
        img = img.transpose(0, 2, 1)
        b[:, [0, 1, 2, 3]] = b[:, [1, 0, 3, 2]]
    return np.ascontiguousarray(img), b


# -- loss ---------------------------------------------------------------------------------------

def box_iou_pairs(a, b, giou=False):
    import torch
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:], b[..., 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)
    union = area_a + area_b - inter + 1e-7
    iou = inter / union
    if not giou:
        return iou
    hull = (torch.maximum(a[..., 2:], b[..., 2:]) - torch.minimum(a[..., :2], b[..., :2])).prod(-1) + 1e-7
    return iou - (hull - union) / hull


def assign(gt, anc, strides):
    """gt [B, M, 5] (x1, y1, x2, y2, class; class -1 = padding) -> per anchor: foreground mask
    [B, A], target boxes [B, A, 4], target classes [B, A]."""
    import torch
    B, M = gt.shape[:2]
    valid = gt[..., 4] >= 0                                           # [B, M]
    ax, ay = anc[:, 0].view(1, -1, 1), anc[:, 1].view(1, -1, 1)      # [1, A, 1]
    x1, y1, x2, y2 = (gt[..., i].unsqueeze(1) for i in range(4))     # [B, 1, M]
    ltrb = torch.stack([ax - x1, ay - y1, x2 - ax, y2 - ay], -1)      # [B, A, M, 4]
    inside = ltrb.min(-1).values > 0
    s = strides.view(1, -1, 1)
    near = ((ax - (x1 + x2) / 2).abs() < 2.5 * s) & ((ay - (y1 + y2) / 2).abs() < 2.5 * s)
    m = ltrb.max(-1).values
    lo = torch.tensor([LEVEL_RANGES[STRIDES.index(int(v))][0] for v in strides.tolist()]).view(1, -1, 1)
    hi = torch.tensor([LEVEL_RANGES[STRIDES.index(int(v))][1] for v in strides.tolist()]).view(1, -1, 1)
    ok = inside & near & (m >= lo) & (m < hi) & valid.unsqueeze(1)
    area = ((x2 - x1) * (y2 - y1)).expand(B, anc.shape[0], M)
    area = torch.where(ok, area, torch.full_like(area, float("inf")))
    best = area.argmin(-1)                                            # [B, A]
    fg = ok.any(-1)
    tb = torch.gather(gt[..., :4], 1, best.unsqueeze(-1).expand(-1, -1, 4))
    tc = torch.gather(gt[..., 4], 1, best).long()
    return fg, tb, tc


def loss_fn(feats, gt, anc, strides):
    import torch
    import torch.nn.functional as F
    logits_box, boxes, logits_cls = decode(feats, anc, strides)
    fg, tb, tc = assign(gt, anc, strides)
    npos = max(int(fg.sum()), 1)
    iou = box_iou_pairs(boxes, tb, giou=False).detach().clamp(min=0)
    target = torch.zeros_like(logits_cls)
    target[fg, tc[fg]] = iou[fg]
    tsum = max(float(target.sum()), 1.0)
    l_cls = F.binary_cross_entropy_with_logits(logits_cls, target, reduction="sum") / tsum
    if not fg.any():
        return l_cls * 0.5, {}
    w = target.sum(-1)[fg]
    giou = box_iou_pairs(boxes[fg], tb[fg], giou=True)
    l_box = ((1 - giou) * w).sum() / tsum
    s = strides.view(1, -1, 1)
    a = anc.unsqueeze(0)
    tdist = torch.cat([a - tb[..., :2], tb[..., 2:] - a], -1) / s     # [B, A, 4] in strides
    tdist = tdist[fg].clamp(0, REG_MAX - 1 - 0.01)                    # [P, 4]
    pl = logits_box.permute(0, 3, 1, 2)[fg]                           # [P, 4, 16]
    tl = tdist.floor().long()
    wl = tl.float() + 1 - tdist
    ce = lambda t: F.cross_entropy(pl.reshape(-1, REG_MAX), t.reshape(-1), reduction="none").view(-1, 4)
    l_dfl = ((ce(tl) * wl + ce(tl + 1) * (1 - wl)).mean(-1) * w).sum() / tsum
    total = 7.5 * l_box + 0.5 * l_cls + 1.5 * l_dfl
    return total, {"box": float(l_box.detach()), "cls": float(l_cls.detach()), "dfl": float(l_dfl.detach()),
                   "pos": npos}


# -- training -----------------------------------------------------------------------------------

def train(steps, scenes):
    import torch
    t0 = time.time()
    imgs, labels = make_pool(scenes)
    print(f"generated {scenes} training scenes in {time.time() - t0:.1f}s", flush=True)
    model = build_model()
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.999))
    warm = min(100, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: (k + 1) / warm if k < warm else 0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * (k - warm) / max(steps - warm, 1))))
    anc, st = (torch.from_numpy(a) for a in anchors())
    rng = np.random.default_rng(SEED)
    model.train()
    t0 = time.time()
    for step in range(steps):
        idx = rng.integers(0, scenes, BATCH)
        tf = rng.integers(0, 8, BATCH)
        batch, labs = [], []
        for i, t in zip(idx, tf):
            im, lb = augment(imgs[i], labels[i], int(t))
            batch.append(im)
            labs.append(lb)
        m = max(len(lb) for lb in labs)
        gt = np.full((BATCH, m, 5), -1, np.float32)
        for k, lb in enumerate(labs):
            gt[k, :len(lb)] = lb
        x = torch.from_numpy(np.stack(batch).astype(np.float32) / 255.0)
        loss, parts = loss_fn(model(x), torch.from_numpy(gt), anc, st)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {float(loss):.3f}  " + "  ".join(f"{k} {v:.3g}" for k, v in parts.items())
                  + f"  {time.time() - t0:.0f}s", flush=True)
    model.eval()
    return model


# -- ONNX export ----------------------------------------------------------------------------------

def to_onnx(model):
    """The trained model as an ONNX graph in the YOLOv8 exporters' form (BatchNorm folded)."""
    import onnx
    import torch
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    counter = {"n": 0}

    def name(base):
        counter["n"] += 1
        return f"{base}_{counter['n']}"

    def init(base, arr, dtype=np.float32):
        n = name(base)
        inits.append(numpy_helper.from_array(np.asarray(arr, dtype=dtype), n))
        return n

    def node(op, ins, base, n_out=1, **attrs):
        nm = name(base)
        outs = [f"{nm}_out{i}" if n_out > 1 else f"{nm}_out" for i in range(n_out)]
        nodes.append(helper.make_node(op, ins, outs, name=nm, **attrs))
        return outs if n_out > 1 else outs[0]

    def conv_raw(prefix, x, w, b, k, s):
        return node("Conv", [x, init(prefix + ".weight", w), init(prefix + ".bias", b)], prefix,
                    kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, dilations=[1, 1], group=1)

    def conv(prefix, m, x):
        w = m.conv.weight.detach().numpy().astype(np.float64)
        bn = m.bn
        g = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().numpy().astype(np.float64)
        b = bn.bias.detach().numpy() - bn.running_mean.detach().numpy() * g
        y = conv_raw(prefix + "/conv", x, w * g[:, None, None, None], b, m.conv.kernel_size[0], m.conv.stride[0])
        return node("Mul", [y, node("Sigmoid", [y], prefix + "/act")], prefix + "/act")

    def c2f(prefix, m, x):
        y = conv(prefix + "/cv1", m.cv1, x)
        parts = node("Split", [y, init(prefix + "/split", [m.c, m.c], np.int64)], prefix + "/Split", 2, axis=1)
        ys = list(parts)
        for i, b in enumerate(m.m):
            h = conv(f"{prefix}/m.{i}/cv2", b.cv2, conv(f"{prefix}/m.{i}/cv1", b.cv1, ys[-1]))
            ys.append(node("Add", [ys[-1], h], f"{prefix}/m.{i}/add") if b.add else h)
        return conv(prefix + "/cv2", m.cv2, node("Concat", ys, prefix + "/Concat", axis=1))

    def sppf(prefix, m, x):
        ys = [conv(prefix + "/cv1", m.cv1, x)]
        for i in range(3):
            ys.append(node("MaxPool", [ys[-1]], f"{prefix}/m.{i}", kernel_shape=[5, 5], strides=[1, 1],
                           pads=[2, 2, 2, 2]))
        return conv(prefix + "/cv2", m.cv2, node("Concat", ys, prefix + "/Concat", axis=1))

    scales = init("up_scales", [1.0, 1.0, 2.0, 2.0])

    def up(x, prefix):
        return node("Resize", [x, "", scales], prefix, mode="nearest", coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor")

    x = "images"
    x = c2f("model.2", model.b2, conv("model.1", model.b1, conv("model.0", model.b0, x)))
    p3 = c2f("model.4", model.b4, conv("model.3", model.b3, x))
    p4 = c2f("model.6", model.b6, conv("model.5", model.b5, p3))
    p5 = sppf("model.9", model.b9, c2f("model.8", model.b8, conv("model.7", model.b7, p4)))
    n4 = c2f("model.12", model.n1, node("Concat", [up(p5, "model.10"), p4], "model.11", axis=1))
    o3 = c2f("model.15", model.n2, node("Concat", [up(n4, "model.13"), p3], "model.14", axis=1))
    o4 = c2f("model.18", model.n4, node("Concat", [conv("model.16", model.n3, o3), n4], "model.17", axis=1))
    o5 = c2f("model.21", model.n6, node("Concat", [conv("model.19", model.n5, o4), p5], "model.20", axis=1))
    flat = []
    for i, (o, bb, cc) in enumerate(zip((o3, o4, o5), model.box, model.cls)):
        hb = conv(f"model.22/cv2.{i}/1", bb[1], conv(f"model.22/cv2.{i}/0", bb[0], o))
        hb = conv_raw(f"model.22/cv2.{i}/2", hb, bb[2].weight.detach().numpy(), bb[2].bias.detach().numpy(), 1, 1)
        hc = conv(f"model.22/cv3.{i}/1", cc[1], conv(f"model.22/cv3.{i}/0", cc[0], o))
        hc = conv_raw(f"model.22/cv3.{i}/2", hc, cc[2].weight.detach().numpy(), cc[2].bias.detach().numpy(), 1, 1)
        cat = node("Concat", [hb, hc], f"model.22/Concat_{i}", axis=1)
        flat.append(node("Reshape", [cat, init("shape", [0, 4 * REG_MAX + NC, -1], np.int64)], f"model.22/Reshape_{i}"))
    allx = node("Concat", flat, "model.22/Concat_3", axis=2)
    box, cls = node("Split", [allx, init("split", [4 * REG_MAX, NC], np.int64)], "model.22/Split", 2, axis=1)
    d = node("Reshape", [box, init("shape", [0, 4, REG_MAX, -1], np.int64)], "model.22/dfl/Reshape")
    d = node("Transpose", [d], "model.22/dfl/Transpose", perm=[0, 2, 1, 3])
    d = node("Softmax", [d], "model.22/dfl/Softmax", axis=1)
    d = node("Conv", [d, init("model.22.dfl.conv.weight", np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1))],
             "model.22/dfl/conv", kernel_shape=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=1)
    d = node("Reshape", [d, init("shape", [0, 4, -1], np.int64)], "model.22/dfl/Reshape_1")
    sl = lambda a, b: node("Slice", [d, init("starts", [a], np.int64), init("ends", [b], np.int64),
                                     init("axes", [1], np.int64)], "model.22/Slice")
    lt, rb = sl(0, 2), sl(2, 4)
    anc, st = anchors()
    anc_c = init("model.22/anchors", (anc / st[:, None]).T[None])      # [1, 2, A], grid units
    x1y1 = node("Sub", [anc_c, lt], "model.22/Sub")
    x2y2 = node("Add", [anc_c, rb], "model.22/Add")
    cxy = node("Div", [node("Add", [x1y1, x2y2], "model.22/Add_1"), init("two", 2.0)], "model.22/Div")
    wh = node("Sub", [x2y2, x1y1], "model.22/Sub_1")
    dbox = node("Mul", [node("Concat", [cxy, wh], "model.22/Concat_4", axis=1), init("model.22/strides", st[None, None])],
                "model.22/Mul")
    prob = node("Sigmoid", [cls], "model.22/Sigmoid")
    nodes.append(helper.make_node("Concat", [dbox, prob], ["output0"], name="model.22/Concat_5", axis=1))
    n_anc = len(st)
    graph = helper.make_graph(
        nodes, "yolo_shapes",
        inputs=[helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        outputs=[helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + NC, n_anc])],
        initializer=inits)
    graph.doc_string = ("YOLOv8-style detector trained on synthetic shapes scenes (circle, square, triangle); "
                        "regenerate with edge_infer/data/yolo_shapes/train_yolo_shapes.py.")
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="edge_infer.data.yolo_shapes.train_yolo_shapes", producer_version="1")
    proto.ir_version = IR_VERSION
    proto.metadata_props.add(key="names", value=str(dict(enumerate(CLASSES))))
    proto.metadata_props.add(key="stride", value="32")
    proto.metadata_props.add(key="imgsz", value=f"[{SIZE}, {SIZE}]")
    onnx.checker.check_model(proto, full_check=True)
    return proto


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--scenes", type=int, default=SCENES)
    ap.add_argument("--eval", type=int, default=200, help="held-out scenes to measure F1 on")
    ap.add_argument("--out-dir", default=HERE)
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import torch

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
    from edge_infer.quantize.metrics import detection_f1

    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)                  # 2 threads on a shared 2-core machine ran 20x slower
    t0 = time.time()
    model = train(args.steps, args.scenes)
    print(f"trained {args.steps} steps in {time.time() - t0:.0f}s")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params}")
    proto = to_onnx(model)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "yolo_shapes.onnx")
    onnx.save_model(proto, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    torch.save(model.state_dict(), os.path.join(args.out_dir, "yolo_shapes_state.pt"))   # not shipped

    x, labels = eval_scenes(args.eval)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    out = np.concatenate([sess.run(None, {"images": x[k:k + 16]})[0] for k in range(0, len(x), 16)])
    with torch.no_grad():
        anc, st = (torch.from_numpy(a) for a in anchors())
        _, boxes, logit = decode(model(torch.from_numpy(x[:4])), anc, st)
        cxcywh = torch.cat([(boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]], 2)
        ref = torch.cat([cxcywh, logit.sigmoid()], 2).transpose(1, 2).numpy()
    diff = float(np.abs(ref - out[:4]).max())
    print(f"max |onnxruntime - torch| on 4 scenes: {diff:.3g}")
    f1, p, r = detection_f1(out, labels)
    print(f"held-out detection ({args.eval} scenes, conf 0.25, IoU 0.5): F1 {f1:.4f}  precision {p:.4f}  recall {r:.4f}")
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
