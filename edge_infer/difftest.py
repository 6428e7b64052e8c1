"""Differential testing at scale: an artifact against the model it came from.

``verify_at_scale(model, artifact, samples=N)`` (``edge-infer verify``) streams N inputs
through the source model (onnxruntime for ``.onnx``, LiteRT for ``.tflite``) and through the
artifact on every available backend (or the ones asked for), in batches where the model's
batch dim is symbolic, and reports per output and backend the distribution of the error of
each sample: max abs, max relative, p99.9 of both, mean abs over all elements, and the
worst sample's input (saved for replay with ``edge-infer run --input``).

The error of one sample: ``abs`` = max |ours - ref| over its elements; ``rel`` = ||ours -
ref||_2 / ||ref||_2 (``abs`` where the reference is all zeros), in float64.

What passes:

* an fp32 artifact: every backend against the source, max ``rel`` <= ``tol`` (1e-5);
* an int8 artifact: quantization error against a float source is expected, so that row is
  reported and gates only when ``tol`` is given; what gates is the backends' agreement with
  the artifact on the CPU backend, in steps of the output's quantization scale (the scale of
  the DequantizeLinear producing it): max |ours - cpu| / scale <= ``tol_steps`` (2: LiteRT's
  XNNPACK requantizes in float and lands up to 2 steps from ours, see test_litert_backend).
  Against an int8 TFLite source (int8 inputs: it computes in int8 too) the source row is
  gated in steps as well. An output with no known step (a float op after the last
  DequantizeLinear, e.g. a Softmax) is reported only, unless ``tol`` is given.

Inputs: random, uniform in ``value_range`` (default: the range the artifact's calibration
recipe maps pixels 0..255 to, when it records one; else standard normal), integers in the
dtype's range (int8/uint8) or 0..9; or real data from ``data`` (a folder of ``.npy`` files
or images, or an ``.npy``/``.npz``, read as calibration data is, images through ``recipe``).
"""
from __future__ import annotations

import os
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import EdgeInferError

DEFAULT_TOL = 1e-5
DEFAULT_TOL_STEPS = 2.0


class DiffTestError(EdgeInferError):
    """The models cannot be compared (inputs or outputs do not match, no source runtime)."""


# -- the source model ---------------------------------------------------------------------

def _is_tflite(path: str) -> bool:
    p = os.fspath(path)
    with open(p, "rb") as f:
        head = f.read(8)
    return p.lower().endswith(".tflite") or head[4:8] == b"TFL3"


def source_runner(path: str, threads: Optional[int] = None) -> Tuple[Callable, List[str], List[str]]:
    """(run(feeds) -> {output: array}, input names, output names) of an ONNX or TFLite model."""
    p = os.fspath(path)
    if _is_tflite(p):
        return _litert_runner(p, threads)
    try:
        import onnxruntime as ort
    except ImportError:
        raise DiffTestError("comparing against an ONNX model needs onnxruntime (pip install onnxruntime)") from None
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = int(threads)
    try:
        sess = ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001  (onnxruntime's own errors: not a model it runs)
        raise DiffTestError(f"onnxruntime cannot load {p}: {str(e).splitlines()[0][:200]}") from None
    outs = [o.name for o in sess.get_outputs()]

    def run(feeds):
        return dict(zip(outs, sess.run(outs, feeds)))
    return run, [i.name for i in sess.get_inputs()], outs


def _litert_runner(path: str, threads: Optional[int]):
    from .backends.litert import _quiet_stderr, interpreter_class
    cls, why = interpreter_class()
    if cls is None:
        raise DiffTestError(f"comparing against a TFLite model needs LiteRT: {why}")
    with _quiet_stderr():
        try:
            it = cls(model_path=path, num_threads=int(threads or 1))
            it.allocate_tensors()
        except (RuntimeError, ValueError) as e:
            raise DiffTestError(f"LiteRT cannot load {path}: {str(e).splitlines()[0][:200]}") from None
    ins, outs = it.get_input_details(), it.get_output_details()
    state = {"shapes": [tuple(d["shape"]) for d in ins]}

    def run(feeds):
        arrays = [feeds[d["name"]] for d in ins]
        if [a.shape for a in arrays] != state["shapes"]:
            with _quiet_stderr():
                for d, a in zip(ins, arrays):
                    it.resize_tensor_input(d["index"], list(a.shape))
                it.allocate_tensors()
            state["shapes"] = [a.shape for a in arrays]
        for d, a in zip(ins, arrays):
            it.set_tensor(d["index"], np.ascontiguousarray(a, d["dtype"]))
        it.invoke()
        return {d["name"]: it.get_tensor(d["index"]) for d in outs}
    return run, [d["name"] for d in ins], [d["name"] for d in outs]


# -- inputs -------------------------------------------------------------------------------

def recipe_range(recipe) -> Optional[Tuple[float, float]]:
    """The values a preprocessing recipe maps pixels 0..255 to, as (low, high)."""
    from .quantize.calibration import load_recipe
    r = load_recipe(recipe) if not isinstance(recipe, dict) else recipe
    if not r:
        return None
    scale = float(r.get("scale", 1.0))
    mean = np.atleast_1d(np.asarray(r.get("mean", 0.0), np.float64))
    std = np.atleast_1d(np.asarray(r.get("std", 1.0), np.float64))
    ends = np.stack([(0.0 - mean) / std, (255.0 * scale - mean) / std])
    return float(ends.min()), float(ends.max())


def _artifact_recipe(meta: dict):
    q = ((meta.get("provenance") or {}).get("options") or {}).get("quantization") or {}
    name = q.get("calib_recipe")
    return name if isinstance(name, str) and name != "dict" else None


def _batch_shape(shape, batch: int) -> Tuple[Tuple[int, ...], bool]:
    """(shape of one batch, whether dim 0 takes the batch)."""
    dims = list(shape or ())
    batched = bool(dims) and not isinstance(dims[0], (int, np.integer))
    out = [batch if (k == 0 and batched) else (d if isinstance(d, (int, np.integer)) else 1)
           for k, d in enumerate(dims)]
    return tuple(int(d) for d in out), batched


def random_batch(rng, specs, n: int, value_range) -> Dict[str, np.ndarray]:
    """``n`` samples for each input spec (name, per-sample shape, dtype, batched)."""
    feeds = {}
    for name, shape, dtype, batched in specs:
        full = ((n,) + tuple(shape[1:])) if batched else tuple(shape)
        dt = np.dtype(dtype)
        if dt.kind == "f":
            arr = rng.uniform(*value_range, full) if value_range else rng.standard_normal(full)
        elif dt.kind == "b":
            arr = rng.random(full) < 0.5
        elif dt in (np.dtype(np.int8), np.dtype(np.uint8)):
            info = np.iinfo(dt)
            arr = rng.integers(int(info.min), int(info.max) + 1, full)
        else:
            arr = rng.integers(0, 10, full)
        feeds[name] = np.asarray(arr).astype(dt)
    return feeds


# -- comparing ----------------------------------------------------------------------------

class _Stats:
    """Per-sample errors of one (backend, output, reference) pair, accumulated batch by batch."""

    def __init__(self, step: Optional[float] = None):
        self.abs: List[np.ndarray] = []
        self.rel: List[np.ndarray] = []
        self.sum_abs, self.count = 0.0, 0
        self.step = step
        self.worst, self.worst_value, self.worst_input = -1, -1.0, None

    def add(self, ours: np.ndarray, ref: np.ndarray, first: int, inputs: Dict[str, np.ndarray],
            batched: bool, key: str) -> None:
        ours = np.asarray(ours, np.float64)
        ref = np.asarray(ref, np.float64)
        if ours.shape != ref.shape:
            raise DiffTestError(f"output shapes differ: {ours.shape} vs the reference's {ref.shape}")
        n = ref.shape[0] if batched and ref.ndim else 1
        d = np.abs(ours - ref).reshape(n, -1)
        r = ref.reshape(n, -1)
        bad = ~(np.isfinite(ours).reshape(n, -1) == np.isfinite(r)).all(axis=1)
        d = np.where(np.isfinite(d), d, 0.0)
        a = d.max(axis=1) if d.shape[1] else np.zeros(n)
        norm = np.linalg.norm(np.where(np.isfinite(r), r, 0.0), axis=1)
        rel = np.where(norm > 0, np.linalg.norm(d, axis=1) / np.where(norm > 0, norm, 1.0), a)
        a, rel = np.where(bad, np.inf, a), np.where(bad, np.inf, rel)
        self.abs.append(a)
        self.rel.append(rel)
        self.sum_abs += float(d.sum())
        self.count += d.size
        score = (a / self.step) if key == "steps" else (rel if key == "rel" else a)
        k = int(np.argmax(score))
        if score[k] > self.worst_value:
            self.worst, self.worst_value = first + k, float(score[k])
            self.worst_input = {name: (v[k:k + 1] if batched else v).copy() for name, v in inputs.items()}

    def summary(self) -> dict:
        a, r = np.concatenate(self.abs), np.concatenate(self.rel)
        out = {"max_abs": float(a.max()), "max_rel": float(r.max()), "mean_abs": self.sum_abs / max(self.count, 1),
               "p99_9_abs": float(np.quantile(a, 0.999)), "p99_9_rel": float(np.quantile(r, 0.999)),
               "worst_sample": self.worst}
        if self.step:
            out.update(step=self.step, max_steps=float(a.max() / self.step),
                       p99_9_steps=float(np.quantile(a, 0.999) / self.step))
        return out


def output_step(graph, name: str) -> Optional[float]:
    """The quantization step of output ``name``: the scale of the DequantizeLinear producing it
    (the largest, per channel), or the output tensor's own int8 scale; None for a float one."""
    t = graph.tensors.get(name)
    if t is not None and t.quant and t.quant.get("scale"):
        return float(np.max(np.abs(t.quant["scale"])))
    node = next((n for n in graph.nodes if name in n.outputs), None)
    if node is not None and node.op == "DequantizeLinear" and len(node.inputs) > 1:
        s = graph.tensors.get(node.inputs[1])
        if s is not None and s.data is not None:
            return float(np.max(np.abs(np.asarray(s.data, np.float64))))
    return None


def _is_int8(graph) -> bool:
    return any(t.dtype in ("int8", "uint8") for t in graph.tensors.values())


def _runtimes(artifact: str, backends: Optional[Sequence[str]], threads, trusted_keys=None) -> Tuple[dict, dict]:
    from .backends import BACKENDS
    from .backends.picker import usable_backends
    from .runtime import Runtime
    names, skipped = usable_backends(list(backends) if backends else list(BACKENDS))
    rts = {}
    for name in names:
        try:
            rts[name] = Runtime(artifact, backend=name, threads=threads, trusted_keys=trusted_keys)
        except EdgeInferError as e:
            skipped[name] = str(e).splitlines()[0]
    return rts, skipped


def verify_at_scale(model: str, artifact: str, samples: int = 1000, backends: Optional[Sequence[str]] = None,
                    data: Optional[str] = None, batch: int = 256, out_dir: Optional[str] = None,
                    tol: Optional[float] = None, tol_steps: float = DEFAULT_TOL_STEPS, seed: int = 0,
                    value_range: Optional[Tuple[float, float]] = None, recipe=None,
                    threads: Optional[int] = None, trusted_keys=None) -> dict:
    """Stream ``samples`` inputs through ``model`` and ``artifact`` (see the module doc);
    return the report (``passed``: every gated row within its tolerance). ``trusted_keys``:
    load the artifact only when signed by one of them (``Runtime(trusted_keys=)``)."""
    if samples < 1 or batch < 1:
        raise DiffTestError("samples and batch must be at least 1")
    from .artifact import load_artifact
    graph, meta = load_artifact(artifact, trusted_keys=trusted_keys)
    run_src, src_inputs, src_outputs = source_runner(model, threads)
    if sorted(src_inputs) != sorted(graph.inputs):
        if len(src_inputs) != len(graph.inputs):
            raise DiffTestError(f"the source has inputs {src_inputs}, the artifact {graph.inputs}")
    in_map = dict(zip(graph.inputs, src_inputs)) if sorted(src_inputs) != sorted(graph.inputs) \
        else {n: n for n in graph.inputs}
    if sorted(src_outputs) == sorted(graph.outputs):
        out_map = {n: n for n in graph.outputs}
    elif len(src_outputs) == len(graph.outputs):
        out_map = dict(zip(graph.outputs, src_outputs))      # a TFLite import renames: by position
    else:
        raise DiffTestError(f"the source has outputs {src_outputs}, the artifact {graph.outputs}")
    rts, skipped = _runtimes(artifact, backends, threads, trusted_keys)
    if not rts:
        raise DiffTestError("no backend can run the artifact: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    int8 = _is_int8(graph)
    # an int8 TFLite source computes in int8 as the artifact does: compared in output steps too
    int8_source = int8 and _is_tflite(model) and any(t.dtype in ("int8", "uint8") for t in (
        graph.tensors[n] for n in graph.inputs))
    if tol is None and not int8:
        tol = DEFAULT_TOL
    specs, any_batched = [], False
    for name in graph.inputs:
        t = graph.tensors[name]
        shape, batched = _batch_shape(t.shape, batch)
        specs.append((name, shape, t.dtype, batched))
        any_batched |= batched
    if not any_batched:
        batch = 1
    if value_range is None and data is None:
        rec = recipe if recipe is not None else _artifact_recipe(meta)
        value_range = recipe_range(rec) if rec is not None else None
    feeds_iter = _data_batches(graph, data, samples, batch, recipe) if data else None
    rng = np.random.default_rng(seed)
    steps = {o: output_step(graph, o) for o in graph.outputs} if int8 else {}
    stats: Dict[Tuple[str, str, str], _Stats] = {}
    seconds = {"source": 0.0, **{b: 0.0 for b in rts}}
    done = 0
    t_start = time.perf_counter()
    while done < samples:
        n = min(batch, samples - done)
        if feeds_iter is not None:
            feeds = next(feeds_iter, None)
            if feeds is None:
                break
            n = next(iter(feeds.values())).shape[0] if any_batched else 1
        else:
            feeds = random_batch(rng, specs, n, value_range)
        t0 = time.perf_counter()
        ref = run_src({in_map[k]: v for k, v in feeds.items()})
        seconds["source"] += time.perf_counter() - t0
        outs = {}
        for b, rt in list(rts.items()):
            t0 = time.perf_counter()
            try:
                outs[b] = rt.run(feeds)
            except EdgeInferError as e:     # cannot plan these shapes (an op it lacks): not compared
                skipped[b] = f"failed on samples {done}..{done + n - 1}: {str(e).splitlines()[0]}"
                del rts[b]
                continue
            seconds[b] += time.perf_counter() - t0
        if not rts:
            raise DiffTestError("no backend could run the artifact: " + "; ".join(
                f"{k}: {v}" for k, v in skipped.items()))
        for b, o in outs.items():
            for name in graph.outputs:
                step = steps.get(name)
                src_step = step if int8_source else None
                st = stats.setdefault((b, name, "source"), _Stats(src_step))
                st.add(o[name], ref[out_map[name]], done, feeds, any_batched,
                       "steps" if src_step else ("rel" if not int8 else "abs"))
                if int8 and b != "cpu" and "cpu" in outs:
                    st = stats.setdefault((b, name, "cpu"), _Stats(step))
                    st.add(o[name], outs["cpu"][name], done, feeds, any_batched, "steps" if step else "rel")
        done += n
    if done == 0:
        raise DiffTestError(f"no samples in {data}")
    rows = []
    for (b, name, vs), st in stats.items():
        row = {"backend": b, "output": name, "vs": vs, **st.summary()}
        if st.step:
            # the step is a float32 scale: 2 steps of it may come out as 2.0000001
            row.update(metric="steps", tolerance=tol_steps, passed=row["max_steps"] <= tol_steps * (1 + 1e-4))
        elif tol is not None:
            row.update(metric="rel", tolerance=tol, passed=row["max_rel"] <= tol)
        else:
            row.update(metric="rel", tolerance=None, passed=None)     # int8, no step known: reported only
        row["_worst_input"] = st.worst_input
        rows.append(row)
    report = {"model": os.fspath(model), "artifact": os.fspath(artifact), "samples": done, "batch": batch,
              "kind": "int8" if int8 else "fp32", "inputs": "data" if data else _inputs_label(specs, value_range),
              "seed": seed, "seconds": round(time.perf_counter() - t_start, 3),
              "seconds_by_runtime": {k: round(v, 3) for k, v in seconds.items()},
              "skipped": skipped, "rows": rows}
    report["passed"] = all(r["passed"] is not False for r in rows)
    if out_dir:
        _save_worst(report, out_dir)
    for r in rows:
        r.pop("_worst_input", None)
    return report


def _inputs_label(specs, value_range) -> str:
    kinds = {np.dtype(sp[2]).kind for sp in specs}
    parts = []
    if "f" in kinds:
        parts.append(f"uniform {list(value_range)}" if value_range else "standard normal")
    if kinds & set("iu"):
        parts.append("integers over the dtype's range (int8/uint8), else 0..9")
    if "b" in kinds:
        parts.append("random booleans")
    return ", ".join(parts)


def _data_batches(graph, data: str, samples: int, batch: int, recipe):
    """Batches of real samples (calibration's reader: image folders, .npy/.npz, video)."""
    from .quantize.calibration import load_calibration
    feeds = load_calibration(data, graph, samples=samples, recipe=recipe)
    for k in range(0, len(feeds), batch):
        part = feeds[k:k + batch]
        yield {name: np.concatenate([f[name] for f in part]) for name in graph.inputs}


def _save_worst(report: dict, out_dir: str) -> None:
    """Per backend, the input of its worst sample (over outputs, by the gated metric):
    ``worst_BACKEND.npy`` (one input) or ``.npz``; replay with ``edge-infer run --input``."""
    import json
    from .artifact import _atomic_write
    os.makedirs(out_dir, exist_ok=True)
    best: Dict[str, dict] = {}
    for r in report["rows"]:
        score = r["max_steps"] if r["metric"] == "steps" else r["max_rel"]
        if r["_worst_input"] is None:
            continue
        if r["backend"] not in best or score > best[r["backend"]]["score"]:
            best[r["backend"]] = {"score": score, "row": r}
    for b, e in best.items():
        inp = e["row"]["_worst_input"]
        if len(inp) == 1:
            path = os.path.join(out_dir, f"worst_{b}.npy")
            arr = next(iter(inp.values()))
            _atomic_write(path, lambda f, a=arr: np.save(f, a))
        else:
            path = os.path.join(out_dir, f"worst_{b}.npz")
            _atomic_write(path, lambda f, d=inp: np.savez(f, **d))
        for r in report["rows"]:
            if r["backend"] == b:
                r["worst_file"] = path
    rows = [{k: v for k, v in r.items() if k != "_worst_input"} for r in report["rows"]]
    text = json.dumps({**{k: v for k, v in report.items() if k != "rows"}, "rows": rows}, indent=1, default=str)
    _atomic_write(os.path.join(out_dir, "report.json"), lambda f: f.write(text.encode()))


def format_report(rep: dict) -> str:
    """The table ``edge-infer verify`` prints."""
    lines = [f"{rep['artifact']} ({rep['kind']}) vs {rep['model']}: {rep['samples']:,} samples "
             f"({rep['inputs']}), batch {rep['batch']}, {rep['seconds']:.1f} s "
             f"({', '.join(f'{k} {v:.1f} s' for k, v in rep['seconds_by_runtime'].items())})",
             f"  {'backend':8} {'output':16} {'vs':7} {'max abs':>10} {'p99.9 abs':>10} {'mean abs':>10} "
             f"{'max rel':>10} {'p99.9 rel':>10} {'limit':>12}  result"]
    for r in rep["rows"]:
        if r["metric"] == "steps":
            limit = f"{r['max_steps']:.2f}/{r['tolerance']:g} st"
        else:
            limit = "report only" if r["tolerance"] is None else f"rel {r['tolerance']:g}"
        res = {True: "ok", False: "FAIL", None: "-"}[r["passed"]]
        lines.append(f"  {r['backend']:8} {r['output'][:16]:16} {r['vs']:7} {r['max_abs']:10.3g} "
                     f"{r['p99_9_abs']:10.3g} {r['mean_abs']:10.3g} {r['max_rel']:10.3g} {r['p99_9_rel']:10.3g} "
                     f"{limit:>12}  {res}" + (f" (worst: sample {r['worst_sample']}"
                                              + (f", {r['worst_file']}" if r.get("worst_file") else "") + ")"
                                              if r["passed"] is False else ""))
    for name, why in rep["skipped"].items():
        lines.append(f"  {name:8} skipped: {why}")
    lines.append("passed" if rep["passed"] else "FAILED: over the tolerance")
    return "\n".join(lines)
