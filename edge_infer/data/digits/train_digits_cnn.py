"""Train the bundled digits CNN fixture and export it to ONNX by hand.

Regenerate (from the repository root; needs torch, scikit-learn, onnx, onnxruntime):

    pip install torch==2.13.0 scikit-learn onnx onnxruntime
    python edge_infer/data/digits/train_digits_cnn.py

Writes, beside this file:
  digits_cnn.onnx  opset 13, ir_version 8, input `input` float32 [N,1,8,8], output `logits` [N,10]
  samples.npz      the full held-out split: `x` float32 [n,1,8,8] (pixels / 16), `y` int64 [n]

Data: scikit-learn's `load_digits()` (1797 8x8 images, 10 classes; sklearn's copy of the
UCI optdigits test set). Split: `train_test_split(test_size=0.25, random_state=0, stratify=y)`
-> 1347 train / 450 held-out. The held-out split is never used for training or model
selection; it is only measured once, after the last epoch.

The ONNX graph is built with onnx.helper from the trained state_dict (no torch.onnx), with
BatchNormalization kept as separate nodes so that later fusion/quantization passes have work.
The script then checks that onnxruntime on the ONNX model matches torch on the held-out set
(max abs diff < 1e-4) and prints both accuracies.
"""
import argparse
import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

SEED = 0
SPLIT_SEED = 0        # train_test_split random_state
TEST_SIZE = 0.25
EPOCHS = 40
BATCH = 64
LR = 1e-2
WEIGHT_DECAY = 1e-4
BN_EPS = 1e-5
BN_MOMENTUM = 0.1
OPSET = 13
IR_VERSION = 8


def load_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]   # [1797,1,8,8] in [0,1]
    y = d.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=y)
    return (np.ascontiguousarray(x_tr), y_tr, np.ascontiguousarray(x_te), y_te)


def build_model():
    import torch.nn as nn

    def bn(c):
        return nn.BatchNorm2d(c, eps=BN_EPS, momentum=BN_MOMENTUM)

    class DigitsCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
            self.bn1 = bn(16)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
            self.bn2 = bn(32)
            self.pool = nn.MaxPool2d(2, 2)
            self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
            self.bn3 = bn(32)
            self.pw = nn.Conv2d(32, 64, 1, bias=False)
            self.bn4 = bn(64)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.bn1(self.conv1(x)).relu()
            x = self.bn2(self.conv2(x)).relu()
            x = self.pool(x)
            x = self.bn3(self.dw(x)).clamp(0.0, 6.0)        # ReLU6
            x = self.bn4(self.pw(x)).relu()
            x = x.mean(dim=(2, 3))                          # GlobalAveragePool + Flatten
            return self.fc(x)

    return DigitsCNN()


def train(x_tr, y_tr, epochs):
    import torch
    import torch.nn.functional as F

    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    steps_per_epoch = (len(x_tr) + BATCH - 1) // BATCH
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=LR, epochs=epochs, steps_per_epoch=steps_per_epoch)
    xt = torch.from_numpy(x_tr)
    yt = torch.from_numpy(y_tr)
    gen = torch.Generator().manual_seed(SEED)
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(xt), generator=gen)
        total, correct, loss_sum = 0, 0, 0.0
        for i in range(0, len(xt), BATCH):
            idx = perm[i:i + BATCH]
            xb, yb = xt[idx], yt[idx]
            # Light augmentation: random +-1 pixel shift (zero fill), same generator -> reproducible.
            xb = random_shift(xb, gen)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item() * len(idx)
            correct += int((logits.argmax(1) == yb).sum())
            total += len(idx)
        if epoch % 5 == 4 or epoch == epochs - 1:
            print(f"epoch {epoch + 1:3d}  loss {loss_sum / total:.4f}  train-acc {correct / total:.4f}")
    model.eval()
    return model


def random_shift(xb, gen):
    import torch
    import torch.nn.functional as F

    n = xb.shape[0]
    padded = F.pad(xb, (1, 1, 1, 1))
    dx = torch.randint(0, 3, (n,), generator=gen)
    dy = torch.randint(0, 3, (n,), generator=gen)
    out = torch.empty_like(xb)
    for k in range(n):
        out[k] = padded[k, :, dy[k]:dy[k] + 8, dx[k]:dx[k] + 8]
    return out


def to_onnx(model):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    sd = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    inits = []

    def init(name, arr, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(arr, dtype=dtype), name))
        return name

    nodes = []

    def conv(prefix, x, out, kernel, pad, group=1):
        w = init(f"{prefix}.weight", sd[f"{prefix}.weight"])
        nodes.append(helper.make_node(
            "Conv", [x, w], [out], name=prefix, kernel_shape=[kernel, kernel],
            pads=[pad, pad, pad, pad], strides=[1, 1], dilations=[1, 1], group=group))
        return out

    def batchnorm(prefix, x, out):
        ins = [x,
               init(f"{prefix}.weight", sd[f"{prefix}.weight"]),
               init(f"{prefix}.bias", sd[f"{prefix}.bias"]),
               init(f"{prefix}.running_mean", sd[f"{prefix}.running_mean"]),
               init(f"{prefix}.running_var", sd[f"{prefix}.running_var"])]
        nodes.append(helper.make_node("BatchNormalization", ins, [out], name=prefix,
                                      epsilon=BN_EPS, momentum=0.9))
        return out

    def relu(name, x, out):
        nodes.append(helper.make_node("Relu", [x], [out], name=name))
        return out

    t = "input"
    t = conv("conv1", t, "conv1_out", 3, 1)
    t = batchnorm("bn1", t, "bn1_out")
    t = relu("relu1", t, "relu1_out")
    t = conv("conv2", t, "conv2_out", 3, 1)
    t = batchnorm("bn2", t, "bn2_out")
    t = relu("relu2", t, "relu2_out")
    nodes.append(helper.make_node("MaxPool", [t], ["pool_out"], name="pool",
                                  kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0]))
    t = conv("dw", "pool_out", "dw_out", 3, 1, group=32)
    t = batchnorm("bn3", t, "bn3_out")
    cmin = init("relu6.min", np.float32(0.0))
    cmax = init("relu6.max", np.float32(6.0))
    nodes.append(helper.make_node("Clip", [t, cmin, cmax], ["relu6_out"], name="relu6"))
    t = conv("pw", "relu6_out", "pw_out", 1, 0)
    t = batchnorm("bn4", t, "bn4_out")
    t = relu("relu4", t, "relu4_out")
    nodes.append(helper.make_node("GlobalAveragePool", [t], ["gap_out"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="flatten", axis=1))
    w = init("fc.weight", sd["fc.weight"])        # [10, 64]
    b = init("fc.bias", sd["fc.bias"])            # [10]
    nodes.append(helper.make_node("Gemm", ["flat_out", w, b], ["logits"], name="fc",
                                  alpha=1.0, beta=1.0, transA=0, transB=1))

    graph = helper.make_graph(
        nodes, "digits_cnn",
        inputs=[helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        outputs=[helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=inits)
    graph.doc_string = ("Small CNN trained on scikit-learn digits (8x8, pixels/16). "
                        "Regenerate with edge_infer/data/digits/train_digits_cnn.py.")
    model_proto = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="edge_infer.data.digits.train_digits_cnn", producer_version="1")
    model_proto.ir_version = IR_VERSION
    onnx.checker.check_model(model_proto, full_check=True)
    return model_proto


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--out-dir", default=HERE, help="where to write digits_cnn.onnx and samples.npz")
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import torch

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)                  # thread count can change float summation order
    torch.use_deterministic_algorithms(True)

    x_tr, y_tr, x_te, y_te = load_split()
    print(f"split: {len(x_tr)} train / {len(x_te)} held-out (test_size={TEST_SIZE}, "
          f"random_state={SPLIT_SEED}, stratified)")

    t0 = time.time()
    model = train(x_tr, y_tr, args.epochs)
    print(f"trained {args.epochs} epochs in {time.time() - t0:.1f}s")
    n_params = sum(p.numel() for p in model.parameters())
    n_buffers = sum(b.numel() for n, b in model.named_buffers() if not n.endswith("num_batches_tracked"))
    print(f"parameters: {n_params} trainable (+{n_buffers} BatchNorm running stats)")

    with torch.no_grad():
        torch_logits = model(torch.from_numpy(x_te)).numpy()
    torch_acc = float((torch_logits.argmax(1) == y_te).mean())
    print(f"held-out accuracy (torch):       {torch_acc:.4f}")

    proto = to_onnx(model)
    os.makedirs(args.out_dir, exist_ok=True)
    onnx_path = os.path.join(args.out_dir, "digits_cnn.onnx")
    onnx.save_model(proto, onnx_path)
    onnx.checker.check_model(onnx_path, full_check=True)

    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    ort_logits = sess.run(["logits"], {"input": x_te})[0]
    diff = float(np.abs(ort_logits - torch_logits).max())
    ort_acc = float((ort_logits.argmax(1) == y_te).mean())
    print(f"max |onnxruntime - torch| logits: {diff:.3g}")
    print(f"held-out accuracy (onnxruntime): {ort_acc:.4f} ({int((ort_logits.argmax(1) == y_te).sum())}/{len(y_te)})")
    if diff >= 1e-4:
        print("ERROR: onnxruntime output does not match torch", file=sys.stderr)
        return 1
    # Batch-1 run too, to exercise the symbolic batch dim.
    one = sess.run(["logits"], {"input": x_te[:1]})[0]
    assert one.shape == (1, 10) and np.abs(one - ort_logits[:1]).max() < 1e-4

    samples_path = os.path.join(args.out_dir, "samples.npz")
    np.savez_compressed(samples_path, x=x_te.astype(np.float32), y=y_te.astype(np.int64))
    for p in (onnx_path, samples_path):
        print(f"wrote {os.path.relpath(p)} ({os.path.getsize(p)} bytes)")
    if ort_acc < 0.97:
        print("WARNING: held-out accuracy below the 0.97 target", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
