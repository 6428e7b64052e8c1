"""Choosing the backend for a model: ``Runtime(path, backend="auto")``.

For one graph with concrete shapes, ``pick``

1. lists the candidates: the target profile's ``"backends"`` first (``"native"`` is the
   CPU backend with its native kernels: an alias of ``"cpu"``), then every other
   registered backend; each says whether it is available here and why not;
2. checks coverage: ``Backend.supports(node, graph)`` on every node that runs. A backend
   covering everything is an option as is; one covering part of the graph is an option
   as a partition with the CPU backend (``partition.plan_partition``), if any segment
   is worth offloading;
3. scores the options: the time measured by ``edge-infer bench --backends`` on this
   device for this model and input shapes (``timings.json``) where there is one, else the
   cost model's estimate (``throughput``: FLOPs and bytes per op against the backend's
   microbenchmarked throughput, cached in ``throughput.json``); close estimates of
   in-process backends on a small model are settled by timing the model itself once
   (``_measure_close_calls``; recorded in ``timings.json``);
4. takes the fastest; where estimates take part, scores within 3% go to the earlier
   candidate (the profile's order); between measured timings the fastest wins outright.

With one option (the usual CPU-only machine) nothing is measured or estimated.

Cache files live in ``$EDGE_INFER_CACHE_DIR``, else ``$XDG_CACHE_HOME/edge_infer``, else
``~/.cache/edge_infer``; entries are keyed by a device fingerprint (CPU, board,
accelerators, edge_infer version), and timings also by a hash of the model's structure
with its input shapes and the thread count. An unwritable cache only costs re-measuring.
A profile measured while the machine is busy (load average above 1.5 per CPU) is kept but
marked, and the first later process that finds the machine quiet measures it again.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, List, Optional, Sequence

from ..cache import cache_dir  # noqa: F401  (re-exported: picker.cache_dir)
from ..errors import BackendError, UnsupportedOpError
from ..probe_guard import DeviceCrashError
from ..ir import Graph
from ..ops.dynamic import data_dependent_tensors
from .base import Backend
from .partition import (DEFAULT_MIN_RATIO, PartitionedBackend, PartitionPlan, plan_partition,
                        run_time_shapes_crossing)
from .throughput import MICROBENCH_VERSION, graph_seconds, measure_profile, prepared_runner, running_nodes

#: profile names that mean another backend
ALIASES = {"native": "cpu", "numpy": "cpu"}
FALLBACK = "cpu"
TIE = 0.03
#: backends that run in this process and are timed on the model itself when the estimates of
#: two of them are within MEASURE_WITHIN of each other (a GPU driver is only ever loaded in a
#: child process, see probe_guard, so OpenCL and CUDA are not); models estimated above
#: MEASURE_MAX_S keep the estimate (their FLOPs decide, and timing them takes long)
MEASURE_ON_PICK = frozenset({"cpu", "litert"})
MEASURE_WITHIN = 3.0
MEASURE_MAX_S = 0.02
#: seconds of round-robin runs (at least 3 each, at most 50)
MEASURE_BUDGET_S = 0.4
#: why a backend is no option under a memory limit (pick's ``memory_bound``)
NO_MEMORY_BOUND = ("cannot honour a memory limit: it allocates inside its own runtime, so the "
                   "plan's memory is not known before a run")

#: a profile measured while the 1-minute load average per CPU exceeds this is re-measured
#: by a later process that finds the machine quieter
MAX_LOAD_TO_SAVE = 1.5

_lock = threading.Lock()
_measured_here: Dict[str, dict] = {}    # profiles this process measured
_memory_cache: Dict[str, dict] = {}     # file name -> content, when the cache dir is unwritable


# -- cache ---------------------------------------------------------------------------------

def _load(fname: str) -> dict:
    path = os.path.join(cache_dir(), fname)
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return dict(_memory_cache.get(path, {}))


def _save(fname: str, data: dict) -> None:
    path = os.path.join(cache_dir(), fname)
    _memory_cache[path] = data
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        import tempfile
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass


@lru_cache(maxsize=1)
def device_fingerprint() -> str:
    """A short hash naming this device: CPU, board, OpenCL/CUDA devices, edge_infer version."""
    from ..version import __version__
    from ..probe import probe
    info = probe(backends=False)
    cpu, board = info.get("cpu", {}), info.get("board", {})
    ocl = [(p.get("platform"), [(d.get("name"), d.get("version")) for d in p.get("devices", [])])
           for p in info.get("opencl", {}).get("platforms", [])]
    cuda = [(d.get("name"), d.get("compute_capability")) for d in info.get("cuda", {}).get("devices", [])]
    key = json.dumps([cpu.get("arch"), cpu.get("model"), cpu.get("logical_cpus"), board.get("device_tree_model"),
                      board.get("nv_tegra_release"), ocl, cuda, __version__], default=str)
    import hashlib      # not at module level: it maps libcrypto (~3 MB RSS) into every runtime
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def model_key(graph: Graph, threads: int) -> str:
    """Hash of a specialized graph's structure (ops, attributes, tensor dtypes and shapes:
    what timing depends on, not the weight values) and the thread count."""
    import hashlib
    h = hashlib.sha256()
    for n in graph.nodes:
        h.update(json.dumps([n.op, n.inputs, n.outputs, n.attrs], sort_keys=True, default=str).encode())
    for name in sorted(graph.tensors):
        t = graph.tensors[name]
        shape = t.data.shape if t.is_const else t.shape
        h.update(f"{name}:{t.dtype}:{shape}:{t.is_const}".encode())
    h.update(json.dumps([graph.inputs, graph.outputs]).encode())
    return f"{h.hexdigest()[:20]}-t{int(threads)}"


def throughput_profile(backend: Backend, threads: int, refresh: bool = False) -> dict:
    """The backend's microbenchmarked throughput on this device (cached)."""
    key = f"{device_fingerprint()}/{backend.name}/t{int(threads)}/v{MICROBENCH_VERSION}"
    with _lock:
        data = _load("throughput.json")
        prof = data.get(key) or _measured_here.get(key)
    if prof and not refresh:
        busy = prof.get("load_per_cpu", 0.0) > MAX_LOAD_TO_SAVE
        if not busy or key in _measured_here or _load_per_cpu() > MAX_LOAD_TO_SAVE:
            return prof
        # measured on a busy machine and it is quiet now: measure again, once per process
    if backend.isolate_probe:   # a GPU driver: measured where a crash cannot reach us
        from ..probe_guard import throughput_in_child
        prof = throughput_in_child(backend.name, threads)
    else:
        prof = measure_profile(backend, threads)
    prof["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    prof["load_per_cpu"] = _load_per_cpu()
    _measured_here[key] = prof
    with _lock:
        data = _load("throughput.json")
        data[key] = prof
        _save("throughput.json", data)
    return prof


def _load_per_cpu() -> float:
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)
    except (OSError, AttributeError):      # no load average on this platform
        return 0.0


def measured_timings(key: str) -> Dict[str, dict]:
    """{option name: {"median_ms", "runs", "when"}} measured for this model key on this device."""
    with _lock:
        return dict(_load("timings.json").get(device_fingerprint(), {}).get(key, {}))


def record_timing(key: str, option: str, median_ms: float, runs: int) -> None:
    """Store a measured median (``edge-infer bench --backends``) for later picks."""
    with _lock:
        data = _load("timings.json")
        data.setdefault(device_fingerprint(), {}).setdefault(key, {})[option] = {
            "median_ms": float(median_ms), "runs": int(runs), "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
        _save("timings.json", data)


# -- candidates ------------------------------------------------------------------------------

def candidate_names(preference: Sequence[str] = ()) -> List[str]:
    """The profile's preferred backends (aliases resolved), then the other registered ones."""
    from . import BACKENDS
    names = [ALIASES.get(p, p) for p in preference]
    return list(dict.fromkeys([n for n in names if n in BACKENDS] + list(BACKENDS)))


def _instantiate(name: str):
    from . import BACKENDS
    try:
        b = BACKENDS[name]()
        ok, why = b.available()
    except Exception as e:  # noqa: BLE001  (a backend whose dependency is broken is unavailable)
        return None, False, f"failed to load ({type(e).__name__}: {e})"
    return b, bool(ok), str(why or "")


def usable_backends(names: Sequence[str]):
    """(the backends of ``names`` available here, in order, "native" as "cpu", each once;
    {name: why not} of the others). An unknown name raises BackendError."""
    from . import BACKENDS
    unknown = [n for n in names if n not in BACKENDS and n not in ALIASES]
    if unknown:
        raise BackendError(f"unknown backend(s) {unknown}; known: {', '.join(sorted(BACKENDS))}")
    usable, skipped = [], {}
    for name in dict.fromkeys(ALIASES.get(n, n) for n in names):
        _, ok, why = _instantiate(name)
        if ok:
            usable.append(name)
        else:
            skipped[name] = why
    return usable, skipped


def coverage(backend: Backend, graph: Graph) -> dict:
    """{"nodes", "supported", "unsupported": {op: count}} over the nodes that run. A node that
    touches a tensor whose shape is decided at run time is the CPU backend's alone."""
    nodes = running_nodes(graph)
    dyn = data_dependent_tensors(graph) if backend.name != FALLBACK else {}
    missing: Dict[str, int] = {}
    for n in nodes:
        try:
            ok = not any(t in dyn for t in n.inputs + n.outputs if t) and backend.supports(n, graph)
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            missing[n.op] = missing.get(n.op, 0) + 1
    return {"nodes": len(nodes), "supported": len(nodes) - sum(missing.values()), "unsupported": missing}


@dataclass
class Choice:
    """What ``pick`` decided: the backend that prepares plans (a partition is one too)."""
    name: str
    backend: Backend
    report: dict = field(default_factory=dict)
    plan: Optional[PartitionPlan] = None


def pick(graph: Graph, requested: str = "auto", preference: Sequence[str] = (), threads: int = 1,
         profiles: Optional[Dict[str, dict]] = None, use_timings: bool = True,
         min_ratio: float = DEFAULT_MIN_RATIO, estimate: bool = False,
         memory_bound: bool = False) -> Choice:
    """The backend (or partition) to run ``graph`` (concrete shapes) with; see the module doc.

    ``requested``: "auto" or a backend name (then only it, partitioned with the CPU where it
    lacks ops). ``profiles``: throughput profiles to use instead of measuring (tests).
    ``use_timings``: consult measured timings. ``estimate``: estimate even a lone option.
    ``memory_bound``: the caller set a memory limit, so only backends whose plans size their
    memory up front (``Backend.plans_memory``) are options, and no partition; the others are
    listed in the report as excluded, with why."""
    from . import BACKENDS
    requested = ALIASES.get(requested, requested)
    if requested != "auto" and requested not in BACKENDS:
        raise BackendError(f"unknown backend {requested!r}; known: {', '.join(sorted(BACKENDS))}")
    names = [requested] if requested != "auto" else candidate_names(preference)
    if FALLBACK not in names and FALLBACK in BACKENDS:
        names.append(FALLBACK)
    report = {"requested": requested, "preference": [ALIASES.get(p, p) for p in preference],
              "candidates": [], "threads": threads}
    dyn = data_dependent_tensors(graph)
    if dyn:
        # shapes decided at run time: the CPU backend plans those parts in stages; another
        # backend can take the rest as a partition (``coverage`` and ``assign`` leave it them)
        report["data_dependent"] = dict(dyn)
    insts: Dict[str, Backend] = {}
    options = []            # (name, backend, plan or None)
    for name in names:
        b, ok, why = _instantiate(name)
        entry = {"name": name, "available": ok, "reason": why}
        report["candidates"].append(entry)
        if not ok:
            continue
        if memory_bound and not b.plans_memory:
            entry["excluded"] = NO_MEMORY_BOUND
            if requested == name:
                raise BackendError(f"backend {name!r} {NO_MEMORY_BOUND}; drop the memory limit or use "
                                   "another backend")
            continue
        insts[name] = b
        cov = coverage(b, graph)
        entry["coverage"] = cov
        if requested != "auto" and name != requested:
            continue                      # the CPU only as the fallback of a requested backend
        if not cov["unsupported"]:
            options.append((name, b, None))
            entry["option"] = name
        elif name != FALLBACK and cov["supported"] and memory_bound:
            entry["why_not"] = "a partition's memory is not checked against a memory limit"
        elif name != FALLBACK and cov["supported"]:
            entry["option"] = "partition"
    if requested != "auto":
        if requested not in insts:
            raise BackendError(f"backend {requested!r} is not available here: {report['candidates'][0]['reason']}")
    fb = insts.get(FALLBACK)
    partial = [(e["name"], insts[e["name"]]) for e in report["candidates"] if e.get("option") == "partition"]
    if partial and fb is None:
        raise BackendError("the CPU backend is needed to run the ops other backends lack, and it is unavailable")
    need_profiles = estimate or partial or len(options) > 1
    profs: Dict[str, dict] = dict(profiles or {})
    if need_profiles:
        for name, b in insts.items():
            if name not in profs:
                try:
                    profs[name] = throughput_profile(b, threads)
                except DeviceCrashError as e:   # the driver crashed measuring: not used at all
                    e_ = _entry(report, name)
                    e_.update(available=False, reason=f"unavailable because {e}", option=None)
                    options = [o for o in options if o[0] != name]
                    partial = [p for p in partial if p[0] != name]
                except Exception as e:  # noqa: BLE001  (the microbenchmark failed: no estimate)
                    _entry(report, name)["profile_error"] = str(e)
    for name, b in partial:
        e = _entry(report, name)
        try:
            # a backend the caller asked for runs every segment it covers (no ratio to meet): the
            # ratio only decides between backends when the choice is ours
            plan = plan_partition(graph, b, fb, profs, min_ratio if requested == "auto" else 0.0,
                                  require_gain=requested == "auto")
        except UnsupportedOpError as err:
            e["partition_error"] = str(err)
            continue
        crossing = run_time_shapes_crossing(graph, plan.segments)
        if crossing:
            e["partition_error"] = (f"tensor {crossing[0]!r}, whose shape is decided at run time, "
                                    "would pass between segments")
            continue
        e["partition"] = plan.summary()
        if plan.offloaded or requested != "auto":
            options.append((plan.name, PartitionedBackend(plan, {b.name: b, fb.name: fb}), plan))
            e["option"] = plan.name
        else:
            e["option"] = None
            e["why_not"] = "no segment worth offloading: " + "; ".join(plan.demoted[-1:])
    if not options:
        missing = {op for e in report["candidates"] for op in (e.get("coverage") or {}).get("unsupported", {})}
        why = ""
        if dyn:
            first, what = next(iter(dyn.items()))
            why = (f"; shapes depend on run-time values (tensor {first!r}: {what}), which only the "
                   f"{FALLBACK} backend plans, and {requested!r} runs none of the other nodes")
        raise UnsupportedOpError(f"no available backend runs this graph (ops {sorted(missing)} are not covered){why}")

    # seconds estimated per option (a partition's from its plan), None where no profile
    estimates = {name: plan.est_s if plan is not None else
                 graph_seconds(graph, profs[name], fallback=profs.get(FALLBACK)) if name in profs else None
                 for name, _, plan in options}
    key = None
    if use_timings and (len(options) > 1 or estimate):
        key = model_key(graph, threads)
        measured = measured_timings(key)
        if requested == "auto" and profiles is None:
            measured.update(_measure_close_calls(graph, options, estimates, measured, key, threads, report))
    else:
        measured = {}
    report["device"] = device_fingerprint() if need_profiles or key else None
    report["model_key"] = key
    scores = []
    for k, (name, b, plan) in enumerate(options):
        entry = _entry(report, name if plan is None else plan.primary)
        est = estimates[name]
        meas = measured.get(name, {}).get("median_ms")
        entry["estimated_ms"] = None if est is None else est * 1e3
        entry["measured_ms"] = meas
        score = meas if meas is not None else (est * 1e3 if est is not None else None)
        scores.append((name, b, plan, score, "measured" if meas is not None else "estimated", k))
    scored = [s for s in scores if s[3] is not None]
    if len(options) == 1 or not scored:
        name, b, plan = options[0]
        why = ("requested" if requested != "auto" else "the only available backend that runs this graph"
               if len(options) == 1 else "no estimate available: first in preference order")
        if plan is not None:
            why += f"; partitioned with {FALLBACK} ({len(plan.segments)} segments) for the ops {plan.primary} lacks"
        best = next(s for s in scores if s[0] == name)
    else:
        fastest = min(s[3] for s in scored)
        tie = 0.0 if all(s[4] == "measured" for s in scored) else TIE     # measurements decide alone
        best = min((s for s in scored if s[3] <= fastest * (1 + tie)), key=lambda s: s[5])
        others = ", ".join(f"{s[0]} {s[3]:.3f} ms ({s[4]})" for s in scored if s is not best)
        why = f"fastest: {best[0]} {best[3]:.3f} ms ({best[4]})" + (f" vs {others}" if others else "")
        if best[3] > fastest:
            why += f"; within {TIE:.0%} of the fastest, so the earlier in preference order"
        name, b, plan = best[0], best[1], best[2]
    if dyn:
        first, what = next(iter(dyn.items()))
        why += (f"; shapes decided at run time ({len(dyn)} tensors, e.g. {first!r}: {what}) are "
                f"planned in stages on {FALLBACK}")
    report["choice"] = name
    report["why"] = why
    report["options"] = [{"name": s[0], "score_ms": s[3], "basis": s[4]} for s in scores]
    return Choice(name, b, report, plan)


def _measure_close_calls(graph: Graph, options, estimates: Dict[str, Optional[float]],
                         measured: Dict[str, dict], key: str, threads: int, report: dict) -> Dict[str, dict]:
    """Time the options of in-process backends (``MEASURE_ON_PICK``; whole graph, or as a
    partition with the CPU) on the model itself when their estimates (``estimates``:
    seconds per option) are within ``MEASURE_WITHIN`` of each other and the model is
    small enough to time in a moment; record the medians (``timings.json``: later picks read
    them) and return {name: timing}. The estimate counts FLOPs and bytes against
    microbenchmarked rates; on small models per-op and per-run costs it does not see decide
    (an int8 MobileNetV3 estimated 0.086 ms on LiteRT and 0.100 on the CPU ran 0.25 and
    0.06 ms), so there the model is its own benchmark, once per device, model and threads."""
    # whole-graph options of those backends, and their partitions with the CPU (litert+cpu)
    est = {name: estimates[name] for name, _, plan in options
           if name not in measured and estimates[name] is not None
           and (plan.primary if plan is not None else name) in MEASURE_ON_PICK}
    if len(est) < 2:
        return {}
    fastest = min(est.values())
    close = [n for n, e in est.items() if e <= fastest * MEASURE_WITHIN]
    if len(close) < 2 or fastest > MEASURE_MAX_S:
        return {}
    runners = {}
    for name in close:
        b = next(o[1] for o in options if o[0] == name)
        try:
            runners[name] = prepared_runner(b, graph, threads)
        except Exception as e:  # noqa: BLE001  (timing is advice: a backend that fails it is left to the estimate)
            _entry(report, name)["timing_error"] = f"{type(e).__name__}: {e}"
    # round-robin, so that load from elsewhere hits every option alike
    times = {n: [] for n in runners}
    t_end = time.perf_counter() + MEASURE_BUDGET_S
    while runners and (min(map(len, times.values())) < 3 or time.perf_counter() < t_end) \
            and min(map(len, times.values())) < 50:
        for name, run in list(runners.items()):
            t0 = time.perf_counter()
            try:
                run()
            except Exception as e:  # noqa: BLE001
                _entry(report, name)["timing_error"] = f"{type(e).__name__}: {e}"
                del runners[name], times[name]
                continue
            times[name].append(time.perf_counter() - t0)
    # a busy machine's numbers decide this pick only; a quieter later process measures again
    keep = _load_per_cpu() <= MAX_LOAD_TO_SAVE
    out = {}
    for name, ts in times.items():
        ms = float(sorted(ts)[len(ts) // 2] * 1e3)
        out[name] = {"median_ms": ms, "runs": len(ts)}
        if keep:
            record_timing(key, name, ms, len(ts))
    if out:
        report["measured_at_pick"] = sorted(out)
    return out if len(out) >= 2 else {}


def _entry(report: dict, name: str) -> dict:
    return next(e for e in report["candidates"] if e["name"] == name)


def format_report(rep: dict) -> str:
    """The text ``edge-infer run --explain`` prints."""
    lines = [f"backend: {rep['choice']} (requested {rep['requested']}): {rep['why']}"]
    if rep.get("preference"):
        lines.append(f"  target profile prefers: {', '.join(rep['preference'])}")
    for e in rep["candidates"]:
        if not e["available"]:
            lines.append(f"  {e['name']:8} unavailable: {e['reason']}")
            continue
        if e.get("excluded"):
            lines.append(f"  {e['name']:8} excluded: {e['excluded']}")
            continue
        cov = e.get("coverage", {})
        text = f"  {e['name']:8} covers {cov.get('supported')}/{cov.get('nodes')} nodes"
        if cov.get("unsupported"):
            text += " (lacks " + ", ".join(f"{k} x{v}" for k, v in sorted(cov["unsupported"].items())) + ")"
        if e.get("estimated_ms") is not None:
            text += f"; estimated {e['estimated_ms']:.3f} ms"
        if e.get("measured_ms") is not None:
            text += f"; measured {e['measured_ms']:.3f} ms"
        if e.get("partition") and e.get("option"):
            p = e["partition"]
            text += f"; as partition {p['name']} in {len(p['segments'])} segments"
        if e.get("why_not"):
            text += f"; {e['why_not']}"
        if e.get("partition_error"):
            text += f"; cannot partition: {e['partition_error']}"
        lines.append(text)
    if rep.get("model_key"):
        lines.append(f"  device {rep.get('device')}, model key {rep['model_key']} (cache {cache_dir()})")
    return "\n".join(lines)


def partition_for(graph: Graph, requested: str = "auto", preference: Sequence[str] = (), threads: int = 1,
                  min_ratio: float = DEFAULT_MIN_RATIO) -> tuple:
    """(choice, plan) for ``inspect --partition``: the plan of the chosen backend (or of
    ``requested``); a backend covering the whole graph gives a one-segment plan."""
    from . import BACKENDS
    choice = pick(graph, requested, preference, threads, min_ratio=min_ratio, estimate=True)
    if choice.plan is not None:
        return choice, choice.plan
    b = choice.backend
    fb = b if b.name == FALLBACK else BACKENDS[FALLBACK]()
    profs = {n: throughput_profile(x, threads) for n, x in ((b.name, b), (fb.name, fb))}
    return choice, plan_partition(graph, b, fb, profs, min_ratio, require_gain=False)
