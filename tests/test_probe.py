"""Hardware probe and target matching, on fake machines (a /proc and /sys under tmp_path)
and on this one."""
import json

import pytest

from edge_infer.probe import format_probe, match_target, parse_cpuinfo, probe
from edge_infer.targets import list_targets

PI4_CPUINFO = "".join(f"""processor\t: {i}
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd08
CPU revision\t: 3

""" for i in range(4)) + "Hardware\t: BCM2835\nRevision\t: c03114\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"

PI5_CPUINFO = PI4_CPUINFO.replace("0xd08", "0xd0b").replace(
    "fp asimd evtstrm crc32 cpuid", "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
    "asimdrdm lrcpc dcpop asimddp")

PI4_32BIT_CPUINFO = PI4_CPUINFO.replace("fp asimd evtstrm crc32 cpuid",
                                        "half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae "
                                        "evtstrm crc32").replace("BogoMIPS", "model name\t: ARMv7 Processor rev 3 (v7l)\nBogoMIPS")

X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz
cpu MHz\t\t: 3192.000
flags\t\t: fpu vme de pse tsc msr pae mce sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 lm

processor\t: 1
model name\t: Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz
cpu MHz\t\t: 3192.000
flags\t\t: fpu vme de pse tsc msr pae mce sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 lm
"""

MEMINFO = "MemTotal:        3884096 kB\nMemFree:          120000 kB\nMemAvailable:    2900000 kB\n"


def make_machine(root, cpuinfo, model=None, tegra=None, temps=(("cpu-thermal", 52100),), max_khz=1800000):
    def w(rel, text):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    w("proc/cpuinfo", cpuinfo)
    w("proc/meminfo", MEMINFO)
    if model is not None:
        w("proc/device-tree/model", model + "\x00")
    if tegra is not None:
        w("etc/nv_tegra_release", tegra)
    for i, (kind, milli) in enumerate(temps):
        w(f"sys/class/thermal/thermal_zone{i}/type", kind + "\n")
        w(f"sys/class/thermal/thermal_zone{i}/temp", f"{milli}\n")
    if max_khz:
        for c in range(4):
            w(f"sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq", "1500000\n")
            w(f"sys/devices/system/cpu/cpu{c}/cpufreq/cpuinfo_max_freq", f"{max_khz}\n")
    return str(root)


def test_parse_cpuinfo():
    pi4 = parse_cpuinfo(PI4_CPUINFO)
    assert pi4["logical_cpus"] == 4 and pi4["arm_cores"] == ["cortex-a72"]
    assert "neon" in pi4["simd"] and "dotprod" not in pi4["simd"]
    pi5 = parse_cpuinfo(PI5_CPUINFO)
    assert pi5["arm_cores"] == ["cortex-a76"] and {"neon", "asimddp", "dotprod", "asimdhp"} <= set(pi5["simd"])
    x86 = parse_cpuinfo(X86_CPUINFO)
    assert x86["model"].startswith("Intel") and x86["logical_cpus"] == 2
    assert {"avx2", "fma", "sse4_2"} <= set(x86["simd"]) and "avx512f" not in x86["simd"]
    avx512 = parse_cpuinfo(X86_CPUINFO.replace("avx2 lm", "avx2 avx512f avx512bw lm"))
    assert {"avx512f", "avx512bw"} <= set(avx512["simd"])


@pytest.mark.parametrize("cpuinfo,model,tegra,want,why", [
    (PI4_CPUINFO, "Raspberry Pi 4 Model B Rev 1.4", None, "rpi4", "Raspberry Pi 4"),
    (PI4_CPUINFO, "Raspberry Pi Compute Module 4 Rev 1.0", None, "rpi4", "Compute Module 4"),
    (PI5_CPUINFO, "Raspberry Pi 5 Model B Rev 1.0", None, "rpi5", "Raspberry Pi 5"),
    (PI4_CPUINFO.replace("0xd08", "0xd07"), "NVIDIA Jetson Nano Developer Kit",
     "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64", "jetson-nano", "R32"),
    (PI5_CPUINFO.replace("0xd0b", "0xd42"), "NVIDIA Jetson Orin Nano Developer Kit",
     "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64", "jetson-orin-nano", "Orin Nano"),
    (PI4_CPUINFO, "Pine64 RockPro64", None, "generic-aarch64", "aarch64"),
    (PI4_CPUINFO, None, None, "generic-aarch64", "aarch64"),
    (X86_CPUINFO, None, None, "generic-x86_64", "x86_64"),
])
def test_match_target_on_fake_machines(tmp_path, cpuinfo, model, tegra, want, why):
    info = probe(make_machine(tmp_path, cpuinfo, model, tegra))
    m = match_target(info)
    assert m.name == want, (m.reason, m.candidates)
    assert why in m.reason
    assert m.profile["name"] == want
    assert {c["name"] for c in m.candidates} == set(list_targets())


def test_jetson_of_another_kind_is_not_taken_for_orin(tmp_path):
    # Xavier NX runs L4T R35 like the Orin, but its board model says otherwise
    info = probe(make_machine(tmp_path, PI5_CPUINFO, "NVIDIA Jetson Xavier NX Developer Kit",
                              "# R35 (release), REVISION: 4.1"))
    assert match_target(info).name == "generic-aarch64"


def test_32bit_os_on_a_pi4_still_matches_with_a_note(tmp_path):
    info = probe(make_machine(tmp_path, PI4_32BIT_CPUINFO, "Raspberry Pi 4 Model B Rev 1.2"))
    assert info["cpu"]["arch"] == "armv7l"
    m = match_target(info)
    assert m.name == "rpi4" and "armv7l" in m.reason


def test_unknown_machine_has_no_profile(tmp_path):
    info = probe(make_machine(tmp_path, "processor\t: 0\nisa\t: rv64imafdc\n", None), arch="riscv64")
    m = match_target(info)
    assert m.name is None and "riscv64" in m.reason


def test_probe_fake_pi_details(tmp_path):
    info = probe(make_machine(tmp_path, PI4_CPUINFO, "Raspberry Pi 4 Model B Rev 1.4",
                              temps=(("cpu-thermal", 61500), ("gpu", 55000))))
    assert info["cpu"]["arch"] == "aarch64" and info["cpu"]["model"] == "Arm cortex-a72"
    assert info["cpu"]["frequency"] == {"current_mhz": 1500.0, "max_mhz": 1800.0, "source": "cpufreq"}
    assert info["memory"]["total_mb"] == 3793 and info["memory"]["available_mb"] == 2832
    assert info["board"]["device_tree_model"] == "Raspberry Pi 4 Model B Rev 1.4"      # NUL stripped
    assert "nv_tegra_release" in info["board"]["nv_tegra_release_unavailable"]
    assert [z["temp_c"] for z in info["thermal"]] == [61.5, 55.0]
    for acc in ("opencl", "cuda"):
        assert info[acc]["available"] is False and info[acc]["reason"].startswith("unavailable because")
    text = format_probe(info, match_target(info))
    assert "target:   rpi4" in text and "cortex-a72" in text and "61.5 C" in text


def test_probe_this_machine_and_cli(capsys):
    info = probe()
    assert info["cpu"]["logical_cpus"] >= 1 and info["cpu"]["arch"]
    for acc in ("opencl", "cuda"):
        a = info[acc]
        assert a["available"] or a["reason"].startswith("unavailable because")
    m = match_target(info)
    if info["cpu"]["arch"] in ("x86_64", "aarch64"):
        assert m.name is not None
    from edge_infer.cli import main
    assert main(["probe", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["target"]["name"] == m.name and rep["target"]["reason"]
    assert main(["probe"]) == 0
    assert "target:" in capsys.readouterr().out


@pytest.mark.parametrize("model,tegra,kind", [
    ("Raspberry Pi 5 Model B Rev 1.0", None, "raspberry-pi"),
    ("Raspberry Pi Compute Module 4 Rev 1.0", None, "raspberry-pi"),
    ("NVIDIA Jetson Nano Developer Kit", "# R32 (release), REVISION: 7.1", "jetson"),
    (None, "# R36 (release), REVISION: 3.0", "jetson"),            # a Jetson without a device-tree model file
    ("Pine64 RockPro64", None, None),
    (None, None, None),
])
def test_board_kind_on_fake_machines(tmp_path, model, tegra, kind):
    info = probe(make_machine(tmp_path, PI4_CPUINFO, model, tegra))
    assert info["board"]["kind"] == kind
    assert "backends" not in info                       # backends describe this host, not a fake root
    if kind:
        assert f"({kind})" in format_probe(info)


def test_parse_nvidia_smi():
    from edge_infer.probe import parse_nvidia_smi
    rows = parse_nvidia_smi("NVIDIA H200, 143771, 9.0\nOrin (nvgpu), [N/A], 8.7\n\n")
    assert rows == [{"index": 0, "name": "NVIDIA H200", "memory_mb": 143771, "compute_capability": "9.0"},
                    {"index": 1, "name": "Orin (nvgpu)", "memory_mb": None, "compute_capability": "8.7"}]


def test_backends_report_availability_and_why(monkeypatch):
    from edge_infer.backends import BACKENDS
    from edge_infer.backends.base import Backend

    class Ghost(Backend):
        name = "ghost"

        def available(self):
            return False, "no ghost device"

    def broken():
        raise ImportError("libghost.so missing")
    monkeypatch.setitem(BACKENDS, "ghost", Ghost)
    monkeypatch.setitem(BACKENDS, "broken", broken)
    info = probe()
    assert info["backends"]["cpu"] == {"available": True, "reason": ""}
    assert info["backends"]["ghost"] == {"available": False, "reason": "no ghost device"}
    assert not info["backends"]["broken"]["available"] and "libghost.so" in info["backends"]["broken"]["reason"]
    text = format_probe(info)
    assert "backend:  ghost: unavailable (no ghost device)" in text and "backend:  cpu: available" in text
    assert info["memory"]["source"] == "psutil" and info["memory"]["total_bytes"] > 0
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert "CuPy is not installed" in info["cuda"]["reason"] and "nvidia-smi" in info["cuda"]["reason"]
