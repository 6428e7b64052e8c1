"""Whole-model parity with onnxruntime on the real architectures shipped in the
onnx package (AlexNet ... VGG-19), with seeded random weights.

Each model runs through ``load_onnx`` -> ``Runtime`` and through onnxruntime
(CPU, default graph optimizations and none) on the same seeded input; every
output must agree to a relative L2 error of 1e-4. The Softmax inputs (logits)
are added as extra outputs: with random weights a softmax can saturate, where
agreeing on probabilities says little.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_models import (LIGHT_MODELS, ort_run, randomized_light_model_path, rel_l2,  # noqa: E402
                         softmax_inputs, with_extra_outputs)

from edge_infer.frontends.onnx import load_onnx  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402

REL_L2_TOL = 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_matches_onnxruntime(name):
    t0 = time.perf_counter()
    model = onnx.load(randomized_light_model_path(name, seed=0))
    logits = softmax_inputs(model)
    with_extra_outputs(model, logits)
    inits = {t.name for t in model.graph.initializer}
    (inp,) = [i.name for i in model.graph.input if i.name not in inits]
    x = np.random.default_rng(1234).standard_normal((1, 3, 224, 224), dtype=np.float32)

    t1 = time.perf_counter()
    graph = load_onnx(model)
    assert set(logits) <= set(graph.outputs)
    ours = Runtime(graph, backend="cpu").run({inp: x})
    del graph
    t2 = time.perf_counter()

    data = model.SerializeToString()
    del model
    report = []
    for optimize in (True, False):
        ref = ort_run(data, {inp: x}, optimize=optimize)
        assert set(ref) == set(ours)
        for out, r in ref.items():
            assert ours[out].shape == r.shape, (out, ours[out].shape, r.shape)
            assert np.all(np.isfinite(ours[out])), out
            err = rel_l2(ours[out], r)
            report.append(f"{out}{'' if optimize else ' (ORT no-opt)'}: {err:.2e}")
            assert err <= REL_L2_TOL, f"{name} output {out!r}: rel L2 error {err:.3g} > {REL_L2_TOL}"
    t3 = time.perf_counter()

    # the random weights must keep the logits informative (softmax not saturated)
    for name_ in logits:
        std = float(np.std(ours[name_]))
        assert 0.1 < std < 100, f"{name} logits {name_!r} std {std:.3g}: weights badly scaled"
    print(f"\n{name}: {'; '.join(report)} | load+randomize {t1 - t0:.1f}s, "
          f"edge_infer {t2 - t1:.1f}s, onnxruntime x2 {t3 - t2:.1f}s")


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_optimized_artifact_matches_onnxruntime(name, tmp_path):
    """The same models through the whole converter at the highest opt level, an
    .eim on disk and the runtime; also nothing left that the optimizer removes."""
    from edge_infer import convert
    from edge_infer.artifact import load_artifact

    model = onnx.load(randomized_light_model_path(name, seed=0))
    logits = softmax_inputs(model)
    with_extra_outputs(model, logits)
    inits = {t.name for t in model.graph.initializer}
    (inp,) = [i.name for i in model.graph.input if i.name not in inits]
    src = tmp_path / f"{name}.onnx"
    onnx.save(model, str(src))
    data = model.SerializeToString()
    del model
    eim = tmp_path / f"{name}.eim"
    report = convert(src, eim, input_shapes={inp: (1, 3, 224, 224)}, opt_level=3)
    assert report["after"]["nodes"] < report["before"]["nodes"]

    graph, _ = load_artifact(str(eim))
    leftovers = [n.op for n in graph.nodes if n.op in ("BatchNormalization", "Identity", "Dropout")]
    assert not leftovers, leftovers
    const_only = [n.name for n in graph.nodes if all(graph.tensors[i].is_const for i in n.inputs if i)]
    assert not const_only, const_only
    del graph

    x = np.random.default_rng(1234).standard_normal((1, 3, 224, 224), dtype=np.float32)
    ours = Runtime(str(eim), backend="cpu").run({inp: x})
    ref = ort_run(data, {inp: x}, optimize=True)
    for out, r in ref.items():
        err = rel_l2(ours[out], r)
        assert err <= REL_L2_TOL, f"{name} output {out!r} at opt level 3: rel L2 error {err:.3g}"
