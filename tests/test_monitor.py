"""Monitoring: registry, sampler (>= 10 Hz, >= 20 metrics, fake sysfs), Prometheus text scraped
over loopback and checked by a strict parser, JSON lines, terminal view, bench --plot."""
import json
import math
import os
import re
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import edge_infer
from edge_infer.data import digits_model_path
from edge_infer.memory.buddy import BuddyAllocator
from edge_infer.monitor import MetricsServer, Registry, Sampler, TerminalView, format_line, render
from edge_infer.pipeline import Pipeline, SyntheticSource


# -- a strict parser of the Prometheus text exposition format 0.0.4 --------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LNAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_LVALUE = r'"(?:[^"\\\n]|\\["\\n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(\{{(?:{_LNAME}={_LVALUE}(?:,{_LNAME}={_LVALUE})*)?\}})? (\S+)(?: (-?\d+))?$")
_LABEL = re.compile(rf"({_LNAME})=({_LVALUE})")
_FLOAT = re.compile(r"^(?:[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|[+-]Inf|NaN)$")


def parse_prometheus(text):
    """{family: {"type", "help", "samples": [(name, {labels}, value)]}}; AssertionError on any
    deviation from the format (the rules Prometheus' own parser enforces)."""
    assert text.endswith("\n"), "exposition must end with a newline"
    families, current, seen_series, closed = {}, None, set(), set()
    for n, line in enumerate(text.split("\n")[:-1], 1):
        assert line == line.strip() and line, f"line {n}: stray whitespace or empty line"
        if line.startswith("#"):
            m = re.match(rf"^# (HELP|TYPE) ({_NAME}) (.*)$", line)
            assert m, f"line {n}: bad comment {line!r}"
            kind, name, rest = m.groups()
            fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
            assert name not in closed, f"line {n}: family {name} is not contiguous"
            if current is not None and current != name:
                closed.add(current)
            current = name
            if kind == "TYPE":
                assert fam["type"] is None and not fam["samples"], f"line {n}: TYPE repeated or late"
                assert rest in ("counter", "gauge", "summary", "histogram", "untyped"), rest
                fam["type"] = rest
            else:
                assert fam["help"] is None, f"line {n}: HELP repeated"
                assert not re.search(r"\\[^\\n]", rest), f"line {n}: bad escape in HELP"
                fam["help"] = rest
            continue
        m = _SAMPLE.match(line)
        assert m, f"line {n}: not a sample line {line!r}"
        name, labels_txt, value, _ = m.groups()
        labels = {}
        if labels_txt:
            for k, v in _LABEL.findall(labels_txt):
                assert k not in labels, f"line {n}: label {k} twice"
                labels[k] = re.sub(r'\\(["\\n])', lambda m: "\n" if m.group(1) == "n" else m.group(1), v[1:-1])
        assert _FLOAT.match(value), f"line {n}: bad value {value!r}"
        base = name
        for suffix in ("_sum", "_count"):
            if name.endswith(suffix) and families.get(name[:-len(suffix)], {}).get("type") == "summary":
                base = name[:-len(suffix)]
        fam = families.get(base)
        assert fam is not None and fam["type"] is not None, f"line {n}: sample {name} before its TYPE"
        assert base == current, f"line {n}: sample of {base} outside its family block"
        if fam["type"] == "summary" and base == name:
            assert "quantile" in labels and _FLOAT.match(labels["quantile"]), f"line {n}: summary needs quantile"
        if fam["type"] == "counter":
            assert float(value) >= 0 or value == "NaN", f"line {n}: negative counter"
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen_series, f"line {n}: duplicate series {key}"
        seen_series.add(key)
        fam["samples"].append((name, labels, float(value)))
    return families


def test_strict_parser_rejects_bad_text():
    good = '# HELP a_total x\n# TYPE a_total counter\na_total{x="1"} 3\n'
    assert parse_prometheus(good)["a_total"]["samples"] == [("a_total", {"x": "1"}, 3.0)]
    for bad in ('a_total 3\n',                                            # no TYPE
                '# TYPE a gauge\na{x=1} 3\n',                              # unquoted label
                '# TYPE a gauge\na 3\na 4\n',                              # duplicate series
                '# TYPE a gauge\na three\n',                               # bad value
                '# TYPE a gauge\n# TYPE b gauge\nb 1\na 2\n',              # family split
                '# TYPE s summary\ns 1\n',                                  # summary without quantile
                '# TYPE a gauge\na 1'):                                     # no final newline
        with pytest.raises(AssertionError):
            parse_prometheus(bad)


# -- registry and exposition ------------------------------------------------------------------

def test_registry_and_render_roundtrip():
    r = Registry()
    r.counter("edge_infer_things_total", "things", {"kind": 'we"ird\\na\nme'}).inc(3)
    g = r.gauge("edge_infer_level", "a level")
    g.set(-2.5)
    r.gauge("edge_infer_lazy", "read when collected", fn=lambda: 7)
    r.gauge("edge_infer_broken", "a probe that fails", fn=lambda: 1 / 0)
    s = r.summary("edge_infer_lat_seconds", "latency")
    for v in range(1, 101):
        s.observe(v / 1000)
    with pytest.raises(ValueError):
        r.gauge("edge_infer_things_total")                    # a counter already
    with pytest.raises(ValueError):
        r.counter("bad name")
    with pytest.raises(ValueError):
        r.counter("edge_infer_x_total").inc(-1)
    fams = parse_prometheus(render(r))
    assert fams["edge_infer_things_total"]["samples"][0][1]["kind"] == 'we"ird\\na\nme'
    assert fams["edge_infer_level"]["samples"][0][2] == -2.5
    assert fams["edge_infer_lazy"]["samples"][0][2] == 7
    assert math.isnan(fams["edge_infer_broken"]["samples"][0][2])
    q = {lb.get("quantile"): v for n, lb, v in fams["edge_infer_lat_seconds"]["samples"] if n == "edge_infer_lat_seconds"}
    assert q["0.5"] == pytest.approx(0.0505, abs=1e-3) and q["0.99"] == pytest.approx(0.099, abs=1e-3)
    cnt = [v for n, _, v in fams["edge_infer_lat_seconds"]["samples"] if n.endswith("_count")]
    assert cnt == [100]
    snap = r.snapshot()
    assert snap["edge_infer_lat_seconds"]["p99"] == pytest.approx(0.099, abs=1e-3)
    assert snap["edge_infer_broken"] is None
    json.dumps(snap)


# -- the sampler -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits_rt(tmp_path_factory):
    out = tmp_path_factory.mktemp("mon") / "digits.eim"
    edge_infer.convert(digits_model_path(), str(out))
    # the CPU backend: these tests read its planned arena (backend="auto" may pick LiteRT,
    # whose interpreter keeps its memory to itself)
    return edge_infer.Runtime(str(out), backend="cpu")


def _fake_sysfs(root):
    def w(rel, text):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    w("sys/class/thermal/thermal_zone0/type", "cpu-thermal\n")
    w("sys/class/thermal/thermal_zone0/temp", "61234\n")
    w("sys/class/thermal/thermal_zone1/type", "gpu-thermal\n")
    w("sys/class/thermal/thermal_zone1/temp", "48500\n")
    w("sys/class/thermal/cooling_device0/type", "cpufreq-cpu0\n")
    w("sys/class/thermal/cooling_device0/cur_state", "0\n")
    for c in range(os.cpu_count() or 1):
        w(f"sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq", "1200000\n")
        w(f"sys/devices/system/cpu/cpu{c}/cpufreq/cpuinfo_max_freq", "1800000\n")
        w(f"sys/devices/system/cpu/cpu{c}/cpufreq/scaling_max_freq", "1800000\n")
    w("sys/devices/platform/soc/soc:firmware/get_throttled", "0x50005\n")
    w("sys/devices/gpu.0/load", "375\n")


def test_sampler_reads_fake_board(tmp_path, digits_rt):
    _fake_sysfs(tmp_path)
    reg = Registry()
    s = Sampler(reg, runtime=digits_rt, root=str(tmp_path))
    s.sample()
    snap = reg.snapshot()
    assert snap['edge_infer_temperature_celsius{type="cpu-thermal",zone="thermal_zone0"}'] == pytest.approx(61.234)
    assert snap["edge_infer_soc_temperature_celsius"] == pytest.approx(61.234)
    assert snap['edge_infer_cpu_frequency_mhz{core="0"}'] == 1200
    assert snap["edge_infer_cpu_frequency_max_ratio"] == pytest.approx(1200 / 1800)
    assert snap["edge_infer_cpu_throttled"] == 1                       # RPi firmware: capped now
    assert snap["edge_infer_gpu_utilization_ratio"] == pytest.approx(0.375)
    (tmp_path / "sys/devices/platform/soc/soc:firmware/get_throttled").write_text("0x50000\n")
    s.sample()                                                         # throttled in the past only
    assert reg.snapshot()["edge_infer_cpu_throttled"] == 0


def test_sampler_on_this_machine_at_10hz(digits_rt, tmp_path):
    reg = Registry()
    pool = BuddyAllocator(1 << 16)
    a, _ = pool.alloc(1000), pool.alloc(5000)
    pool.free(a)
    jsonl = tmp_path / "metrics.jsonl"
    digits_rt.run(np.zeros((1, 1, 8, 8), np.float32))
    with Sampler(reg, interval=0.1, runtime=digits_rt, allocators={"work": pool}, jsonl=str(jsonl),
                 jsonl_interval=0.25) as s:
        time.sleep(1.05)
    assert s.samples >= 9                                               # >= 10 Hz
    snap = reg.snapshot()
    assert snap["edge_infer_process_rss_bytes"] > 10 * 2**20
    assert snap["edge_infer_memory_available_bytes"] > 0
    assert snap['edge_infer_cpu_percent{core="0"}'] is not None
    assert snap["edge_infer_arena_bytes"] > 0 and snap["edge_infer_plans"] >= 1
    assert snap['edge_infer_allocator_fragmentation{pool="work"}'] == pytest.approx(pool.fragmentation)
    assert snap['edge_infer_backend_info{backend="cpu"}'] == 1
    assert s.overhead < 0.10     # a sanity bound (1 s, first samples included); the benchmark measures < 2%
    lines = jsonl.read_text().splitlines()
    assert len(lines) >= 3 and "edge_infer_process_rss_bytes" in json.loads(lines[-1])


def test_metrics_endpoint_scraped_over_loopback(digits_rt):
    reg = Registry()
    pipe = Pipeline(digits_rt, SyntheticSource("digits", count=40), registry=reg, profile_every=5,
                    preprocess={"resize": "center_crop", "interpolation": "area"})
    sampler = Sampler(reg, interval=0.05, runtime=digits_rt)
    with MetricsServer(reg, port=0) as server, sampler:
        assert server.host == "127.0.0.1"
        pipe.run()
        time.sleep(0.15)
        with urllib.request.urlopen(server.url, timeout=5) as resp:
            ctype = resp.headers["Content-Type"]
            text = resp.read().decode("utf-8")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=5)
        assert e.value.code == 404
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype
    fams = parse_prometheus(text)
    assert len(fams) >= 20, sorted(fams)
    need = ["edge_infer_latency_seconds", "edge_infer_stage_seconds", "edge_infer_fps", "edge_infer_queue_depth",
            "edge_infer_frames_dropped_total", "edge_infer_op_seconds", "edge_infer_process_rss_bytes",
            "edge_infer_arena_bytes", "edge_infer_workspace_bytes", "edge_infer_cpu_percent",
            "edge_infer_cpu_frequency_mhz", "edge_infer_cpu_throttled", "edge_infer_memory_available_bytes",
            "edge_infer_backend_info", "edge_infer_errors_total", "edge_infer_frames_total"]
    missing = [n for n in need if n not in fams]
    assert not missing
    stages = {lb["stage"] for n, lb, _ in fams["edge_infer_stage_seconds"]["samples"] if "stage" in lb}
    assert stages == {"capture", "preprocess", "infer", "postprocess", "sink"}
    ops = {lb["op"] for _, lb, _ in fams["edge_infer_op_seconds"]["samples"]}
    assert "FusedConv" in ops or "Conv" in ops
    frames = [v for n, _, v in fams["edge_infer_frames_total"]["samples"]]
    assert frames == [40]
    assert fams["edge_infer_fps"]["type"] == "gauge" and fams["edge_infer_frames_total"]["type"] == "counter"


def test_terminal_view_line(digits_rt):
    import io
    reg = Registry()
    Pipeline(digits_rt, SyntheticSource("digits", count=10), registry=reg,
             preprocess={"resize": "center_crop"}).run()
    Sampler(reg, runtime=digits_rt).sample()
    line = format_line(reg)
    for part in ("fps", "e2e p50/p90/p99", "inf", "q 0/0/0/0", "drop 0", "rss", "cpu", "err 0"):
        assert part in line, (part, line)
    buf = io.StringIO()
    TerminalView(reg, stream=buf).render()
    assert buf.getvalue().endswith("\n") and "\r" not in buf.getvalue()       # not a tty: plain lines


def test_bench_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from edge_infer.cli import main
    art = tmp_path / "d.eim"
    edge_infer.convert(digits_model_path(), str(art))
    png = tmp_path / "bench.png"
    assert main(["bench", str(art), "--runs", "20", "--warmup", "2", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert main(["bench", str(art), "--runs", "5", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert "latencies_ms" not in rep and rep["runs"] == 5
