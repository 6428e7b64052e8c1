#!/usr/bin/env python3
"""fp32 (and optionally int8) latency, ours vs onnxruntime, quiet and under contention.

One run, side by side: for each model and thread count, our CPU backend (the in-memory graph
at opt level 3, NHWC, the native packed SGEMM / conv kernels; ``--int8`` adds our int8 and
onnxruntime's static int8 QDQ) and onnxruntime (ORT_ENABLE_ALL, the same thread count) are
timed interleaved (_common.interleaved: blocks of runs per engine per round), first on a quiet
machine, then with ``--contention N`` busy processes (``while 1: pass`` at nice 10, as a camera
pipeline or other services would keep the cores busy) started for the second pass. Prints min
and median ms and the ratios ours / onnxruntime and contended / quiet. Model names and groups
as in benchmarks/_common.py (``families``: the MobileNetV3 / DB / YOLO family models).
benchmarks/compare.py measures the converted .eim the same way for the README table; this
script is the quicker loop while working on the kernels.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/fp32_bench.py \\
        [--models resnet50,mobilenetv2,squeezenet] [--threads 1,2] [--rounds 10] [--contention 2] [--int8]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402  (models, inputs, ORT session, interleaved timer, contention)
import native_bench as nb  # noqa: E402  (onnxruntime's int8 QDQ model)


def engines_for(name: str, threads: int, tmp: str, int8: bool):
    from edge_infer.convert import optimize_verified
    from edge_infer.frontends import load_model
    from edge_infer.runtime import Runtime
    path = C.model_path(name, tmp)
    in_name, xs = C.model_inputs(name, path, 5)
    g = load_model(path)
    g.validate()
    g3, _ = optimize_verified(g, 3, samples=1)
    ours = Runtime(g3, backend="cpu", threads=threads)
    plan = ours.plan({in_name: xs[4].shape})
    notes = list(plan.notes.values())
    native = sum("native" in v for v in notes)
    eng = {"ours fp32": lambda x: ours.run({in_name: x})}
    s32 = C.ort_session(path, threads)
    eng["onnxruntime fp32"] = lambda x: s32.run(None, {in_name: x})
    if int8:
        from edge_infer.quantize import quantize_model
        q, _ = quantize_model(g3, [{in_name: x} for x in xs[:4]])
        ours8 = Runtime(q, backend="cpu", threads=threads)
        eng["ours int8"] = lambda x: ours8.run({in_name: x})
        try:
            s8 = C.ort_session(nb.ort_int8(path, os.path.join(tmp, f"{name}_qdq.onnx"), in_name, xs[:4]), threads)
            eng["onnxruntime int8 QDQ"] = lambda x: s8.run(None, {in_name: x})
        except Exception as e:      # noqa: BLE001 (a quantizer failure is reported, not fatal)
            print(f"onnxruntime int8 n/a: {type(e).__name__}: {str(e)[:80]}")
    ref = s32.run(None, {in_name: xs[4]})[0]
    got = list(ours.run({in_name: xs[4]}).values())[0]
    err = C.max_rel_err(got, ref)
    return eng, xs[4], f"{native} of {len(notes)} steps native; max |ours - ort| / max |ort| = {err:.1e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50,mobilenetv2,squeezenet")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--contention", type=int, default=0, help="busy nice-10 processes for a second pass")
    ap.add_argument("--int8", action="store_true", help="also time ours int8 and onnxruntime int8 QDQ")
    args = ap.parse_args(argv)
    import platform
    print(f"# fp32 bench: {platform.machine()}, {os.cpu_count()} cpus; BLAS: {C.blas_info()}; {C.load_line()}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in C.expand_models(args.models):
            for t in [int(v) for v in args.threads.split(",")]:
                eng, feed, info = engines_for(name, t, tmp, args.int8)
                quiet, busy = C.quiet_and_contended(eng, feed, args.rounds, args.contention)
                print(f"\n### {name}, {t} thread(s) ({info})\n")
                print("\n".join(C.timing_table(quiet, busy, args.contention)))
                for kind in ("fp32", "int8"):
                    peer = f"onnxruntime {kind}" + (" QDQ" if kind == "int8" else "")
                    o, r = quiet.get(f"ours {kind}"), quiet.get(peer)
                    if o and r:
                        line = f"ours / onnxruntime {kind}: quiet {o[0] / r[0]:.2f}x (min)"
                        if busy:
                            line += f", contended {busy[f'ours {kind}'][1] / busy[peer][1]:.2f}x (median)"
                        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
