"""Accelerator probes that cannot take the process down.

Asking a GPU driver what it has runs the driver's code in our process: PoCL aborted the
process under a tight address-space limit, and a broken CUDA install can do the same. So the
first look at OpenCL or CUDA (``accelerators.opencl_direct`` / ``accelerators.cuda_direct``) runs in a
child process of the same interpreter, limits and environment; a child that dies by a
signal, exits non-zero or hangs (``TIMEOUT_S``) marks that accelerator unavailable, saying
why, and the driver is then never loaded here. Only a clean answer lets the backend touch the
driver in this process.

The answer is kept for the process and on disk (``devices.json`` in the picker's cache dir),
keyed by what could change it: the interpreter, the edge_infer version, the address-space
and data limits, the driver-selecting environment variables, the OpenCL vendor files and the
installed pyopencl / CuPy; a later process with the same key spends a file read (a probe
costs about 0.4 s). Where pyopencl / CuPy is not installed no driver is loaded and no
child is started. ``EDGE_INFER_PROBE_IN_PROCESS=1`` probes in this process (no guard).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from typing import Any, Dict

from .accelerators import cuda_direct, opencl_direct
from .cache import cache_dir
from .errors import BackendError

#: seconds a child probe may take before the accelerator counts as hung
TIMEOUT_S = 60.0
_MODULES = {"opencl": "pyopencl", "cuda": "cupy"}
_ENV = ("OCL_ICD_VENDORS", "OCL_ICD_FILENAMES", "OPENCL_VENDOR_PATH", "POCL_DEVICES", "EDGE_INFER_OPENCL_DEVICE",
        "CUDA_VISIBLE_DEVICES", "CUDA_PATH", "LD_LIBRARY_PATH")
_MARK = "EDGE_INFER_PROBE_RESULT "
#: the child's program (a test replaces it with one that crashes)
CHILD_CODE = ("import json, sys\n"
              "from edge_infer import accelerators\n"
              "res = getattr(accelerators, sys.argv[1] + '_direct')()\n"
              "sys.stdout.write('\\n" + _MARK + "' + json.dumps(res, default=str) + '\\n')\n")
_memo: Dict[str, Dict[str, Any]] = {}
_lock = threading.Lock()


def guarded_probe(kind: str) -> Dict[str, Any]:
    """``accelerators.opencl_direct()`` or ``accelerators.cuda_direct()`` (``kind`` "opencl" /
    "cuda"), as a child process found it (see the module doc): {"available": bool, "reason"?: str, ...}."""
    direct = {"opencl": opencl_direct, "cuda": cuda_direct}[kind]
    if os.environ.get("EDGE_INFER_PROBE_IN_PROCESS") == "1":
        return direct()
    try:
        installed = importlib.util.find_spec(_MODULES[kind]) is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        return direct()                  # says "not installed" without loading any driver
    with _lock:
        if kind in _memo:
            return _memo[kind]
        key = _key(kind)
        cached = _cache_read().get(key)
        if isinstance(cached, dict) and "available" in cached:
            _memo[kind] = cached
            return cached
        res = _run_child(kind)
        _memo[kind] = res
        if not res.get("transient"):
            data = _cache_read()
            data[key] = res
            _cache_write(data)
        return res


def _run_child(kind: str) -> Dict[str, Any]:
    label = {"opencl": "OpenCL", "cuda": "CUDA"}[kind]
    res, why = call_in_child(CHILD_CODE, [kind], f"the {label} probe")
    if res is None:
        return {"available": False, "reason": f"unavailable because {why}", **(
            {"transient": True} if "could not start" in why else {})}
    if not isinstance(res, dict) or "available" not in res:
        return {"available": False, "reason": f"unavailable because the {label} probe gave no answer"}
    return res


def call_in_child(code: str, args, what: str, timeout: float = TIMEOUT_S):
    """Run ``code`` (which writes its JSON answer after ``_MARK`` on a line of stdout) in a
    child process of this interpreter with ``args`` as ``sys.argv[1:]``. Returns (answer,
    None), or (None, why) where the child died by a signal, failed, hung or gave no answer."""
    import signal          # here, not at module level: a runtime that never probes a device
    import subprocess      # in a child (the picker imports this module) does not load them
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg_root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    try:
        proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, env=env,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"{what} hung (no answer in {timeout:g} s in a child process)"
    except OSError as e:
        return None, f"{what} could not start a child process ({e})"
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        return None, f"{what} crashed ({sig}) in a child process, so the driver is not used here"
    line = next((ln for ln in reversed(proc.stdout.decode("utf-8", "replace").splitlines())
                 if ln.startswith(_MARK)), None)
    if proc.returncode != 0 or line is None:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return None, f"{what} failed in a child process ({tail[0][:200]})"
    try:
        return json.loads(line[len(_MARK):]), None
    except ValueError:
        return None, f"{what} gave no answer"


#: measures a backend's throughput profile in a child (``throughput_in_child``)
MEASURE_CODE = ("import json, sys\n"
                "from edge_infer.backends import BACKENDS\n"
                "from edge_infer.backends.throughput import measure_profile\n"
                "res = measure_profile(BACKENDS[sys.argv[1]](), int(sys.argv[2]))\n"
                "sys.stdout.write('\\n" + _MARK + "' + json.dumps(res) + '\\n')\n")


def throughput_in_child(name: str, threads: int) -> Dict[str, Any]:
    """``throughput.measure_profile`` of the registered backend ``name`` run in a child process
    (the microbenchmark compiles and runs kernels in the driver: PoCL segfaulted there under an
    address-space limit). Raises ``DeviceCrashError`` where the child did not answer; that
    answer is remembered in ``devices.json`` under the probe's key (same limits, drivers,
    environment), so later processes do not crash a child again (a success is cached by the
    picker as any profile is)."""
    key = f"measure-{name}-t{int(threads)}-" + _key(name if name in _MODULES else "opencl")
    with _lock:
        failed = _cache_read().get(key)
    if isinstance(failed, str):
        raise DeviceCrashError(failed)
    res, why = call_in_child(MEASURE_CODE, [name, threads], f"the {name} microbenchmark", timeout=300)
    if res is None or not isinstance(res, dict):
        why = why or f"the {name} microbenchmark gave no answer"
        if "could not start" not in why:
            with _lock:
                data = _cache_read()
                data[key] = why
                _cache_write(data)
        raise DeviceCrashError(why)
    return res


class DeviceCrashError(BackendError):
    """A device probe or microbenchmark did not answer in its child process."""


def _key(kind: str) -> str:
    from .version import __version__
    try:
        import resource
        limits = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, resource.RLIMIT_DATA)]
    except (ImportError, AttributeError, OSError, ValueError):
        limits = []
    files = []
    for d in ("/etc/OpenCL/vendors", os.environ.get("OCL_ICD_VENDORS") or ""):
        try:
            files += [(n, os.stat(os.path.join(d, n)).st_mtime_ns) for n in sorted(os.listdir(d))]
        except OSError:
            pass
    try:
        spec = importlib.util.find_spec(_MODULES[kind])
        origin = spec.origin if spec else None
        files.append((origin, os.stat(origin).st_mtime_ns if origin else None))
    except (ImportError, ValueError, OSError):
        pass
    blob = json.dumps([kind, sys.executable, __version__, limits, [os.environ.get(k) for k in _ENV], files],
                      default=str)
    import hashlib         # libcrypto, ~3.6 MB resident: only when a device is probed
    return f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:20]}"


def _cache_path() -> str:
    return os.path.join(cache_dir(), "devices.json")


def _cache_read() -> dict:
    try:
        with open(_cache_path()) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _cache_write(data: dict) -> None:
    path = _cache_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:                      # an unwritable cache only costs probing again
        pass


def forget() -> None:
    """Drop this process's remembered answers (tests; after installing a driver)."""
    with _lock:
        _memo.clear()
