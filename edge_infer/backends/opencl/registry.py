"""The OpenCL backend's kernel table (``backends/kernel_table.py``): prepare functions keyed by
(op, dtype, sparse encoding, layout). The float32 kernels (``ops.py``, ``ops_tensor.py``)
are the generic entries; the int8 kernels (``ops_int8.py``) the ``dtype="int8"`` entries,
which ``TABLE.lookup`` picks for a node on int8 tensors. Those modules register into it when
imported: ``executable.py`` imports them, so the table is full before the package is."""
from __future__ import annotations

from ..kernel_table import KernelTable


TABLE = KernelTable("OpenCL")
kernel_for = TABLE.kernel_for
