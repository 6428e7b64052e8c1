"""Hardware probe: what this machine is, and which target profile fits it.

``probe()`` reads /proc/cpuinfo, /proc/meminfo, the device tree (/proc/device-tree/model),
/etc/nv_tegra_release, /sys/class/thermal, cpufreq in sysfs, and asks pyopencl and CuPy (only if
importable) for OpenCL platforms and CUDA devices; anything it cannot read is reported as
``"unavailable because ..."``. ``match_target()`` picks the best profile in ``targets/`` and
says why. Everything reads below ``root`` (default ``/``), so tests can fake a machine.

Matching (each profile's ``"match"`` block):
  * ``device_tree_model``: a listed string occurs in the board's model string      -> 100 points
  * ``nv_tegra_release``: the L4T release (``R32``, ``R35``...) starts with one     -> 50 points
  * ``arch``: the CPU architecture is listed (the generic fallbacks)                -> 10 points
A profile that lists board strings (device tree, Tegra release) must match one of them; the
highest score wins; a tie goes to the profile whose ``cpu.simd`` the CPU fully has.
"""
from __future__ import annotations

import glob
import os
import platform
import re
from typing import Any, Dict, List, NamedTuple, Optional

from .accelerators import parse_nvidia_smi
from .meminfo import read_meminfo, read_text as _read
from .probe_guard import guarded_probe

__all__ = ["probe", "match_target", "parse_cpuinfo", "parse_nvidia_smi", "board_kind", "backend_availability",
           "TargetMatch", "format_probe", "SIMD_FLAGS"]

#: SIMD features reported (as /proc/cpuinfo spells them); ``dotprod`` is derived from ``asimddp``
SIMD_FLAGS = ("neon", "asimd", "asimddp", "asimdhp", "sve", "sve2", "i8mm", "bf16", "sse4_2", "avx", "avx2", "fma",
              "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "amx_tile")


def parse_cpuinfo(text: str) -> Dict[str, Any]:
    """Model name, logical CPUs, SIMD features and Arm part numbers from /proc/cpuinfo text."""
    model = None
    flags: set = set()
    processors = 0
    parts = set()
    implementer = None
    hardware = None
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if not sep:
            continue
        key, val = key.strip().lower(), val.strip()
        if key == "processor":
            processors += 1
        elif key in ("model name", "cpu model") and not model:
            model = val
        elif key in ("flags", "features"):
            flags.update(val.split())
        elif key == "cpu part":
            parts.add(val)
        elif key == "cpu implementer":
            implementer = val
        elif key == "hardware":
            hardware = val
    simd = sorted(f for f in flags if f in SIMD_FLAGS)
    if "asimd" in flags and "neon" not in simd:
        simd.append("neon")               # AArch64 Advanced SIMD is NEON
    if "asimddp" in flags:
        simd.append("dotprod")
    arm_cores = {"0xd03": "cortex-a53", "0xd04": "cortex-a35", "0xd05": "cortex-a55", "0xd07": "cortex-a57",
                 "0xd08": "cortex-a72", "0xd09": "cortex-a73", "0xd0a": "cortex-a75", "0xd0b": "cortex-a76",
                 "0xd0d": "cortex-a77", "0xd41": "cortex-a78", "0xd42": "cortex-a78ae", "0xd44": "cortex-x1",
                 "0xd46": "cortex-a510", "0xd47": "cortex-a710", "0xd4b": "cortex-a78c", "0xd0c": "neoverse-n1",
                 "0xd40": "neoverse-v1", "0xd49": "neoverse-n2"}
    cores = sorted({arm_cores.get(p.lower(), p) for p in parts})
    if model is None and cores:
        model = "Arm " + "+".join(cores)
    return {"model": model or hardware, "logical_cpus": processors or None, "simd": sorted(set(simd)),
            "arm_cores": cores, "implementer": implementer, "hardware": hardware}


def _psutil_memory() -> Dict[str, Any]:
    try:
        import psutil
        vm = psutil.virtual_memory()
    except Exception as e:  # noqa: BLE001  (psutil missing or unsupported platform)
        return {"psutil": f"unavailable because psutil failed ({e})"}
    return {"total_bytes": int(vm.total), "available_bytes": int(vm.available), "total_mb": round(vm.total / 2**20),
            "available_mb": round(vm.available / 2**20), "source": "psutil"}


def _freq(root: str) -> Dict[str, Any]:
    cur, mx = [], []
    for d in sorted(glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu[0-9]*/cpufreq"))):
        c, m = _read(os.path.join(d, "scaling_cur_freq")), _read(os.path.join(d, "cpuinfo_max_freq"))
        if c and c.isdigit():
            cur.append(int(c) / 1000)
        if m and m.isdigit():
            mx.append(int(m) / 1000)
    if cur or mx:
        return {"current_mhz": max(cur) if cur else None, "max_mhz": max(mx) if mx else None, "source": "cpufreq"}
    text = _read(os.path.join(root, "proc/cpuinfo")) or ""
    mhz = [float(v) for v in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M)]
    if mhz:
        return {"current_mhz": round(max(mhz), 1), "max_mhz": None, "source": "/proc/cpuinfo"}
    return {"unavailable": "unavailable because there is no cpufreq in sysfs and no 'cpu MHz' in /proc/cpuinfo"}


def _thermal(root: str) -> List[Dict[str, Any]]:
    zones = []
    for d in sorted(glob.glob(os.path.join(root, "sys/class/thermal/thermal_zone*"))):
        t = _read(os.path.join(d, "temp"))
        try:
            v = int(t) if t is not None else None
        except ValueError:
            v = None
        zones.append({"zone": os.path.basename(d), "type": _read(os.path.join(d, "type")) or "unknown",
                      "temp_c": (v / 1000.0 if v is not None and abs(v) > 200 else v)})
    return zones


def _opencl() -> Dict[str, Any]:
    """OpenCL platforms and devices, probed in a child process (``probe_guard``)."""
    return guarded_probe("opencl")


def _cuda() -> Dict[str, Any]:
    """CUDA devices, probed in a child process (``probe_guard``)."""
    return guarded_probe("cuda")


def _arch_from_cpuinfo(text: str) -> str:
    t = text.lower()
    if "asimd" in t or "cpu implementer" in t and "aarch64" not in t and "armv7" not in t:
        return "aarch64"
    if re.search(r"^(flags|features)\s*:.*\b(sse2|lm)\b", t, re.M):
        return "x86_64"
    if "armv7" in t or re.search(r"^features\s*:.*\bneon\b", t, re.M):
        return "armv7l"
    return "unknown"


def probe(root: str = "/", accelerators: bool = True, arch: Optional[str] = None,
          backends: bool = True) -> Dict[str, Any]:
    """Everything known about this machine, as a JSON-able dict. ``root`` other than ``/``
    reads a fake machine (the architecture then comes from its cpuinfo unless ``arch`` says);
    accelerators and backends are probed only on the real machine."""
    is_host = os.path.abspath(root) == "/"
    info: Dict[str, Any] = {}
    cpuinfo = _read(os.path.join(root, "proc/cpuinfo"))
    cpu = parse_cpuinfo(cpuinfo) if cpuinfo is not None else {
        "unavailable": "unavailable because /proc/cpuinfo is not readable"}
    if arch is None:
        arch = platform.machine().lower() if is_host else _arch_from_cpuinfo(cpuinfo or "")
    cpu["arch"] = {"arm64": "aarch64", "amd64": "x86_64", "x64": "x86_64"}.get(arch.lower(), arch.lower())
    if is_host:
        cpu["logical_cpus"] = os.cpu_count() or cpu.get("logical_cpus")
        try:
            import psutil
            cpu["physical_cores"] = psutil.cpu_count(logical=False)
        except Exception:  # noqa: BLE001
            cpu["physical_cores"] = None
    cpu["frequency"] = _freq(root)
    info["cpu"] = cpu
    info["memory"] = read_meminfo(root)
    if is_host:
        info["memory"].update(_psutil_memory())
    model = _read(os.path.join(root, "proc/device-tree/model"))
    tegra = _read(os.path.join(root, "etc/nv_tegra_release"))
    m = re.search(r"#\s*(R\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", tegra or "")
    info["board"] = {
        "device_tree_model": model,
        "nv_tegra_release": (m.group(1) if m else (tegra.split()[1] if tegra and len(tegra.split()) > 1 else None))
        if tegra else None,
        "l4t_revision": m.group(2) if m else None,
    }
    info["board"]["kind"] = board_kind(model, tegra)
    if model is None:
        info["board"]["device_tree_model_unavailable"] = "unavailable because /proc/device-tree/model does not exist (not a device-tree board)"
    if tegra is None:
        info["board"]["nv_tegra_release_unavailable"] = "unavailable because /etc/nv_tegra_release does not exist (not a Jetson / L4T)"
    zones = _thermal(root)
    info["thermal"] = zones if zones else {"unavailable": "unavailable because there are no /sys/class/thermal zones"}
    if accelerators and is_host:
        info["opencl"] = _opencl()
        info["cuda"] = _cuda()
    else:
        why = "unavailable because not probed (a fake root)" if not is_host else "unavailable because not probed"
        info["opencl"] = {"available": False, "reason": why}
        info["cuda"] = {"available": False, "reason": why}
    if backends and is_host:
        info["backends"] = backend_availability()
    return info


def board_kind(model: Optional[str], tegra: Optional[str]) -> Optional[str]:
    """``"raspberry-pi"``, ``"jetson"`` or None, from the device-tree model and the L4T release file."""
    if tegra or (model and "jetson" in model.lower()):
        return "jetson"
    if model and model.lower().startswith("raspberry pi"):
        return "raspberry-pi"
    return None


def backend_availability() -> Dict[str, Dict[str, Any]]:
    """Every registered backend: usable here, and why not (``Backend.available()``)."""
    from .backends import BACKENDS
    out = {}
    for name, factory in BACKENDS.items():
        try:
            ok, why = factory().available()
        except Exception as e:  # noqa: BLE001  (a backend whose dependency is broken)
            ok, why = False, f"failed to load ({type(e).__name__}: {e})"
        out[name] = {"available": bool(ok), "reason": "" if ok else str(why)}
    return out


class TargetMatch(NamedTuple):
    name: Optional[str]            #: best profile, or None
    reason: str
    score: int
    profile: Optional[Dict[str, Any]]
    candidates: List[Dict[str, Any]]


def match_target(info: Optional[Dict[str, Any]] = None, profiles: Optional[Dict[str, Dict]] = None) -> TargetMatch:
    """The best target profile for ``info`` (default: ``probe()`` of this machine), and why."""
    from .targets import list_targets, load_target
    info = probe(accelerators=False) if info is None else info
    if profiles is None:
        profiles = {n: load_target(n) for n in list_targets()}
    board = info.get("board", {}) or {}
    model = board.get("device_tree_model") or ""
    tegra = board.get("nv_tegra_release") or ""
    arch = (info.get("cpu", {}) or {}).get("arch") or ""
    have_simd = set((info.get("cpu", {}) or {}).get("simd") or [])
    scored = []
    for name, prof in profiles.items():
        rules = prof.get("match", {}) or {}
        score, why, failed = 0, [], []
        dt = rules.get("device_tree_model") or []
        nv = rules.get("nv_tegra_release") or []
        hit_dt = next((s for s in dt if s.lower() in model.lower()), None) if model else None
        hit_nv = next((s for s in nv if tegra.upper().startswith(s.upper())), None) if tegra else None
        if hit_dt:
            score += 100
            why.append(f"board model {model!r} contains {hit_dt!r}")
        if hit_nv:
            score += 50
            why.append(f"L4T release {tegra} matches {hit_nv}")
        if (dt or nv) and not (hit_dt or hit_nv):
            failed.append("board does not match " + " / ".join(
                ([f"device tree model {dt}"] if dt else []) + ([f"L4T release {nv}"] if nv else [])))
            score = 0
        elif dt and model and not hit_dt:
            # the board names itself and it is not this one (an L4T release alone is not enough)
            failed.append(f"board model {model!r} is none of {dt}")
            score = 0
        archs = [a.lower() for a in rules.get("arch") or []]
        if archs:
            if arch in archs:
                score += 10
                why.append(f"CPU architecture {arch}")
            else:
                failed.append(f"architecture {arch or 'unknown'} not in {archs}")
                score = 0
        prof_arch = (prof.get("cpu", {}) or {}).get("arch")
        if score and prof_arch and arch and arch != "unknown" and prof_arch != arch:
            if hit_dt or hit_nv:     # the right board with another OS (e.g. 32-bit Raspberry Pi OS)
                why.append(f"note: the profile assumes a {prof_arch} OS, this one runs {arch}")
            else:
                failed.append(f"profile is for {prof_arch}, this CPU is {arch}")
                score = 0
        simd_ok = set((prof.get("cpu", {}) or {}).get("simd") or []) <= have_simd
        scored.append({"name": name, "score": score, "simd_ok": simd_ok,
                       "why": "; ".join(why) if score else "; ".join(failed) or "no match rule fired"})
    scored.sort(key=lambda c: (-c["score"], not c["simd_ok"], c["name"]))
    best = scored[0] if scored and scored[0]["score"] > 0 else None
    if best is None:
        desc = f"arch {arch or 'unknown'}" + (f", board {model!r}" if model else "")
        return TargetMatch(None, f"no profile matches this machine ({desc})", 0, None, scored)
    reason = best["why"]
    if not best["simd_ok"]:
        missing = sorted(set(profiles[best["name"]]["cpu"].get("simd", [])) - have_simd)
        reason += f"; note: the CPU lacks {missing} that the profile assumes"
    return TargetMatch(best["name"], reason, best["score"], profiles[best["name"]], scored)


def format_probe(info: Dict[str, Any], match: Optional[TargetMatch] = None) -> str:
    """The human-readable report ``edge-infer probe`` prints."""
    lines = []
    cpu = info.get("cpu", {})
    f = cpu.get("frequency", {})
    freq = (f.get("unavailable") or
            f"{f.get('current_mhz')} MHz now" + (f", {f.get('max_mhz')} MHz max" if f.get("max_mhz") else ""))
    lines.append(f"cpu:      {cpu.get('model') or 'unknown'} ({cpu.get('arch')}), "
                 f"{cpu.get('logical_cpus')} logical CPUs, {cpu.get('physical_cores') or '?'} cores; {freq}")
    lines.append(f"simd:     {', '.join(cpu.get('simd') or []) or 'none found'}")
    mem = info.get("memory", {})
    lines.append("memory:   " + (mem.get("unavailable") or f"{mem.get('total_mb')} MB total, {mem.get('available_mb')} MB available"))
    b = info.get("board", {})
    lines.append("board:    " + (b.get("device_tree_model") or b.get("device_tree_model_unavailable", "unknown"))
                 + (f" ({b['kind']})" if b.get("kind") else ""))
    lines.append("jetson:   " + (f"L4T {b['nv_tegra_release']} (revision {b.get('l4t_revision')})"
                                 if b.get("nv_tegra_release") else b.get("nv_tegra_release_unavailable", "no")))
    for key, label in (("opencl", "opencl:   "), ("cuda", "cuda:     ")):
        a = info.get(key, {})
        if a.get("available"):
            items = a.get("platforms") or a.get("devices") or []
            if key == "opencl":
                lines.append(label + "; ".join(f"{i['platform']}: " + ", ".join(
                    f"{d.get('name', '?')} ({d.get('type', '?')}, {d.get('compute_units', '?')} CU)"
                    for d in i.get("devices", [])) for i in items))
            else:
                lines.append(label + "; ".join(f"{i.get('name', '?')} (sm {i.get('compute_capability')}, "
                                               f"{i.get('memory_mb')} MB)" for i in items))
        else:
            lines.append(label + a.get("reason", "unknown"))
    th = info.get("thermal")
    if isinstance(th, dict):
        lines.append("thermal:  " + th["unavailable"])
    else:
        lines.append("thermal:  " + ", ".join(f"{z['type']} {z['temp_c']:.1f} C" if z["temp_c"] is not None
                                              else f"{z['type']} ?" for z in th))
    for name, b in (info.get("backends") or {}).items():
        lines.append(f"backend:  {name}: " + ("available" if b["available"] else f"unavailable ({b['reason']})"))
    if match is not None:
        lines.append(f"target:   {match.name or 'none'} ({match.reason})")
    return "\n".join(lines)
