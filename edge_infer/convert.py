"""The offline converter: source model -> IR -> passes -> verified -> .eim artifact."""
from __future__ import annotations

import datetime
import os
import platform
import warnings
from typing import Dict, Iterable, Optional, Sequence, Tuple, Union

from .errors import ConversionError, QuantizationDriftError, QuantizationDriftWarning
from .ir import VERIFY_SHAPES_KEY, Graph
from .version import __version__


def _sha256(path: str) -> str:
    import hashlib      # here, not at the top: OpenSSL is ~3.5 MB of RSS the runtime never needs
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _graph_stats(g: Graph) -> Dict[str, int]:
    params = sum(int(t.data.size) for t in g.tensors.values() if t.is_const)
    return {"nodes": len(g.nodes), "parameters": params,
            "weight_bytes": sum(int(t.data.nbytes) for t in g.tensors.values() if t.is_const)}


def _cost(graph_cost, g: Graph) -> dict:
    """ops, parameters, FLOPs and bytes moved (ir/cost.py); {} if shapes don't resolve."""
    from .errors import EdgeInferError
    try:
        return graph_cost(g)
    except (EdgeInferError, ValueError, TypeError, KeyError, IndexError):
        return {}


def find_culprit(original: Graph, level: int, disabled: Iterable[str], feeds, tolerance: float) -> str:
    """Replay the passes one application at a time and name the first whose result
    drifts from ``original`` by more than ``tolerance``."""
    from .passes import passes_for_level
    from .verify import compare
    g = original.copy()
    for _ in range(20):
        changed = False
        for fn in passes_for_level(level, disabled):
            if fn(g):
                changed = True
                if compare(g, original, feeds, "float64") > tolerance:
                    return fn.__name__
        if not changed:
            break
    return "unknown"


def check_drift(qreport: dict, allow_drift: bool, report_path=None) -> None:
    """Raise QuantizationDriftError when the int8 report finds a broken output (``drift``),
    unless ``allow_drift``: then warn (QuantizationDriftWarning)."""
    from .quantize.drift import format_drift
    drift = qreport.get("drift") or {}
    if not drift.get("findings"):
        return
    msg = format_drift(drift["findings"], drift["blame"], qreport)
    if report_path is not None:
        msg += f"\n  report: {os.fspath(report_path)}"
    if not allow_drift:
        raise QuantizationDriftError(msg + "\n  nothing written", qreport)
    warnings.warn(msg, QuantizationDriftWarning, stacklevel=3)


def optimize_verified(graph: Graph, opt_level: int = 3, disable_passes: Sequence[str] = (),
                      tolerance: float = 1e-6, allow_drift: bool = False, samples: int = 2,
                      feeds: Optional[list] = None) -> Tuple[Graph, dict]:
    """Optimize a copy of ``graph`` and check it against the original on seeded
    random inputs (plus ``feeds``). Returns (optimized graph, report).

    Symbolic input dims take the shapes in ``graph.metadata["verify_shapes"]`` (set by
    ``convert``, see verify_shapes.py), else 1; the cost report counts at the same shapes."""
    from .passes import optimize
    from .verify import VerificationError, compare, random_inputs
    from .ir.cost import graph_cost
    original = graph
    g = graph.copy()
    before = {**_graph_stats(original), **_cost(graph_cost, original)}
    passes = optimize(g, opt_level, disable_passes)
    g.validate()
    feeds_list = list(feeds or []) + [random_inputs(original, seed) for seed in range(samples)]
    err = compare(g, original, feeds_list, "float64") if passes else 0.0
    noise = None
    if err > tolerance:
        # Rewrites that are exact in real arithmetic still round their new float32
        # weights (folded BN, scales). Such drift is accepted only while it stays
        # within the source model's own float32 error (source in float32 vs the
        # source in float64): the optimized model is then as close to the exact
        # model as the source itself is when run on any float32 device.
        noise = compare(original, original, feeds_list, "float32-vs-float64")
    limit = max(tolerance, noise or 0.0)
    report = {"opt_level": opt_level, "passes": passes, "before": before,
              "after": {**_graph_stats(g), **_cost(graph_cost, g)},
              "fusion_decisions": list(g.metadata.get("fusion_decisions") or []),
              "max_relative_error": err, "tolerance": tolerance, "float32_noise_floor": noise}
    if err > limit:
        culprit = find_culprit(original, opt_level, disable_passes, feeds_list, limit)
        msg = (f"optimized graph drifts from the source: relative error {err:.3g} > {limit:.3g}, "
               f"introduced by pass {culprit!r} (use --disable-pass {culprit} or --allow-drift)")
        report["culprit"] = culprit
        if not allow_drift:
            raise VerificationError(msg)
        warnings.warn(msg)
    return g, report


def convert(src: Union[str, os.PathLike], dst: Union[str, os.PathLike, None] = None, *,
            input_shapes: Optional[Dict[str, Sequence[int]]] = None,
            verify_shapes: Optional[Dict[str, Sequence[int]]] = None, opt_level: int = 3,
            disable_passes: Sequence[str] = (), allow_drift: bool = False, target: Optional[str] = None,
            verify_samples: int = 2, layout: str = "auto", quantize: Optional[str] = None,
            calib=None, calib_samples: Optional[int] = None, calib_recipe=None,
            calib_method: str = "minmax", keep_float: Sequence[str] = (), requant: str = "fp32",
            max_accuracy_drop: Optional[float] = None, report: Union[str, os.PathLike, None] = None,
            sparsity: Optional[float] = None, sparse_pattern: str = "unstructured",
            sparse_layers: Optional[Dict[str, float]] = None, sparse_scope: str = "layer",
            sparse_max_accuracy_drop: Optional[float] = None, sparse_encode: bool = True,
            memory_limit: Union[int, str, None] = None, task: Optional[str] = None,
            metric=None, max_bytes: Union[int, str, None] = None, strip_names: bool = False,
            sign_key=None, **options) -> dict:
    """Convert a model file (ONNX) into an ``.eim`` artifact at ``dst``.

    ``input_shapes`` ({input: shape}) pins input shapes in the artifact. Inputs that stay
    symbolic (dynamic height and width, ...) stay so in the artifact; the verification run,
    the cost report and seeded calibration use ``verify_shapes`` ({input: shape}) if given,
    else a size the model records, the target's or calibration recipe's size, else the
    smallest size shape inference accepts (verify_shapes.py); the result's
    ``verified_shapes`` and ``verified_shapes_source`` say which.

    ``quantize="int8"``: after the fp32 graph is optimized and verified, quantize it
    (edge_infer/quantize, docs/quantization.md) calibrating on ``calib`` (a folder of
    images, a video, .npy/.npz, an iterable, or "random"), at most ``calib_samples``
    samples, images preprocessed by ``calib_recipe``; ``calib_method`` minmax, ema,
    percentile, entropy or mse; ``keep_float`` node names stay fp32; ``requant`` the int8
    Conv / Gemm / MatMul / Mul requantization, "fp32" (float32 multiplier, one rounding: onnxruntime's
    and XNNPACK's) or "fixed" (TFLite's reference kernels, bit-exact with them);
    ``max_accuracy_drop`` (a fraction) keeps the most damaging layers fp32 until the
    drop holds; ``report`` writes the accuracy report as JSON (also in the result);
    ``task`` (auto, classify, detect, segment, generic) picks the metric of the report and
    the budget (default: from the output shapes), ``metric(reference, candidate)`` (dicts of
    output arrays, higher is better) replaces it (see quantize/metrics.py). When the report
    shows an output broken by int8 (task accuracy drop >= 0.5, output SQNR < 6 dB, or an
    output or channel that quantizes to one level: quantize/drift.py), ``convert`` raises
    ``QuantizationDriftError`` naming the layers to blame and the fixes, and writes nothing,
    unless ``allow_drift`` (then a ``QuantizationDriftWarning``; ``result["quantization"]
    ["drift"]`` holds the findings either way).

    A pre-quantized ONNX model (QuantizeLinear/DequantizeLinear pairs, or QOperator ops) is
    imported into int8 ops with its own scales after the fp32 passes (quantize/import_qdq.py);
    ``result["quantization"]`` then says which nodes run int8 and why the others stay float32,
    and ``quantize`` is refused (the model is quantized already).

    ``layout``: the data layout the level-3 layout pass puts spatial ops in: "nchw",
    "nhwc", or "auto" (the target profile's ``preferred_layout``, else the CPU
    backend's, see passes/convert_layout.py and docs/layout.md). Inputs and outputs
    keep their layout either way.

    ``memory_limit`` (bytes or "256MB"): recorded in the artifact (``meta["memory_limit"]``)
    as the default budget of runtimes for activations plus workspaces.

    Sparsity (edge_infer/sparse, after the fp32 optimization, before quantization):
    ``sparsity`` magnitude-prunes every compute layer but the first conv, depthwise convs and
    the classifier to that fraction (``sparse_scope`` "layer" or "global" threshold) in
    ``sparse_pattern`` (unstructured, block1x4, block4x1, 2:4); ``sparse_layers`` {node name:
    sparsity} overrides per layer (protected ones included); ``sparse_max_accuracy_drop`` picks
    per-layer sparsity by a sensitivity analysis on the calibration samples (``calib``, else
    seeded random inputs). Last, every weight with >= 50% zeros (pruned, or arriving sparse)
    is stored encoded when that is smaller (``sparse_encode=False``: never), verified against
    its dense form; ``result["sparsity"]`` reports compression and accuracy.

    ``max_bytes`` (bytes or "4GB"): what the graph may allocate (each tensor, the constants,
    a ConstantOfShape/Expand/Tile/Range output, a constant fold); default: the target profile's
    budget, else the memory available, and 1 GiB for one value-sized tensor (ops/resources.py).

    ``sign_key`` (an Ed25519 private key: file path, bytes or key object; ``keygen``) signs
    the artifact as it is written (``edge_infer.signing``, docs/format.md); the key is read
    first, so a bad key fails before any work. A target profile with ``"require_signed":
    true`` needs it (ConversionError without).

    ``strip_names``: leave the side table of original tensor and node names out of the
    artifact (the smallest file; graph inputs and outputs keep their names, the rest load as
    short base-36 ids, which error messages and profiles then show; docs/format.md).

    Returns a report dict: source and artifact sizes, node counts, what each
    pass did and the verified relative error of the optimized graph.
    """
    from .artifact import save_artifact
    from .frontends import load_model
    src = os.fspath(src)
    if not os.path.isfile(src):
        raise ConversionError(f"no such model file: {src}")
    if dst is None:
        dst = os.path.splitext(src)[0] + ".eim"
    dst = os.fspath(dst)
    if options:
        raise ConversionError(f"unknown conversion option(s): {', '.join(sorted(options))}")
    signer = None
    if sign_key is not None:
        from .signing import load_private_key
        signer = load_private_key(sign_key)
    from .memory.budget import parse_size
    memory_limit, max_bytes = parse_size(memory_limit), parse_size(max_bytes)
    if quantize is not None:
        from .quantize import check_convert_options
        check_convert_options(quantize, calib, calib_method, max_accuracy_drop, requant)
    pruning = sparsity is not None or bool(sparse_layers)
    if pruning or sparse_max_accuracy_drop is not None:
        from .sparse import check_options
        check_options(sparsity, sparse_pattern, sparse_layers, sparse_max_accuracy_drop)
    graph = load_model(src, input_shapes=dict(input_shapes) if input_shapes else None)
    graph.validate()
    profile = None
    if target:
        from .targets import load_target
        profile = load_target(target)
        graph.metadata["target"] = profile       # the passes' cost model reads it
        if profile.get("require_signed") and signer is None:
            raise ConversionError(f"target profile {profile.get('name', target)!r} requires signed "
                                  "artifacts: give a signing key (sign_key=, --sign KEY)")
    from .ops import validate_graph               # before the verification run executes anything
    from .ops.resources import set_limit
    validate_graph(graph, "convert", max_bytes, profile)
    fold_limit = set_limit(max_bytes) if max_bytes is not None else None
    from .verify_shapes import choose_verify_shapes, symbolic_inputs
    vshapes, vsource = choose_verify_shapes(graph, verify_shapes, profile, calib_recipe)
    if symbolic_inputs(graph):                   # the graph stays dynamic; these feed the checks
        graph.metadata[VERIFY_SHAPES_KEY] = {k: list(v) for k, v in vshapes.items()}
        graph.metadata["verify_shapes_source"] = vsource
    from .passes.convert_layout import resolve_layout
    graph.metadata["preferred_layout"] = resolve_layout(layout, profile)
    optimized, opt_report = optimize_verified(graph, opt_level, disable_passes,
                                              allow_drift=allow_drift, samples=verify_samples)
    opt_report["verified_shapes"] = {k: list(v) for k, v in vshapes.items()}
    opt_report["verified_shapes_source"] = vsource
    opt_report["dynamic_inputs"] = {k: list(v) for k, v in symbolic_inputs(graph).items()}
    sreport = {}
    if pruning:                  # zeros in dense arrays: quantization and its calibration see them
        from .sparse import prune_model
        optimized, sreport["pruning"] = prune_model(
            optimized, sparsity, sparse_pattern, sparse_layers, sparse_scope, sparse_max_accuracy_drop,
            calib=None if isinstance(calib, str) and calib == "random" else calib, calib_samples=calib_samples,
            calib_recipe=calib_recipe)
    qreport = None
    from .quantize.import_qdq import import_qdq, is_prequantized
    if is_prequantized(graph):   # QDQ / QOperator: int8 ops with the file's own parameters
        if quantize is not None:
            raise ConversionError(f"{os.path.basename(src)} is already quantized (QuantizeLinear/DequantizeLinear "
                                  "nodes): convert it without --quantize; its own scales are used")
        optimized, ireport = import_qdq(optimized)
        if ireport["float_nodes"]:
            warnings.warn(f"{len(ireport['float_nodes'])} node(s) of the pre-quantized model stay float32: "
                          + "; ".join(f"{k}: {v}" for k, v in list(ireport["float_nodes"].items())[:5]))
    if quantize is not None:     # after the fp32 optimization and its verification
        from .quantize import quantize_model
        optimized, qreport = quantize_model(optimized, calib, calib_samples=calib_samples,
                                            calib_recipe=calib_recipe, calib_method=calib_method,
                                            keep_float=keep_float, max_accuracy_drop=max_accuracy_drop,
                                            report=report, task=task, metric=metric, requant=requant)
        check_drift(qreport, allow_drift, report)
    meta = {
        "provenance": {
            "source": os.path.basename(src),
            "source_sha256": _sha256(src),
            "source_bytes": os.path.getsize(src),
            "converter": f"edge_infer {__version__}",
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.platform(),
            "options": {"input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
                        "verify_shapes": {k: list(v) for k, v in (verify_shapes or {}).items()},
                        "opt_level": opt_level, "disable_passes": list(disable_passes),
                        "allow_drift": allow_drift, "target": target, "layout": layout,
                        "strip_names": strip_names},
        },
        "optimization": opt_report,
        "target": profile or {},
    }
    if memory_limit is not None:
        meta["memory_limit"] = memory_limit
    if is_prequantized(graph):
        meta["quantization"] = ireport
    if qreport is not None:
        meta["provenance"]["options"]["quantization"] = {
            "quantize": quantize,
            "calib": os.fspath(calib) if isinstance(calib, (str, os.PathLike)) else type(calib).__name__,
            "calib_samples": calib_samples,
            "calib_recipe": calib_recipe if isinstance(calib_recipe, (str, type(None))) else "dict",
            "calib_method": calib_method, "keep_float": list(keep_float), "requant": requant,
            "max_accuracy_drop": max_accuracy_drop, "task": qreport.get("task")}
        meta["quantization"] = {k: v for k, v in qreport.items() if k != "layers"}   # full: report=
    if sparse_encode:            # last: the weights stay encoded in the artifact and in memory
        from .sparse import encode_model
        optimized, enc = encode_model(optimized, sparse_pattern if pruning else None)
        sreport.update(enc)
        if enc["encoded"] or pruning:
            meta["sparsity"] = {k: v for k, v in sreport.items() if k != "pruning"}
            if pruning:
                meta["sparsity"]["pruning"] = {k: v for k, v in sreport["pruning"].items() if k != "budget"}
                meta["provenance"]["options"]["sparsity"] = {
                    "sparsity": sparsity, "pattern": sparse_pattern, "layers": dict(sparse_layers or {}),
                    "scope": sparse_scope, "max_accuracy_drop": sparse_max_accuracy_drop}
    if max_bytes is not None:
        set_limit(fold_limit)
    nbytes = save_artifact(dst, optimized, meta, strip_names=strip_names, sign_key=signer)
    result = {"source": src, "artifact": dst, "source_bytes": os.path.getsize(src),
              "artifact_bytes": nbytes, **opt_report}
    if signer is not None:
        from .signing import signer_id
        result["signed_by"] = signer_id(signer)
    if qreport is not None:
        result["quantization"] = qreport
    elif "quantization" in meta:
        result["quantization"] = meta["quantization"]
    if sreport.get("encoded") or pruning:
        result["sparsity"] = sreport
    return result
