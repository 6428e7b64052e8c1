"""A compact live terminal view of the metrics: one line, redrawn in place on a terminal
(a new line each refresh when the output is not a terminal, e.g. a systemd journal)."""
from __future__ import annotations

import math
import sys
import threading
import time
from typing import Optional

from .registry import Registry

__all__ = ["TerminalView", "format_line"]


def _num(v, fmt="{:.1f}", none="-"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return fmt.format(v)


def format_line(registry: Registry) -> str:
    """``fps 29.9 | e2e p50/p90/p99 12.1/14.0/20.3 ms | wait p50 2.1 ms | model p50 8.1 ms |
    pre 1.2 inf 8.3 post 0.4 ms | q 0/1/0/0 |
    drop 3 | batch 4.0 | rss 85 MB | cpu 43% 51% | 1800 MHz | 54.2 C | err 0``"""
    r = registry
    parts = []
    g = r.get("edge_infer_fps")
    parts.append(f"fps {_num(g.value if g else None)}")
    lat = r.get("edge_infer_latency_seconds")
    if lat is not None and lat.count:
        q = lat.quantiles()
        parts.append("e2e p50/p90/p99 " + "/".join(_num(q.get(k, math.nan) * 1e3) for k in (0.5, 0.9, 0.99)) + " ms")
    for name, short in (("edge_infer_queue_wait_seconds", "wait"), ("edge_infer_inference_seconds", "model")):
        m = r.get(name)
        if m is not None and m.count:
            parts.append(f"{short} p50 {_num(m.quantiles().get(0.5, math.nan) * 1e3)} ms")
    stages = r.series("edge_infer_stage_seconds")
    if stages:
        short = {"capture": "cap", "preprocess": "pre", "infer": "inf", "postprocess": "post", "sink": "sink"}
        parts.append(" ".join(f"{short.get(dict(m.labels).get('stage'), dict(m.labels).get('stage'))} "
                              f"{_num(m.mean * 1e3)}" for m in stages) + " ms")
    qs = r.series("edge_infer_queue_depth")
    if qs:
        parts.append("q " + "/".join(_num(m.value, "{:.0f}") for m in qs))
    drops = r.series("edge_infer_frames_dropped_total")
    if drops:
        parts.append(f"drop {int(sum(m.value for m in drops))}")
    b = r.get("edge_infer_batch_size")
    if b is not None and b.count:
        parts.append(f"batch {_num(b.mean)}")
    rss = r.get("edge_infer_process_rss_bytes")
    if rss is not None:
        parts.append(f"rss {rss.value / 2**20:.0f} MB")
    cores = r.series("edge_infer_cpu_percent")
    if cores:
        parts.append("cpu " + " ".join(f"{m.value:.0f}%" for m in cores[:8]) + (" ..." if len(cores) > 8 else ""))
    freqs = [m.value for m in r.series("edge_infer_cpu_frequency_mhz") if m.value]
    if freqs:
        th = r.get("edge_infer_cpu_throttled")
        parts.append(f"{max(freqs):.0f} MHz" + (" THROTTLED" if th is not None and th.value else ""))
    t = r.get("edge_infer_soc_temperature_celsius")
    if t is not None:
        parts.append(f"{t.value:.1f} C")
    gpu = r.get("edge_infer_gpu_utilization_ratio")
    if gpu is not None:
        parts.append(f"gpu {gpu.value:.0%}")
    err = r.get("edge_infer_errors_total")
    if err is not None:
        parts.append(f"err {int(err.value)}")
    return " | ".join(parts)


class TerminalView:
    """Writes ``format_line`` to ``stream`` every ``interval`` seconds: driven by a Sampler
    (``Sampler(view=TerminalView(reg))``) or by its own thread (``start()``)."""

    def __init__(self, registry: Registry, stream=None, interval: float = 1.0):
        self.registry, self.stream, self.interval = registry, stream or sys.stderr, interval
        self._next = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def render(self) -> str:
        line = format_line(self.registry)
        if self._tty:
            self.stream.write("\r\x1b[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        return line

    def maybe_render(self, now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        if now >= self._next:
            self._next = now + self.interval
            self.render()

    def start(self) -> "TerminalView":
        def loop():
            while not self._stop.wait(self.interval):
                self.render()
        self._thread = threading.Thread(target=loop, name="edge-infer-view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.render()                      # the final state
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()
