"""The OpenCL backend's kernel table (``backends/kernel_table.py``): prepare functions keyed by
(op, dtype, sparse encoding, layout). The float32 kernels (``ops.py``, ``ops_tensor.py``)
are the generic entries; the int8 kernels (``ops_int8.py``) the ``dtype="int8"`` entries,
which ``TABLE.lookup`` picks for a node on int8 tensors. The table loads those modules the
first time it is read."""
from __future__ import annotations

from ..kernel_table import KernelTable


def _load() -> None:
    from . import ops, ops_int8, ops_tensor  # noqa: F401  (register their kernels)


TABLE = KernelTable("OpenCL", load=_load)
kernel_for = TABLE.kernel_for
