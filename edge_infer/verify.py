"""Numerical equivalence of two graphs (or artifacts) on seeded random inputs."""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Union

import numpy as np

from .errors import EdgeInferError
from .ir import Graph, concrete_input_shapes


class VerificationError(EdgeInferError):
    """Two graphs that should be equivalent disagree."""


def random_inputs(graph: Graph, seed: int = 0, shapes: Optional[Dict[str, tuple]] = None
                  ) -> Dict[str, np.ndarray]:
    """Seeded inputs for every graph input, shaped by ``shapes``, else by the shapes the
    converter verified the graph at, else with symbolic dims 1 (``concrete_input_shapes``)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    concrete = concrete_input_shapes(graph, shapes)
    for name in graph.inputs:
        t = graph.tensors[name]
        shape = concrete[name]
        dt = np.dtype(t.dtype)
        if dt.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feeds[name] = rng.random(shape) < 0.5
        else:
            feeds[name] = rng.integers(0, 10, shape).astype(dt)
    return feeds


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| (0 when both are zero); exact comparison for non-floats."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    if b.dtype.kind not in "fc":
        return 0.0 if np.array_equal(a, b) else float("inf")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if not (np.all(np.isfinite(a64) == np.isfinite(b64))
            and np.array_equal(a64[~np.isfinite(a64)], b64[~np.isfinite(b64)], equal_nan=True)):
        return float("inf")
    fa, fb = np.nan_to_num(a64, posinf=0, neginf=0), np.nan_to_num(b64, posinf=0, neginf=0)
    denom = np.linalg.norm(fb)
    num = np.linalg.norm(fa - fb)
    if denom == 0:
        return float(num)
    return float(num / denom)


_WIDEN = {"float32": "float64", "float16": "float64"}


def promote_float64(graph: Graph) -> Graph:
    """A copy of ``graph`` computing in float64 (float constants, tensors, Cast
    targets and dtype attributes widened).

    Equivalence checks run both graphs this way: a rewrite that is exact in real
    arithmetic (folding, fusion, reordering) then agrees to ~1e-12, so the 1e-6
    tolerance catches real mistakes and not float32 rounding noise, which on a
    50-layer network alone reaches 1e-5.
    """
    g = graph.copy()
    for t in g.tensors.values():
        if t.dtype in _WIDEN:
            t.dtype = _WIDEN[t.dtype]
            if t.data is not None:
                t.data = t.data.astype(np.float64)
    for n in g.nodes:
        for key in ("to", "dtype"):
            if n.attrs.get(key) in _WIDEN:
                n.attrs[key] = _WIDEN[n.attrs[key]]
    return g


def _as_runtime(model, precision: str = "native", trusted_keys=None):
    from .artifact import load_artifact
    from .runtime import Runtime
    if hasattr(model, "run") and hasattr(model, "inputs"):
        if precision == "float64":
            return Runtime(promote_float64(model.graph), backend="cpu")
        return model
    # an artifact path loads through the signature check; a Graph in memory has no file to check
    keys = trusted_keys if not isinstance(model, Graph) else None
    if precision == "float64":
        graph = model if isinstance(model, Graph) else load_artifact(str(model), trusted_keys=keys)[0]
        return Runtime(promote_float64(graph), backend="cpu")
    return Runtime(model, backend="cpu", trusted_keys=keys)


def compare(a, b, feeds_list: Iterable[Dict[str, np.ndarray]], precision: str = "native",
            trusted_keys=None) -> float:
    """Largest relative error over outputs and feeds between models ``a`` and ``b``
    (Graphs, artifact paths or Runtimes). ``precision="float64"`` runs both with
    widened floats (see ``promote_float64``). ``trusted_keys``: as for ``Runtime``; artifact
    paths load only if signed by one of them."""
    if precision == "float32-vs-float64":  # the float32 rounding noise of ``a`` itself
        ra, rb = _as_runtime(a, trusted_keys=trusted_keys), _as_runtime(b, "float64", trusted_keys)
    else:
        ra, rb = _as_runtime(a, precision, trusted_keys), _as_runtime(b, precision, trusted_keys)
    worst = 0.0
    for feeds in feeds_list:
        if precision != "native":
            feeds = {k: v.astype(np.float64) if v.dtype in (np.float32, np.float16) else v
                     for k, v in feeds.items()}
        oa = ra.run({k: v.astype(np.float32) if v.dtype == np.float64 and ra.graph.tensors[k].dtype == "float32"
                     else v for k, v in feeds.items()})
        ob = rb.run(dict(feeds))
        for name in ob:
            worst = max(worst, relative_error(oa[name], ob[name]))
    return worst


def verify(a: Union[Graph, str], b: Union[Graph, str], samples: int = 2, seed: int = 0,
           tolerance: float = 1e-6, feeds: Optional[list] = None, precision: str = "float64",
           trusted_keys=None) -> float:
    """Check that models ``a`` and ``b`` compute the same outputs on seeded random
    inputs (and on ``feeds`` if given). Returns the largest relative error; raises
    VerificationError if it exceeds ``tolerance``. By default both run in float64
    so that float32 rounding differences do not count (``precision="native"`` to
    compare them as they run on the device). ``trusted_keys``: as for ``Runtime``: artifact
    paths load only if signed by one of these Ed25519 public keys."""
    ra = _as_runtime(a, trusted_keys=trusted_keys)
    ga = ra.graph
    feeds_list = list(feeds or []) + [random_inputs(ga, seed + k) for k in range(samples)]
    err = compare(ra, b, feeds_list, precision, trusted_keys)
    if err > tolerance:
        raise VerificationError(f"outputs differ: relative error {err:.3g} > {tolerance:g}")
    return err
