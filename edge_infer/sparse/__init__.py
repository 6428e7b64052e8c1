"""Sparse weights: compact encodings kept in memory, magnitude pruning, sensitivity, report.

See ``encodings.py`` (the in-memory and on-disk form), ``pruning.py`` (convert-time pruning)
and ``report.py`` (compression per tensor and model)."""
from .encodings import ENCODINGS, SparseArray, encode, validate  # noqa: F401
