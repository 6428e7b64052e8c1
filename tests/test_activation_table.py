"""The one activation table (edge_infer/ops/activations.py): the generated C / OpenCL / CUDA
files are current, and every backend's name -> code map and enum agree with it."""
import os
import re

import pytest

from edge_infer.ops import activations as A

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "edge_infer", "backends")


def test_generated_files_are_current():
    for path in A.GENERATED:
        with open(path) as f:
            assert f.read() == A.generated_text(path), \
                f"{os.path.relpath(path, ROOT)} is stale: python -m edge_infer.ops.activations --write"


def test_table_is_well_formed():
    names = [n for n, _, _ in A.ACTIVATIONS]
    assert len(set(names)) == len(names) and names[0] == ""
    for name, n, defaults in A.ACTIVATIONS:
        assert len(defaults) == n, name
    assert A.CODES["Identity"] == A.CODES[""]


def test_every_backend_map_uses_the_table():
    from edge_infer.backends.cpu.native import kernels as native_kernels
    from edge_infer.backends.cpu.native import ops as native_ops
    from edge_infer.backends.cuda import ops as cuda_ops
    from edge_infer.backends.opencl import ops as opencl_ops
    for label, table in (("native UNARY", native_ops.UNARY), ("native depthwise", native_kernels.DW_ACTIVATIONS),
                         ("OpenCL ACT", opencl_ops.ACT), ("CUDA ACT", cuda_ops.ACT)):
        wrong = {k: v for k, v in table.items() if A.CODES.get(k) != v}
        assert not wrong, (label, wrong)
    # the activations every backend runs as a fused epilogue mean the same code everywhere
    for name in ("Relu", "Clip", "HardSwish", "HardSigmoid", "LeakyRelu"):
        assert native_ops.UNARY[name] == native_kernels.DW_ACTIVATIONS[name] == opencl_ops.ACT[name] \
            == cuda_ops.ACT[name] == A.CODES[name]


def _read(*parts):
    with open(os.path.join(PKG, *parts)) as f:
        return f.read()


def test_c_enums_are_the_table_codes():
    """The C enums name EI_ACT_* codes (no numbers of their own), and each EI_U_* / depthwise
    ACT_* name maps to the table entry of the same meaning."""
    h = _read("cpu", "native", "src", "elementwise.h")
    pairs = dict(re.findall(r"(EI_U_[A-Z_]+) = (EI_ACT_[A-Z_]+)", h))
    assert len(pairs) >= 19
    assert not re.search(r"EI_U_[A-Z_]+ = \d", h)
    expect = {"EI_U_COPY": "", "EI_U_LEAKY": "LeakyRelu", "EI_U_HSIGMOID": "HardSigmoid", "EI_U_HSWISH": "HardSwish",
              "EI_U_GELU_TANH": "GeluTanh", "EI_U_RECIP": "Reciprocal"}
    for u, act in pairs.items():
        name = expect[u] if u in expect else next(n for n, _, _ in A.ACTIVATIONS if A.macro(n) == u[len("EI_U_"):])
        assert act == "EI_ACT_" + A.macro(name), (u, act)
    dw = _read("cpu", "native", "src", "depthwise.h")        # where the depthwise enum lives
    dw_pairs = re.findall(r"(ACT_[A-Z]+) = (EI_ACT_[A-Z]+)", dw)
    assert len(dw_pairs) >= 6
    for act, code in dw_pairs:
        assert act[len("ACT_"):] == code[len("EI_ACT_"):]
    assert not re.search(r"ACT_[A-Z]+ = \d", dw)


@pytest.mark.parametrize("parts", [("opencl", "kernels"), ("cuda", "kernels")])
def test_device_sources_define_no_codes_of_their_own(parts):
    folder = os.path.join(PKG, *parts)
    for fn in os.listdir(folder):
        if fn.startswith("activations."):
            continue
        with open(os.path.join(folder, fn)) as f:
            text = f.read()
        assert not re.search(r"#define ACT_[A-Z]+ \d", text), fn


def test_device_programs_carry_the_table():
    from edge_infer.backends.cuda.device import module_source
    from edge_infer.backends.opencl.build import source
    want = A.defines("ACT_")
    assert want in source("elementwise")
    assert want in module_source("elementwise.cu")


@pytest.mark.parametrize("act, params, want", [("LeakyRelu", [], (0.01, 0.0)), ("HardSigmoid", [0.3], (0.3, 0.5)),
                                               ("Clip", [0.0, 6.0], (0.0, 6.0)), ("Relu", [], (0.0, 0.0))])
def test_epilogue_parameters_mean_the_same_on_opencl_and_cuda(act, params, want):
    """Parameters a fused node leaves out take the table's defaults on both device backends
    (before: 0 on OpenCL, an error on CUDA)."""
    from edge_infer.backends.cuda.ops import _act_params
    from edge_infer.backends.opencl.ops import activation
    from edge_infer.ir import Node
    node = Node("FusedConv", ["x", "w"], ["y"], {"activation": act, "activation_params": params}, name="c")
    code, p0, p1 = activation(node)
    assert (code, p0, p1) == _act_params(node)
    assert code == A.CODES[act] and (p0, p1) == pytest.approx(want)
