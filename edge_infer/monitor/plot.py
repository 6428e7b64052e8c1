"""``edge-infer bench --plot FILE.png``: latency histogram and per-op time breakdown.
Needs matplotlib (the ``plot`` extra), imported only here."""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

__all__ = ["plot_bench"]


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")          # files only; no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plotting needs matplotlib, which is not installed: "
                          "pip install \"edge-infer[plot]\" (or matplotlib)") from None
    return plt


def plot_bench(report: Dict, latencies_ms: Sequence[float], path: str, top_ops: int = 12) -> str:
    """Draw ``report`` (as ``cli.bench_artifact`` returns) and the raw latencies into ``path``."""
    plt = _pyplot()
    lat = np.asarray(latencies_ms, dtype=np.float64)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax1.hist(lat, bins=min(50, max(10, len(lat) // 4)), color="#4c72b0")
    for key, style in (("median_ms", "-"), ("p90_ms", "--"), ("p99_ms", ":")):
        if key in report:
            ax1.axvline(report[key], color="k", linestyle=style, label=f"{key[:-3]} {report[key]:.3f} ms")
    ax1.set_xlabel("latency (ms)")
    ax1.set_ylabel("runs")
    ax1.set_title(f"latency, {len(lat)} runs ({report.get('backend', '?')}, {report.get('threads', '?')} threads)")
    ax1.legend()
    ops = report.get("ops", [])[:top_ops][::-1]
    ax2.barh([o["op"] for o in ops], [o["ms"] for o in ops], color="#dd8452")
    for k, o in enumerate(ops):
        ax2.text(o["ms"], k, f" {o['share']:.0%}", va="center", fontsize=8)
    ax2.set_xlabel("time per run (ms)")
    ax2.set_title("time per op type")
    fig.suptitle(str(report.get("artifact", "")), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
