"""Model importers: each turns a framework's model file into an IR :class:`Graph`.

``load_model`` picks the importer from the file's extension (or its first
bytes when the extension says nothing).
"""
from __future__ import annotations

import os
from typing import Union

from ..errors import ConversionError
from ..ir import Graph

__all__ = ["load_model", "load_onnx", "load_tflite"]

#: a .tflite flatbuffer carries this identifier at bytes 4..8
_TFLITE_MAGIC = b"TFL3"


def load_onnx(path_or_model, input_shapes=None) -> Graph:
    """See :func:`edge_infer.frontends.onnx.load_onnx` (imported lazily: it needs onnx)."""
    from .onnx import load_onnx as _load
    return _load(path_or_model, input_shapes)


def load_tflite(path_or_bytes, input_shapes=None) -> Graph:
    """See :func:`edge_infer.frontends.tflite.load_tflite` (needs the ``tflite`` schema package)."""
    from .tflite import load_tflite as _load
    return _load(path_or_bytes, input_shapes)


def load_model(path: Union[str, os.PathLike], **kw) -> Graph:
    """Import the model at ``path`` into an IR graph.

    ``.onnx`` files go to :func:`load_onnx` (``kw`` are its options, e.g.
    ``input_shapes``); ``.tflite`` files (or any file with the "TFL3" identifier) go to
    :func:`load_tflite`.
    Files with another extension are recognised by their content.
    """
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext == ".tflite":
        return load_tflite(p, kw.get("input_shapes"))
    if ext == ".onnx":
        return load_onnx(p, **kw)
    if not os.path.isfile(p):
        raise ConversionError(f"{p}: no such file")
    with open(p, "rb") as f:
        head = f.read(8)
    if head[4:8] == _TFLITE_MAGIC:
        return load_tflite(p, kw.get("input_shapes"))
    try:
        return load_onnx(p, **kw)
    except ConversionError as e:
        raise ConversionError(f"{p}: unrecognised model format (expected .onnx or .tflite): {e}") from None
