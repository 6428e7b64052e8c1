"""How often does ``backend="auto"`` pick the fastest backend?

For every (model, device) case runnable here: the light zoo of ``tests/onnx_models.py``
(seeded random weights, converted at opt level 3), the bundled digits CNN in fp32 and
int8, and int8 MobileNetV3-small, the 48x192 text-direction classifier and YOLOv8n-320
(``tests/family_models.py``), on this machine with every available backend, the script

1. asks the picker for its choice on a fresh cache directory: no timings recorded, only the
   microbenchmarked throughput profiles, and what the picker times itself on a close call
   (``docs/picker.md``);
2. times every available backend on the model (each as ``Runtime(path, backend=name)``; a
   backend that covers part of the graph runs as its partition with the CPU), and the
   picker's choice itself when it is a partition: interleaved, round-robin runs, medians
   (``time_options``), so that load from elsewhere hits every option alike;
3. counts a case correct when the choice is the measured fastest (strict), and reports
   also the cases within 5% of the fastest and the regret (chosen / fastest latency).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/picker_accuracy.py
    ... --models digits,digits_int8,squeezenet --threads 2 --budget 1.5 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from family_models import FAMILIES  # noqa: E402

LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512")
FAMILY_INT8 = ("mnv3_int8", "mnv3_textdir_int8", "yolo320_int8")
DEFAULT_MODELS = ("digits", "digits_int8") + FAMILY_INT8 + LIGHT


def artifact(name: str, out_dir: str) -> str:
    """The .eim of a case (converted once into ``out_dir``)."""
    from edge_infer import convert
    from edge_infer.data import digits_model_path, load_digits_samples
    path = os.path.join(out_dir, f"{name}.eim")
    if os.path.exists(path):
        return path
    if name == "digits":
        convert(digits_model_path(), path)
    elif name == "digits_int8":
        x, _ = load_digits_samples()
        calib = os.path.join(out_dir, "digits_calib.npy")
        np.save(calib, x[:64])
        convert(digits_model_path(), path, quantize="int8", calib=calib)
    elif name.endswith("_int8") and name[:-5] in FAMILIES:
        # the deployed families in int8 (random calibration: this times them, it does not score them)
        import onnx
        src = os.path.join(out_dir, f"{name[:-5]}.onnx")
        onnx.save(FAMILIES[name[:-5]](), src)
        convert(src, path, quantize="int8", calib="random", calib_samples=8, allow_drift=True)
    else:
        from onnx_models import randomized_light_model_path
        convert(randomized_light_model_path(name), path)
    return path


def time_options(runtimes: dict, feeds, budget_s: float, min_rounds: int = 5) -> dict:
    """Median ms per option. One warm-up run each; an option more than 5x slower than the
    quickest warm-up is clearly not the fastest and gets one timed run; the others run
    interleaved, round-robin, for ``budget_s`` per option (at least ``min_rounds`` rounds),
    so that load from elsewhere on the machine hits them alike."""
    warm = {}
    for name, rt in runtimes.items():
        t0 = time.perf_counter()
        rt.run(feeds)
        warm[name] = time.perf_counter() - t0
    best = min(warm.values())
    slow = {n for n, t in warm.items() if t > 5 * best}
    lat = {n: [] for n in runtimes}
    for n in slow:
        t0 = time.perf_counter()
        runtimes[n].run(feeds)
        lat[n].append(time.perf_counter() - t0)
    close = [n for n in runtimes if n not in slow]
    t_end = time.perf_counter() + budget_s * len(close)
    rounds = 0
    while rounds < min_rounds or (time.perf_counter() < t_end and rounds < 200):
        for n in close:
            t0 = time.perf_counter()
            runtimes[n].run(feeds)
            lat[n].append(time.perf_counter() - t0)
        rounds += 1
    return {n: float(np.median(v)) * 1e3 for n, v in lat.items()}


def run_case(path: str, names, threads: int, budget_s: float) -> dict:
    from edge_infer.backends.picker import pick
    from edge_infer.runtime import Runtime, specialize
    from edge_infer.verify import random_inputs
    base = Runtime(path, backend="cpu", threads=threads)
    feeds = random_inputs(base.graph, 0)
    shapes = {k: v.shape for k, v in feeds.items()}
    g = specialize(base.graph, shapes)
    prefer = (base.meta.get("target") or {}).get("backends") or ()
    t0 = time.perf_counter()
    # as Runtime(path) on a fresh cache: the estimate, and the model timed on a close call
    choice = pick(g, "auto", prefer, threads, use_timings=True, estimate=True)
    pick_ms = (time.perf_counter() - t0) * 1e3
    est = {o["name"]: o["score_ms"] for o in choice.report["options"]}
    for e in choice.report["candidates"]:
        if e.get("estimated_ms") is not None and e["name"] in est:
            est[e["name"]] = e["estimated_ms"]
    runtimes, failed = {}, {}
    for name in names:
        try:
            rt = Runtime(path, backend=name, threads=threads)
            rt.plan(shapes)
            runtimes.setdefault(rt.backend.name, rt)
        except Exception as e:  # noqa: BLE001  (a backend failing on a model is a result too)
            failed[f"{name} (failed)"] = None
            print(f"    {name}: failed: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
    if choice.plan is not None:     # a partition: time the picker's own plan
        rt = Runtime(g, backend="cpu", threads=threads)
        rt._choices[tuple(tuple(shapes[n]) for n in g.inputs)] = choice     # run exactly this choice
        rt._choice = choice
        runtimes[choice.name] = rt
    measured = {**time_options(runtimes, feeds, budget_s), **failed}
    ok = {k: v for k, v in measured.items() if v is not None}
    fastest = min(ok, key=ok.get)
    return {"choice": choice.name, "why": choice.report["why"], "estimated_ms": est, "measured_ms": measured,
            "fastest": fastest, "correct": choice.name == fastest,
            "within_5pct": ok.get(choice.name, np.inf) <= ok[fastest] * 1.05,
            "regret": ok.get(choice.name, np.inf) / ok[fastest], "pick_ms": pick_ms}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per backend per model")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    from edge_infer.backends.picker import _instantiate, candidate_names, device_fingerprint
    from onnx_models import cache_dir
    os.environ["EDGE_INFER_CACHE_DIR"] = tempfile.mkdtemp(prefix="picker_accuracy_")   # no timings
    names, skipped = [], {}
    for n in candidate_names():
        _, ok, why = _instantiate(n)
        (names.append(n) if ok else skipped.__setitem__(n, why))
    try:
        from threadpoolctl import threadpool_info
        blas = "; ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, "
                         f"{i.get('num_threads')} thr)" for i in threadpool_info() if i.get("user_api") == "blas")
    except ImportError:
        blas = "unknown (no threadpoolctl)"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; device "
          f"{device_fingerprint()}; BLAS: {blas}; load average {os.getloadavg()[0]:.2f}")
    print(f"backends available: {', '.join(names)}; unavailable: "
          + (", ".join(f"{k} ({v})" for k, v in skipped.items()) or "none"))
    print(f"threads {args.threads}, {args.budget:g} s of runs per backend per model, batch 1\n")
    out_dir = cache_dir("picker_eim")
    cases = {}
    for m in [x.strip() for x in args.models.split(",") if x.strip()]:
        path = artifact(m, out_dir)
        cases[m] = run_case(path, names, args.threads, args.budget)
        c = cases[m]
        print(f"  {m}: picked {c['choice']}, fastest {c['fastest']} "
              + " ".join(f"{k}={v:.2f}ms" for k, v in c["measured_ms"].items() if v is not None), file=sys.stderr)
    labels = sorted({k for c in cases.values() for k in list(c["measured_ms"]) + list(c["estimated_ms"])})
    head = " | ".join(f"{k} est / meas ms" for k in labels)
    print(f"| model | {head} | fastest | picked | correct | regret |")
    print("|---|" + "---:|" * len(labels) + "---|---|---|---:|")
    for m, c in cases.items():
        cells = []
        for k in labels:
            e, v = c["estimated_ms"].get(k), c["measured_ms"].get(k)
            cells.append(f"{'-' if e is None else f'{e:.2f}'} / {'-' if v is None else f'{v:.2f}'}")
        print(f"| {m} | " + " | ".join(cells) + f" | {c['fastest']} | {c['choice']} | "
              f"{'yes' if c['correct'] else 'no'} | {c['regret']:.2f}x |")
    n = len(cases)
    strict = sum(c["correct"] for c in cases.values())
    near = sum(c["within_5pct"] for c in cases.values())
    multi = [m for m, c in cases.items() if len([v for v in c["measured_ms"].values() if v is not None]) > 1]
    print(f"\npicker chose the fastest in {strict}/{n} cases ({strict / max(n, 1):.0%}); within 5% of the "
          f"fastest in {near}/{n}; cases with more than one runnable option: {len(multi)}; "
          f"mean regret {np.mean([c['regret'] for c in cases.values()]):.3f}x; "
          f"pick time (estimate, and timing close calls) median {np.median([c['pick_ms'] for c in cases.values()]):.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cases": cases, "backends": names, "skipped": skipped}, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
