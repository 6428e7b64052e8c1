"""The backend interface every backend implements (CPU, native, OpenCL, CUDA, LiteRT).

A backend turns a graph whose shapes are all concrete into an ``Executable``:

* ``prepare`` runs once per (graph, input shapes): it binds every op to its
  buffers, packs weights and allocates scratch (TFLite Micro's prepare step);
* ``Executable.run`` computes only (the eval step) and allocates nothing but
  the returned output copies.

Backends are registered by name in ``BACKENDS``; ``supports`` lets the picker
and the partitioner ask who covers which node. A backend whose kernels live in a
``KernelTable`` (CPU, OpenCL, CUDA; ``kernel_table.py``) returns it from ``kernel_table()``:
``supported_ops`` and ``supports`` read that table, the one its prepare dispatches through.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..ir import Graph, Node

if TYPE_CHECKING:
    from ..memory.arena import ArenaPlan
    from .kernel_table import KernelTable


class Executable:
    """A prepared graph, ready to run many times.

    What callers (the runtime's memory checks, ``inspect``, ``memory_stats``, the run slots)
    read of a plan is declared here, so no caller probes for it: ``arena_plan`` is the
    activation arena's plan (``memory.arena.ArenaPlan``) where the backend sizes its memory up
    front, else None (LiteRT, which allocates inside its own interpreter); ``workspace_bytes``
    is the scratch outside the arena (``scratch_bytes``: its buffers shared by role); ``notes`` maps a node name to the algorithm chosen."""

    #: the nodes that run, in order
    nodes: List[Node]
    arena_plan: Optional["ArenaPlan"] = None
    workspace_bytes: int = 0
    #: {role: bytes} of the scratch buffers shared by role (``memory/scratch.py``), part of
    #: ``workspace_bytes``; scratch placed in the arena is ``arena_plan.scratch_offsets``
    scratch_bytes: Dict[str, int] = {}
    notes: Dict[str, str] = {}
    #: {node name: how} of the nodes whose kernel split its work (bands of output rows, tiles
    #: for fewer threads) to fit the memory budget or a scratch cap, as the kernel recorded it
    #: at prepare (``PrepareContext.tiled_to_fit``)
    tiled: Dict[str, str] = {}
    #: {node name: None (runs as Winograd F(4x4,3x3)) or why not} of the 3x3 stride-1 fp32
    #: convs Winograd could compute, as the kernel decided at prepare (``PrepareContext.winograd``)
    winograd: Dict[str, Optional[str]] = {}

    def step_summary(self) -> Optional[dict]:
        """``{"steps", "native_steps", "numpy_steps": [op, ...]}`` of a plan whose steps are all
        fixed at prepare (what runs as native C, what as numpy); None where they are not (a
        staged plan makes its rest per run-time value; other backends run no native steps)."""
        return None

    def run(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run once. ``feeds`` maps every graph input name to an array of the
        planned shape and dtype; returns every graph output (fresh arrays)."""
        raise NotImplementedError

    def run_profiled(self, feeds: Dict[str, np.ndarray]
                     ) -> Tuple[Dict[str, np.ndarray], List[Tuple[str, str, float]]]:
        """Like ``run``, also returning ``(node name, op, seconds)`` per node."""
        raise NotImplementedError


class Backend:
    """Interface of a backend. Subclasses set ``name`` and override the methods."""

    name = "base"
    #: whether this backend's plans size their memory up front (an ``arena_plan``), so that a
    #: memory limit can be checked before a run; LiteRT allocates inside its own interpreter
    plans_memory = False
    #: whether the picker's microbenchmark of this backend runs in a child process
    #: (``probe_guard``): a GPU driver that crashes must not end the caller's process
    isolate_probe = False

    def available(self) -> Tuple[bool, str]:
        """(usable here?, why not)."""
        return True, ""

    def kernel_table(self) -> Optional["KernelTable"]:
        """The backend's kernels by (op, dtype, sparse encoding, layout), where it keeps them in
        a ``KernelTable``; None for a backend that runs the graph some other way (LiteRT)."""
        return None

    def supported_ops(self) -> Sequence[str]:
        """Every op the backend has a kernel for (in some form)."""
        table = self.kernel_table()
        if table is None:
            raise NotImplementedError
        return table.ops()

    def supports(self, node: Node, graph: Graph) -> bool:
        """Whether this backend can run ``node`` as it appears in ``graph``."""
        return node.op in self.supported_ops()

    def prepare(self, graph: Graph, threads: Optional[int] = None, **options) -> Executable:
        """Bind a graph with concrete shapes to buffers and kernels."""
        raise NotImplementedError


def running_nodes(graph: Graph) -> List[Node]:
    """Nodes that run (not folded into constants at plan time), in graph order."""
    return [n for n in graph.nodes
            if not all(graph.tensors[o].is_const for o in n.outputs if o in graph.tensors and o)]
