"""Asking the accelerator drivers directly, in this process: OpenCL platforms (pyopencl) and
CUDA devices (CuPy, else nvidia-smi). ``probe_guard`` runs these in a child process first (a
driver can abort the process) and ``probe.probe`` reports what the guard found; this module
imports neither, so the guard and the probe sit above it."""
from __future__ import annotations

from typing import Any, Dict, List

__all__ = ["opencl_direct", "cuda_direct", "nvidia_smi", "parse_nvidia_smi"]


def opencl_direct() -> Dict[str, Any]:
    """OpenCL platforms and devices as pyopencl lists them in this process, or why not."""
    try:
        import pyopencl as cl  # noqa: F401
    except ImportError:
        return {"available": False, "reason": "unavailable because pyopencl is not installed "
                                              "(pip install \"edge-infer[opencl]\")"}
    try:
        plats = cl.get_platforms()
    except Exception as e:  # noqa: BLE001  (no ICD loader, no platform)
        return {"available": False, "reason": f"unavailable because pyopencl found no platform ({e})"}
    out = []
    for p in plats:
        try:
            devs = [{"name": d.name.strip(), "type": cl.device_type.to_string(d.type),
                     "vendor": d.vendor.strip(), "version": d.version.strip(),
                     "compute_units": d.max_compute_units, "max_clock_mhz": d.max_clock_frequency,
                     "global_mem_mb": d.global_mem_size // 2**20,
                     "host_unified_memory": bool(getattr(d, "host_unified_memory", False))}
                    for d in p.get_devices()]
        except Exception as e:  # noqa: BLE001
            devs = [{"error": str(e)}]
        out.append({"platform": p.name.strip(), "version": p.version.strip(), "devices": devs})
    if not out:
        return {"available": False, "reason": "unavailable because no OpenCL platform is installed"}
    return {"available": True, "platforms": out}


def nvidia_smi() -> Dict[str, Any]:
    """GPUs nvidia-smi lists (used when CuPy is missing, to say whether installing it would help)."""
    import shutil
    import subprocess
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"found": False, "reason": "there is no nvidia-smi (no NVIDIA driver)"}
    try:
        out = subprocess.run([exe, "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return {"found": False, "reason": f"nvidia-smi failed ({e})"}
    if out.returncode != 0:
        return {"found": False, "reason": f"nvidia-smi failed ({(out.stderr or out.stdout).strip()[:120]})"}
    return {"found": True, "devices": parse_nvidia_smi(out.stdout)}


def parse_nvidia_smi(text: str) -> List[Dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader,nounits``."""
    devs = []
    for i, line in enumerate(x for x in text.splitlines() if x.strip()):
        cols = [c.strip() for c in line.split(",")]
        mem = cols[1] if len(cols) > 1 else ""
        devs.append({"index": i, "name": cols[0], "memory_mb": int(mem) if mem.isdigit() else None,
                     "compute_capability": cols[2] if len(cols) > 2 else None})
    return devs


def cuda_direct() -> Dict[str, Any]:
    """CUDA devices as CuPy lists them in this process, or why not (with what nvidia-smi lists)."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        smi = nvidia_smi()
        if smi["found"] and smi["devices"]:
            names = ", ".join(d["name"] for d in smi["devices"])
            return {"available": False, "devices": smi["devices"],
                    "reason": f"unavailable because CuPy is not installed, though nvidia-smi lists {names} "
                              "(pip install \"edge-infer[cuda]\")"}
        return {"available": False, "reason": "unavailable because CuPy is not installed and "
                                              f"{smi['reason']}"}
    except Exception as e:  # noqa: BLE001  (CuPy installed but broken: missing CUDA libs)
        return {"available": False, "reason": f"unavailable because CuPy failed to import ({e})"}
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001  (no driver, no device)
        return {"available": False, "reason": f"unavailable because CUDA reports no device ({e})"}
    devs = []
    for i in range(n):
        p = cupy.cuda.runtime.getDeviceProperties(i)
        name = p.get("name", b"")
        devs.append({"index": i, "name": name.decode() if isinstance(name, bytes) else str(name),
                     "compute_capability": f"{p.get('major')}.{p.get('minor')}",
                     "memory_mb": int(p.get("totalGlobalMem", 0)) // 2**20,
                     "integrated": bool(p.get("integrated", 0))})
    if not devs:
        return {"available": False, "reason": "unavailable because CUDA reports 0 devices"}
    return {"available": True, "devices": devs}
