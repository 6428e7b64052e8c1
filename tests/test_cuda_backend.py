"""CUDA backend: the .cu sources compile with nvcc, every claimed op has a launcher and every
launch matches its kernel's signature, the host-side pieces (fixed point, geometry, Jetson
detection, arena, I/O slots) are right, and the kernels agree with the CPU backend: fp32 within
1e-4 relative L2, int8 bit for bit.

Without a GPU the kernels run through the CPU emulator (the same .cu sources compiled as host
C++, emulator.py); the GPU parity tests at the end run only where CuPy sees a CUDA device
(benchmarks/cuda_device_check.sh runs them on a GPU machine) and skip cleanly elsewhere.
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from edge_infer.backends import BACKENDS, get_backend  # noqa: E402
from edge_infer.backends.cpu import CpuBackend  # noqa: E402
from edge_infer.backends.cuda import CudaBackend, cupy_status, is_jetson  # noqa: E402
from edge_infer.backends.cuda.executor import sizing_pass  # noqa: E402
from edge_infer.backends.cuda.ops import MAX_BLOCKS, gemm_grid, grid_1d  # noqa: E402
from edge_infer.backends.cuda.registry import TABLE  # noqa: E402

#: the kernel table's float and int8 launchers by op
LAUNCHERS = {op: e.prepare for op in TABLE.ops() for e in TABLE.entries(op) if e.dtype != "int8"}
INT8_LAUNCHERS = {op: e.prepare for op in TABLE.ops() for e in TABLE.entries(op) if e.dtype == "int8"}
from edge_infer.backends.cuda.signatures import KERNEL_DIR, check_args, cu_sources, kernels  # noqa: E402
from edge_infer.errors import BackendError  # noqa: E402
from edge_infer.ir import Graph  # noqa: E402
from edge_infer.runtime import specialize  # noqa: E402

REL = 1e-4
#: Jetson Nano (sm_53), Xavier (sm_72), Orin (sm_87), Hopper (sm_90): those this nvcc still builds
WANTED_ARCHS = ("53", "72", "87", "90")


def _emulator():
    from edge_infer.backends.cuda.emulator import EmulatedDevice, compiler
    if compiler() is None:
        pytest.skip("no host C++ compiler for the CUDA kernel emulator")
    return EmulatedDevice


# -- compilation ----------------------------------------------------------------------------------

def _nvcc_archs():
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    out = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout
    have = set(re.findall(r"compute_(\d+)", out))
    return nvcc, [a for a in WANTED_ARCHS if a in have]


def test_every_cu_source_compiles_with_nvcc(tmp_path):
    nvcc, archs = _nvcc_archs()
    assert archs, "nvcc builds none of sm_53/72/87/90"
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    jobs = []
    for src in cu_sources():                                  # all files at once: nvcc is mostly serial
        out = tmp_path / (os.path.basename(src) + ".fatbin")
        jobs.append((src, out, subprocess.Popen([nvcc, "--fatbin", *gencode, "-I", KERNEL_DIR, "-Werror",
                                                 "all-warnings", "-o", str(out), src],
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    for src, out, proc in jobs:
        log = proc.communicate()[0]
        assert proc.returncode == 0, f"{os.path.basename(src)} (sm_{', sm_'.join(archs)}):\n{log[-3000:]}"
        assert out.stat().st_size > 0


def _libnvrtc():
    """A loadable libnvrtc (the pip wheel nvidia-cuda-nvrtc, or a CUDA toolkit's), or None."""
    import ctypes
    import glob
    pats = [os.path.join(p, "nvidia", "*", "lib", "libnvrtc.so*") for p in sys.path if p]
    pats += [os.path.join(p, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*") for p in sys.path if p]
    pats += ["/usr/local/cuda*/lib64/libnvrtc.so*", "/usr/lib/*/libnvrtc.so*"]
    for pat in pats:
        for path in sorted(glob.glob(pat)):
            if "builtins" in path or ".alt." in path:
                continue
            try:
                # NVRTC dlopens its builtins library by soname: load it from the same folder first
                for b in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
                    if ".alt." not in b:
                        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def test_every_module_compiles_with_nvrtc_as_cupy_would():
    """What CuPy's RawModule does on the device: NVRTC on module_source(file) (common.cuh
    inlined, so the kernel cache key covers it) with the backend's options, here to PTX for a
    few architectures. Skips where no libnvrtc is installed (pip install nvidia-cuda-nvrtc)."""
    import ctypes
    from edge_infer.backends.cuda.device import NVRTC_OPTIONS, module_source
    lib = _libnvrtc()
    if lib is None:
        pytest.skip("libnvrtc not found (pip install nvidia-cuda-nvrtc)")
    for src in cu_sources():
        name = os.path.basename(src)
        text = module_source(name)
        assert '#include "common.cuh"' not in text and "mbqm" in text
        for arch in ("75", "87"):                      # Turing (CUDA 13's oldest), Jetson Orin
            prog = ctypes.c_void_p()
            assert lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), name.encode(), 0, None, None) == 0
            opts = [o.encode() for o in NVRTC_OPTIONS] + [f"-arch=compute_{arch}".encode()]
            rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            lib.nvrtcDestroyProgram(ctypes.byref(prog))
            assert rc == 0, f"{name} compute_{arch}: {log.value.decode(errors='replace')[-3000:]}"
            assert "warning" not in log.value.decode(errors="replace").lower(), log.value


def test_kernel_signatures_parse_and_follow_the_convention():
    ks = kernels()
    assert len(ks) >= 25
    for name, k in ks.items():
        assert k.params, name
    # the barrier kernels are exactly those declared so in their sources
    assert {n for n, k in ks.items() if k.syncs} == {"softmax_f32", "gemm_s8_nt"}
    with pytest.raises(BackendError):
        check_args("unary_f32", (np.zeros(2, np.float32), np.zeros(2, np.float32), 2, np.int32(1),
                                 np.float32(0), np.float32(0)))                 # a Python int for i64
    with pytest.raises(BackendError):
        check_args("lut_s8", (np.zeros(2, np.int8), np.zeros(2, np.int8), np.zeros(256, np.int32), np.int64(2)))


def test_every_claimed_op_has_a_launcher_and_every_kernel_is_launched():
    b = CudaBackend()
    claimed = set(b.supported_ops())
    assert claimed == set(LAUNCHERS) | set(INT8_LAUNCHERS)
    assert {"Conv", "FusedConv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool", "Concat",
            "Softmax", "LRN", "Add", "Mul", "Relu", "Transpose", "Reshape", "QuantizeLinear",
            "DequantizeLinear", "Resize"} <= claimed
    assert {"Conv", "FusedConv", "Gemm", "MatMul", "Add", "Mul", "Concat", "AveragePool", "MaxPool",
            "GlobalAveragePool", "Sigmoid", "Relu", "Clip"} <= set(INT8_LAUNCHERS)
    for op in claimed:
        assert callable(LAUNCHERS.get(op) or INT8_LAUNCHERS.get(op)), op
    here = os.path.dirname(os.path.abspath(sys.modules[CudaBackend.__module__].__file__))
    text = "".join(open(os.path.join(here, f)).read() for f in ("ops.py", "ops_nn.py", "ops_int8.py"))
    roles = set(re.findall(r'scratch\(\s*"([a-z0-9_]+)"', text))           # scratch names, not kernels
    launched = set(re.findall(r'"([a-z0-9_]+_(?:f32|s8|s32|b1|b4|b8|nt))"', text)) - roles
    unknown = launched - set(kernels())
    assert not unknown, f"launchers name kernels that do not exist: {unknown}"
    unused = set(kernels()) - launched - {"requantize_s32"}
    assert not unused, f"kernels no launcher uses: {unused}"


def test_registered_and_unavailable_without_cupy_or_gpu():
    assert "cuda" in BACKENDS
    ok, why = CudaBackend().available()
    if not ok:
        assert why.startswith(("cupy not installed", "no CUDA device", "cupy does not import")), why
        with pytest.raises(BackendError, match="not available"):
            get_backend("cuda")


# -- host-side pieces ---------------------------------------------------------------------------------

def test_jetson_detection_from_fake_roots(tmp_path):
    assert not is_jetson(str(tmp_path))
    tegra = tmp_path / "tegra"
    (tegra / "etc").mkdir(parents=True)
    (tegra / "etc" / "nv_tegra_release").write_text("# R35 (release), REVISION: 4.1\n")
    assert is_jetson(str(tegra))
    for model, want in ((b"NVIDIA Jetson Orin Nano Developer Kit\x00", True),
                        (b"Raspberry Pi 4 Model B Rev 1.4\x00", False)):
        root = tmp_path / model[:6].decode().strip()
        (root / "proc" / "device-tree").mkdir(parents=True)
        (root / "proc" / "device-tree" / "model").write_bytes(model)
        assert is_jetson(str(root)) is want


def test_launch_geometry():
    assert grid_1d(1) == (1,) and grid_1d(256) == (1,) and grid_1d(257) == (2,)
    assert grid_1d(0) == (1,)
    assert grid_1d(10 ** 12) == (MAX_BLOCKS,)           # grid-stride loops cover the rest
    assert gemm_grid(1, 1) == (1, 1, 1)
    assert gemm_grid(12321, 64, 1) == (1, 193, 1)
    assert gemm_grid(100, 130, 4) == (3, 2, 4)


def test_fixed_point_matches_cpu_requantize():
    from edge_infer.backends.cpu.kernels.int8_common import quantize_multiplier, requantize
    dev = _emulator()()
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.integers(-2 ** 31, 2 ** 31, 3000),
                        [-2 ** 31, 2 ** 31 - 1, 0, 1, -1, 2 ** 20, -(2 ** 20), 3, -3]]).astype(np.int32)
    cases = []
    for k in range(200):
        q, sh = quantize_multiplier(float(np.exp(rng.uniform(-25, 3))))
        cases.append((-q if k % 5 == 0 else q, sh))
    cases += [(-2 ** 31, 0), (2 ** 31 - 1, 30), (2 ** 30, -31)]
    for q, sh in cases:
        y = np.zeros_like(x)
        dev.bind("requantize_s32", (4,), (256,), (x, y, np.array([q], np.int32), np.array([sh], np.int32),
                                                   np.int64(x.size), np.int64(1), np.int32(1)))()
        ref = requantize(x.astype(np.int64), q, sh)
        fits = (ref >= -2 ** 31) & (ref < 2 ** 31)
        assert np.array_equal(y[fits], ref[fits]), (q, sh)


# -- single ops through the emulator against the CPU backend ---------------------------------------------

def _qd(scale, zp, axis=None):
    return {"scale": [float(np.float32(v)) for v in np.atleast_1d(scale)],
            "zero_point": [int(v) for v in np.atleast_1d(zp)], "axis": axis}


def _graph(op, inputs, attrs=None, out_dtype="float32", out_q=None):
    """A one-node graph: inputs [(name, array, quant, const?)]; returns (graph, feeds)."""
    g = Graph("t")
    feeds, names = {}, []
    for name, arr, q, const in inputs:
        names.append(name)
        if not name:
            continue
        if const:
            g.add_tensor(name, arr.dtype.name, arr.shape, arr, q)
        else:
            g.add_input(name, arr.dtype.name, arr.shape).quant = q
            feeds[name] = arr
    g.add_node(op, names, ["y"], **(attrs or {}))
    g.tensors["y"].dtype = out_dtype
    g.tensors["y"].quant = out_q
    g.outputs = ["y"]
    return g, feeds


def _compare(g, feeds, exact, integrated=False):
    sp = specialize(g, {k: v.shape for k, v in feeds.items()})
    ref = CpuBackend().prepare(sp).run(feeds)
    out = CudaBackend(_emulator()(integrated=integrated)).prepare(sp).run(feeds)
    for k, r in ref.items():
        o = out[k]
        assert o.shape == r.shape and o.dtype == r.dtype, (k, o.shape, r.shape)
        if exact:
            assert np.array_equal(o, r), (k, np.argwhere(o != r)[:5])
        else:
            den = np.linalg.norm(r.astype(np.float64)) or 1.0
            assert np.linalg.norm(o.astype(np.float64) - r) / den <= REL, k
    return out


CONV_CASES = [  # (c, m, k, stride, pad, group, dilation)
    (8, 16, 1, 1, 0, 1, 1), (3, 8, 3, 2, 1, 1, 1), (6, 6, 3, 1, 1, 6, 1), (8, 16, 3, 1, 2, 4, 2),
    (4, 8, 5, 2, 2, 4, 1), (5, 7, 3, 1, 0, 1, 1)]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "c{}m{}k{}s{}p{}g{}d{}".format(*c))
def test_conv_fp32_and_int8(case, layout):
    c, m, k, s, p, group, d = case
    rng = np.random.default_rng(sum(case))
    n, h, w = 2, 9, 7
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    attrs = {"group": group, "strides": [s, s], "pads": [p] * 4, "dilations": [d, d], "kernel_shape": [k, k]}
    oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    xin = x.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else x
    zshape = (n, oh, ow, m) if layout == "NHWC" else (n, m, oh, ow)
    attrs_l = dict(attrs, data_layout=layout) if layout == "NHWC" else attrs
    z = rng.standard_normal(zshape).astype(np.float32)
    g, feeds = _graph("FusedConv", [("x", xin, None, False), ("w", wt, None, True), ("b", b, None, True),
                                    ("z", z, None, False)], dict(attrs_l, activation="Relu"))
    _compare(g, feeds, exact=False)
    g, feeds = _graph("Conv", [("x", xin, None, False), ("w", wt, None, True)], attrs_l)
    _compare(g, feeds, exact=False)
    # int8: per-channel symmetric weights, int32 bias, zero points, residual and a clamp
    xq = rng.integers(-128, 128, xin.shape).astype(np.int8)
    wq = rng.integers(-127, 128, wt.shape).astype(np.int8)
    bq = rng.integers(-5000, 5000, m).astype(np.int32)
    zq = rng.integers(-128, 128, zshape).astype(np.int8)
    sw = rng.uniform(0.002, 0.02, m)
    g, feeds = _graph("FusedConv", [("x", xq, _qd(0.05, 3), False), ("w", wq, _qd(sw, [0] * m, 0), True),
                                    ("b", bq, _qd(0.05 * sw, [0] * m, 0), True), ("z", zq, _qd(0.1, -7), False)],
                      dict(attrs_l, activation="Relu"), "int8", _qd(0.4, -10))
    _compare(g, feeds, exact=True)


DECONV_CASES = [  # (c, m, k, stride, pads, output_padding, group, dilation)
    (4, 6, 2, 2, 0, 0, 1, 1), (5, 3, 4, 2, 1, 0, 1, 1), (6, 4, 3, 2, 1, 1, 1, 1), (4, 8, 3, 1, 1, 0, 2, 1),
    (3, 5, 3, 3, 2, 2, 1, 2)]


@pytest.mark.parametrize("case", DECONV_CASES, ids=lambda c: "c{}m{}k{}s{}p{}op{}g{}d{}".format(*c))
def test_conv_transpose_fp32_and_int8(case):
    """ConvTranspose stays NCHW in every plan (the layout pass keeps it so): NCHW here."""
    c, m, k, s, p, op, group, d = case
    rng = np.random.default_rng(sum(case))
    n, h, w = 2, 5, 6
    xin = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, m // group, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    attrs = {"group": group, "strides": [s, s], "pads": [p] * 4, "output_padding": [op, op],
             "dilations": [d, d], "kernel_shape": [k, k]}
    g, feeds = _graph("ConvTranspose", [("x", xin, None, False), ("w", wt, None, True), ("b", b, None, True)],
                      attrs)
    _compare(g, feeds, exact=False)
    if group > 1 or d > 1:        # the CPU's int8 kernel covers group 1, dilation 1
        return
    xq = rng.integers(-128, 128, xin.shape).astype(np.int8)
    wq = rng.integers(-127, 128, wt.shape).astype(np.int8)
    bq = rng.integers(-5000, 5000, m).astype(np.int32)
    sw = rng.uniform(0.002, 0.02, m)
    g, feeds = _graph("ConvTranspose", [("x", xq, _qd(0.05, 3), False), ("w", wq, _qd(sw, [0] * m, 1), True),
                                        ("b", bq, _qd(0.05 * sw, [0] * m, 0), True)], attrs, "int8",
                      _qd(0.4, -10))
    _compare(g, feeds, exact=True)


def test_split_fp32_and_int8():
    rng = np.random.default_rng(3)
    for arr, q in ((rng.standard_normal((2, 7, 3, 5)).astype(np.float32), None),
                   (rng.integers(-128, 128, (2, 7, 3, 5)).astype(np.int8), _qd(0.1, 2))):
        for axis, split in ((1, [2, 5]), (-1, [1, 3, 1]), (2, None)):
            g = Graph("t")
            g.add_input("x", arr.dtype.name, arr.shape).quant = q
            names = ["x"]
            if split is not None:
                g.add_tensor("s", "int64", (len(split),), np.array(split, np.int64))
                names.append("s")
            outs = [f"y{i}" for i in range(len(split) if split else 3)]
            g.add_node("Split", names, outs, axis=axis)
            for o in outs:
                g.tensors[o].dtype, g.tensors[o].quant = arr.dtype.name, q
            g.outputs = outs
            _compare(g, {"x": arr}, exact=True)


def test_int8_gemm_matmul_binary_lut_concat_pools():
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (5, 70)).astype(np.int8)
    bw = rng.integers(-127, 128, (33, 70)).astype(np.int8)
    bias = rng.integers(-3000, 3000, 33).astype(np.int32)
    sb = rng.uniform(0.01, 0.03, 33)
    g, f = _graph("FusedGemm", [("a", a, _qd(0.1, 5), False), ("b", bw, _qd(sb, [0] * 33, 0), True),
                                ("c", bias, _qd(0.1 * sb, [0] * 33, 0), True)],
                  {"transB": 1, "activation": "Clip", "activation_params": [0.0, 6.0]}, "int8", _qd(0.3, 2))
    _compare(g, f, exact=True)
    # MatMul of two computed int8 tensors, batched, both with zero points
    a3 = rng.integers(-128, 128, (2, 3, 40)).astype(np.int8)
    b3 = rng.integers(-128, 128, (2, 40, 9)).astype(np.int8)
    g, f = _graph("MatMul", [("a", a3, _qd(0.05, -3), False), ("b", b3, _qd(0.07, 11), False)], {}, "int8",
                  _qd(0.9, 1))
    _compare(g, f, exact=True)
    for op in ("Add", "Sub", "Mul"):
        x1 = rng.integers(-128, 128, (2, 3, 4, 5)).astype(np.int8)
        x2 = rng.integers(-128, 128, (3, 1, 5)).astype(np.int8)
        g, f = _graph(op, [("a", x1, _qd(0.02, 4), False), ("b", x2, _qd(0.05, -9), False)], {}, "int8",
                      _qd(0.04, 1))
        _compare(g, f, exact=True)
    x = np.arange(-128, 128, dtype=np.int8).reshape(4, 64)
    for op in ("Sigmoid", "Tanh", "HardSwish", "Gelu"):
        g, f = _graph(op, [("x", x, _qd(0.05, 3), False)], {}, "int8", _qd(1 / 256, -128 if op == "Sigmoid" else 0))
        _compare(g, f, exact=True)
    g, f = _graph("Relu", [("x", x, _qd(0.05, 3), False)], {}, "int8", _qd(0.03, -100))
    _compare(g, f, exact=True)
    c1 = rng.integers(-128, 128, (1, 2, 3, 3)).astype(np.int8)
    c2 = rng.integers(-128, 128, (1, 4, 3, 3)).astype(np.int8)
    g, f = _graph("Concat", [("a", c1, _qd(0.1, 0), False), ("b", c2, _qd(0.2, 5), False)], {"axis": 1}, "int8",
                  _qd(0.1, 0))
    _compare(g, f, exact=True)
    xp = rng.integers(-128, 128, (2, 3, 7, 6)).astype(np.int8)
    for attrs, outq in (({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, _qd(0.1, 2)),
                        ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}, _qd(0.1, 2)),
                        ({"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, _qd(0.07, -4))):
        g, f = _graph("AveragePool", [("x", xp, _qd(0.1, 2), False)], attrs, "int8", outq)
        _compare(g, f, exact=True)
    g, f = _graph("MaxPool", [("x", xp, _qd(0.1, 2), False)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
                  "int8", _qd(0.1, 2))
    _compare(g, f, exact=True)
    for outq in (_qd(0.1, 2), _qd(0.03, -1)):
        g, f = _graph("GlobalAveragePool", [("x", xp, _qd(0.1, 2), False)], {}, "int8", outq)
        _compare(g, f, exact=True)
    xf = rng.standard_normal((2, 3, 4)).astype(np.float32) * 3
    g, f = _graph("QuantizeLinear", [("x", xf, None, False), ("s", np.array(0.02, np.float32), None, True),
                                     ("zp", np.array(-3, np.int8), None, True)], {}, "int8")
    _compare(g, f, exact=True)
    g, f = _graph("DequantizeLinear", [("x", xp, None, False), ("s", np.array([0.1, 0.2, 0.3], np.float32), None, True),
                                       ("zp", np.array([1, -2, 3], np.int8), None, True)], {"axis": 1}, "float32")
    _compare(g, f, exact=True)


def test_fp32_elementwise_pools_softmax_lrn_resize_gemm():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    for op, attrs in (("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", {"alpha": 0.1}),
                      ("HardSwish", {}), ("Elu", {}), ("Gelu", {}), ("Softplus", {}), ("Exp", {})):
        g, f = _graph(op, [("x", x, None, False)], attrs)
        _compare(g, f, exact=False)
    for op in ("Add", "Sub", "Mul", "Div", "Max"):
        g, f = _graph(op, [("a", x, None, False), ("b", rng.standard_normal((5, 1, 7)).astype(np.float32) + 3,
                                                   None, True)])
        _compare(g, f, exact=False)
    for attrs in ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                  {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
                  {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1, "data_layout": "NHWC"}):
        for op in ("MaxPool", "AveragePool"):
            g, f = _graph(op, [("x", x, None, False)], attrs)
            _compare(g, f, exact=False)
    for op, attrs in (("GlobalAveragePool", {}), ("GlobalMaxPool", {"data_layout": "NHWC"}),
                      ("Softmax", {"axis": -1}), ("Softmax", {"axis": 1}), ("LogSoftmax", {"axis": 2}),
                      ("LRN", {"size": 3}), ("Transpose", {"perm": [0, 2, 3, 1]}), ("Flatten", {"axis": 1})):
        g, f = _graph(op, [("x", x, None, False)], attrs)
        _compare(g, f, exact=op in ("Transpose", "Flatten"))
    big = rng.standard_normal((1, 1000)).astype(np.float32) * 5
    g, f = _graph("Softmax", [("x", big, None, False)], {"axis": -1})
    _compare(g, f, exact=False)
    for mode in ("nearest", "linear"):
        g, f = _graph("Resize", [("x", x, None, False), ("", None, None, False),
                                 ("sc", np.array([1, 1, 2, 1.5], np.float32), None, True)], {"mode": mode})
        _compare(g, f, exact=mode == "nearest")
    a = rng.standard_normal((3, 20)).astype(np.float32)
    g, f = _graph("FusedGemm", [("a", a, None, False), ("b", rng.standard_normal((11, 20)).astype(np.float32), None, True),
                                ("c", rng.standard_normal(11).astype(np.float32), None, True)],
                  {"transB": 1, "alpha": 0.5, "beta": 2.0, "activation": "Relu"})
    _compare(g, f, exact=False)
    g, f = _graph("MatMul", [("a", rng.standard_normal((2, 3, 8)).astype(np.float32), None, False),
                             ("b", rng.standard_normal((8, 5)).astype(np.float32), None, True)])
    _compare(g, f, exact=False)
    parts = [rng.standard_normal((1, k, 3, 3)).astype(np.float32) for k in (2, 3)]
    g, f = _graph("Concat", [("a", parts[0], None, False), ("b", parts[1], None, False)], {"axis": 1})
    _compare(g, f, exact=True)


def test_kernels_stay_in_bounds_under_address_sanitizer():
    """The emulator built with AddressSanitizer and every tensor in its own allocation
    (EDGE_INFER_EMU_SEPARATE): any kernel reading or writing past a tensor aborts the child."""
    if os.environ.get("EDGE_INFER_EMU_CFLAGS"):
        pytest.skip("already running under the sanitizer")
    from edge_infer.backends.cuda.emulator import compiler
    cxx = compiler()
    if cxx is None:
        pytest.skip("no host C++ compiler")
    asan = subprocess.run([cxx, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(asan) or not os.path.exists(asan):
        pytest.skip("the compiler has no AddressSanitizer runtime")
    env = dict(os.environ, EDGE_INFER_EMU_SEPARATE="1", LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0",
               EDGE_INFER_EMU_CFLAGS="-fsanitize=address -fno-omit-frame-pointer")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "(conv_fp32_and_int8 and NHWC) or int8_gemm or (digits and nchw-discrete) or pipelined"],
                       capture_output=True, text=True, env=env, timeout=600)
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0 and "AddressSanitizer" not in tail, tail
    assert re.search(r"\b(\d+) passed", r.stdout) and int(re.search(r"(\d+) passed", r.stdout).group(1)) >= 8, tail


# -- models through the emulator -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits_graphs():
    pytest.importorskip("onnx")
    import onnx
    from edge_infer.convert import optimize_verified
    from edge_infer.data import digits_model_path, load_digits_samples
    from edge_infer.frontends.onnx import load_onnx
    from edge_infer.quantize import quantize_model
    g = load_onnx(onnx.load(digits_model_path()))
    x, _ = load_digits_samples()
    out = {}
    for layout in ("nchw", "nhwc"):
        g2 = g.copy()
        g2.metadata["preferred_layout"] = layout
        opt, _ = optimize_verified(g2, 3, samples=1)
        q, _ = quantize_model(opt, [{opt.inputs[0]: x[i:i + 1]} for i in range(16)])
        out[layout] = (opt, q)
    return out, x


@pytest.mark.parametrize("integrated", [False, True], ids=["discrete", "integrated"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_digits_fp32_and_int8_match_cpu(digits_graphs, layout, integrated):
    graphs, x = digits_graphs
    fp32, int8 = graphs[layout]
    xb = x[:8]
    _compare(fp32, {fp32.inputs[0]: xb}, exact=False, integrated=integrated)
    _compare(int8, {int8.inputs[0]: xb}, exact=True, integrated=integrated)


def test_pipelined_runs_and_arena(digits_graphs):
    graphs, x = digits_graphs
    g = graphs["nhwc"][1]
    name = g.inputs[0]
    sp = specialize(g, {name: (1, 1, 8, 8)})
    exe = CudaBackend(_emulator()()).prepare(sp)
    cpu = CpuBackend().prepare(sp)
    frames = [x[k:k + 1] for k in range(5)]
    want = [cpu.run({name: f})[g.outputs[0]] for f in frames]
    handles = [exe.run_async({name: frames[0]}), exe.run_async({name: frames[1]})]
    assert handles[1].slot is not handles[0].slot                      # two frames in flight
    handles.append(exe.run_async({name: frames[2]}))                  # reuses slot 0: finishes frame 0
    assert handles[0].done()
    handles += [exe.run_async({name: f}) for f in frames[3:]]
    for h, w in zip(handles, want):
        assert np.array_equal(h.result()[g.outputs[0]], w)
    out, times = exe.run_profiled({name: frames[4]})
    assert np.array_equal(out[g.outputs[0]], want[4]) and len(times) == len(exe.nodes)
    # arena: tensors live at the same time never share bytes; graph I/O is outside it
    plan = exe.arena_plan
    assert not set(plan.offsets) & (set(g.inputs) | set(g.outputs))
    items = list(plan.offsets.items())
    for i, (a, oa) in enumerate(items):
        for b, ob in items[i + 1:]:
            (fa, la), (fb, lb) = plan.lifetimes[a], plan.lifetimes[b]
            alias = plan.aliases.get(a) == b or plan.aliases.get(b) == a
            if la >= fb and lb >= fa and not alias:
                assert oa + plan.nbytes[a] <= ob or ob + plan.nbytes[b] <= oa, (a, b)
    assert exe.arena.size >= plan.size


@pytest.mark.slow
@pytest.mark.parametrize("name", ["light_squeezenet"])
def test_light_model_fp32_and_int8_match_cpu_emulated(name):
    onnx = pytest.importorskip("onnx")
    from onnx_models import randomized_light_model_path
    from edge_infer.convert import optimize_verified
    from edge_infer.frontends.onnx import load_onnx
    from edge_infer.quantize import quantize_model
    g = load_onnx(onnx.load(randomized_light_model_path(name)))
    g.metadata["preferred_layout"] = "nhwc"
    opt, _ = optimize_verified(g, 3, samples=1)
    x = np.random.default_rng(1234).standard_normal((1, 3, 224, 224), dtype=np.float32)
    _compare(opt, {opt.inputs[0]: x}, exact=False)
    cal = [{opt.inputs[0]: np.random.default_rng(k).standard_normal(x.shape, dtype=np.float32)} for k in range(2)]
    q = with_logits(quantize_model(opt, cal)[0])
    sp = specialize(q, {q.inputs[0]: x.shape})
    ref = CpuBackend().prepare(sp).run({q.inputs[0]: x})
    out = CudaBackend(_emulator()()).prepare(sp).run({q.inputs[0]: x})
    assert_parity(sp, ref, out, True, name)


def test_zoo_models_are_covered_and_every_launch_type_checks():
    """The sizing pass over the converted zoo graphs: every node has a launcher, and every
    launch's arguments match the kernel signature (what a GPU would otherwise read as garbage)."""
    onnx = pytest.importorskip("onnx")
    from onnx_models import randomized_light_model_path
    from edge_infer.frontends.onnx import load_onnx
    for name in ("light_squeezenet", "light_inception_v1", "light_resnet50"):
        g = load_onnx(onnx.load(randomized_light_model_path(name)))
        sp = specialize(g, {g.inputs[0]: (1, 3, 224, 224)})
        run = [n for n in sp.nodes if not all(sp.tensors[o].is_const for o in n.outputs if o)]
        ctx = sizing_pass(sp, run)                      # raises on any missing launcher or bad launch
        assert ctx.scratch_need and len(ctx.notes) >= len([n for n in run if n.op in ("Conv", "Gemm")])
        b = CudaBackend()
        assert all(b.supports(n, sp) for n in run), name


def with_logits(graph: Graph) -> Graph:
    """``graph`` (a copy) with its Softmax inputs as extra outputs: in an int8 graph those come
    from DequantizeLinear and must match bit for bit, while the float Softmax after them is
    compared within the fp32 tolerance."""
    g = graph.copy()
    for n in g.nodes:
        if n.op == "Softmax" and n.inputs[0] not in g.outputs:
            g.outputs.append(n.inputs[0])
    return g


def exact_outputs(graph: Graph) -> set:
    """Outputs an int8 graph computes in integers: int8 tensors and DequantizeLinear results."""
    prod = {o: n.op for n in graph.nodes for o in n.outputs}
    return {o for o in graph.outputs if graph.tensors[o].dtype == "int8" or prod.get(o) == "DequantizeLinear"}


def assert_parity(graph: Graph, ref: dict, out: dict, int8: bool, what) -> None:
    exact = exact_outputs(graph) if int8 else set()
    if int8:
        assert exact, f"{what}: no integer outputs to compare"
    for k, r in ref.items():
        if k in exact:
            assert np.array_equal(out[k], r), (what, k, int(np.sum(out[k] != r)))
        else:
            den = np.linalg.norm(r.astype(np.float64)) or 1.0
            assert np.linalg.norm(out[k].astype(np.float64) - r) / den <= REL, (what, k)


# -- the CuPy glue, against a stand-in for CuPy -------------------------------------------------------------

def fake_cupy(integrated: bool):
    """A stand-in for the subset of CuPy that device.CupyDevice calls (signatures as CuPy 14
    documents them), over host memory and the emulated kernels: it runs the glue code
    (modules, pinned and mapped memory, streams, events, async copies) that no GPU-less test
    would otherwise execute. It checks our use of CuPy's API as documented, not CuPy itself."""
    import ctypes
    import types
    from edge_infer.backends.cuda.emulator import EmulatedKernel

    class MemPtr:
        def __init__(self, ptr):
            self.ptr = ptr

        def copy_from_host_async(self, mem, size, stream=None):
            assert isinstance(mem, ctypes.c_void_p) and isinstance(stream, Stream)
            ctypes.memmove(self.ptr, mem.value, size)

        def copy_to_host_async(self, mem, size, stream=None):
            assert isinstance(mem, ctypes.c_void_p) and isinstance(stream, Stream)
            ctypes.memmove(mem.value, self.ptr, size)

    class Array(np.ndarray):
        @property
        def data(self):
            return MemPtr(self.ctypes.data)

    host_blocks = {}

    class Runtime:
        hostAllocMapped = 2

        @staticmethod
        def getDeviceCount():
            return 1

        @staticmethod
        def getDeviceProperties(i):
            return {"name": b"Fake GPU", "major": 8, "minor": 7}

        @staticmethod
        def hostAlloc(size, flags):
            assert flags == 2
            buf = np.zeros(size, np.uint8)
            host_blocks[buf.ctypes.data] = buf
            return buf.ctypes.data

        @staticmethod
        def pointerGetAttributes(ptr):
            assert ptr in host_blocks
            return types.SimpleNamespace(devicePointer=ptr, hostPointer=ptr)

        @staticmethod
        def freeHost(ptr):
            host_blocks.pop(ptr)

    class Device:
        def __init__(self, i=0):
            self.attributes = {"Integrated": int(integrated), "CanMapHostMemory": 1, "MaxThreadsPerBlock": 1024}

        def use(self):
            pass

        def synchronize(self):
            pass

    class Stream:
        current = []

        def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
            self.ptr = id(self)

        def __enter__(self):
            Stream.current.append(self)
            return self

        def __exit__(self, *exc):
            Stream.current.pop()

        def synchronize(self):
            pass

        def wait_event(self, event):
            assert isinstance(event, Event) and event.recorded

    class Event:
        def __init__(self, block=False, disable_timing=False, interprocess=False):
            self.recorded = False

        def record(self, stream=None):
            assert isinstance(stream, Stream)
            self.recorded = True

        def synchronize(self):
            assert self.recorded

    class RawModule:
        def __init__(self, code=None, path=None, options=(), backend="nvrtc", **kw):
            assert code and '#include "common.cuh"' not in code and all(isinstance(o, str) for o in options)
            self.code = code

        def get_function(self, name):
            assert f" {name}(" in self.code or f"({name}," in self.code, name
            k = EmulatedKernel(name)

            def launch(grid, block, args, shared_mem=0, stream=None):
                assert Stream.current, "kernels must launch inside the compute stream's context"
                k.bind(grid, block, args)()
            return launch

    def empty(shape, dtype):
        return np.zeros(shape, dtype).view(Array)

    def asarray(a):
        return np.array(a).view(Array)

    def matmul(a, b, out=None):
        assert Stream.current and isinstance(out, Array)
        np.matmul(a, b, out=out)
        return out

    def ndarray(shape, dtype, memptr):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        raw = (ctypes.c_uint8 * n).from_address(memptr.ptr)
        return np.frombuffer(raw, np.uint8).view(np.dtype(dtype)).reshape(shape).view(Array)

    cuda = types.SimpleNamespace(
        runtime=Runtime, Device=Device, Stream=Stream, Event=Event,
        alloc_pinned_memory=lambda n: bytearray(n),
        UnownedMemory=lambda ptr, size, owner, device_id=-1: types.SimpleNamespace(ptr=ptr, size=size, owner=owner),
        MemoryPointer=lambda mem, offset: types.SimpleNamespace(ptr=mem.ptr + offset, mem=mem))
    return types.SimpleNamespace(cuda=cuda, RawModule=RawModule, empty=empty, asarray=asarray, matmul=matmul,
                                 ndarray=ndarray, uint8=np.uint8, __version__="fake")


@pytest.mark.parametrize("integrated", [False, True], ids=["discrete", "integrated"])
def test_cupy_device_glue_runs_digits_through_a_cupy_stand_in(digits_graphs, integrated, monkeypatch):
    _emulator()
    from edge_infer.backends.cuda import device as D
    monkeypatch.setattr(D, "_cupy", fake_cupy(integrated))
    monkeypatch.setattr(D, "_cupy_error", None)
    dev = D.CupyDevice(0, root="/nonexistent")
    assert dev.integrated is integrated and "Fake GPU" in dev.describe()
    graphs, x = digits_graphs
    for g, exact in ((graphs["nhwc"][0], False), (graphs["nchw"][1], True)):
        name = g.inputs[0]
        sp = specialize(g, {name: (2, 1, 8, 8)})
        exe = CudaBackend(dev).prepare(sp)
        ref = [CpuBackend().prepare(sp).run({name: x[k:k + 2]}) for k in (0, 2, 4)]
        pend = [exe.run_async({name: x[k:k + 2]}) for k in (0, 2, 4)]
        for p, r in zip(pend, ref):
            out = p.result()
            for k in r:
                if exact:
                    assert np.array_equal(out[k], r[k])
                else:
                    assert np.linalg.norm(out[k] - r[k]) / np.linalg.norm(r[k]) <= REL
        t = exe.timed_run({name: x[:2]})
        assert {"host_write", "h2d", "compute", "d2h"} <= set(t) and all(t[k] >= 0 for k in ("h2d", "compute"))
        if exact:
            assert np.array_equal(t["outputs"][g.outputs[0]], ref[0][g.outputs[0]])


# -- on a GPU --------------------------------------------------------------------------------------------

def _gpu():
    ok, why = cupy_status()
    if not ok:
        pytest.skip(f"CUDA backend not runnable here: {why}")
    from edge_infer.backends.cuda import default_device
    return default_device()


def test_gpu_digits_fp32_and_int8(digits_graphs):
    dev = _gpu()
    graphs, x = digits_graphs
    for layout in ("nchw", "nhwc"):
        fp32, int8 = graphs[layout]
        for g, int8 in ((fp32, False), (int8, True)):
            sp = specialize(g, {g.inputs[0]: x.shape})
            ref = CpuBackend().prepare(sp).run({g.inputs[0]: x})
            out = CudaBackend(dev).prepare(sp).run({g.inputs[0]: x})
            assert_parity(sp, ref, out, int8, layout)


def test_gpu_pipelined_and_zero_copy_slots(digits_graphs):
    """run_async with two frames in flight, with device I/O buffers and with mapped host memory
    (zero-copy; on a discrete GPU the kernels read it over the bus)."""
    _gpu()
    from edge_infer.backends.cuda.device import CupyDevice
    graphs, x = digits_graphs
    g = graphs["nhwc"][1]
    name = g.inputs[0]
    sp = specialize(g, {name: (4, 1, 8, 8)})
    cpu = CpuBackend().prepare(sp)
    want = [cpu.run({name: x[k:k + 4]})[g.outputs[0]] for k in range(0, 40, 4)]
    for zero_copy in (False, True):
        exe = CudaBackend(CupyDevice(0, zero_copy=zero_copy)).prepare(sp)
        pending = [exe.run_async({name: x[k:k + 4]}) for k in range(0, 40, 4)]
        for p, w in zip(pending, want):
            assert np.array_equal(p.result()[g.outputs[0]], w), zero_copy
        assert "CUDA graph" in exe.launch_mode, exe.launch_mode     # frames 3.. replay each slot's graph


@pytest.mark.parametrize("name", ["light_squeezenet", "light_resnet50", "light_inception_v1", "light_shufflenet"])
def test_gpu_light_models(name):
    dev = _gpu()
    onnx = pytest.importorskip("onnx")
    from onnx_models import randomized_light_model_path
    from edge_infer.convert import optimize_verified
    from edge_infer.frontends.onnx import load_onnx
    from edge_infer.quantize import quantize_model
    g = load_onnx(onnx.load(randomized_light_model_path(name)))
    x = np.random.default_rng(1234).standard_normal((1, 3, 224, 224), dtype=np.float32)
    for layout in ("nchw", "nhwc"):
        g2 = g.copy()
        g2.metadata["preferred_layout"] = layout
        opt, _ = optimize_verified(g2, 3, samples=1)
        cal = [{opt.inputs[0]: np.random.default_rng(k).standard_normal((1, 3, 224, 224), dtype=np.float32)}
               for k in range(2)]
        q, _ = quantize_model(opt, cal)
        for gr, int8 in ((opt, False), (q, True)):
            sp = specialize(with_logits(gr), {gr.inputs[0]: x.shape})
            ref = CpuBackend().prepare(sp).run({gr.inputs[0]: x})
            out = CudaBackend(dev).prepare(sp).run({gr.inputs[0]: x})
            assert_parity(sp, ref, out, int8, (name, layout))


def _family_graphs():
    """(name, graph, input shape) of the deployed families at small sizes: MobileNetV3 (HardSwish,
    squeeze-excite), DB text detector (FPN, Resize, ConvTranspose), YOLO-style (SiLU, C2f, Split,
    upsample + concat head)."""
    onnx = pytest.importorskip("onnx")  # noqa: F841
    from family_models import db_text_detector, mobilenetv3_classifier, yolo_detector
    from edge_infer.frontends.onnx import load_onnx
    return [("mnv3", load_onnx(mobilenetv3_classifier((96, 96), classes=10)), (1, 3, 96, 96)),
            ("db", load_onnx(db_text_detector((96, 96))), (1, 3, 96, 96)),
            ("yolo", load_onnx(yolo_detector(96)), (1, 3, 96, 96))]


def test_launches_stay_one_by_one_on_the_emulator(digits_graphs):
    graphs, x = digits_graphs
    g = graphs["nhwc"][1]
    sp = specialize(g, {g.inputs[0]: x[:2].shape})
    exe = CudaBackend(_emulator()()).prepare(sp)
    outs = [exe.run({g.inputs[0]: x[k:k + 2]})[g.outputs[0]] for k in range(0, 8, 2)]
    assert "one by one: the emulator" in exe.launch_mode
    cpu = CpuBackend().prepare(sp)
    assert all(np.array_equal(o, cpu.run({g.inputs[0]: x[k:k + 2]})[g.outputs[0]])
               for o, k in zip(outs, range(0, 8, 2)))


def _family_parity(dev, layout):
    from edge_infer.convert import optimize_verified
    from edge_infer.quantize import quantize_model
    for name, g, shape in _family_graphs():
        g2 = g.copy()
        g2.metadata["preferred_layout"] = layout
        opt, _ = optimize_verified(g2, 3, samples=1)
        cal = [{opt.inputs[0]: np.random.default_rng(k).random(shape, dtype=np.float32)} for k in range(4)]
        q, _ = quantize_model(opt, cal)
        for gr, int8 in ((opt, False), (q, True)):
            sp = specialize(with_logits(gr), {gr.inputs[0]: shape})
            assert all(CudaBackend(dev).supports(n, sp) for n in sp.nodes
                       if not all(sp.tensors[o].is_const for o in n.outputs if o)), (name, layout)
            cpu, exe = CpuBackend().prepare(sp), CudaBackend(dev).prepare(sp)
            for k in range(3):          # the third frame replays the captured CUDA graph on a GPU
                xk = np.random.default_rng(99 + k).random(shape, dtype=np.float32)
                assert_parity(sp, cpu.run({gr.inputs[0]: xk}), exe.run({gr.inputs[0]: xk}), int8,
                              (name, layout, int8, k, exe.launch_mode))


@pytest.mark.parametrize("layout", ["nhwc", pytest.param("nchw", marks=pytest.mark.slow)])
def test_family_models_match_cpu_emulated(layout):
    """The families users deploy, fp32 and int8 (bit-exact), through the CPU emulator."""
    _family_parity(_emulator()(), layout)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_gpu_family_models(layout):
    """The same families on the GPU against the CPU backend."""
    _family_parity(_gpu(), layout)
