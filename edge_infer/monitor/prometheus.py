"""Prometheus text exposition format (version 0.0.4) and a tiny HTTP endpoint.

``render(registry)`` gives the text; ``MetricsServer(registry, port)`` serves it at
``/metrics`` from a daemon thread, bound to 127.0.0.1 unless told otherwise (metrics say a lot
about a device: expose them on the network only on purpose, ``host="0.0.0.0"``).
"""
from __future__ import annotations

import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from .registry import Registry

__all__ = ["render", "MetricsServer", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_help(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 2 ** 53:
        return str(int(v))
    return repr(v)


def _labels(pairs) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in pairs) + "}"


def render(registry: Registry) -> str:
    """All metrics of ``registry`` in the Prometheus text format."""
    lines = []
    for name, kind, help, metrics in registry.families():
        if not metrics:
            continue
        lines.append(f"# HELP {name} {_escape_help(help or name)}")
        lines.append(f"# TYPE {name} {kind}")
        for m in metrics:
            if kind == "summary":
                for q, v in m.quantiles().items():
                    lines.append(f"{name}{_labels(m.labels + (('quantile', _fmt(q)),))} {_fmt(v)}")
                lines.append(f"{name}_sum{_labels(m.labels)} {_fmt(m.sum)}")
                lines.append(f"{name}_count{_labels(m.labels)} {_fmt(m.count)}")
            else:
                lines.append(f"{name}{_labels(m.labels)} {_fmt(m.value)}")
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    registry: Registry = None
    server_version = "edge-infer-metrics"

    def do_GET(self):  # noqa: N802  (http.server's name)
        path = self.path.split("?", 1)[0]
        if path in ("/metrics", "/metrics/"):
            body, ctype, code = render(self.registry).encode("utf-8"), CONTENT_TYPE, 200
        elif path == "/":
            body = b'<html><body><a href="/metrics">metrics</a></body></html>\n'
            ctype, code = "text/html; charset=utf-8", 200
        else:
            body, ctype, code = b"not found\n", "text/plain; charset=utf-8", 404
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):  # quiet
        pass


class MetricsServer:
    """Serves ``registry`` at ``http://HOST:PORT/metrics``; ``port=0`` picks a free port
    (read it from ``.port``)."""

    def __init__(self, registry: Registry, port: int = 0, host: str = "127.0.0.1"):
        handler = type("Handler", (_Handler,), {"registry": registry})
        self.httpd = ThreadingHTTPServer((host, int(port)), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def start(self) -> "MetricsServer":
        if self._thread is None:
            self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                            name="edge-infer-metrics", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
