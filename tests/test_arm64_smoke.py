"""Opt-in: the whole package on aarch64 under qemu-user (tests/arm64/smoke.sh; see its README).

Skipped unless EDGE_INFER_ARM64_SMOKE=1: it downloads Debian arm64 packages on its first run
and takes minutes under emulation (about 3 min on 2 cores with a warm cache, the first run
adds about half a minute of downloads).
"""
import os
import shutil
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "arm64", "smoke.sh")


@pytest.mark.skipif(os.environ.get("EDGE_INFER_ARM64_SMOKE", "") in ("", "0"),
                    reason="opt-in: set EDGE_INFER_ARM64_SMOKE=1 to run tests/arm64/smoke.sh "
                           "(qemu-aarch64 end-to-end smoke test, minutes)")
def test_arm64_smoke():
    missing = [t for t in ("qemu-aarch64-static", "aarch64-linux-gnu-gcc", "apt-get", "dpkg-deb")
               if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (Debian: apt-get install qemu-user-static "
                    "gcc-aarch64-linux-gnu)")
    r = subprocess.run(["bash", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=3600)
    out = r.stdout
    summary = out[out.rfind("=== SUMMARY"):] if "=== SUMMARY" in out else out[-6000:]
    print(summary)
    assert r.returncode == 0 and "RESULT: PASS" in out, out[-12000:]
