#!/usr/bin/env python3
"""Memory: planned arena vs bounds, peak RSS vs onnxruntime, a run under a memory limit,
fragmentation of the dynamic pool. One run, printed side by side.

1. arena: for every model of the test set (the onnx "light" zoo with seeded weights, and
   the digits CNN), converted at opt level 3: the planned activation arena against the
   lower bound (most bytes live at any one step) and the naive sum (target <= 1.1x).
2. peak RSS: each runtime in its own fresh process (benchmarks/rss_child.py: numpy and the
   engine, nothing else) loads the model and runs it 3 times on the same input; VmHWM of that
   process (target <= 0.5x onnxruntime's). First the zoo models, then the 640x640 detectors
   users deploy (``--families``: the DB text detector and YOLOv8n of tests/family_models.py),
   fp32 and int8 (onnxruntime int8: its own static QDQ quantization, as native_bench.py), each
   process repeated ``--repeats`` times (median; onnxruntime's peak varies by a few MB from run
   to run), with our plan's arena and workspace and the floor (python + numpy + the input).
3. under a limit: a conv chain whose naive activation footprint is >= 2x the limit runs in
   a child under ``memory_limit``; its peak RSS (VmHWM) against the RSS before planning.
4. fragmentation: a model with symbolic batch and image size under a mixed workload of
   varying shapes; the dynamic pool's 1 - largest free block / free bytes after every run
   (target < 3%).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/memory_bench.py
    python benchmarks/memory_bench.py --models resnet50,digits --skip rss
    python benchmarks/memory_bench.py --skip arena,rss,limit,frag      # the detectors only
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)
from _common import stale  # noqa: E402

MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
          "squeezenet", "vgg19", "zfnet512", "digits"]
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "edge_infer_bench")


def vm(field: str = "VmHWM") -> int:
    """A /proc/self/status field in bytes (VmHWM: peak RSS since exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def model_files(name: str):
    """(onnx path, converted .eim path) for a zoo model or the digits CNN (converted once)."""
    import edge_infer
    if name == "digits":
        from edge_infer.data import digits_model_path
        src = digits_model_path()
    else:
        sys.path.insert(0, HERE)
        from compare import model_file
        src = model_file(name)
    os.makedirs(CACHE, exist_ok=True)
    eim = os.path.join(CACHE, f"{name}_mem.eim")
    if stale(eim, src):
        edge_infer.convert(src, eim, verify_samples=1)
    return src, eim


def feeds_for(onnx_path: str) -> dict:
    sys.path.insert(0, HERE)
    from compare import input_feeds
    return input_feeds(onnx_path)


# -- 1. arena ------------------------------------------------------------------------------

def arena_table(models) -> list:
    from edge_infer.runtime import Runtime
    rows = []
    for name in models:
        src, eim = model_files(name)
        rt = Runtime(eim, backend="cpu")
        feeds = feeds_for(src)
        plan = rt.plan({k: v.shape for k, v in feeds.items()}).arena_plan
        rows.append({"model": name, "arena": plan.size, "lower_bound": plan.lower_bound, "naive": plan.naive,
                     "vs_lower_bound": plan.size / plan.lower_bound, "in_place": len(plan.aliases)})
    return rows


# -- 2. peak RSS against onnxruntime --------------------------------------------------------

CHILD = os.path.join(HERE, "rss_child.py")


def rss_run(kind: str, model: str, feeds: dict, threads: int, folder: str) -> dict:
    """benchmarks/rss_child.py in a fresh process: {"peak_rss": bytes, ...} or {"error": ...}."""
    args = []
    for k, v in feeds.items():
        path = os.path.join(folder, f"feed{len(args)}.npy")
        np.save(path, v)
        args.append(f"{k}={path}")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out = subprocess.run([sys.executable, CHILD, kind, model, str(threads), *args], capture_output=True,
                         text=True, env=env)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_child(args, env=None) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *map(str, args)],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def compile_package() -> None:
    """Byte-compile edge_infer as an installed wheel is (pip compiles at install; an editable
    checkout under PYTHONDONTWRITEBYTECODE compiles every module at each start, ~2.7 MB of
    peak RSS that a deployed runtime does not pay)."""
    import compileall
    import edge_infer
    compileall.compile_dir(os.path.dirname(edge_infer.__file__), quiet=1)


def rss_table(models, threads: int) -> list:
    compile_package()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            src, eim = model_files(name)
            feeds = feeds_for(src)
            ours = rss_run("ours", eim, feeds, threads, tmp)
            ort = rss_run("ort", src, feeds, threads, tmp)
            rows.append({"model": name, "ours": ours.get("peak_rss"), "ort": ort.get("peak_rss"),
                         "error": ours.get("error") or ort.get("error")})
    return rows


FAMILY_RSS = ["db640", "yolo640"]


def family_files(name: str) -> dict:
    """Paths of a family detector (benchmarks/_common.py): its ONNX file, our fp32 and int8
    .eim, onnxruntime's static int8 QDQ model, and its input. Converted once into the cache;
    int8 calibrated on 4 random inputs in the model's preprocessing range (plan bytes do not
    depend on the calibration; drift is allowed: YOLO's output concat collapses on random
    calibration, which changes no memory)."""
    import edge_infer
    import _common as C
    from native_bench import ort_int8
    folder = os.path.join(CACHE, "families")
    src = C.model_path(name, folder)
    in_name, (x,) = C.model_inputs(name, src, 1)
    out = {"onnx": src, "feeds": {in_name: x}}
    for kind in ("fp32", "int8", "ort_int8"):
        path = os.path.join(folder, f"{name}_{kind}_mem" + (".onnx" if kind == "ort_int8" else ".eim"))
        if stale(path, src):
            cal = C.model_inputs(name, src, 4, seed=2)[1]
            if kind == "ort_int8":
                ort_int8(src, path, in_name, cal)
            else:
                opts = dict(quantize="int8", calib=cal, allow_drift=True) if kind == "int8" else {}
                edge_infer.convert(src, path, verify_samples=1, **opts)
        out[kind] = path
    return out


def family_rss_table(models, threads: int, repeats: int = 3) -> list:
    """Per family detector and dtype: median peak RSS of ours and of onnxruntime over
    ``repeats`` fresh processes each (onnxruntime's range too), our arena and workspace, and
    the floor every process pays (python + numpy + the input)."""
    compile_package()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            f = family_files(name)
            floor = rss_run("floor", "-", f["feeds"], threads, tmp).get("peak_rss")
            for dtype, eim, ref in (("fp32", f["fp32"], f["onnx"]), ("int8", f["int8"], f["ort_int8"])):
                ours = [rss_run("ours", eim, f["feeds"], threads, tmp) for _ in range(repeats)]
                ort = [rss_run("ort", ref, f["feeds"], threads, tmp) for _ in range(repeats)]
                err = next((r["error"] for r in ours + ort if "error" in r), None)
                row = {"model": name, "dtype": dtype, "floor": floor, "error": err}
                if err is None:
                    o, r = [v["peak_rss"] for v in ours], [v["peak_rss"] for v in ort]
                    row.update(ours=int(np.median(o)), ort=int(np.median(r)), ort_min=min(r), ort_max=max(r),
                               arena=ours[0]["arena"], workspace=ours[0]["workspace"])
                rows.append(row)
    return rows


def print_family_rss(rows) -> None:
    print("\n| model | dtype | edge_infer peak RSS MB | onnxruntime peak RSS MB (range) | ratio | arena MB | "
          "workspace MB | floor MB (python + numpy + input) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["error"]:
            print(f"| {r['model']} | {r['dtype']} | - | - | {r['error']} | - | - | {mb(r['floor'])} |")
            continue
        print(f"| {r['model']} | {r['dtype']} | {mb(r['ours'])} | {mb(r['ort'])} ({mb(r['ort_min'])}-"
              f"{mb(r['ort_max'])}) | {r['ours'] / r['ort']:.2f}x | {mb(r['arena'])} | {mb(r['workspace'])} | "
              f"{mb(r['floor'])} |")
    ok = [r for r in rows if not r["error"]]
    if ok:
        worst = max(ok, key=lambda r: r["ours"] / r["ort"])
        print(f"worst ratio: {worst['ours'] / worst['ort']:.2f}x ({worst['model']} {worst['dtype']}; target <= 0.5x); "
              f"without the floor both pay: {(worst['ours'] - worst['floor']) / (worst['ort'] - worst['floor']):.2f}x")
        for name in dict.fromkeys(r["model"] for r in ok):
            f32, i8 = (next((r for r in ok if r["model"] == name and r["dtype"] == d), None) for d in ("fp32", "int8"))
            if f32 and i8:
                print(f"{name}: int8 peak RSS {mb(i8['ours'])} MB vs fp32 {mb(f32['ours'])} MB "
                      f"(target: int8 below fp32)")


# -- 3. a model twice the limit ---------------------------------------------------------------

def chain_graph(c: int = 32, hw: int = 256, depth: int = 8, symbolic: bool = False):
    """3x3 conv + Relu chain: large activations and im2col columns, small weights."""
    from edge_infer.ir import Graph
    rng = np.random.default_rng(0)
    g = Graph("chain")
    g.add_input("x", "float32", ("N", 3, "H", "W") if symbolic else (1, 3, hw, hw))
    prev, cin = "x", 3
    for k in range(depth):
        g.add_const(f"w{k}", (rng.standard_normal((c, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32))
        g.add_node("Conv", [prev, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1])
        g.add_node("Relu", [f"c{k}"], [f"r{k}"])
        prev, cin = f"r{k}", c
    g.outputs = [prev]
    return g


def limit_child(eim: str, limit: str, hw: int) -> dict:
    from edge_infer.runtime import Runtime
    x = np.random.default_rng(1).standard_normal((1, 3, hw, hw)).astype(np.float32)
    a = np.ones((1024, 1024), np.float32)
    a @ a                                   # BLAS buffers mapped before the baseline
    del a
    rt = Runtime(eim, backend="cpu", threads=1, memory_limit=None if limit == "none" else limit)
    before = vm("VmRSS")
    y = rt.run(x)
    ex = rt.plan({"x": x.shape})
    return {"rss_before_plan": before, "peak_rss": vm("VmHWM"), "arena": ex.arena_plan.size,
            "naive": ex.arena_plan.naive, "workspace": ex.workspace_bytes,
            "banded": sum(" bands of " in t for t in ex.notes.values()),
            "output_bytes": int(sum(v.nbytes for v in y.values())),
            "checksum": float(np.float64(next(iter(y.values())).sum()))}


def limit_run(limit_mb: int = 32, hw: int = 256) -> dict:
    from edge_infer.artifact import save_artifact
    with tempfile.TemporaryDirectory() as tmp:
        eim = os.path.join(tmp, "chain.eim")
        save_artifact(eim, chain_graph(hw=hw), {})
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        limited = run_child(["limit", eim, f"{limit_mb}MB", hw], env)
        whole = run_child(["limit", eim, "none", hw], env)
    return {"limit": limit_mb << 20, "limited": limited, "unlimited": whole}


# -- 4. fragmentation of the dynamic pool --------------------------------------------------------

def fragmentation_run(runs: int = 240, seed: int = 0, threads: int = 4) -> dict:
    """Three dynamically shaped models (conv chains of 4, 8 and 16 channels, symbolic batch
    and image size) run by ``threads`` threads at once on random shapes; the process pool's
    fragmentation sampled after every run. For comparison the same sequence replayed on a
    fresh pool with one block per (model, shape) plan, 16 plans kept per model (a plan's
    own arena, the design before run slots)."""
    from collections import OrderedDict
    from concurrent.futures import ThreadPoolExecutor
    from edge_infer.memory.pool import DYNAMIC_POOL, DynamicPool
    from edge_infer.runtime import Runtime
    rng = np.random.default_rng(seed)
    rts = [Runtime(chain_graph(c=c, depth=3, symbolic=True), backend="cpu", threads=1, memory_limit="48MB")
           for c in (4, 8, 16)]
    work = [(int(rng.integers(0, 3)), int(rng.integers(1, 9)), *(int(v) for v in rng.choice([16, 24, 32, 48, 64], 2)))
            for _ in range(runs)]
    frags = []

    def one(job):
        m, n, h, w = job
        rts[m].run(np.zeros((n, 3, h, w), np.float32))
        frags.append(DYNAMIC_POOL.stats()["fragmentation"])
    with ThreadPoolExecutor(threads) as tp:
        list(tp.map(one, work))
    s = DYNAMIC_POOL.stats()
    # the same sequence, one block per plan
    arena = {}
    for m, n, h, w in set(work):
        arena[(m, n, h, w)] = rts[m].plan({"x": (n, 3, h, w)}).arena_plan.size
    pool, caches, per_plan = DynamicPool(), [OrderedDict() for _ in rts], []
    for job in work:
        cache = caches[job[0]]
        if job in cache:
            cache.move_to_end(job)
        else:
            cache[job] = pool.arena(arena[job])[1]
            while len(cache) > 16:
                cache.popitem(last=False)[1]()
        per_plan.append(pool.stats()["fragmentation"])
    p = pool.stats()
    return {"runs": runs, "threads": threads, "mean": float(np.mean(frags)), "p95": float(np.percentile(frags, 95)),
            "max": float(np.max(frags)), "final": frags[-1], "capacity": s["capacity"], "chunks": s["chunks"],
            "peak_used": s["peak_used"], "allocations": s["allocations"],
            "slots": sum(len(rt.memory_stats()["slots"]) for rt in rts),
            "per_plan": {"mean": float(np.mean(per_plan)), "p95": float(np.percentile(per_plan, 95)),
                         "max": float(np.max(per_plan)), "capacity": p["capacity"], "peak_used": p["peak_used"]}}


# -- main --------------------------------------------------------------------------------------

def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
        return "; ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')})"
                         for i in threadpool_info() if i.get("user_api") == "blas") or "unknown"
    except ImportError:
        return "threadpoolctl not installed"


def mb(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: arena,rss,families,limit,frag")
    ap.add_argument("--families", default=",".join(FAMILY_RSS), help="family detectors for the RSS table")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per engine in the families table")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        rest = args.child[1:]
        print(json.dumps(limit_child(rest[0], rest[1], int(rest[2]))))
        return 0
    models = [m for m in args.models.split(",") if m]
    skip = set(args.skip.split(","))
    import onnxruntime
    print(f"machine: {os.cpu_count()} cores; numpy {np.__version__}, onnxruntime {onnxruntime.__version__}; "
          f"BLAS: {blas_info()}; threads {args.threads}")
    report = {}
    if "arena" not in skip:
        rows = report["arena"] = arena_table(models)
        print("\n| model | arena B | lower bound B | naive B | arena / lower bound | naive / arena |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['model']} | {r['arena']:,} | {r['lower_bound']:,} | {r['naive']:,} | "
                  f"{r['vs_lower_bound']:.3f}x | {r['naive'] / r['arena']:.1f}x |")
        print(f"worst arena / lower bound: {max(r['vs_lower_bound'] for r in rows):.3f}x (target <= 1.1x)")
    if "rss" not in skip:
        rows = report["rss"] = rss_table(models, args.threads)
        print("\n| model | edge_infer peak RSS MB | onnxruntime peak RSS MB | ratio |")
        print("|---|---:|---:|---:|")
        for r in rows:
            ratio = f"{r['ours'] / r['ort']:.2f}x" if r["ours"] and r["ort"] else r["error"]
            print(f"| {r['model']} | {mb(r['ours'])} | {mb(r['ort'])} | {ratio} |")
        ok = [r["ours"] / r["ort"] for r in rows if r["ours"] and r["ort"]]
        if ok:
            print(f"worst RSS ratio: {max(ok):.2f}x, median {np.median(ok):.2f}x (target <= 0.5x)")
    if "families" not in skip:
        rows = report["families"] = family_rss_table([m for m in args.families.split(",") if m], args.threads,
                                                     args.repeats)
        print_family_rss(rows)
    if "limit" not in skip:
        r = report["limit"] = limit_run()
        lim, un = r["limited"], r["unlimited"]
        if "error" in lim or "error" in un:
            print(f"\nunder a limit: {lim.get('error') or un.get('error')}")
        else:
            print(f"\nconv chain 8 x (3x3, 32 ch) at 256x256 under memory_limit {mb(r['limit'])} MB: naive activations "
                  f"{mb(lim['naive'])} MB ({lim['naive'] / r['limit']:.1f}x the limit), arena {mb(lim['arena'])} MB, "
                  f"workspace {mb(lim['workspace'])} MB ({lim['banded']} convs in bands)")
            grew = lim['peak_rss'] - lim['rss_before_plan']
            print(f"  peak RSS {mb(lim['peak_rss'])} MB: {mb(grew)} MB above the RSS before planning, of which "
                  f"{mb(lim['output_bytes'])} MB is the output array run() returns, so the plan itself took "
                  f"{mb(grew - lim['output_bytes'])} MB (limit {mb(r['limit'])} MB)")
            print(f"  unlimited: workspace {mb(un['workspace'])} MB, peak RSS "
                  f"{mb(un['peak_rss'])} MB, {mb(un['peak_rss'] - un['rss_before_plan'])} MB above; same output: "
                  f"{abs(lim['checksum'] - un['checksum']) <= 1e-5 * abs(un['checksum'])}")
    if "frag" not in skip:
        r = report["fragmentation"] = fragmentation_run()
        pp = r["per_plan"]
        print(f"\ndynamic pool: 3 models, {r['threads']} threads, {r['runs']} runs of random shapes (batch 1-8, H, W "
              f"in 16..64), memory limit 48 MB each: fragmentation mean {r['mean']:.2%}, p95 {r['p95']:.2%}, max "
              f"{r['max']:.2%}, final {r['final']:.2%} (target < 3%); {r['slots']} run slots, {r['allocations']} "
              f"blocks allocated, capacity {mb(r['capacity'])} MB in {r['chunks']} chunk(s), peak used "
              f"{mb(r['peak_used'])} MB")
        print(f"  same sequence, one block per (model, shape) plan, 16 kept per model: fragmentation mean "
              f"{pp['mean']:.2%}, p95 {pp['p95']:.2%}, max {pp['max']:.2%}; capacity {mb(pp['capacity'])} MB, "
              f"peak used {mb(pp['peak_used'])} MB")
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
