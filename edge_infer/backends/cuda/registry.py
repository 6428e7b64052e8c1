"""The CUDA backend's kernel table (``backends/kernel_table.py``): launchers keyed by (op, dtype,
sparse encoding, layout). ``@launcher(*ops)`` registers a float launcher (``dtype="float"``: a
node that is not int8), ``@launcher(*ops, int8=True)`` the int8 one (``dtype="int8"``); an
int8 node with no int8 launcher is refused, not sent to a float kernel. The table loads the
launcher modules (``ops.py``, ``ops_nn.py``, ``ops_int8.py``) the first time it is read."""
from __future__ import annotations

from ..kernel_table import KernelTable


def _load() -> None:
    from . import ops, ops_int8, ops_nn  # noqa: F401  (register their launchers)


TABLE = KernelTable("CUDA", load=_load)


def launcher(*ops: str, int8: bool = False):
    """Register a launcher ``fn(node, ctx) -> [step, ...]`` for ``ops`` (int8: for int8 nodes)."""
    return TABLE.kernel_for(*ops, dtype="int8" if int8 else "float")
