"""The CUDA backend's kernel table (``backends/kernel_table.py``): launchers keyed by (op, dtype,
sparse encoding, layout). ``@launcher(*ops)`` registers a float launcher (``dtype="float"``: a
node that is not int8), ``@launcher(*ops, int8=True)`` the int8 one (``dtype="int8"``); an
int8 node with no int8 launcher is refused, not sent to a float kernel. The launcher modules
(``ops.py``, ``ops_nn.py``, ``ops_int8.py``) register into it when imported: ``executor.py``
imports them, so the table is full before the package is."""
from __future__ import annotations

from ..kernel_table import KernelTable


TABLE = KernelTable("CUDA")


def launcher(*ops: str, int8: bool = False):
    """Register a launcher ``fn(node, ctx) -> [step, ...]`` for ``ops`` (int8: for int8 nodes)."""
    return TABLE.kernel_for(*ops, dtype="int8" if int8 else "float")
