"""Helpers the benchmark scripts share: the models (by name), their inputs, engine sessions,
the interleaved timer, background contention, and the machine / BLAS description.

Model names (``model_path``):

* ``mobilenetv2``: MobileNet-v2 1.0 built here (torchvision layout, Clip(0, 6), He weights);
* ``resnet50``, ``squeezenet``, ``shufflenet``, ``inception_v1``, ``densenet121``, ...: the light
  models shipped with onnx, with seeded random weights (tests/onnx_models.py);
* ``digits``: the bundled digits CNN;
* the families users deploy (tests/family_models.py, ``FAMILIES``): ``mnv3`` (MobileNetV3-small
  classifier, 224x224), ``mnv3_large`` (MobileNetV3-large, 224x224), ``mnv3_textdir`` (the OCR
  text-direction classifier, 48x192), ``db640``
  (DB text detector, 640x640), ``yolo320`` and ``yolo640`` (YOLOv8n with the exporters' output).

Inputs (``model_inputs``): the family models get random pixels mapped the way their
preprocessing recipe maps images (calibration/*.json: YOLO [0, 1], ImageNet mean/std, text
lines [-1, 1]); the others seeded standard-normal values, as the benchmarks always used.
"""
from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (ROOT, os.path.join(ROOT, "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from family_models import FAMILIES  # noqa: E402

#: the issue-17 set: the two classic benchmark architectures, SqueezeNet, and the families
CORE_MODELS = ["resnet50", "mobilenetv2", "squeezenet"]
FAMILY_MODELS = list(FAMILIES)
#: the older zoo comparison (README's first compare.py table)
ZOO_MODELS = ["resnet50", "squeezenet", "shufflenet", "inception_v1", "densenet121", "digits"]
GROUPS = {"core": CORE_MODELS, "families": FAMILY_MODELS, "zoo": ZOO_MODELS}

#: input preprocessing of each family: (recipe name, mean, std) applied to pixels in [0, 1]
_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
FAMILY_RECIPES = {"mnv3": ("imagenet", *_IMAGENET), "mnv3_large": ("imagenet", *_IMAGENET),
                  "db640": ("imagenet", *_IMAGENET),
                  "mnv3_textdir": ("symmetric_range", (0.5,) * 3, (0.5,) * 3),
                  "yolo320": ("yolo", (0.0,) * 3, (1.0,) * 3), "yolo640": ("yolo", (0.0,) * 3, (1.0,) * 3)}


def expand_models(spec: str) -> List[str]:
    """Comma-separated model names and group names (core, families, zoo), in order, once each."""
    out: List[str] = []
    for name in (s.strip() for s in spec.split(",")):
        for m in GROUPS.get(name, [name] if name else []):
            if m not in out:
                out.append(m)
    return out


# -- machine --------------------------------------------------------------------------------------

def blas_info() -> str:
    """The BLAS libraries loaded in this process, as threadpoolctl reports them."""
    try:
        from threadpoolctl import threadpool_info
        return "; ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('threading_layer', '')}, "
                         f"{i.get('num_threads')} threads, {i.get('architecture', '')})"
                         for i in threadpool_info() if i.get("user_api") == "blas") or "none found"
    except ImportError:
        return "threadpoolctl not installed"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model", "Hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_line() -> str:
    try:
        return "load average " + " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "load average unknown"


# -- contention -----------------------------------------------------------------------------------

def busy_processes(n: int) -> List[subprocess.Popen]:
    """``n`` CPU-bound processes at nice 10 (the caller terminates them)."""
    return [subprocess.Popen(["nice", "-n", "10", sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


@contextlib.contextmanager
def contention(n: int):
    """``n`` busy nice-10 processes (a camera pipeline, other services) for the ``with`` body."""
    procs = busy_processes(n)
    try:
        time.sleep(0.2)             # let them get scheduled before the first timed run
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


# -- timing ---------------------------------------------------------------------------------------

def interleaved(engines: Dict[str, Callable], feed, rounds: int, warmup: int = 2,
                block: int = 4, gap_s: float = 0.02) -> Dict[str, Tuple[float, float]]:
    """{name: (min ms, median ms)} timing ``engines`` {name: fn(x)}: per round, each engine runs
    ``block`` times back to back, after a ``gap_s`` pause, and the first run of each block is
    not counted. Engines whose thread pools spin after a run (onnxruntime, XNNPACK, OpenBLAS,
    ours) would otherwise be timed while the previous engine's threads still hold the cores:
    measured 2026-12-04, SqueezeNet at 2 threads, ours right after onnxruntime's block took
    6.1-6.5 ms against 3.9-4.0 ms alone or after a 20 ms pause (onnxruntime's own time was the
    same either way). Load from other processes still hits every engine alike."""
    for _ in range(warmup):
        for fn in engines.values():
            fn(feed)
    ts: Dict[str, List[float]] = {k: [] for k in engines}
    for _ in range(rounds):
        for k, fn in engines.items():
            time.sleep(gap_s)
            for i in range(block):
                t0 = time.perf_counter()
                fn(feed)
                if i:
                    ts[k].append(time.perf_counter() - t0)
    return {k: (min(v) * 1e3, float(np.median(v)) * 1e3) for k, v in ts.items()}


def quiet_and_contended(engines: Dict[str, Callable], feed, rounds: int, busy: int):
    """(quiet timings, contended timings or None) of ``interleaved``; the contended pass runs
    with ``busy`` nice-10 busy processes."""
    quiet = interleaved(engines, feed, rounds)
    if not busy:
        return quiet, None
    with contention(busy):
        return quiet, interleaved(engines, feed, rounds)


def timing_table(quiet, busy, n_busy: int, base: str = "") -> List[str]:
    """Markdown rows: min and median per engine, ``base`` / engine (min) when ``base`` is given,
    and the contended columns (min, median, contended / quiet median, ``base`` / engine median)
    when ``busy``."""
    head = "| engine | quiet min ms | quiet median ms |" + (f" {base} / engine (min) |" if base else "")
    if busy:
        head += f" {n_busy} busy: min ms | median ms | contended / quiet (median) |"
        head += f" {base} / engine (median) |" if base else ""
    rows = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    small = min(mn for mn, _ in quiet.values()) < 1.0
    ms = (lambda v: f"{v:.3f}") if small else (lambda v: f"{v:.2f}")    # a 60 us model keeps its digits
    for k, (mn, md) in quiet.items():
        row = f"| {k} | {ms(mn)} | {ms(md)} |"
        if base:
            row += f" {quiet[base][0] / mn:.2f}x |"
        if busy:
            bm, bd = busy[k]
            row += f" {ms(bm)} | {ms(bd)} | {bd / md:.2f}x |"
            row += f" {busy[base][1] / bd:.2f}x |" if base else ""
        rows.append(row)
    return rows


# -- models and inputs ----------------------------------------------------------------------------

def mobilenet_v2_onnx(path: str, hw: int = 224) -> None:
    """MobileNet-v2 1.0 as an ONNX file: conv+BN folded into biased convs, Clip(0, 6)."""
    import onnx
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    state = {"t": "input", "c": 3, "i": 0}
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
              numpy_helper.from_array(np.array(6.0, np.float32), "six")]

    def conv(cin, cout, k, s, group=1, act=True):
        i = state["i"] = state["i"] + 1
        w = rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.01).astype(np.float32), f"b{i}"))
        out = f"c{i}"
        nodes.append(helper.make_node("Conv", [state["t"], f"w{i}", f"b{i}"], [out], kernel_shape=[k, k],
                                      strides=[s, s], pads=[k // 2] * 4, group=group))
        if act:
            nodes.append(helper.make_node("Clip", [out, "zero", "six"], [out + "_r"]))
            out += "_r"
        state["t"], state["c"] = out, cout

    conv(3, 32, 3, 2)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for j in range(n):
            cin, src = state["c"], state["t"]
            if t != 1:
                conv(cin, cin * t, 1, 1)
            conv(cin * t, cin * t, 3, s if j == 0 else 1, group=cin * t)
            conv(cin * t, c, 1, 1, act=False)
            if (s if j == 0 else 1) == 1 and cin == c:
                nodes.append(helper.make_node("Add", [src, state["t"]], [f"add{state['i']}"]))
                state["t"] = f"add{state['i']}"
    conv(state["c"], 1280, 1, 1)
    nodes += [helper.make_node("GlobalAveragePool", [state["t"]], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)]
    inits += [numpy_helper.from_array((rng.standard_normal((1000, 1280)) * 0.03).astype(np.float32), "fc_w"),
              numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b")]
    graph = helper.make_graph(nodes, "mobilenet_v2", [helper.make_tensor_value_info("input", 1, [1, 3, hw, hw])],
                              [helper.make_tensor_value_info("logits", 1, [1, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def model_path(name: str, folder: str) -> str:
    """An ONNX file for the model ``name`` (see the module doc). Built models are written into
    ``folder`` (and reused there when newer than their builder); zoo models come from the test
    cache, the digits CNN from the package."""
    if name == "digits":
        from edge_infer.data import digits_model_path
        return digits_model_path()
    if name == "mobilenetv2" or name in FAMILIES:
        path = os.path.join(folder, f"{name}.onnx")
        builder = os.path.join(ROOT, "tests", "family_models.py") if name in FAMILIES else __file__
        if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(builder):
            os.makedirs(folder, exist_ok=True)
            if name == "mobilenetv2":
                mobilenet_v2_onnx(path + ".tmp")
            else:
                import onnx
                onnx.save(FAMILIES[name](), path + ".tmp")
            os.replace(path + ".tmp", path)
        return path
    from onnx_models import randomized_light_model_path
    return randomized_light_model_path(name, seed=0)


def model_inputs(name: str, path: str, n: int, seed: int = 1) -> Tuple[str, List[np.ndarray]]:
    """(input name, ``n`` seeded inputs) for the single-input model at ``path``."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    inp = [i for i in m.graph.input if i.name not in inits][0]
    shape = tuple(d.dim_value or 1 for d in inp.type.tensor_type.shape.dim)
    rng = np.random.default_rng(seed)
    if name not in FAMILY_RECIPES:
        return inp.name, [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]
    _, mean, std = FAMILY_RECIPES[name]
    mean, std = (np.array(v, np.float32).reshape(1, 3, 1, 1) for v in (mean, std))
    return inp.name, [((rng.random(shape, dtype=np.float32) - mean) / std).astype(np.float32) for _ in range(n)]


def ort_session(path: str, threads: int):
    """An onnxruntime CPU session at ``threads`` intra-op threads, all graph optimizations."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def max_rel_err(ours, ref) -> float:
    """max |ours - ref| / max |ref| (the agreement the benchmarks print)."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(ours - ref).max() / (np.abs(ref).max() + 1e-12))


def converter_mtime() -> float:
    """Newest modification time of the package's sources and native library: an artifact
    cached before it was made by another converter (another branch, an older commit)."""
    import edge_infer
    root = os.path.dirname(edge_infer.__file__)
    newest = 0.0
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith((".py", ".so", ".c", ".h")):
                newest = max(newest, os.path.getmtime(os.path.join(d, f)))
    return newest


def stale(artifact: str, source: str) -> bool:
    """Whether a cached ``artifact`` converted from ``source`` must be converted again."""
    return (not os.path.exists(artifact) or os.path.getmtime(artifact) < os.path.getmtime(source)
            or os.path.getmtime(artifact) < converter_mtime())
