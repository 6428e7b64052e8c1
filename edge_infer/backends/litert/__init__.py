"""LiteRT backend: the graph exported to a TFLite flatbuffer (in memory) and run by LiteRT's
interpreter (``ai_edge_litert``, the maintained successor of tflite-runtime; ``tflite_runtime``
where only that is installed, which needs numpy < 2 for its 2.14 wheels).

prepare = export (edge_infer/export_tflite.py) + ``Interpreter(model_content=...,
num_threads=threads)`` + ``allocate_tensors``; run = set inputs, ``invoke``, copy outputs.
A node is supported when the exporter covers it (``unsupported_reason``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import BackendError, EdgeInferError
from ...ir import Graph, Node
from ..base import Backend, Executable


def interpreter_class():
    """(Interpreter class, module name), or (None, why neither imports)."""
    errors = []
    for mod in ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"):
        try:
            m = __import__(mod, fromlist=["Interpreter"])
            return m.Interpreter, mod
        except Exception as e:            # ImportError, or a binary built for another numpy
            errors.append(f"{mod}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip())
    return None, "; ".join(errors)


_stderr_lock = threading.Lock()
_log = logging.getLogger(__name__)


@contextlib.contextmanager
def _quiet_stderr():
    """Keep what LiteRT's C++ code prints straight to file descriptor 2 ("INFO: Created
    TensorFlow Lite XNNPACK delegate for CPU.", its error lines) off the process's stderr,
    where it would break a command line's one-line error contract; yields the list that
    receives those lines once the block ends (also logged at DEBUG to ``edge_infer.backends.
    litert``). fd 2 is process-wide: another thread's writes to it inside the block land
    here too, so the block is kept to interpreter creation."""
    lines: List[str] = []
    with _stderr_lock:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):   # no fd 2 (embedded, closed): nothing to hide
            yield lines
            return
        with tempfile.TemporaryFile() as cap:
            os.dup2(cap.fileno(), 2)
            try:
                yield lines
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                cap.seek(0)
                text = cap.read(1 << 16).decode("utf-8", "replace")
                lines.extend(ln for ln in text.splitlines() if ln.strip())
                for ln in lines:
                    _log.debug("%s", ln)


class LiteRTExecutable(Executable):
    """One interpreter over the exported model, its tensors allocated once."""

    def __init__(self, graph: Graph, threads: int = 1):
        from ...export_tflite import graph_to_tflite
        cls, where = interpreter_class()
        if cls is None:
            raise BackendError(f"LiteRT is not installed: {where}")
        self.graph = graph
        self.nodes: List[Node] = list(graph.nodes)
        self.model_bytes = graph_to_tflite(graph)
        with _quiet_stderr() as log:
            try:
                self.interpreter = cls(model_content=self.model_bytes, num_threads=max(1, int(threads or 1)))
                self.interpreter.allocate_tensors()
                err = None
            except (RuntimeError, ValueError) as e:
                err = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
        if err is not None:
            detail = next((ln for ln in log if ln.startswith("ERROR")), "")
            raise BackendError(f"LiteRT refused the exported model: {err}" + (f" ({detail})" if detail else ""))
        self.module = where
        ins = self.interpreter.get_input_details()
        outs = self.interpreter.get_output_details()
        if len(ins) != len(graph.inputs) or len(outs) != len(graph.outputs):
            raise BackendError("LiteRT model inputs/outputs do not match the graph")
        self._inputs = [(name, d["index"], np.dtype(d["dtype"])) for name, d in zip(graph.inputs, ins)]
        self._outputs = [(name, d["index"]) for name, d in zip(graph.outputs, outs)]
        self._set = self.interpreter.set_tensor
        self._get = self.interpreter.get_tensor
        self._invoke = self.interpreter.invoke

    def run(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        for name, idx, dt in self._inputs:
            x = feeds[name]
            self._set(idx, x if x.dtype == dt and x.flags.c_contiguous else np.ascontiguousarray(x, dt))
        self._invoke()
        return {name: self._get(idx) for name, idx in self._outputs}      # get_tensor returns a copy

    def run_profiled(self, feeds: Dict[str, np.ndarray]
                     ) -> Tuple[Dict[str, np.ndarray], List[Tuple[str, str, float]]]:
        """The interpreter runs the model as one step: one entry for the whole graph."""
        t0 = time.perf_counter()
        out = self.run(feeds)
        return out, [("litert", "TFLite", time.perf_counter() - t0)]


class LiteRTBackend(Backend):
    """Runs graphs through LiteRT (see the module doc)."""

    name = "litert"

    def available(self, graph: Optional[Graph] = None) -> Tuple[bool, str]:
        """Usable here (an interpreter imports), and for ``graph`` when given (it exports)."""
        cls, why = interpreter_class()
        if cls is None:
            return False, f"neither ai_edge_litert nor tflite_runtime imports ({why})"
        try:
            import flatbuffers  # noqa: F401
            from ...tflite_format import _schema
            _schema("Model")
        except (ImportError, EdgeInferError) as e:
            return False, f"the TFLite exporter needs flatbuffers and tflite: {e}"
        if graph is not None:
            bad = [f"{n.name} ({n.op}): {r}" for n in graph.nodes
                   for r in [self.reason(n, graph)] if r is not None]
            if bad:
                return False, f"{len(bad)} node(s) cannot be exported to TFLite: {'; '.join(bad[:3])}"
        return True, ""

    def supported_ops(self) -> Sequence[str]:
        from ...export_tflite import EXPORTED_OPS
        return EXPORTED_OPS

    @staticmethod
    def reason(node: Node, graph: Graph) -> Optional[str]:
        from ...export_tflite import unsupported_reason
        try:
            return unsupported_reason(node, graph)
        except EdgeInferError as e:
            return str(e)

    def supports(self, node: Node, graph: Graph) -> bool:
        """Whether the exporter covers ``node`` (with the tensor shapes ``graph`` gives)."""
        if node.op not in self.supported_ops():
            return False
        return self.reason(node, graph) is None

    def prepare(self, graph: Graph, threads: Optional[int] = None, **options) -> LiteRTExecutable:
        return LiteRTExecutable(graph, threads or 1)


__all__ = ["LiteRTBackend", "LiteRTExecutable", "interpreter_class"]
