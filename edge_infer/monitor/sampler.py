"""A background sampler of system and runtime metrics (>= 10 Hz by default).

What it samples (names as exported; the pipeline and the batcher add latency, per-stage
times, queue depths, drops, batch sizes and per-op times to the same registry):

============================================  ==============================================
``edge_infer_process_rss_bytes``              resident memory of this process
``edge_infer_process_cpu_percent``            this process's CPU use (100 = one core)
``edge_infer_process_threads``                its threads
``edge_infer_cpu_percent{core}``              CPU use per core
``edge_infer_cpu_frequency_mhz{core}``        current clock per core
``edge_infer_cpu_frequency_max_ratio``        lowest current/max clock over the cores
``edge_infer_cpu_throttled``                  1 when clocks are capped (RPi firmware flags,
                                              cpufreq cooling devices, a lowered policy max)
``edge_infer_temperature_celsius{zone,type}`` every /sys/class/thermal zone
``edge_infer_soc_temperature_celsius``        the hottest zone
``edge_infer_memory_available_bytes``         MemAvailable
``edge_infer_memory_used_ratio``              1 - available / total
``edge_infer_load_average_1m``                load average
``edge_infer_gpu_utilization_ratio``          Jetson GPU load (sysfs), when readable
``edge_infer_arena_bytes``                    activation arenas of the runtime's plans
``edge_infer_workspace_bytes``                kernel workspaces of those plans
``edge_infer_plans``                          plans (executables) built
``edge_infer_allocator_fragmentation{pool}``  buddy allocator fragmentation (given allocators)
``edge_infer_allocator_used_bytes{pool}``     and use
``edge_infer_backend_info{backend}``          1 for the backend in use
``edge_infer_fps``                            frames (or requests) per second, over ~1 s
``edge_infer_errors_total``                   errors counted by the pipeline / batcher
``edge_infer_uptime_seconds``                 since the sampler started
``edge_infer_sampler_cpu_ratio``              the sampler's own CPU time / wall time
============================================  ==============================================

Every file is located once, when the sampler is made; a tick reads a handful of small files.
"""
from __future__ import annotations

import glob
import json
import os
import threading
import time
from collections import deque
from typing import Dict, Optional

import psutil

from .registry import Registry

__all__ = ["Sampler", "record_op_times", "runtime_memory"]

#: Jetson GPU load files (per mille), newest boards last
GPU_LOAD_FILES = ("sys/devices/gpu.0/load", "sys/devices/platform/gpu.0/load",
                  "sys/devices/17000000.gp10b/load", "sys/devices/17000000.gv11b/load",
                  "sys/devices/platform/17000000.gv11b/load", "sys/devices/platform/17000000.ga10b/load",
                  "sys/devices/platform/bus@0/17000000.gpu/load")
#: Raspberry Pi firmware throttling flags (bit 0: under-voltage, 1: capped, 2: throttled, 3: soft temp limit)
RPI_THROTTLED_FILES = ("sys/devices/platform/soc/soc:firmware/get_throttled",
                       "sys/devices/platform/soc/soc:firmware/raspberrypi-hwmon/get_throttled")


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace").strip()
    except OSError:
        return None


def _read_int(path: str) -> Optional[int]:
    s = _read(path)
    try:
        return int(s, 0) if s is not None else None
    except ValueError:
        return None


def record_op_times(registry: Registry, times, window: int = 256) -> None:
    """Add one profiled run (``[(node, op, seconds)]``, as ``run_profiled`` returns) to the
    per-op-type summaries ``edge_infer_op_seconds{op}``."""
    by_op: Dict[str, float] = {}
    for _, op, sec in times:
        by_op[op] = by_op.get(op, 0.0) + sec
    for op, sec in by_op.items():
        registry.summary("edge_infer_op_seconds", "time per op type in one sampled run",
                         {"op": op}, window=window).observe(sec)


def runtime_memory(runtime) -> Dict[str, int]:
    """Arena and workspace bytes over all plans a Runtime has built (one arena per
    concurrent executable; for dynamic shapes, one block per run slot), from
    ``Runtime.memory_stats``."""
    arena = work = plans = 0
    stats = runtime.memory_stats() if hasattr(runtime, "memory_stats") else {}
    if stats.get("dynamic"):
        for s in stats.get("slots", []):
            arena += int(s.get("block_bytes") or 0)
            work += int(s.get("workspace_bytes") or 0)
            plans += int(s.get("plans") or 0)
    else:
        for p in stats.get("plans", []):
            n = int(p.get("executables") or 0)
            plans += n
            arena += n * int(p.get("arena_bytes") or 0)
            work += n * int(p.get("workspace_bytes") or 0)
    return {"arena_bytes": arena, "workspace_bytes": work, "plans": plans}


class Sampler:
    """Samples into ``registry`` every ``interval`` seconds on a daemon thread.

    ``runtime``: a Runtime (or a list) whose plans' memory and backend are reported.
    ``allocators``: ``{name: BuddyAllocator}`` (or a list) whose fragmentation is reported.
    ``jsonl``: a path or file to append a snapshot to every ``jsonl_interval`` seconds.
    ``view``: a :class:`~edge_infer.monitor.terminal.TerminalView` to refresh.
    ``root``: the filesystem root to read /proc and /sys under (tests).
    """

    def __init__(self, registry: Optional[Registry] = None, interval: float = 0.1, runtime=None,
                 allocators=None, jsonl=None, jsonl_interval: float = 1.0, view=None, root: str = "/",
                 fps_counter: Optional[str] = None):
        self.registry = registry if registry is not None else Registry()
        self.interval = float(interval)
        self.runtimes = [] if runtime is None else list(runtime) if isinstance(runtime, (list, tuple)) else [runtime]
        if isinstance(allocators, dict):
            self.allocators = dict(allocators)
        else:
            self.allocators = {f"pool{i}": a for i, a in enumerate(allocators or ())}
        for rt in self.runtimes:
            a = getattr(rt, "allocator", None)
            if a is not None and hasattr(a, "fragmentation"):
                self.allocators.setdefault("runtime", a)
        self.root = root
        self.view = view
        self.fps_counter = fps_counter
        self._jsonl_own = isinstance(jsonl, (str, os.PathLike))
        self._jsonl = open(jsonl, "a", encoding="utf-8") if self._jsonl_own else jsonl
        self.jsonl_interval = jsonl_interval
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._proc = psutil.Process()
        self.samples = 0
        self.cpu_seconds = 0.0       # this sampler's own CPU time
        self.started = time.monotonic()
        self.unavailable: Dict[str, str] = {}
        self._fps_hist: deque = deque()
        self._discover()
        self._register()
        self._proc.cpu_percent(None)
        psutil.cpu_percent(None, percpu=True)

    # discovery ---------------------------------------------------------------------
    def _p(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def _discover(self) -> None:
        self.zones = []
        for d in sorted(glob.glob(self._p("sys/class/thermal/thermal_zone*"))):
            if os.path.isfile(os.path.join(d, "temp")):
                kind = _read(os.path.join(d, "type")) or "unknown"
                self.zones.append((os.path.basename(d), kind, os.path.join(d, "temp")))
        if not self.zones:
            self.unavailable["temperature"] = "no readable /sys/class/thermal/thermal_zone*/temp"
        self.cpufreq = []
        ncpu = psutil.cpu_count() or 1
        for c in range(ncpu):
            d = self._p(f"sys/devices/system/cpu/cpu{c}/cpufreq")
            if os.path.isfile(os.path.join(d, "scaling_cur_freq")):
                self.cpufreq.append((c, os.path.join(d, "scaling_cur_freq"),
                                     _read_int(os.path.join(d, "cpuinfo_max_freq")),
                                     os.path.join(d, "scaling_max_freq")))
        self.cpuinfo = self._p("proc/cpuinfo") if not self.cpufreq else None
        self.cooling = [os.path.join(d, "cur_state")
                        for d in sorted(glob.glob(self._p("sys/class/thermal/cooling_device*")))
                        if "cpu" in (_read(os.path.join(d, "type")) or "").lower()]
        self.rpi_throttled = next((self._p(f) for f in RPI_THROTTLED_FILES if os.path.isfile(self._p(f))), None)
        self.gpu_load = next((self._p(f) for f in GPU_LOAD_FILES if os.path.isfile(self._p(f))), None)
        if self.gpu_load is None:
            self.unavailable["gpu"] = "no Jetson GPU load file in sysfs (not a Jetson, or no permission)"
        self._cpuinfo_every = 1.0   # /proc/cpuinfo is slow to read on some kernels: at most 1 Hz
        self._cpuinfo_next = 0.0

    def _register(self) -> None:
        r = self.registry
        g = r.gauge
        self.g_rss = g("edge_infer_process_rss_bytes", "resident set size of this process")
        self.g_pcpu = g("edge_infer_process_cpu_percent", "CPU use of this process (100 = one core)")
        self.g_threads = g("edge_infer_process_threads", "threads of this process")
        ncpu = psutil.cpu_count() or 1
        self.g_core = [g("edge_infer_cpu_percent", "CPU use per core", {"core": c}) for c in range(ncpu)]
        self.g_freq = {c: g("edge_infer_cpu_frequency_mhz", "current clock per core", {"core": c})
                       for c in range(ncpu)}
        self.g_freq_ratio = g("edge_infer_cpu_frequency_max_ratio", "lowest current / max clock over the cores")
        self.g_throttled = g("edge_infer_cpu_throttled", "1 when the CPU clock is capped (thermal or power)")
        self.g_zone = [g("edge_infer_temperature_celsius", "temperature per thermal zone",
                         {"zone": z, "type": t}) for z, t, _ in self.zones]
        self.g_soc = g("edge_infer_soc_temperature_celsius", "hottest thermal zone") if self.zones else None
        self.g_mem_avail = g("edge_infer_memory_available_bytes", "memory available (MemAvailable)")
        self.g_mem_used = g("edge_infer_memory_used_ratio", "1 - available / total memory")
        self.g_load = g("edge_infer_load_average_1m", "1-minute load average")
        self.g_gpu = g("edge_infer_gpu_utilization_ratio", "GPU load (Jetson sysfs)") if self.gpu_load else None
        self.g_arena = g("edge_infer_arena_bytes", "activation arenas of all plans")
        self.g_work = g("edge_infer_workspace_bytes", "kernel workspaces of all plans")
        self.g_plans = g("edge_infer_plans", "executables built (one per concurrent run and input shape)")
        self.g_frag = {n: g("edge_infer_allocator_fragmentation", "1 - largest free block / free bytes",
                            {"pool": n}) for n in self.allocators}
        self.g_alloc_used = {n: g("edge_infer_allocator_used_bytes", "allocated bytes", {"pool": n})
                             for n in self.allocators}
        for rt in self.runtimes:
            backend = getattr(getattr(rt, "backend", None), "name", None)
            if backend:
                g("edge_infer_backend_info", "backend in use", {"backend": backend}).set(1)
        self.g_fps = g("edge_infer_fps", "frames or requests completed per second (~1 s window)")
        r.counter("edge_infer_errors_total", "errors (failed frames, failed requests)")
        self.g_uptime = g("edge_infer_uptime_seconds", "seconds since monitoring started")
        self.g_cost = g("edge_infer_sampler_cpu_ratio", "CPU time of the sampler / wall time")
        self.g_samples = g("edge_infer_sampler_samples", "samples taken")

    # sampling ---------------------------------------------------------------------
    def _frames(self) -> Optional[float]:
        names = [self.fps_counter] if self.fps_counter else ["edge_infer_frames_total", "edge_infer_requests_total"]
        for n in names:
            ms = self.registry.series(n)
            if ms:
                return sum(m.value for m in ms)
        return None

    def sample(self) -> None:
        """Take one sample now (the thread calls this every ``interval``)."""
        now = time.monotonic()
        p = self._proc
        try:
            with p.oneshot():
                self.g_rss.set(p.memory_info().rss)
                self.g_pcpu.set(p.cpu_percent(None))
                self.g_threads.set(p.num_threads())
        except psutil.Error:
            pass
        for gauge, v in zip(self.g_core, psutil.cpu_percent(None, percpu=True)):
            gauge.set(v)
        self._sample_freq(now)
        if self.zones:
            hottest = None
            for gauge, (_, _, path) in zip(self.g_zone, self.zones):
                v = _read_int(path)
                if v is not None:
                    c = v / 1000.0 if abs(v) > 200 else float(v)
                    gauge.set(c)
                    hottest = c if hottest is None else max(hottest, c)
            if hottest is not None:
                self.g_soc.set(hottest)
        vm = psutil.virtual_memory()
        self.g_mem_avail.set(vm.available)
        self.g_mem_used.set(1.0 - vm.available / max(vm.total, 1))
        try:
            self.g_load.set(os.getloadavg()[0])
        except (OSError, AttributeError):
            pass
        if self.g_gpu is not None:
            v = _read_int(self.gpu_load)
            if v is not None:
                self.g_gpu.set(v / 1000.0)
        arena = work = plans = 0
        for rt in self.runtimes:
            m = runtime_memory(rt)
            arena, work, plans = arena + m["arena_bytes"], work + m["workspace_bytes"], plans + m["plans"]
        self.g_arena.set(arena)
        self.g_work.set(work)
        self.g_plans.set(plans)
        for n, a in self.allocators.items():
            self.g_frag[n].set(a.fragmentation)
            self.g_alloc_used[n].set(a.used_bytes)
        frames = self._frames()
        if frames is not None:
            h = self._fps_hist
            h.append((now, frames))
            while len(h) > 2 and now - h[1][0] >= 1.0:
                h.popleft()
            dt = now - h[0][0]
            self.g_fps.set((frames - h[0][1]) / dt if dt > 0 else 0.0)
        self.g_uptime.set(now - self.started)
        self.samples += 1
        self.g_samples.set(self.samples)

    def _sample_freq(self, now: float) -> None:
        ratios = []
        capped = False
        if self.cpufreq:
            for c, cur_path, max_khz, policy_max_path in self.cpufreq:
                cur = _read_int(cur_path)
                if cur is None:
                    continue
                self.g_freq[c].set(cur / 1000.0)
                if max_khz:
                    ratios.append(cur / max_khz)
                    pmax = _read_int(policy_max_path)
                    if pmax is not None and pmax < max_khz:
                        capped = True
        elif self.cpuinfo and now >= self._cpuinfo_next:
            self._cpuinfo_next = now + self._cpuinfo_every
            text = _read(self.cpuinfo) or ""
            mhz = [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]
            for c, v in enumerate(mhz):
                if c in self.g_freq:
                    self.g_freq[c].set(v)
            if not mhz:
                self.unavailable["cpu_frequency"] = "no cpufreq in sysfs and no 'cpu MHz' in /proc/cpuinfo"
        if ratios:
            self.g_freq_ratio.set(min(ratios))
        for path in self.cooling:
            v = _read_int(path)
            if v:
                capped = True
        if self.rpi_throttled:
            v = _read_int(self.rpi_throttled)
            if v and v & 0x6:          # currently capped or throttled
                capped = True
        self.g_throttled.set(1.0 if capped else 0.0)

    # thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        clock = time.thread_time
        next_json = wall0 = time.monotonic()
        while not self._stop.is_set():
            t0, c0 = time.monotonic(), clock()
            try:
                self.sample()
                if self._jsonl is not None and t0 >= next_json:
                    next_json = t0 + self.jsonl_interval
                    self._jsonl.write(json.dumps({"time": round(time.time(), 3), **self.registry.snapshot()},
                                                 separators=(",", ":")) + "\n")
                    self._jsonl.flush()
                if self.view is not None:
                    self.view.maybe_render(t0)
            except Exception:  # noqa: BLE001  (monitoring must never take the app down)
                self.registry.counter("edge_infer_sampler_errors_total", "sampler failures").inc()
            self.cpu_seconds += clock() - c0
            wall = time.monotonic() - wall0
            if wall > 0:
                self.g_cost.set(self.cpu_seconds / wall)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def start(self) -> "Sampler":
        if self._thread is None:
            self._stop.clear()
            self.started, self.cpu_seconds = time.monotonic(), 0.0
            self._thread = threading.Thread(target=self._loop, name="edge-infer-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._jsonl_own and self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None

    @property
    def overhead(self) -> float:
        """CPU seconds the sampler used per wall second since it started (0.02 = 2% of a core)."""
        wall = time.monotonic() - self.started
        return self.cpu_seconds / wall if wall > 0 else 0.0

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
