"""Range observers for calibration, and the int8 parameters derived from a range.

Activations are quantized per tensor, asymmetric (TFLite int8): an observer watches every
batch of a tensor's float values and finally proposes a range [lo, hi] (containing 0);
``activation_qparams`` turns it into (scale, zero_point). Weights are quantized per output
channel, symmetric: ``weight_scales`` (max |w| / 127 per channel).

``calib_method`` names an observer:

* ``minmax``: the exact running min and max;
* ``ema``: moving-average min-max (TensorFlow's QAT convention: each batch's min and max
  averaged in with weight 0.01 after the first batch);
* ``percentile``: the ``percentile`` (default 99.99) and 100 - ``percentile`` quantiles;
* ``entropy``: TensorRT's KL-divergence calibration: a 2048-bin histogram of |x|, thresholds
  searched from bin 128 up, each candidate distribution quantized to 128 levels; the
  threshold with the smallest KL(reference || quantized) clips |x|;
* ``mse``: the range (a common fraction of [min, max]) minimizing the expected squared
  quantization error (rounding inside, clipping outside) over the histogram.

The histogram observers keep the bin width of the first batch (max |x| / 2048) and add bins
when a later batch reaches further (merging pairs of bins past 16 x 2048), so one pass over the
calibration data suffices.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import numpy as np

QMIN, QMAX = -128, 127
BINS = 2048
KL_LEVELS = 128
KL_START = 128
MAX_BINS = 16 * BINS


class Observer:
    """Watches a tensor's values; ``range()`` proposes the float range to quantize."""

    name = "observer"

    def __init__(self):
        self.min = math.inf
        self.max = -math.inf
        self.count = 0

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x)
        if x.size == 0:
            return
        finite = x if np.all(np.isfinite(x)) else x[np.isfinite(x)]
        if finite.size == 0:
            return
        self.min = min(self.min, float(finite.min()))
        self.max = max(self.max, float(finite.max()))
        self.count += int(finite.size)
        self._update(finite)

    def _update(self, x: np.ndarray) -> None:
        pass

    def range(self) -> Tuple[float, float]:
        if self.count == 0:
            return 0.0, 0.0
        return min(self.min, 0.0), max(self.max, 0.0)


class MinMaxObserver(Observer):
    name = "minmax"


class MovingAverageMinMaxObserver(Observer):
    name = "ema"

    def __init__(self, averaging_constant: float = 0.01):
        super().__init__()
        self.c = float(averaging_constant)
        self.avg_min: Optional[float] = None
        self.avg_max: Optional[float] = None

    def _update(self, x: np.ndarray) -> None:
        lo, hi = float(x.min()), float(x.max())
        if self.avg_min is None:
            self.avg_min, self.avg_max = lo, hi
        else:
            self.avg_min += self.c * (lo - self.avg_min)
            self.avg_max += self.c * (hi - self.avg_max)

    def range(self):
        if self.avg_min is None:
            return 0.0, 0.0
        return min(self.avg_min, 0.0), max(self.avg_max, 0.0)


class HistogramObserver(Observer):
    """Two histograms of |x| with one bin width: values >= 0 and values < 0."""

    name = "histogram"

    def __init__(self, bins: int = BINS):
        super().__init__()
        self.bins = int(bins)
        self.width: Optional[float] = None
        self.pos = np.zeros(0, np.float64)
        self.neg = np.zeros(0, np.float64)

    def _update(self, x: np.ndarray) -> None:
        x = x.astype(np.float32, copy=False).reshape(-1)
        amax = float(max(abs(float(x.min())), abs(float(x.max()))))
        if self.width is None:
            if amax == 0.0:
                self.pos = _grow(self.pos, 1)
                self.pos[0] += x.size
                return
            self.width = amax / self.bins
        need = int(amax / self.width) + 1
        while need > MAX_BINS:                     # merge pairs of bins: width doubles
            self.width *= 2
            self.pos = _merge2(self.pos)
            self.neg = _merge2(self.neg)
            need = int(amax / self.width) + 1
        idx = np.minimum((np.abs(x) / np.float32(self.width)).astype(np.int64), need - 1)
        negative = x < 0
        counts_neg = np.bincount(idx[negative], minlength=need)
        counts_pos = np.bincount(idx[~negative], minlength=need)
        self.pos = _grow(self.pos, need)
        self.neg = _grow(self.neg, need)
        self.pos[:need] += counts_pos
        self.neg[:need] += counts_neg

    def signed_histogram(self) -> Tuple[np.ndarray, np.ndarray]:
        """(bin centers, counts) over the signed values, negative bins first."""
        w = self.width or 1.0
        nb = max(len(self.pos), len(self.neg))
        pos, neg = _grow(self.pos, nb), _grow(self.neg, nb)
        centers = (np.arange(nb) + 0.5) * w
        return np.concatenate([-centers[::-1], centers]), np.concatenate([neg[::-1], pos])

    def abs_histogram(self) -> np.ndarray:
        nb = max(len(self.pos), len(self.neg))
        return _grow(self.pos, nb) + _grow(self.neg, nb)


def _grow(h: np.ndarray, n: int) -> np.ndarray:
    if len(h) >= n:
        return h
    out = np.zeros(n, np.float64)
    out[:len(h)] = h
    return out


def _merge2(h: np.ndarray) -> np.ndarray:
    if len(h) % 2:
        h = np.append(h, 0.0)
    return h.reshape(-1, 2).sum(axis=1)


class PercentileObserver(HistogramObserver):
    name = "percentile"

    def __init__(self, percentile: float = 99.99, bins: int = BINS):
        super().__init__(bins)
        if not 50.0 < percentile <= 100.0:
            raise ValueError(f"percentile must be in (50, 100], got {percentile}")
        self.percentile = float(percentile)

    def range(self):
        if self.count == 0 or self.width is None:
            return super().range()
        centers, counts = self.signed_histogram()
        w = self.width
        edges_hi = centers + w / 2
        edges_lo = centers - w / 2
        cdf = np.cumsum(counts) / counts.sum()
        q = self.percentile / 100.0
        hi = float(edges_hi[min(np.searchsorted(cdf, q), len(cdf) - 1)])
        lo = float(edges_lo[min(np.searchsorted(cdf, 1.0 - q, side="right"), len(cdf) - 1)])
        lo, hi = max(lo, self.min), min(hi, self.max)
        return min(lo, 0.0), max(hi, 0.0)


def kl_threshold_bin(hist: np.ndarray, levels: int = KL_LEVELS, start: int = KL_START,
                     max_candidates: int = 1024) -> int:
    """TensorRT entropy calibration on a histogram of |x|: the bin count i (threshold
    i * width) whose clipped-and-quantized distribution is closest in KL divergence."""
    hist = np.asarray(hist, np.float64).copy()
    n = len(hist)
    if n <= start:
        return n
    if n > 1:
        hist[0] = hist[1]          # as pytorch-quantization: ReLU zeros would swamp bin 0
    total = hist.sum()
    if total <= 0:
        return n
    stride = max(1, (n - start) // max_candidates)
    tail = np.cumsum(hist[::-1])[::-1]            # tail[i] = sum(hist[i:])
    best_i, best_kl = n, math.inf
    for i in range(start, n + 1, stride):
        ref = hist[:i].copy()
        if i < n:
            ref[-1] += tail[i]
        h = hist[:i]
        nz = h > 0
        group = (np.arange(i) * levels) // i
        gsum = np.bincount(group, weights=h, minlength=levels)
        gcnt = np.bincount(group, weights=nz.astype(np.float64), minlength=levels)
        cand = np.where(nz, gsum[group] / np.maximum(gcnt[group], 1.0), 0.0)
        ps, qs = ref.sum(), cand.sum()
        if ps <= 0 or qs <= 0:
            continue
        p = ref / ps
        qd = cand / qs
        mask = p > 0
        if np.any(qd[mask] == 0):
            continue
        kl = float(np.sum(p[mask] * np.log(p[mask] / qd[mask])))
        if kl <= best_kl:                       # ties: the larger threshold (as TensorRT's last argmin)
            best_kl, best_i = kl, i
    return best_i


class EntropyObserver(HistogramObserver):
    name = "entropy"

    def range(self):
        if self.count == 0 or self.width is None:
            return super().range()
        i = kl_threshold_bin(self.abs_histogram())
        t = i * self.width
        lo, hi = max(self.min, -t), min(self.max, t)
        return min(lo, 0.0), max(hi, 0.0)


def expected_mse(centers: np.ndarray, counts: np.ndarray, lo: float, hi: float) -> float:
    """Squared error of quantizing the histogram (bin centers) with the int8 range [lo, hi]."""
    scale, zp = activation_qparams(lo, hi)
    q = np.clip(np.rint(centers / scale) + zp, QMIN, QMAX)
    err = (q - zp) * scale - centers
    return float(np.sum(counts * err * err) / max(counts.sum(), 1.0))


class MSEObserver(HistogramObserver):
    name = "mse"

    def __init__(self, bins: int = BINS, steps: int = 100):
        super().__init__(bins)
        self.steps = int(steps)

    def range(self):
        if self.count == 0 or self.width is None:
            return super().range()
        centers, counts = self.signed_histogram()
        keep = counts > 0
        centers, counts = centers[keep], counts[keep]
        lo0, hi0 = min(self.min, 0.0), max(self.max, 0.0)
        best, best_err = (lo0, hi0), math.inf
        for frac in np.linspace(1.0, 0.05, self.steps):
            lo, hi = lo0 * frac, hi0 * frac
            if hi - lo <= 0:
                continue
            err = expected_mse(centers, counts, lo, hi)
            if err < best_err:
                best, best_err = (lo, hi), err
        return best


OBSERVERS = {
    "minmax": MinMaxObserver,
    "ema": MovingAverageMinMaxObserver,
    "percentile": PercentileObserver,
    "entropy": EntropyObserver,
    "mse": MSEObserver,
}
CALIB_METHODS = tuple(OBSERVERS)


def make_observer(method: str, **options) -> Observer:
    """An observer for ``calib_method`` (``percentile=`` for the percentile method)."""
    if method not in OBSERVERS:
        from ..errors import EdgeInferError
        raise EdgeInferError(f"unknown calibration method {method!r}; known: {', '.join(CALIB_METHODS)}")
    if method == "percentile":
        return PercentileObserver(percentile=float(options.get("percentile", 99.99)))
    return OBSERVERS[method]()


# -- parameters ---------------------------------------------------------------------------------

def activation_qparams(lo: float, hi: float) -> Tuple[float, int]:
    """Asymmetric int8 (scale, zero_point) for the range [lo, hi] (widened to contain 0);
    the scale is a float32 value (what .eim, TFLite and ONNX store)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo <= 0:
        return 1.0, 0
    scale = float(np.float32((hi - lo) / (QMAX - QMIN)))
    if scale < 1e-30:
        return 1.0, 0
    zp = int(np.clip(round(QMIN - lo / scale), QMIN, QMAX))
    return scale, zp


def weight_scales(w: np.ndarray, axis: int = 0) -> np.ndarray:
    """Symmetric per-channel scales along ``axis``: max |w| / 127 (float32; 1 for an all-zero channel)."""
    w = np.asarray(w, np.float64)
    axis = axis % w.ndim
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=red) if red else np.abs(w)
    s = (amax / 127.0).astype(np.float32)
    return np.where(s > 0, s, np.float32(1.0)).astype(np.float32)


def quantize_weights(w: np.ndarray, scales: np.ndarray, axis: int = 0) -> np.ndarray:
    """round(w / s) (half away from zero), clipped to [-127, 127], int8."""
    shape = [1] * w.ndim
    shape[axis % w.ndim] = -1
    v = np.asarray(w, np.float64) / np.asarray(scales, np.float64).reshape(shape)
    v = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.clip(v, -127, 127).astype(np.int8)


def observe_summary(obs: Dict[str, Observer]) -> Dict[str, Tuple[float, float]]:
    return {k: o.range() for k, o in obs.items()}
