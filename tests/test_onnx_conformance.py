"""ONNX's own backend node tests, run through edge_infer.

For every case under ``onnx/backend/test/data/node`` (generated into the test
cache when the onnx wheel does not ship them): cases whose ops are all
supported (``load_onnx`` raises no UnsupportedOpError) are run on the CPU
backend and compared with the expected outputs: rtol 1e-4 / atol 1e-5 for
float32/64, looser for float16 (its epsilon is 1e-3), exact for ints and bools.

Every graph input is fed as the case gives it, shape-deciding ones (pads, axes, target
shapes, Range bounds, TopK's k) included: nothing is frozen into a constant; the runtime
plans for those values as they arrive (``backends/cpu/staged.py``).

Cases that load but fail are listed in KNOWN_FAILURES (strict xfail, so a fix
shows up as XPASS); cases with unsupported ops or dtypes are skipped, naming them.
"""
from __future__ import annotations

import functools
import os
from typing import Dict, Tuple

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx_models import load_data_sets, model_ops, node_test_cases, node_test_dir  # noqa: E402

from edge_infer.errors import ConversionError, GraphError, ShapeError, UnsupportedOpError  # noqa: E402
from edge_infer.frontends.onnx import load_onnx  # noqa: E402
from edge_infer.runtime import Runtime  # noqa: E402

#: case -> why it fails. Keep it small and honest: each entry is a real gap.
KNOWN_FAILURES: Dict[str, str] = {
    "test_resize_downsample_scales_linear_align_corners":
        "align_corners with scales: the ONNX reference divides by length*scale - 1 unrounded "
        "(2.4 - 1); edge_infer, like onnxruntime, by the integer output length - 1 (gets 4.0, "
        "ORT 4.0, expected 3.142857)",
    "test_resize_downsample_scales_cubic_align_corners":
        "same align_corners/scales quirk of the ONNX reference as the linear case; "
        "edge_infer matches onnxruntime ([1, 2.5, 4, ...] vs expected [1, 2.395, 3.790, ...])",
}

#: case -> (rtol, atol, why) where the expected data cannot meet the default tolerance
TOLERANCES: Dict[str, Tuple[float, float, str]] = {
    "test_averagepool_2d_ceil_last_window_starts_on_pad":
        (1e-3, 1e-4, "expected output is written with 4 decimals (0.1511 for 0.151056)"),
    "test_causal_conv_with_state_silu_fp16_expanded":
        (3e-3, 3e-3, "a chain of ~10 float16 ops: one ulp of rounding difference (1.814 vs 1.817)"),
}

#: the ops edge_infer supports; each with node tests must pass at least one
SUPPORTED_OPS = (
    "Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "Relu", "Clip", "LeakyRelu",
    "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Softmax", "LogSoftmax", "Add",
    "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Max", "Min",
    "Sum", "Mean", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LRN", "Concat",
    "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Split", "Pad", "Resize",
    "Upsample", "ConstantOfShape", "Shape", "Size", "Gather", "Cast", "ReduceMean", "ReduceMax",
    "ReduceMin", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
    "ReduceLogSumExp", "Expand", "Tile", "Range", "Where", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Identity", "Dropout", "Erf", "Gelu",
    "Floor", "Ceil", "ArgMax", "ArgMin", "InstanceNormalization", "Softplus", "LayerNormalization",
    "GroupNormalization", "Einsum", "LSTM", "GRU", "RNN", "Attention",
    "TopK", "NonZero", "NonMaxSuppression", "Compress", "GatherND", "ScatterND", "ScatterElements",
    "OneHot", "CumSum", "Unique", "CenterCropPad",
    # pre-quantized models: QOperator (expanded to QDQ) and dynamic quantization
    "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger",
    "DynamicQuantizeLinear",
)

RTOL, ATOL = 1e-4, 1e-5
RTOL_F16, ATOL_F16 = 1e-3, 1e-3

ROOT = node_test_dir()
CASES = node_test_cases()


@functools.lru_cache(maxsize=None)
def run_case(case: str) -> Tuple[str, str]:
    """(status, detail): status is "pass", "fail", "unsupported" or "unconvertible"."""
    d = os.path.join(ROOT, case)
    try:
        graph = load_onnx(os.path.join(d, "model.onnx"))
    except UnsupportedOpError as e:
        return "unsupported", str(e)
    except ConversionError as e:
        return "unconvertible", str(e)
    model = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
    in_names = [v.name for v in model.graph.input]
    out_names = [v.name for v in model.graph.output]
    sets = load_data_sets(d)
    if not sets:
        return "unconvertible", "no tensor test data"
    try:
        for k, (inputs, expected) in enumerate(sets):
            feeds = {n: v for n, v in zip(in_names, inputs) if n in graph.inputs}
            got = _run(graph, feeds)
            for name, want in zip(out_names, expected):
                _compare(got[name], want, f"data set {k}, output {name!r}", TOLERANCES.get(case))
    except AssertionError as e:
        return "fail", _first_line(e) or "mismatch"
    except UnsupportedOpError as e:
        # the backend refuses a mode of a supported op (training-mode Dropout...)
        return "unsupported", _first_line(e)
    except Exception as e:  # noqa: BLE001  (a kernel or shape rule blew up: report which)
        return "fail", f"{type(e).__name__}: {_first_line(e)}"
    return "pass", ""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _run(graph, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Run on the CPU backend, every graph input fed as the test gives it: shape-deciding
    values (pads, axes, target shapes, Range bounds, TopK's k) arrive at run time and the
    runtime plans for them (``backends/cpu/staged.py``)."""
    return Runtime(graph, backend="cpu", threads=1).run(feeds)


def _compare(got: np.ndarray, want: np.ndarray, where: str, tol=None) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape, f"{where}: shape {got.shape} != expected {want.shape}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != expected {want.dtype}"
    if want.dtype.kind == "f":
        rtol, atol = (RTOL_F16, ATOL_F16) if want.dtype == np.float16 else (RTOL, ATOL)
        if tol is not None:
            rtol, atol = tol[0], tol[1]
        ok = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        if not ok.all():
            bad = np.argwhere(~ok)[0]
            raise AssertionError(f"{where}: {int((~ok).sum())}/{ok.size} values differ, e.g. at "
                                 f"{tuple(int(i) for i in bad)}: {got[tuple(bad)]!r} != {want[tuple(bad)]!r}")
    else:
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            raise AssertionError(f"{where}: {len(bad)}/{want.size} values differ")


def _params():
    for case in CASES:
        if case in KNOWN_FAILURES:
            yield pytest.param(case, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[case], strict=True))
        else:
            yield case


@pytest.mark.parametrize("case", list(_params()))
def test_node_case(case):
    status, detail = run_case(case)
    if status == "unsupported":
        pytest.skip(detail)
    if status == "unconvertible":
        pytest.skip(f"not convertible: {detail}")
    assert status == "pass", f"{case}: {detail}"


def test_known_failures_exist():
    """Every KNOWN_FAILURES / TOLERANCES entry names a real case (typos would hide nothing)."""
    missing = sorted((set(KNOWN_FAILURES) | set(TOLERANCES)) - set(CASES))
    assert not missing, f"KNOWN_FAILURES names unknown cases: {missing}"


def test_supported_ops_are_covered():
    """Each supported op that has node test cases passes at least one of them."""
    cases_by_op: Dict[str, list] = {}
    for case in CASES:
        model = onnx.load(os.path.join(ROOT, case, "model.onnx"), load_external_data=False)
        for op in model_ops(model):
            cases_by_op.setdefault(op, []).append(case)
    uncovered = {}
    for op in SUPPORTED_OPS:
        cases = cases_by_op.get(op)
        if not cases:
            continue
        # cases named after the op first: they test it most directly
        stem = "test_" + "".join("_" + c.lower() if c.isupper() else c for c in op).lstrip("_")
        cases = sorted(cases, key=lambda c: (not c.startswith(stem), c))
        results = {}
        for c in cases:
            results[c] = run_case(c)
            if results[c][0] == "pass":
                break
        else:
            uncovered[op] = "; ".join(f"{c}: {s} {d[:80]}" for c, (s, d) in list(results.items())[:3])
    assert not uncovered, "supported ops with no passing node test:\n" + "\n".join(
        f"  {op}: {why}" for op, why in sorted(uncovered.items()))
