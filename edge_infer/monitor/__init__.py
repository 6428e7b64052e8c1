"""Live monitoring: a metrics registry, a sampler thread, Prometheus exposition over HTTP,
JSON lines and a terminal view.

>>> reg = Registry()                                              # doctest: +SKIP
>>> with Sampler(reg, interval=0.1, runtime=rt), MetricsServer(reg, port=9100):
...     ...                                                       # scrape /metrics
"""
from .registry import Counter, Gauge, Registry, Summary
from .prometheus import MetricsServer, render
from .sampler import Sampler, record_op_times, runtime_memory
from .terminal import TerminalView, format_line

__all__ = ["Registry", "Counter", "Gauge", "Summary", "Sampler", "MetricsServer", "render", "TerminalView",
           "format_line", "record_op_times", "runtime_memory"]
