#!/usr/bin/env python3
"""Where the native thread pool loses time when a core is taken: per-op times of our plan at
``--threads`` quiet and under ``--contention N`` busy nice-10 processes, with the pool's own
counters (edge_infer.backends.cpu.native.pool_stats / profile_steps, runtime.c).

For each model (benchmarks/_common.py names), fp32 (opt level 3) and, with ``--int8``, its
int8 plan (minmax quantization on seeded random inputs) are run ``--runs`` times per condition
with every native step recorded: wall ns per step and the pool counters over it (parallel
jobs, jobs run by the caller alone after the pool shrank, chunks the caller ran, the caller's
waits for workers and their ns, jobs that saw contention). Printed per model: the run's total
(median of the per-run sums), the pool counters per run, and the ops that lost most between
quiet and contended (mean, median and max ms each), so a join that waits on a descheduled
worker shows as wait ms on its op.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/pool_profile.py --models mnv3,squeezenet \\
        --threads 2 --contention 2 --int8
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402


def step_names(rt, shapes) -> dict:
    """{native args address: 'node (op)'} of the plan for ``shapes``."""
    ex = rt.plan(shapes)
    names = {}
    for node, step in zip(ex.nodes, ex.steps):
        ns = getattr(step, "native_step", None)
        if ns is not None:
            names[ns[1]] = f"{node.name} ({node.op})"
    return names


def profile(rt, in_name: str, x, runs: int) -> dict:
    """{op label: array (runs, fields)} and the per-run totals, over ``runs`` runs."""
    from edge_infer.backends.cpu import native
    names = step_names(rt, {in_name: x.shape})
    rt.run({in_name: x})
    per_op = defaultdict(list)
    totals = []
    buf = np.zeros((len(names) * 2 + 16, native.PROFILE_FIELDS), np.int64)
    for _ in range(runs):
        native.profile_steps(buf)
        rt.run({in_name: x})
        n = native.profile_steps(None)
        rec = buf[:n]
        totals.append(rec[:, 1].sum() / 1e6)
        for r in rec:
            per_op[names.get(int(r[0]), "?")].append(r[1:].copy())
    return {k: np.array(v) for k, v in per_op.items()}, np.array(totals)


def summary(per_op: dict, totals, runs: int) -> str:
    from edge_infer.backends.cpu import native
    f = {k: i + 1 for i, k in enumerate(native.POOL_STATS)}
    allrec = np.concatenate(list(per_op.values()))
    s = allrec.sum(0) / runs
    return (f"{np.median(totals):.2f} ms/run (min {totals.min():.2f}); per run: {s[f['jobs']]:.0f} parallel jobs, "
            f"{s[f['serial_jobs']]:.0f} run alone (shrunk), caller ran {s[f['caller_chunks']]:.0f} of "
            f"{s[f['chunks']]:.0f} chunks, waited {s[f['waits']]:.1f}x for {s[f['wait_ns']] / 1e6:.2f} ms "
            f"({s[f['sleeps']]:.0f} asleep), worked {s[f['work_ns']] / 1e6:.2f} ms in chunks, "
            f"shrank {s[f['shrinks']]:.1f}x, {s[f['calms']]:.1f} jobs saw contention")


def loss_table(quiet: dict, busy: dict, top: int) -> list:
    """Markdown rows of the ops that lost most on average (a stall in some runs shows in the mean
    and the max, not in the median)."""
    from edge_infer.backends.cpu import native
    wi = 1 + native.POOL_STATS.index("wait_ns")
    rows = []
    for k in busy:
        q = quiet.get(k)
        if q is None:
            continue
        qm, bm = np.median(q[:, 0]) / 1e6, np.median(busy[k][:, 0]) / 1e6
        lost = (np.mean(busy[k][:, 0]) - np.mean(q[:, 0])) / 1e6
        rows.append((lost, k, qm, bm, np.max(busy[k][:, 0]) / 1e6, np.mean(q[:, wi]) / 1e6,
                     np.mean(busy[k][:, wi]) / 1e6))
    rows.sort(reverse=True)
    out = ["| op | quiet median ms | contended median ms | contended max ms | lost ms (mean) | quiet wait ms | "
           "contended wait ms |", "|---|---:|---:|---:|---:|---:|---:|"]
    for d, k, qm, bm, bx, qw, bw in rows[:top]:
        out.append(f"| {k} | {qm:.3f} | {bm:.3f} | {bx:.3f} | {d:+.3f} | {qw:.3f} | {bw:.3f} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="mnv3,squeezenet")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--contention", type=int, default=2, metavar="N")
    ap.add_argument("--int8", action="store_true", help="also the int8 plan")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)
    from edge_infer.backends.cpu import native
    from edge_infer.convert import optimize_verified
    from edge_infer.frontends import load_model
    from edge_infer.quantize import quantize_model
    from edge_infer.runtime import Runtime
    if not native.pool_stats():
        print("the loaded native library has no pool counters")
        return 1
    print(f"{C.cpu_model()}, {os.cpu_count()} CPUs; {C.load_line()}; {args.threads} threads, "
          f"{args.runs} runs per condition, contention: {args.contention} busy nice-10 processes")
    cache = os.path.join(os.path.expanduser("~"), ".cache", "edge_infer_bench")
    for name in C.expand_models(args.models):
        path = C.model_path(name, cache)
        in_name, xs = C.model_inputs(name, path, 5)
        g = load_model(path)
        g.validate()
        g3, _ = optimize_verified(g, 3, samples=1)
        plans = {"fp32": g3}
        if args.int8:
            plans["int8"], _ = quantize_model(g3, [{in_name: x} for x in xs[:4]])
        for kind, graph in plans.items():
            rt = Runtime(graph, backend="cpu", threads=args.threads)
            quiet = profile(rt, in_name, xs[4], args.runs)
            with C.contention(args.contention):
                busy = profile(rt, in_name, xs[4], args.runs)
            print(f"\n### {name} {kind}\n\nquiet:     {summary(*quiet, args.runs)}\n"
                  f"contended: {summary(*busy, args.runs)}\n")
            print("\n".join(loss_table(quiet[0], busy[0], args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
