"""The CPU backend: a graph whose shapes are all planned ahead gets a ``CpuExecutable``
(``executor.py``), any other a staged plan (``staged.py``, built on the executor)."""
from __future__ import annotations

from typing import Optional

from ...ir.graph import Graph
from ..base import Backend, Executable
from .registry import TABLE
from .staged import prepare_plan


class CpuBackend(Backend):
    """numpy/BLAS kernels for every supported op."""

    name = "cpu"
    plans_memory = True

    def kernel_table(self):
        return TABLE

    def prepare(self, graph: Graph, threads: Optional[int] = None, **options) -> Executable:
        """``memory_limit``: bytes for arena plus workspaces (kernels tile to fit; a plan that
        cannot fit raises MemoryBudgetError); ``arena_alloc``: see ``allocate_buffers``. A graph
        whose shapes depend on run-time values gets a staged plan (``staged.py``)."""
        return prepare_plan(graph, threads or 1, options.get("memory_limit"), options.get("arena_alloc"))
