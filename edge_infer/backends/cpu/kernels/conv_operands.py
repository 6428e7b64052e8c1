"""What the numpy and the native conv kernels share: a Conv's operands and geometry, the weight
operand, and the plan's "im2col" column scratch. Below ``conv.py`` (which re-exports these) so
that ``conv_native.py``, ``convt_native.py`` and ``native/kernels.py``, which ``conv.py``
imports, can use them without importing it back."""
from __future__ import annotations

import numpy as np

from ....errors import UnsupportedOpError
from ....ir.graph import Node
from ....ops.conv import conv_geometry


def _weights(ctx, name: str, dtype) -> np.ndarray:
    """The weight array: a contiguous copy in the compute dtype when constant
    (packed once), else the live buffer (read afresh every run through views)."""
    w = ctx.value(name)
    if ctx.const(name) is not None:
        return np.ascontiguousarray(w, dtype=dtype)
    if w.dtype != dtype:
        raise UnsupportedOpError(f"non-constant weight {name!r} has dtype {w.dtype}, input has {dtype}")
    return w


def shared_cols(ctx, nelems: int, dtype) -> np.ndarray:
    """A 1-D scratch of ``nelems`` for im2col columns: the plan's "im2col" scratch role.

    A conv's column matrix is dead once its matmul returns and the executor runs
    steps one at a time, so one buffer sized for the largest conv serves them
    all (ResNet-50: ~8 MB instead of ~60 MB). Were steps ever run concurrently, this
    must become per-thread. Under a memory budget the convs size their requests from
    ``ctx.workspace_budget`` and run in bands of output rows (see ``band_rows``).
    """
    return ctx.scratch("im2col", (nelems,), dtype, tileable=True)


def held_cols(ctx, dtype=None) -> int:
    """Bytes of the plan's im2col column scratch so far (0 before the first im2col)."""
    return ctx.scratch_held("im2col")


def _conv_geometry(node: Node, ctx, last: bool):
    """Operands and window geometry of a Conv in either layout, checked against
    the planned output shape (the prepare-time part both layouts share)."""
    x = ctx.value(node.inputs[0])
    y = ctx.value(node.outputs[0])
    w = _weights(ctx, node.inputs[1], y.dtype)
    g = conv_geometry(node, x.shape, w.shape, y.shape, last)
    return (x, y, w, g.n, g.c, g.m, g.cg, g.nsp, g.group, list(g.kernel), list(g.strides), list(g.dilations),
            list(g.pads), list(g.out_sp))
