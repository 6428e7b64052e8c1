"""The native kernels' self-tests (SIMD paths vs the scalar path, bit for bit, on seeded random
data) built from the library sources and native/selftest/main.c:

* natively on x86-64 (AVX2 vs scalar) with the host gcc;
* cross-compiled for aarch64 (aarch64-linux-gnu-gcc -O2 -static) and run under
  qemu-aarch64-static twice: ``-cpu cortex-a72`` (NEON without the dot product, a Raspberry
  Pi 4) and ``-cpu max`` (with sdot: Pi 5, Jetson Orin).

Each run prints one line per kernel group and exits non-zero on any failure. Skipped when
the compiler or qemu is missing.
"""
import glob
import os
import platform
import re
import shutil
import subprocess

import pytest

NATIVE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "edge_infer", "backends", "cpu", "native")
SOURCES = sorted(glob.glob(os.path.join(NATIVE, "src", "*.c")))
DRIVER = os.path.join(NATIVE, "selftest", "main.c")
FLAGS = ["-O2", "-std=gnu11", "-fno-strict-aliasing", "-pthread", "-I", os.path.join(NATIVE, "src")]


def defined_groups():
    """Self-test groups the sources define (``int ei_selftest_<group>(void) {``)."""
    found = set()
    for path in SOURCES:
        found |= set(re.findall(r"\bint\s+ei_selftest_(\w+)\s*\(void\)\s*\{", open(path).read()))
    return {g for g in found if not g.endswith("_internal")}


def registered_groups():
    m = re.search(r"#define GROUPS\(X\)(.*)", open(DRIVER).read())
    return set(re.findall(r"X\((\w+)\)", m.group(1)))


def build(cc, out, extra=()):
    """Compile every source (in parallel: one process each) and link them statically or not."""
    objs, procs = [], []
    for src in SOURCES + [DRIVER]:
        obj = out + "." + os.path.basename(src) + ".o"
        objs.append(obj)
        procs.append(subprocess.Popen([cc, *FLAGS, "-c", src, "-o", obj], stderr=subprocess.PIPE, text=True))
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(errors)[-4000:]
    r = subprocess.run([cc, *extra, "-pthread", *objs, "-o", out, "-lm"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]


def check_run(cmd, want_features):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    for name, on in want_features.items():
        assert f"{name} {int(on)}" in out.splitlines()[0], out
    for g in ("pool", "epilogue", "int8_gemm", "depthwise", "conv_f32"):
        assert re.search(rf"^{g}\s+simd\s+ok", out, re.M) and re.search(rf"^{g}\s+scalar\s+ok", out, re.M), out
    assert re.search(r"^\d+ runs, 0 failed$", out, re.M), out
    return out


def test_every_selftest_group_is_registered():
    assert defined_groups() <= registered_groups(), "add the group to GROUPS in native/selftest/main.c"


def test_selftest_x86_native(tmp_path):
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("gcc") is None:
        pytest.skip("needs gcc on x86-64")
    exe = str(tmp_path / "selftest")
    build("gcc", exe)
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
    check_run([exe], {"avx2": "avx2" in flags and "fma" in flags})


@pytest.fixture(scope="module")
def arm_selftest(tmp_path_factory):
    cc, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64-static")
    if cc is None or qemu is None:
        pytest.skip("needs aarch64-linux-gnu-gcc and qemu-aarch64-static (Debian: gcc-aarch64-linux-gnu, "
                    "qemu-user-static)")
    exe = str(tmp_path_factory.mktemp("arm") / "selftest_arm")
    build(cc, exe, ["-static"])
    return qemu, exe


@pytest.mark.parametrize("cpu,dotprod", [("cortex-a72", False), ("max", True)])
def test_selftest_aarch64_under_qemu(arm_selftest, cpu, dotprod):
    qemu, exe = arm_selftest
    check_run([qemu, "-cpu", cpu, exe], {"neon": True, "dotprod": dotprod})
