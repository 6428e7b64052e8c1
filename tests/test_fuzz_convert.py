"""Fuzzing ``convert`` (issue #16): ONNX and TFLite models mutated the structured way
(attributes and operator options, dims, initializer data, sparse initializers, node inputs,
opsets and op versions, input shapes, quantization parameters, buffers) and converted in a
subprocess. Every outcome must be a clean conversion (and run) or an edge_infer error; a
signal, a hang (the timeout) or a raw exception fails. Fixed seed in CI
(``EDGE_INFER_CONVERT_FUZZ_CASES`` models of each format, default 1500: about 25 s here);
set it higher for a long run, and ``EDGE_INFER_CONVERT_FUZZ_SEED`` for other cases.

The regression cases below are what earlier runs found, each as the smallest mutation that
reproduced it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fuzz_convert_cases import make_cases, onnx_base, onnx_base2, tflite_base, tflite_base2

pytest.importorskip("onnx")
pytest.importorskip("flatbuffers")

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = int(os.environ.get("EDGE_INFER_CONVERT_FUZZ_CASES", "1500"))
SEED = int(os.environ.get("EDGE_INFER_CONVERT_FUZZ_SEED", "16"))


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz_convert")
    written = make_cases(SEED, CASES, str(folder))
    assert len(written) > CASES                # most mutations of both formats reach convert
    return str(folder), dict((os.path.basename(p), d) for p, d in written)


def _run(folder: str, suffix: str, timeout: float):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]))
    try:
        r = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_convert_cases.py"), folder, suffix],
                           capture_output=True, text=True, env=env, timeout=timeout)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = "timeout", "hang"
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    return lines, err, rc


@pytest.mark.parametrize("suffix", [".onnx", ".tflite"])
def test_fuzz_convert(cases, suffix):
    folder, desc = cases
    lines, err, rc = _run(folder, suffix, timeout=120 + 0.5 * CASES)
    done = [x for x in lines if x["outcome"] != "start"]
    last = lines[-1] if lines else None
    if rc != 0:                                  # a signal or a hang: name the case it was on
        name = last["file"] if last else "?"
        pytest.fail(f"converter subprocess ended with {rc} on {name} ({desc.get(name)}): {err[-800:]}")
    bad = [(x, desc[x["file"]]) for x in done if x["outcome"] not in ("ok", "error")]
    assert not bad, bad[:5]
    want = [k for k in desc if k.endswith(suffix)]
    assert len(done) == len(want)
    assert {x["outcome"] for x in done} == {"ok", "error"}    # the mutations are not all fatal


# -- what earlier runs found --------------------------------------------------------------

def _onnx_case(tmp_path, mutate):
    m = onnx_base()
    mutate(m)
    path = tmp_path / "case.onnx"
    path.write_bytes(m.SerializeToString())
    return str(path)


def _attr(m, node, name):
    n = next(n for n in m.graph.node if n.name == node)
    return next(a for a in n.attribute if a.name == name), n


def _retype_axis(m):
    from onnx import AttributeProto
    a, _ = _attr(m, "softmax", "axis")
    a.Clear()
    a.name, a.type, a.s = "axis", AttributeProto.STRING, b"x"


def _kernel_shape_float(m):
    from onnx import AttributeProto
    a, _ = _attr(m, "conv1x1", "kernel_shape")
    a.Clear()
    a.name, a.type, a.f = "kernel_shape", AttributeProto.FLOAT, 1.5


def _softmax_no_inputs(m):
    del next(n for n in m.graph.node if n.name == "softmax").input[:]


def _relu_as_conv(m):
    next(n for n in m.graph.node if n.name == "relu").op_type = "Conv"


def _negative_init_dim(m):
    next(t for t in m.graph.initializer if t.name == "w2").dims[0] = -1048576


def _huge_symbolic_input(m):
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_value = 2 ** 40
    dims[3].dim_param = "N"


@pytest.mark.parametrize("mutate, needle", [
    (_retype_axis, "attribute 'axis' is of type STRING"),        # was ValueError: int('x')
    (_kernel_shape_float, "attribute 'kernel_shape' is of type FLOAT"),   # was TypeError: len(float)
    (_softmax_no_inputs, "0 inputs given"),                       # was IndexError
    (_relu_as_conv, "1 inputs given"),                            # was IndexError: Conv without weight
    (_negative_init_dim, "negative dim"),                         # numpy took -1048576 as "infer it"
    (_huge_symbolic_input, "would allocate"),     # was MemoryError: verification fed 16 TiB (N as 1)
])
def test_onnx_regressions_are_conversion_errors(tmp_path, mutate, needle):
    from edge_infer import convert
    from edge_infer.errors import ConversionError
    with pytest.raises(ConversionError, match=needle):
        convert(_onnx_case(tmp_path, mutate), str(tmp_path / "o.eim"))


def test_negative_input_dim_is_refused_before_onnx_shape_inference_aborts(tmp_path):
    """Was SIGABRT: onnx's C++ shape inference (the Slice rule's std::clamp) asserted on the
    input dim -1 of a model with a Slice, taking `edge-infer convert` down. Run in a
    subprocess: a regression would abort the test process."""
    m = onnx_base2()
    m.graph.input[0].type.tensor_type.shape.dim[3].dim_value = -1
    path = tmp_path / "case.onnx"
    path.write_bytes(m.SerializeToString())
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    r = subprocess.run([sys.executable, "-m", "edge_infer", "convert", str(path), "-o", str(tmp_path / "o.eim")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-500:])
    assert "input 'x': negative dim in [1, 3, 6, -1]" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_tflite_int64_input_to_an_int8_conv_is_refused(tmp_path):
    """Was KeyError 'l' in the fused activation: an int64 tensor reached the conv kernel."""
    from edge_infer import convert
    from edge_infer.errors import ConversionError
    w, ins, outs = tflite_base()
    w.tensors[0]["type"] = 4                      # x: INT64
    path = tmp_path / "case.tflite"
    path.write_bytes(w.finish(ins, outs))
    with pytest.raises(ConversionError, match="dtype int64; a convolution takes"):
        convert(str(path), str(tmp_path / "o.eim"))


@pytest.mark.parametrize("which", [1, 2])
def test_unmutated_bases_convert_and_match_their_oracles(tmp_path, which):
    """The fuzz starts from models that convert and agree with onnxruntime / LiteRT."""
    import edge_infer
    ort = pytest.importorskip("onnxruntime")
    m = onnx_base() if which == 1 else onnx_base2()
    shape = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    src = tmp_path / "base.onnx"
    src.write_bytes(m.SerializeToString())
    edge_infer.convert(str(src), str(tmp_path / "o.eim"))
    want = ort.InferenceSession(str(src)).run(None, {"x": x})[0]
    np.testing.assert_allclose(edge_infer.Runtime(str(tmp_path / "o.eim")).run(x)["y"], want, atol=1e-6)
    w, ins, outs = tflite_base() if which == 1 else tflite_base2()
    tfl = tmp_path / "base.tflite"
    tfl.write_bytes(w.finish(ins, outs))
    edge_infer.convert(str(tfl), str(tmp_path / "t.eim"))
    from edge_infer.backends.litert import interpreter_class
    cls = interpreter_class()[0]
    if cls is None:
        return
    it = cls(model_content=tfl.read_bytes())
    it.allocate_tensors()
    d = it.get_input_details()[0]
    rng = np.random.default_rng(1)
    xi = (rng.integers(-128, 128, d["shape"]) if d["dtype"] == np.int8 else rng.standard_normal(d["shape"]))
    xi = xi.astype(d["dtype"])
    it.set_tensor(d["index"], xi)
    it.invoke()
    ref = it.get_tensor(it.get_output_details()[0]["index"])
    got = edge_infer.Runtime(str(tmp_path / "t.eim"), backend="cpu").run(xi)["y"]
    # int8 base: one output step of the int8 FC is 0.2 before the softmax; float base: exact-ish
    np.testing.assert_allclose(got, ref, atol=0.02 if which == 1 else 1e-5)
