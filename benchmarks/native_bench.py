#!/usr/bin/env python3
"""Native kernels: our int8 against every int8 and fp32 peer, on the same model, one run.

Engines (each at the same thread count, timed interleaved: per round a block of back-to-back
runs per engine, the first of each block not counted, so load from other processes hits them
alike; min and median printed with the ratios ours int8 / each engine, below 1 where ours is
faster):

* ours int8: the graph at opt level 3 quantized (edge_infer.quantize, minmax) on ``--calib``
  seeded random inputs, the default "fp32" requantization (a float32 multiplier, one rounding);
  how many kernels run natively is counted from the plan's notes;
* ours int8, fixed requant: the same, quantized with ``requant="fixed"`` (TFLite's fixed point,
  bit-exact with TFLite's reference kernels): what that exactness costs;
* ours fp32: the ONNX model converted at opt level 3 (NHWC), CPU backend;
* onnxruntime fp32 (ORT_ENABLE_ALL) and onnxruntime static int8 QDQ
  (``onnxruntime.quantization.quantize_static``, per-channel int8 weights, int8 activations,
  the same calibration inputs);
* LiteRT fp32 (ai-edge-litert, XNNPACK) on ``edge_infer.export_tflite`` of our fp32 graph;
* LiteRT int8 (XNNPACK): the strongest int8 peer on Arm and x86 edge CPUs, run on our own int8
  ``.tflite`` export of the same int8 model (``edge-infer export --format tflite``), so both run
  the same scales and zero points ("n/a" with the reason when the exporter or the interpreter is
  missing, or the export fails).
* ours int8, QDQ import: onnxruntime's QDQ file above converted by ``edge_infer.convert`` as it is
  (its own scales and int8 weights, quantize/import_qdq.py), with its size against the QDQ file
  and its distance from onnxruntime running that file, in output quantization steps;

Models (benchmarks/_common.py names and groups): ``mobilenetv2`` (built here, standard-normal
inputs), ``resnet50`` (onnx's light model, seeded weights), and the families users deploy
(``families``: MobileNetV3-small 224 and the 48x192 text-direction classifier, DB text detector
640x640, YOLOv8n 320 and 640; tests/family_models.py), whose calibration and timed inputs are
random pixels in their preprocessing recipe's range (YOLO [0, 1], ImageNet mean/std, [-1, 1]).
Before timing, every int8 engine is scored against our fp32 on ``--score`` held-out random
inputs with the task metric of the int8 accuracy report (classification top-1 agreement,
detection F1, map IoU): a check that the engines run the same model, not an accuracy figure
(random weights; the trained YOLO fixture's accuracy is benchmarks/int8_detect.py's).

``--contention N``: a second pass with N busy processes at nice 10 (as a camera pipeline keeps
a Raspberry Pi busy), reporting contended min / median, contended / quiet per engine.

Quiet table, then contended, on an otherwise idle machine:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/native_bench.py --threads 1,2 --rounds 10 \\
        --models mobilenetv2,resnet50,families
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/native_bench.py --threads 1,2 --rounds 10 \\
        --models mobilenetv2,resnet50,families --contention 2
    python benchmarks/native_bench.py --models mnv3_textdir --rounds 2        # a quick look
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402


def ort_int8(path: str, out: str, name: str, cal) -> str:
    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    onnxruntime.set_default_logger_severity(3)      # its pre-processing warns about unused initializers
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{name: x} for x in cal])

        def get_next(self):
            return next(self.it, None)
    import onnx
    m = onnx.load(path)
    if max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < 13:
        # per-channel DequantizeLinear (its axis attribute) needs opset 13
        m = onnx.version_converter.convert_version(m, 13)
        path = out + ".op13.onnx"
        onnx.save(m, path)
    pre = out + ".pre.onnx"
    try:
        quant_pre_process(path, pre, skip_symbolic_shape=True)
    except Exception:
        pre = path
    quantize_static(pre, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return out


def litert_runner(graph, threads: int):
    """(callable(x), note) for LiteRT (XNNPACK) on our exporter's TFLite of ``graph`` (fp32 or
    int8: an int8 graph exports with QUANTIZE / DEQUANTIZE at its float boundaries); the note
    says how many XNNPACK partitions the delegate made (more than one: some ops run in LiteRT's
    own kernels between them), or why there is no callable."""
    try:
        from edge_infer.export_tflite import export_tflite
    except ImportError as e:
        return None, f"no exporter ({e})"
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as e:
        return None, f"no LiteRT ({e})"
    try:
        data = export_tflite(graph)
        it = Interpreter(model_content=data, num_threads=threads)
        it.allocate_tensors()
    except Exception as e:  # noqa: BLE001 (an op the exporter does not cover, etc.)
        return None, f"export failed: {type(e).__name__}: {str(e)[:100]}"
    inp = it.get_input_details()[0]
    out = it.get_output_details()[0]
    try:
        parts = sum(o["op_name"] == "DELEGATE" for o in it._get_ops_details())
        note = f"{parts} XNNPACK partition(s)"
    except Exception:  # noqa: BLE001 (a private API: informative only)
        note = ""

    def run(x):
        xi = x if tuple(inp["shape"]) == x.shape else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        it.set_tensor(inp["index"], xi)
        it.invoke()
        return it.get_tensor(out["index"])
    return run, note


def int8_scores(task: str, fp32, candidates: dict, xs) -> str:
    """'name score' for each candidate {name: fn(x) -> first output} against ``fp32`` on ``xs``."""
    from edge_infer.quantize.metrics import METRIC_NAMES, task_score
    refs = [np.asarray(fp32(x)) for x in xs]
    ref = {"y": np.concatenate(refs)}
    parts = []
    for k, fn in candidates.items():
        try:
            got = {"y": np.concatenate([np.asarray(fn(x)).reshape(r.shape) for x, r in zip(xs, refs)])}
            parts.append(f"{k} {task_score(task, ref, got, ['y']):.3f}")
        except Exception as e:  # noqa: BLE001 (a layout the metric cannot read)
            parts.append(f"{k} n/a ({type(e).__name__})")
    return (f"{task} score vs ours fp32 on {len(xs)} random inputs ({METRIC_NAMES[task].split('1 - ')[-1]}): "
            + ", ".join(parts))


def qdq_import(qdq: str, eim: str, in_name: str, feed, threads: int, session):
    """Our runtime on onnxruntime's QDQ file converted as it is (no --quantize: the file's own
    scales, quantize/import_qdq.py), and an info line: sizes, native ops, distance from onnxruntime."""
    import edge_infer
    from edge_infer.runtime import Runtime
    res = edge_infer.convert(qdq, eim)
    rt = Runtime(eim, backend="cpu", threads=threads)
    plan = rt.plan({in_name: feed.shape})
    native_steps = sum(getattr(st, "native_step", None) is not None for st in plan.steps)
    ours = next(iter(rt.run({in_name: feed}).values()))
    ref = session.run(None, {in_name: feed})[0]
    import onnx
    from onnx import numpy_helper
    m = onnx.load(qdq)
    inits = {t.name: t for t in m.graph.initializer}
    last = next(n for n in m.graph.node if m.graph.output[0].name in n.output)
    step = float(numpy_helper.to_array(inits[last.input[1]])) if last.op_type == "DequantizeLinear" else None
    rep = res["quantization"]
    diff = np.abs(ours.astype(np.float64) - ref)
    info = (f"QDQ import: source {res['source_bytes']:,} B, artifact {res['artifact_bytes']:,} B "
          f"({res['artifact_bytes'] / res['source_bytes']:.3f}x); {rep['int8_nodes']} int8 nodes, "
          f"{len(rep['float_nodes'])} float ({', '.join(sorted(set(rep['float_nodes'].values())))[:120] or '-'}); "
          f"{native_steps} of {len(plan.steps)} steps native; vs onnxruntime on the same file: "
          + (f"max {diff.max() / step:.1f} output steps, {100 * float((diff < 1e-3 * step).mean()):.1f}% bit-exact"
             if step else f"max abs diff {diff.max():.3g}"))
    return rt, info


def build_engines(name: str, threads: int, n_calib: int, n_score: int, tmp: str):
    """({engine: fn(x)}, timed input, info lines) for model ``name`` at ``threads``."""
    from edge_infer.convert import optimize_verified
    from edge_infer.frontends import load_model
    from edge_infer.quantize import quantize_model
    from edge_infer.quantize.metrics import guess_task
    from edge_infer.runtime import Runtime
    path = C.model_path(name, tmp)
    in_name, xs = C.model_inputs(name, path, n_calib + max(1, n_score))
    cal, held = xs[:n_calib], xs[n_calib:]
    g = load_model(path)
    g.validate()
    g3, _ = optimize_verified(g, 3, samples=1)
    q, _ = quantize_model(g3, [{in_name: x} for x in cal])
    # the same model in TFLite's fixed-point requantization (--requant fixed): bit-exact with
    # TFLite's reference kernels, the default "fp32" mode's cost of exactness
    q_fixed, _ = quantize_model(g3, [{in_name: x} for x in cal], requant="fixed")
    ours32 = Runtime(g3, backend="cpu", threads=threads)
    ours8 = Runtime(q, backend="cpu", threads=threads)
    ours8_fixed = Runtime(q_fixed, backend="cpu", threads=threads)
    plan = ours8.plan({in_name: held[0].shape})
    n_native = sum("native" in v for v in plan.notes.values())
    n_int8 = sum(1 for nd in q.nodes if q.tensors[nd.outputs[0]].dtype == "int8")
    out_name = g3.outputs[0]
    engines = {"ours int8": lambda x: ours8.run({in_name: x})[out_name],
               "ours int8, fixed requant": lambda x: ours8_fixed.run({in_name: x})[out_name],
               "ours fp32": lambda x: ours32.run({in_name: x})[out_name]}
    notes = []
    try:
        s32 = C.ort_session(path, threads)
        engines["onnxruntime fp32"] = lambda x: s32.run(None, {in_name: x})[0]
        try:
            qdq = ort_int8(path, os.path.join(tmp, name + "_qdq.onnx"), in_name, cal)
            s8 = C.ort_session(qdq, threads)
            engines["onnxruntime int8 QDQ"] = lambda x: s8.run(None, {in_name: x})[0]
            imported, qdq_info = qdq_import(qdq, os.path.join(tmp, name + "_qdq.eim"), in_name, held[0],
                                            threads, s8)
            engines["ours int8, QDQ import"] = lambda x: imported.run({in_name: x})[out_name]
            notes.append(qdq_info)
        except Exception as e:  # noqa: BLE001
            notes.append(f"onnxruntime int8: n/a ({type(e).__name__}: {str(e)[:80]})")
    except ImportError:
        notes.append("onnxruntime: n/a (not installed)")
    for label, graph in (("LiteRT fp32 (XNNPACK)", g3), ("LiteRT int8 (XNNPACK)", q)):
        run, note = litert_runner(graph, threads)
        if run is not None:
            engines[label] = run
        notes.append(f"{label}: {note}" if run is not None else f"{label}: n/a ({note})")
    int8_engines = {k: v for k, v in engines.items() if "int8" in k}
    info = [f"int8 plan: {n_native} of {len(plan.notes)} ops native, {n_int8} int8 nodes",
            int8_scores(guess_task(g3), engines["ours fp32"], int8_engines, held)] + notes
    return engines, held[0], info


def target_misses(quiet, busy) -> list:
    """Issue 18's int8 targets (and issue 17's contended ones) this model misses."""
    o8 = quiet["ours int8"][0]
    out = []
    if o8 > 0.5 * quiet["ours fp32"][0]:
        out.append(f"int8 only {quiet['ours fp32'][0] / o8:.2f}x faster than ours fp32 (target 2x)")
    for peer in ("onnxruntime fp32", "LiteRT int8 (XNNPACK)"):
        if peer in quiet and o8 > quiet[peer][0]:
            out.append(f"slower than {peer} ({o8 / quiet[peer][0]:.2f}x)")
    if busy:
        b8 = busy["ours int8"][1]
        if "onnxruntime int8 QDQ" in busy and b8 > 1.5 * busy["onnxruntime int8 QDQ"][1]:
            out.append(f"contended {b8 / busy['onnxruntime int8 QDQ'][1]:.2f}x onnxruntime int8 (target 1.5x)")
        if b8 > 3 * quiet["ours int8"][1]:
            out.append(f"contended {b8 / quiet['ours int8'][1]:.1f}x own quiet (target 3x)")
    return out


def bench_model(name: str, threads: int, args, tmp: str) -> None:
    engines, feed, info = build_engines(name, threads, args.calib, args.score, tmp)
    quiet, busy = C.quiet_and_contended(engines, feed, args.rounds, args.contention)
    print(f"\n### {name} (batch 1, {threads} thread(s), {args.rounds} interleaved rounds of 3 timed runs "
          f"per engine)\n")
    print("\n".join(info) + "\n")
    print("\n".join(C.timing_table(quiet, busy, args.contention, base="ours int8")))
    miss = target_misses(quiet, busy)
    print("\nint8 targets: " + ("met" if not miss else "missed"))
    for m in miss:
        print(f"- {m}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1",
                    help="comma-separated threads per engine (default 1: on a shared, loaded 2-core machine "
                         "more threads measure the scheduler)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--models", default="mobilenetv2,resnet50", help="names and groups (core, families, zoo)")
    ap.add_argument("--calib", type=int, default=4, help="seeded random calibration samples")
    ap.add_argument("--score", type=int, default=8, help="held-out samples int8 is scored on against fp32")
    ap.add_argument("--contention", type=int, default=0, metavar="N",
                    help="a second pass with N busy nice-10 processes")
    args = ap.parse_args(argv)
    from edge_infer.backends.cpu import native
    from edge_infer.backends.cpu.native import kernels as nk
    ok, why = native.available()
    print(f"# native kernels: {'loaded' if ok else 'NOT loaded: ' + why}")
    print(f"machine: {C.cpu_model()}, {platform.machine()}, {os.cpu_count()} CPUs; ISA features: "
          f"{', '.join(k for k, v in native.features().items() if v) or 'none'}; int8 GEMM micro-kernel: "
          f"{nk.kind_name() if ok else 'n/a'}")
    print(f"BLAS: {C.blas_info()}; {C.load_line()}")
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    for mod in ("onnxruntime", "ai_edge_litert"):
        try:
            m = __import__(mod)
            print(f"{mod} {getattr(m, '__version__', '?')}")
        except ImportError:
            pass
    with tempfile.TemporaryDirectory() as tmp:
        for name in C.expand_models(args.models):
            for t in [int(v) for v in args.threads.split(",") if v]:
                bench_model(name, t, args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
