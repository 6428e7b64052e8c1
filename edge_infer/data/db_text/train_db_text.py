"""Train the bundled DB-style text detector and export it to ONNX by hand.

Regenerate (from the repository root; needs torch, onnx, onnxruntime):

    pip install torch==2.13.0 onnx onnxruntime
    python edge_infer/data/db_text/train_db_text.py

Writes, beside this file, ``db_text.onnx``: input ``x`` float32 [N,3,H,W] (RGB in [0, 1], H and
W multiples of 32), output ``maps`` float32 [N,1,H,W], the probability that a pixel lies in
the shrunk region of a text line (binarize it at 0.3 as DB does, then grow each connected
region back by DB's unclip ratio to get the line's box).

The network is the detector PaddleOCR ships for mobile (DB on MobileNetV3-large x0.5, FPN of
96 channels): a MobileNetV3-large backbone at width 0.5 (conv + BatchNorm + HardSwish/ReLU,
inverted residual blocks with depthwise 3x3/5x5 convs and squeeze-excite = GlobalAveragePool,
1x1 conv, ReLU, 1x1 conv, HardSigmoid, Mul), a feature pyramid over strides 4, 8, 16 and 32
(1x1 lateral convs to 96 channels, nearest Resize x2 + Add top-down, 3x3 convs to 24,
nearest Resize to stride 4, Concat), and DB's probability head (3x3 conv + BN + ReLU, two 2x2
stride-2 ConvTransposes, Sigmoid). BatchNorms are folded into the convs in the export.

Training data: scenes from ``scenes.make_scene`` with seeds 0..SCENES-1 (held-out evaluation
scenes use seeds from 1,000,000 up), random 256x256 crops, flips and colour inversion. Loss:
DB's loss for the probability map, binary cross-entropy with online hard negative mining (3
negatives per positive) plus a dice loss. DB's threshold branch is not trained: it only serves
the training of DB's approximate binarization, and DB's inference graph (this one) never has
it. AdamW, cosine schedule.
"""
import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, ROOT)
from edge_infer.data.db_text.scenes import SIZE, eval_scenes, make_scene  # noqa: E402

SEED = 0
SCENES = 2000
STEPS = 1600
BATCH = 16
CROP = 256
LR = 3e-3
WEIGHT_DECAY = 5e-4
WIDTH = 0.5
FPN = 96
BN_EPS = 1e-5
OPSET = 17
IR_VERSION = 8
# MobileNetV3-large: kernel, expansion, output channels, squeeze-excite, activation, stride
MNV3_LARGE = [(3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
              (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
              (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
              (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
              (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1)]


def divisible(v, d=8):
    """MobileNet's channel rounding: a multiple of ``d``, never more than 10% below ``v``."""
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


# -- the model ----------------------------------------------------------------------------------

def build_model():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def act(kind):
        return nn.Hardswish() if kind == "HS" else nn.ReLU()

    class ConvBN(nn.Module):
        def __init__(self, cin, cout, k=1, s=1, groups=1, kind=None):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False)
            self.bn = nn.BatchNorm2d(cout, eps=BN_EPS)
            self.kind = kind
            self.act = act(kind) if kind else nn.Identity()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1 = nn.Conv2d(c, divisible(c / 4), 1)
            self.fc2 = nn.Conv2d(divisible(c / 4), c, 1)

        def forward(self, x):
            s = F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))
            return x * F.hardsigmoid(self.fc2(s))

    class Block(nn.Module):
        def __init__(self, cin, k, exp, cout, se, kind, s):
            super().__init__()
            self.expand = ConvBN(cin, exp, kind=kind) if exp != cin else None
            self.dw = ConvBN(exp, exp, k, s, groups=exp, kind=kind)
            self.se = SE(exp) if se else None
            self.project = ConvBN(exp, cout)
            self.residual = s == 1 and cin == cout

        def forward(self, x):
            y = self.expand(x) if self.expand is not None else x
            y = self.dw(y)
            if self.se is not None:
                y = self.se(y)
            y = self.project(y)
            return x + y if self.residual else y

    class DBText(nn.Module):
        def __init__(self):
            super().__init__()
            c = divisible(16 * WIDTH)
            self.stem = ConvBN(3, c, 3, 2, kind="HS")
            blocks, tap_channels = [], []
            for k, exp, out, se, kind, s in MNV3_LARGE:
                exp, out = divisible(exp * WIDTH), divisible(out * WIDTH)
                if s == 2:
                    tap_channels.append(c)
                blocks.append(Block(c, k, exp, out, se, kind, s))
                c = out
            self.blocks = nn.ModuleList(blocks)
            c5 = divisible(960 * WIDTH)
            self.last = ConvBN(c, c5, kind="HS")
            chans = tap_channels[1:4] + [c5]
            self.lateral = nn.ModuleList(nn.Conv2d(ci, FPN, 1, bias=False) for ci in chans)
            self.smooth = nn.ModuleList(nn.Conv2d(FPN, FPN // 4, 3, padding=1, bias=False) for _ in chans)
            self.head_conv = ConvBN(FPN, FPN // 4, 3, kind="RE")
            self.deconv1 = nn.ConvTranspose2d(FPN // 4, FPN // 4, 2, 2)
            self.deconv1_bn = nn.BatchNorm2d(FPN // 4, eps=BN_EPS)
            self.deconv2 = nn.ConvTranspose2d(FPN // 4, 1, 2, 2)

        def forward(self, x):
            """Probability-map logits [N, 1, H, W]."""
            x = self.stem(x)
            taps = []
            for b in self.blocks:
                if b.dw.conv.stride[0] == 2:
                    taps.append(x)
                x = b(x)
            feats = taps[1:4] + [self.last(x)]
            lat = [m(f) for m, f in zip(self.lateral, feats)]
            top = [lat[3]]
            for lvl in (2, 1, 0):
                top.insert(0, lat[lvl] + F.interpolate(top[0], scale_factor=2.0, mode="nearest"))
            sm = [m(t) for m, t in zip(self.smooth, top)]
            ups = [sm[0]] + [F.interpolate(sm[i], scale_factor=float(2 ** i), mode="nearest") for i in (1, 2, 3)]
            h = self.head_conv(torch.cat(ups[::-1], 1))
            h = F.relu(self.deconv1_bn(self.deconv1(h)))
            return self.deconv2(h)

    return DBText()


# -- data and loss ------------------------------------------------------------------------------

def make_pool(n):
    imgs, maps = [], []
    for s in range(n):
        im, m, _ = make_scene(s)
        imgs.append(np.round(im * 255).astype(np.uint8))
        maps.append(m.astype(np.uint8))
    return np.stack(imgs), np.stack(maps)[:, None]


def batch_from(pool, rng):
    imgs, maps = pool
    idx = rng.integers(0, len(imgs), BATCH)
    xb, yb = [], []
    for i in idx:
        y0, x0 = rng.integers(0, SIZE - CROP + 1, 2)
        im = imgs[i, :, y0:y0 + CROP, x0:x0 + CROP].astype(np.float32) / 255.0
        m = maps[i, :, y0:y0 + CROP, x0:x0 + CROP].astype(np.float32)
        if rng.random() < 0.5:
            im, m = im[..., ::-1], m[..., ::-1]
        if rng.random() < 0.3:
            im, m = im[:, ::-1], m[:, ::-1]
        if rng.random() < 0.3:
            im = 1.0 - im
        xb.append(im)
        yb.append(m)
    return np.ascontiguousarray(np.stack(xb)), np.ascontiguousarray(np.stack(yb))


def loss_fn(logits, gt):
    """DB's probability-map loss: BCE with 3:1 hard negative mining, plus dice."""
    import torch
    import torch.nn.functional as F
    bce = F.binary_cross_entropy_with_logits(logits, gt, reduction="none").flatten()
    pos = gt.flatten() > 0.5
    n_pos = int(pos.sum())
    neg_loss = bce[~pos]
    n_neg = min(int(neg_loss.numel()), max(3 * n_pos, 1024))
    neg_top = torch.topk(neg_loss, n_neg).values
    l_bce = (bce[pos].sum() + neg_top.sum()) / (n_pos + n_neg + 1e-6)
    p = torch.sigmoid(logits)
    dice = 1 - 2 * (p * gt).sum() / (p.sum() + gt.sum() + 1e-6)
    return l_bce + dice, (float(l_bce.detach()), float(dice.detach()))


def train(steps, scenes):
    import torch
    model = build_model()
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR)
    warm = 100
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    t0 = time.time()
    pool = make_pool(scenes)
    print(f"drew {scenes} scenes in {time.time() - t0:.0f}s", flush=True)
    rng = np.random.default_rng(SEED)
    model.train()
    t0 = time.time()
    for step in range(steps):
        x, y = batch_from(pool, rng)
        loss, parts = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {float(loss.detach()):.4f}  bce {parts[0]:.4f}  dice {parts[1]:.4f}  "
                  f"{time.time() - t0:.0f}s", flush=True)
    model.eval()
    return model


# -- export -------------------------------------------------------------------------------------

def to_onnx(model):
    """The trained model as an ONNX graph (BatchNorm folded), PaddleOCR's DB inference form."""
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

    def node(op, ins, base, **attrs):
        nm = name(base)
        out = nm + "_out"
        nodes.append(helper.make_node(op, ins, [out], name=nm, **attrs))
        return out

    def fold(bn):
        g = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().numpy().astype(np.float64)
        return g, bn.bias.detach().numpy() - bn.running_mean.detach().numpy() * g

    def conv(prefix, x, w, b, k, s=1, group=1):
        ins = [x, init(prefix + ".weight", w)] + ([init(prefix + ".bias", b)] if b is not None else [])
        return node("Conv", ins, prefix, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4,
                    dilations=[1, 1], group=group)

    def act(prefix, x, kind):
        if kind == "HS":
            return node("HardSwish", [x], prefix + ".hardswish")
        return node("Relu", [x], prefix + ".relu") if kind == "RE" else x

    def conv_bn(prefix, m, x):
        g, b = fold(m.bn)
        w = m.conv.weight.detach().numpy().astype(np.float64) * g[:, None, None, None]
        return act(prefix, conv(prefix + ".conv", x, w, b, m.conv.kernel_size[0], m.conv.stride[0], m.conv.groups), m.kind)

    def plain(prefix, m, x):
        b = m.bias.detach().numpy() if m.bias is not None else None
        return conv(prefix, x, m.weight.detach().numpy(), b, m.kernel_size[0])

    def up(x, f, prefix):
        return node("Resize", [x, "", init(prefix + ".scales", [1.0, 1.0, f, f])], prefix, mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    x = conv_bn("backbone.conv1", model.stem, "x")
    taps = []
    for i, blk in enumerate(model.blocks):
        p = f"backbone.stage{i}"
        if blk.dw.conv.stride[0] == 2:
            taps.append(x)
        y = conv_bn(p + ".expand", blk.expand, x) if blk.expand is not None else x
        y = conv_bn(p + ".dw", blk.dw, y)
        if blk.se is not None:
            s = node("GlobalAveragePool", [y], p + ".se.pool")
            s = node("Relu", [plain(p + ".se.conv1", blk.se.fc1, s)], p + ".se.relu")
            s = node("HardSigmoid", [plain(p + ".se.conv2", blk.se.fc2, s)], p + ".se.hardsigmoid",
                     alpha=1.0 / 6, beta=0.5)
            y = node("Mul", [y, s], p + ".se.mul")
        y = conv_bn(p + ".project", blk.project, y)
        x = node("Add", [x, y], p + ".add") if blk.residual else y
    feats = taps[1:4] + [conv_bn("backbone.last", model.last, x)]
    lat = [plain(f"neck.in{i}", m, f) for i, (m, f) in enumerate(zip(model.lateral, feats))]
    top = [lat[3]]
    for lvl in (2, 1, 0):
        top.insert(0, node("Add", [lat[lvl], up(top[0], 2.0, f"neck.up{lvl}")], f"neck.add{lvl}"))
    sm = [plain(f"neck.p{i}", m, t) for i, (m, t) in enumerate(zip(model.smooth, top))]
    ups = [sm[0]] + [up(sm[i], float(2 ** i), f"neck.p{i}.up") for i in (1, 2, 3)]
    h = conv_bn("head.conv", model.head_conv, node("Concat", ups[::-1], "neck.concat", axis=1))
    g, b = fold(model.deconv1_bn)
    w1 = model.deconv1.weight.detach().numpy().astype(np.float64) * g[None, :, None, None]
    b1 = model.deconv1.bias.detach().numpy() * g + b
    h = node("ConvTranspose", [h, init("head.deconv1.weight", w1), init("head.deconv1.bias", b1)], "head.deconv1",
             kernel_shape=[2, 2], strides=[2, 2])
    h = node("Relu", [h], "head.deconv1.relu")
    h = node("ConvTranspose", [h, init("head.deconv2.weight", model.deconv2.weight.detach().numpy()),
                               init("head.deconv2.bias", model.deconv2.bias.detach().numpy())], "head.deconv2",
             kernel_shape=[2, 2], strides=[2, 2])
    nodes.append(helper.make_node("Sigmoid", [h], ["maps"], name="head.sigmoid"))
    graph = helper.make_graph(
        nodes, "db_text",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        outputs=[helper.make_tensor_value_info("maps", TensorProto.FLOAT, ["N", 1, "H", "W"])],
        initializer=inits)
    graph.doc_string = ("DB-style text detector (MobileNetV3-large x0.5, FPN 96) trained on synthetic text scenes; "
                        "regenerate with edge_infer/data/db_text/train_db_text.py.")
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="edge_infer.data.db_text.train_db_text", producer_version="1")
    proto.ir_version = IR_VERSION
    onnx.checker.check_model(proto, full_check=True)
    return proto


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--scenes", type=int, default=SCENES)
    ap.add_argument("--eval", type=int, default=200, help="held-out scenes to measure the map IoU on")
    ap.add_argument("--out-dir", default=HERE)
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import torch

    from edge_infer.quantize.metrics import map_iou

    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)                  # 2 threads on a shared 2-core machine ran far slower
    t0 = time.time()
    model = train(args.steps, args.scenes)
    print(f"trained {args.steps} steps in {time.time() - t0:.0f}s")
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")
    proto = to_onnx(model)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "db_text.onnx")
    onnx.save_model(proto, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(proto.graph.node)} nodes)")
    torch.save(model.state_dict(), os.path.join(args.out_dir, "db_text_state.pt"))   # not shipped

    x, truth = eval_scenes(args.eval)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    out = np.concatenate([sess.run(None, {"x": x[k:k + 8]})[0] for k in range(0, len(x), 8)])
    with torch.no_grad():
        ref = torch.sigmoid(model(torch.from_numpy(x[:4]))).numpy()
    diff = float(np.abs(ref - out[:4]).max())
    print(f"max |onnxruntime - torch| on 4 scenes: {diff:.3g}")
    for thr in (0.3, 0.5):
        print(f"held-out text-map IoU vs truth ({args.eval} scenes, binarized at {thr}): "
              f"{map_iou(truth, out, threshold=thr):.4f}")
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
