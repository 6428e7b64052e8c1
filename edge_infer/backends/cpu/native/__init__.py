"""Native C kernels of the CPU backend (AVX2 / NEON / scalar), loaded with ctypes.

The kernels live in ``src/*.c``: one plain C shared library (no Python C API, no third-party
dependencies) that ``setup.py`` builds when a C compiler is present. Where the library is
missing, stale or disabled with ``EDGE_INFER_NO_NATIVE=1``, ``lib`` is None and the numpy kernels
serve; one warning says so.

A native kernel's prepare fills a ``ctypes.Structure`` of arguments once and returns
``native_step(fn, args)``: a closure that calls ``fn(&args)`` and carries
``native_step = (function address, args address)``, so that the executor can run a sequence of
consecutive native steps in one C call (``ei_run_steps``), GIL released.
"""
from __future__ import annotations

import ctypes
import glob
import os
import warnings
from typing import Callable, Dict, Optional, Tuple

#: must equal EI_ABI_VERSION in src/edge_native.h
ABI_VERSION = 4

#: feature bits of src/edge_native.h
AVX2, AVX512, NEON, DOTPROD, AMX = 1, 2, 4, 8, 16
FEATURE_NAMES = {AVX2: "avx2", AVX512: "avx512", NEON: "neon", DOTPROD: "dotprod", AMX: "amx"}

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.path.join(HERE, "src")


class EiStep(ctypes.Structure):
    """``ei_step`` of edge_native.h."""
    _fields_ = [("fn", ctypes.c_void_p), ("args", ctypes.c_void_p)]


def library_path() -> Optional[str]:
    """The built shared library next to this file (or the one ``EDGE_INFER_NATIVE_LIB`` names:
    the debug build, see setup.py), or None."""
    chosen = os.environ.get("EDGE_INFER_NATIVE_LIB")
    if chosen:
        return chosen if os.path.isfile(chosen) else None
    found = sorted(glob.glob(os.path.join(HERE, "_edge_native*.so")) +
                   glob.glob(os.path.join(HERE, "_edge_native*.dylib")))
    return found[0] if found else None


def _load() -> Tuple[Optional[ctypes.CDLL], str]:
    if os.environ.get("EDGE_INFER_NO_NATIVE", "") not in ("", "0"):
        return None, "disabled by EDGE_INFER_NO_NATIVE"
    path = library_path()
    if path is None:
        return None, "the native library is not built (no C compiler at install time?)"
    try:
        so = ctypes.CDLL(path)
    except OSError as e:
        return None, f"cannot load {os.path.basename(path)}: {e}"
    try:
        so.ei_abi_version.restype = ctypes.c_int
        abi = so.ei_abi_version()
    except AttributeError:
        abi = None
    if abi != ABI_VERSION:
        return None, (f"{os.path.basename(path)} is stale (ABI {abi}, want {ABI_VERSION}); "
                      "rebuild with `pip install -e .` or `python setup.py build_ext --inplace`")
    so.ei_cpu_features.restype = ctypes.c_int
    so.ei_set_isa_mask.restype = ctypes.c_int
    so.ei_set_isa_mask.argtypes = [ctypes.c_int]
    so.ei_run_steps.restype = None
    so.ei_run_steps.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    so.ei_debug_checks.restype = ctypes.c_int
    if hasattr(so, "ei_pool_stats"):      # (a library chosen by EDGE_INFER_NATIVE_LIB may predate them)
        so.ei_pool_stats.restype = None
        so.ei_pool_stats.argtypes = [ctypes.c_void_p, ctypes.c_int]
        so.ei_profile_steps.restype = ctypes.c_int64
        so.ei_profile_steps.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    if hasattr(so, "ei_run_steps_linger"):
        so.ei_run_steps_linger.restype = None
        so.ei_run_steps_linger.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    return so, ""


lib, why_not = _load()
if lib is None and not why_not.startswith("disabled"):    # asked for: no warning on every run
    warnings.warn(f"edge_infer: native CPU kernels unavailable ({why_not}); using the numpy kernels",
                  RuntimeWarning, stacklevel=2)


def debug_checks() -> bool:
    """Whether the loaded library checks kernel preconditions (the EI_DEBUG_CHECKS build)."""
    return lib is not None and bool(lib.ei_debug_checks())


def available() -> Tuple[bool, str]:
    """(native kernels loaded?, why not)."""
    return lib is not None, why_not


def features() -> Dict[str, bool]:
    """ISA features of this CPU that the native kernels use."""
    bits = lib.ei_cpu_features() if lib is not None else 0
    return {name: bool(bits & bit) for bit, name in FEATURE_NAMES.items()}


def set_isa_mask(mask: int) -> int:
    """Restrict the ISA features kernels may use (-1: all); returns the previous mask.
    For tests that compare the scalar and SIMD paths on one machine. Process-wide."""
    return lib.ei_set_isa_mask(mask)


def function(name: str, *argtypes, restype=None):
    """The C function ``name`` with its ctypes signature set (None without the library)."""
    if lib is None:
        return None
    fn = getattr(lib, name)
    fn.argtypes = list(argtypes)
    fn.restype = restype
    return fn


_STEP_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def native_step(fn_name: str, args: ctypes.Structure, *keep) -> Callable[[], None]:
    """The eval closure of a native kernel: calls ``fn_name(&args)``.

    ``keep``: objects the C side points into (arrays, packed weights); the closure holds them
    alive as long as the plan lives."""
    fn = _STEP_FN((fn_name, lib))
    addr = ctypes.addressof(args)

    def run() -> None:
        fn(addr)
    run.native_step = (ctypes.cast(fn, ctypes.c_void_p).value, addr)
    run.native_keep = (fn, args, keep)
    run.native_name = fn_name
    return run


def run_steps_call(steps, last: bool = False) -> Callable[[], None]:
    """One closure running several ``native_step`` closures in one C call (``ei_run_steps``).
    ``last``: nothing of the plan follows them (``ei_run_steps_linger``: the pool's workers
    spin out their idle budget instead of going to sleep, so a next run finds them awake)."""
    arr = (EiStep * len(steps))(*[EiStep(*s.native_step) for s in steps])
    n = len(steps)
    call = lib.ei_run_steps_linger if last and hasattr(lib, "ei_run_steps_linger") else lib.ei_run_steps

    def run() -> None:
        call(arr, n)
    run.native_keep = (arr, tuple(steps))
    run.native_lingers = call is not lib.ei_run_steps
    return run


#: the pool counters of ``pool_stats`` (EI_POOL_* of edge_native.h, in order)
POOL_STATS = ("jobs", "serial_jobs", "chunks", "caller_chunks", "waits", "wait_ns", "work_ns", "sleeps",
              "shrinks", "calms")


def pool_stats(reset: bool = False, forget: bool = False) -> Dict[str, int]:
    """The native thread pool's counters since the last reset (``POOL_STATS``; runtime.c):
    parallel jobs, jobs run by the caller alone while the pool had shrunk, chunks handed out
    and run by the caller, the caller's waits for workers (count, ns, how many ended asleep),
    its ns running chunks, how often the pool shrank, and the jobs during which a spin stopped
    because it saw contention (runtime.c). ``reset``: zero them after reading; ``forget``: the
    pool also forgets that it shrank or saw contention (tests start from a fresh pool). Empty
    without the library."""
    if lib is None or not hasattr(lib, "ei_pool_stats"):
        return {}
    out = (ctypes.c_int64 * len(POOL_STATS))()
    lib.ei_pool_stats(out, int(reset) | (3 if forget else 0))
    return dict(zip(POOL_STATS, out))


#: int64 fields of one ``profile_steps`` record: args address, ns, then the POOL_STATS deltas
PROFILE_FIELDS = 2 + len(POOL_STATS)


def profile_steps(buf) -> int:
    """Start (``buf``: a C-contiguous int64 numpy array of shape (records, PROFILE_FIELDS)) or
    stop (None) recording each native step that ``ei_run_steps`` runs on this thread: its
    argument struct's address, wall ns, and the pool counters' deltas over the step. Returns
    how many records the previous buffer received. ``buf`` must outlive the recording."""
    if lib is None or not hasattr(lib, "ei_profile_steps"):
        return 0
    if buf is None:
        return int(lib.ei_profile_steps(None, 0))
    assert buf.dtype.name == "int64" and buf.flags.c_contiguous and buf.shape[1:] == (PROFILE_FIELDS,)
    return int(lib.ei_profile_steps(buf.ctypes.data, buf.shape[0]))
