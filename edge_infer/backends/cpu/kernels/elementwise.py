"""Element-wise kernels (unary, binary, activations)."""
from __future__ import annotations

import numpy as np

from ..registry import kernel


@kernel("Relu")
def relu(node, ctx):
    x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
    return lambda: np.maximum(x, 0, out=y)


@kernel("Add")
def add(node, ctx):
    a, b, y = ctx.value(node.inputs[0]), ctx.value(node.inputs[1]), ctx.value(node.outputs[0])
    return lambda: np.add(a, b, out=y)
