"""The benchmark scripts run end to end on a small model (one round, one thread, one busy
process): compare.py's rows carry both engines' quiet and contended timings and outputs that
agree with onnxruntime; native_bench.py times every peer it can build, LiteRT int8 included
when ai-edge-litert is installed."""
from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("onnxruntime")
BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)


@pytest.mark.slow
def test_compare_times_both_engines_quiet_and_contended(capsys):
    import compare
    assert compare.main(["--models", "mnv3_textdir", "--threads", "1", "--rounds", "1", "--contention", "1",
                         "--no-micro", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["models"]
    assert row["model"] == "mnv3_textdir" and row["threads"] == 1
    assert row["max_rel_err"] < 1e-4
    for engine in ("edge_infer", "onnxruntime"):
        q, c = row["quiet"][engine], row["contended"][engine]
        assert 0 < q["min_ms"] <= q["median_ms"] and 0 < c["min_ms"] <= c["median_ms"]
        assert c["vs_quiet"] == pytest.approx(c["median_ms"] / q["median_ms"])


@pytest.mark.slow
def test_native_bench_times_every_peer(capsys):
    import native_bench
    assert native_bench.main(["--models", "mnv3_textdir", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")}
    expected = {"ours int8", "ours fp32", "onnxruntime fp32", "onnxruntime int8 QDQ"}
    try:
        import ai_edge_litert  # noqa: F401
        expected |= {"LiteRT fp32 (XNNPACK)", "LiteRT int8 (XNNPACK)"}
    except ImportError:
        pass
    assert expected <= rows, out
    assert "int8 plan:" in out and "top-1 agreement" in out


def test_loop_ops_bench_times_both_sides(capsys):
    import loop_ops_bench
    loop_ops_bench.main(["--threads", "1", "--rounds", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == 8 and all(float(r.split("|")[-2].strip()[:-1]) > 0 for r in rows)


def test_model_groups_expand_in_order_once():
    import _common
    assert _common.expand_models("resnet50,families,yolo320") == ["resnet50", "mnv3", "mnv3_textdir", "mnv3_large",
                                                                   "db640", "yolo320", "yolo640"]
    assert _common.expand_models("core")[:3] == ["resnet50", "mobilenetv2", "squeezenet"]
