"""Whole MobileNet-family classifiers in int8 (the benchmark families of issue 18, built small):
the native int8 plan (depthwise on 4-tap quads and per tap, squeeze-excite gates, small-K VNNI
GEMMs, AMX tiles) gives the numpy int8 kernels' outputs bit for bit, and the int8 model keeps
the fp32 model's top-1 class on held-out inputs.

Models: tests/family_models.py's text-direction classifier (MobileNetV3-small x0.35, 2 classes,
48x192: 8-channel gates and depthwise layers), a MobileNetV3-small (HardSwish, 5x5 depthwise,
squeeze-excite) and MobileNet-v2 (benchmarks/_common.py, Clip 0..6, 3x3 depthwise stride 1/2),
seeded random weights; inputs are random pixels in each model's preprocessing range.
"""
from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import family_models as F  # noqa: E402

from edge_infer.backends.cpu import native  # noqa: E402


def _mobilenet_v2(path):
    import _common
    _common.mobilenet_v2_onnx(path, hw=96)


MODELS = {
    # name: (writer of the ONNX file, input shape, pixel range (lo, hi))
    "text_direction": (lambda p: onnx.save(F.text_direction_classifier((48, 192)), p), (1, 3, 48, 192), (-1, 1)),
    "mobilenetv3": (lambda p: onnx.save(F.mobilenetv3_classifier((96, 96), width=0.75, classes=100), p),
                    (1, 3, 96, 96), (-2, 2)),
    "mobilenetv2": (_mobilenet_v2, (1, 3, 96, 96), (-2, 2)),
}
CALIB, HELD_OUT = 8, 24
#: top-1 agreement of int8 with fp32 on the held-out inputs (issue 18: a drop of at most 1% on
#: real data, checked on the trained fixtures; random weights and 24 random inputs make this a
#: coarse check: the untrained MobileNet-v2's nearly flat logits agreed on 75-87% of them across
#: the two requantization modes and the numpy / native kernels (79% / 83% on 48 inputs), one
#: input being 4%; the gap check below, that every disagreement is a near tie in fp32, is the
#: finer guard)
MIN_AGREEMENT = 0.70


@pytest.fixture(scope="module", params=sorted(MODELS))
def converted(request, tmp_path_factory):
    import edge_infer
    name = request.param
    write, shape, (lo, hi) = MODELS[name]
    d = tmp_path_factory.mktemp(name)
    src = str(d / "m.onnx")
    write(src)
    in_name = onnx.load(src).graph.input[0].name
    rng = np.random.default_rng(11)
    xs = [rng.uniform(lo, hi, shape).astype(np.float32) for _ in range(CALIB + HELD_OUT)]
    # allow_drift: the seeded MobileNet-v2's 1000 logits are nearly flat (untrained, no
    # BatchNorm), a few of them one int8 level; the agreement test below is the check
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge_infer.convert(src, str(d / "q.eim"), quantize="int8", calib=[{in_name: x} for x in xs[:CALIB]],
                           allow_drift=True)
    edge_infer.convert(src, str(d / "f.eim"))
    return name, str(d / "q.eim"), str(d / "f.eim"), in_name, xs[CALIB:]


def _outputs(path, in_name, xs, monkeypatch=None):
    from edge_infer.runtime import Runtime
    rt = Runtime(path, backend="cpu", threads=2)
    ex = rt.plan({in_name: xs[0].shape})
    outs = [next(iter(rt.run({in_name: x}).values())) for x in xs]
    return ex, np.concatenate([o.reshape(1, -1) for o in outs])


@pytest.mark.skipif(native.lib is None, reason=f"native kernels: {native.why_not}")
def test_native_int8_plan_is_bit_exact_with_numpy(converted, monkeypatch):
    name, q, _, in_name, xs = converted
    ex, fast = _outputs(q, in_name, xs[:4])
    slow_ops = [n.op for n, s in zip(ex.nodes, ex.steps) if getattr(s, "native_step", None) is None]
    assert not slow_ops, slow_ops
    notes = " ".join(ex.notes.values())
    assert "depthwise" in notes
    monkeypatch.setattr(native, "lib", None)
    ex_np, slow = _outputs(q, in_name, xs[:4])
    assert not any("native" in v for v in ex_np.notes.values())
    np.testing.assert_array_equal(fast, slow)


def test_int8_keeps_fp32_top1(converted):
    name, q, f, in_name, xs = converted
    _, y8 = _outputs(q, in_name, xs)
    _, y32 = _outputs(f, in_name, xs)
    pick8, pick32 = y8.argmax(axis=1), y32.argmax(axis=1)
    agree = float(np.mean(pick8 == pick32))
    assert agree >= MIN_AGREEMENT, f"{name}: int8 top-1 agrees with fp32 on {agree:.0%} of {len(xs)} inputs"
    # where they differ, fp32 itself nearly tied: int8's pick is within 8% of the input's fp32
    # logit range of fp32's best (the untrained MobileNet-v2's logits are nearly flat)
    rows = np.nonzero(pick8 != pick32)[0]
    gaps = [(y32[r, pick32[r]] - y32[r, pick8[r]]) / np.ptp(y32[r]) for r in rows]
    assert all(g <= 0.08 for g in gaps), f"{name}: int8 flips fp32 top-1 by {max(gaps):.1%} of the logit range"
