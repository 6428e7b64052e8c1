"""The CPU kernel registry (ncnn-style: kernels found by op name).

A kernel is a *prepare* function, run once when a plan is built::

    @kernel("Relu")
    def relu(node: Node, ctx: PrepareContext) -> Callable[[], None]:
        x, y = ctx.value(node.inputs[0]), ctx.value(node.outputs[0])
        return lambda: np.maximum(x, 0, out=y)

``prepare`` reads shapes and constants, packs weights and asks ``ctx`` for
scratch buffers; the closure it returns is the *eval* step: compute only,
writing into the preallocated output arrays, every run.
"""
from __future__ import annotations

from typing import Callable, Dict

KERNELS: Dict[str, Callable] = {}


def kernel(*ops: str):
    """Register a CPU prepare function for the given op names."""
    def deco(fn):
        for op in ops:
            KERNELS[op] = fn
        return fn
    return deco
