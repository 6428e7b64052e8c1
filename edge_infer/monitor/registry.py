"""A small, thread-safe metrics registry: counters, gauges and summaries with labels.

Names follow Prometheus conventions (``edge_infer_latency_seconds``, counters end in
``_total``). Summaries keep a rolling window of the latest observations and report quantiles
over it (p50/p90/p99), plus the all-time count and sum.
"""
from __future__ import annotations

import math
import re
import threading
from collections import deque
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Registry", "Counter", "Gauge", "Summary", "series_key"]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

Labels = Tuple[Tuple[str, str], ...]


def _labels(labels: Optional[Dict[str, object]]) -> Labels:
    if not labels:
        return ()
    for k in labels:
        if not _LABEL.match(k) or k.startswith("__"):
            raise ValueError(f"bad metric label name {k!r}")
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def series_key(name: str, labels: Labels) -> str:
    """``name{a="1",b="x"}`` (the Prometheus series notation; JSON keys use it too)."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


class _Metric:
    kind = ""

    def __init__(self, name: str, labels: Labels):
        self.name, self.labels = name, labels
        self._lock = threading.Lock()


class Counter(_Metric):
    """Only goes up."""
    kind = "counter"

    def __init__(self, name, labels):
        super().__init__(name, labels)
        self._v = 0.0

    def inc(self, n: float = 1.0) -> None:
        if n < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            self._v += n

    @property
    def value(self) -> float:
        return self._v


class Gauge(_Metric):
    """A value that goes up and down; with ``fn`` it is read when collected."""
    kind = "gauge"

    def __init__(self, name, labels, fn: Optional[Callable[[], float]] = None):
        super().__init__(name, labels)
        self._v = 0.0
        self.fn = fn

    def set(self, v: float) -> None:
        self._v = float(v)

    def inc(self, n: float = 1.0) -> None:
        with self._lock:
            self._v += n

    def dec(self, n: float = 1.0) -> None:
        self.inc(-n)

    @property
    def value(self) -> float:
        if self.fn is not None:
            try:
                return float(self.fn())
            except Exception:  # noqa: BLE001  (a probe that fails reads as NaN)
                return math.nan
        return self._v


class Summary(_Metric):
    """Observations: all-time ``count``/``sum``, quantiles over the last ``window``."""
    kind = "summary"

    def __init__(self, name, labels, window: int = 2048, quantiles: Sequence[float] = (0.5, 0.9, 0.99)):
        super().__init__(name, labels)
        self._window: deque = deque(maxlen=window)
        self.quantile_points = tuple(quantiles)
        self.count = 0
        self.sum = 0.0

    def observe(self, v: float) -> None:
        with self._lock:
            self._window.append(float(v))
            self.count += 1
            self.sum += float(v)

    def values(self) -> np.ndarray:
        with self._lock:
            return np.array(self._window, dtype=np.float64)

    def quantiles(self) -> Dict[float, float]:
        v = self.values()
        if not v.size:
            return {q: math.nan for q in self.quantile_points}
        qs = np.quantile(v, self.quantile_points)
        return {q: float(x) for q, x in zip(self.quantile_points, qs)}

    def quantile(self, q: float) -> float:
        v = self.values()
        return float(np.quantile(v, q)) if v.size else math.nan

    @property
    def mean(self) -> float:
        v = self.values()
        return float(v.mean()) if v.size else math.nan

    def reset_window(self) -> None:
        with self._lock:
            self._window.clear()


class Registry:
    """Metric families by name; each family has one series per label set."""

    def __init__(self):
        self._families: Dict[str, dict] = {}
        self._lock = threading.Lock()

    def _get(self, cls, name: str, help: str, labels, **kw):
        if not _NAME.match(name):
            raise ValueError(f"bad metric name {name!r}")
        key = _labels(labels)
        fam = self._families.get(name)
        if fam is not None:
            m = fam["series"].get(key)
            if m is not None:
                if not isinstance(m, cls):
                    raise ValueError(f"metric {name} is a {fam['kind']}, not a {cls.kind}")
                return m
        with self._lock:
            fam = self._families.setdefault(name, {"kind": cls.kind, "help": help, "series": {}})
            if fam["kind"] != cls.kind:
                raise ValueError(f"metric {name} is a {fam['kind']}, not a {cls.kind}")
            if help and not fam["help"]:
                fam["help"] = help
            m = fam["series"].get(key)
            if m is None:
                m = fam["series"][key] = cls(name, key, **kw)
            return m

    def counter(self, name: str, help: str = "", labels: Optional[Dict] = None) -> Counter:
        return self._get(Counter, name, help, labels)

    def gauge(self, name: str, help: str = "", labels: Optional[Dict] = None,
              fn: Optional[Callable[[], float]] = None) -> Gauge:
        g = self._get(Gauge, name, help, labels)
        if fn is not None:
            g.fn = fn
        return g

    def summary(self, name: str, help: str = "", labels: Optional[Dict] = None, window: int = 2048,
                quantiles: Sequence[float] = (0.5, 0.9, 0.99)) -> Summary:
        return self._get(Summary, name, help, labels, window=window, quantiles=quantiles)

    def get(self, name: str, labels: Optional[Dict] = None):
        fam = self._families.get(name)
        return None if fam is None else fam["series"].get(_labels(labels))

    def series(self, name: str) -> List:
        fam = self._families.get(name)
        return [] if fam is None else list(fam["series"].values())

    def families(self) -> List[Tuple[str, str, str, List]]:
        """``(name, kind, help, [metrics])`` for every family, in registration order."""
        with self._lock:
            return [(n, f["kind"], f["help"], list(f["series"].values())) for n, f in self._families.items()]

    def names(self) -> Iterable[str]:
        return list(self._families)

    def snapshot(self) -> Dict[str, object]:
        """Every series' current value: numbers for counters and gauges,
        ``{"count", "sum", "p50", "p90", "p99"}`` for summaries; NaN becomes None (JSON)."""
        out: Dict[str, object] = {}
        for name, kind, _, metrics in self.families():
            for m in metrics:
                key = series_key(name, m.labels)
                if kind == "summary":
                    d = {"count": m.count, "sum": round(m.sum, 9)}
                    for q, v in m.quantiles().items():
                        d[f"p{int(round(q * 100))}"] = None if math.isnan(v) else v
                    out[key] = d
                else:
                    v = m.value
                    out[key] = None if math.isnan(v) else v
        return out
