"""Int8 post-training quantization (TFLite int8 scheme) of edge_infer IR graphs.

>>> from edge_infer.quantize import quantize_model                      # doctest: +SKIP
>>> qgraph, report = quantize_model(graph, calib="calibration/images", calib_recipe="imagenet")

* ``calibration.py``: calibration sources (image folders, video, .npy/.npz, iterables,
  ``"random"``) and JSON preprocessing recipes (``calibration/recipes``);
* ``observers.py``: range observers (minmax, ema, percentile, entropy, mse) and int8 parameters;
* ``quantizer.py``: the graph rewrite (int8 tensors with ``quant``, int8 weights, int32 bias,
  Quantize/DequantizeLinear at fp32 boundaries), mixed precision and the accuracy budget;
* ``report.py``: per-layer SQNR / cosine, output agreement, what stayed fp32 and why;
* ``metrics.py``: task-aware accuracy (top-1, detection F1, map IoU, SQNR), the task from shapes;
* ``heterogeneous.py``: concats whose inputs' ranges are far apart (YOLO's boxes + probabilities);
* ``budget.py``: one-pass layer sensitivity and the search for the fewest float32 layers;
* ``export_onnx.py``: the quantized graph as an ONNX QDQ model.

The int8 kernels themselves live in ``backends/cpu/kernels/int8_*.py``.
"""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence, Tuple, Union

from ..ir import Graph
from .calibration import CalibrationError, list_recipes, load_calibration, load_recipe
from .observers import CALIB_METHODS
from .pipeline import quantize_graph
from .quantizer import QuantizationError
from .report import format_summary

__all__ = ["quantize_model", "quantize_graph", "load_calibration", "load_recipe", "list_recipes",
           "format_summary", "CALIB_METHODS", "CalibrationError", "QuantizationError"]


def quantize_model(graph: Graph, calib, *, calib_samples: Optional[int] = None,
                   calib_recipe: Union[str, dict, None] = None, calib_method: str = "minmax",
                   keep_float: Sequence[str] = (), max_accuracy_drop: Optional[float] = None,
                   report: Union[str, os.PathLike, None] = None, percentile: float = 99.99,
                   held_out: Optional[float] = None, seed: int = 0, show_progress: bool = False,
                   log=None, task: Optional[str] = None, metric=None, requant: str = "fp32") -> Tuple[Graph, dict]:
    """Calibrate on ``calib`` and quantize ``graph`` (fp32, optimized) to int8.

    ``task`` / ``metric``: what the report and the budget measure (``metrics.py``). ``requant``:
    "fp32" (one rounding, as onnxruntime and XNNPACK) or "fixed" (TFLite's reference kernels).
    Returns (int8 graph, report). ``report``: also write the report there as JSON.
    """
    if calib_method not in CALIB_METHODS:
        raise QuantizationError(f"unknown calib_method {calib_method!r}; known: {', '.join(CALIB_METHODS)}")
    if max_accuracy_drop is not None and not 0.0 <= float(max_accuracy_drop) <= 1.0:
        raise QuantizationError(f"max_accuracy_drop is a fraction in [0, 1], got {max_accuracy_drop}")
    feeds = load_calibration(calib, graph, samples=calib_samples, recipe=calib_recipe, seed=seed,
                             show_progress=show_progress)
    qgraph, rep = quantize_graph(graph, feeds, method=calib_method, keep_float=keep_float,
                                 max_accuracy_drop=max_accuracy_drop, percentile=percentile,
                                 held_out=held_out, show_progress=show_progress, log=log,
                                 task=task, metric=metric, requant=requant)
    rep["calibration"]["source"] = calib if isinstance(calib, str) else type(calib).__name__
    if calib_recipe is not None:
        rep["calibration"]["recipe"] = calib_recipe if isinstance(calib_recipe, str) else "dict"
    if report is not None:
        with open(os.fspath(report), "w") as f:
            json.dump(rep, f, indent=2)
    return qgraph, rep


QUANTIZE_MODES = ("int8",)


def check_convert_options(quantize, calib, calib_method: str = "minmax", max_accuracy_drop=None,
                          requant: str = "fp32") -> None:
    """Refuse bad quantization options before a conversion does any work."""
    from .requant_mode import check_requant
    check_requant(requant)
    if quantize not in QUANTIZE_MODES:
        raise QuantizationError(f"quantize={quantize!r}: supported: {', '.join(QUANTIZE_MODES)}")
    if calib is None:
        raise CalibrationError("int8 quantization needs calibration data: give calib (a folder of images, "
                               "a video, .npy/.npz, an iterable), or calib='random' for seeded random inputs")
    if calib_method not in CALIB_METHODS:
        raise QuantizationError(f"unknown calib_method {calib_method!r}; known: {', '.join(CALIB_METHODS)}")
    if max_accuracy_drop is not None and not 0.0 <= float(max_accuracy_drop) <= 1.0:
        raise QuantizationError(f"max_accuracy_drop is a fraction in [0, 1], got {max_accuracy_drop}")
