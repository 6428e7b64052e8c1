"""Framework-neutral graph IR.

``infer_shapes`` / ``infer_node`` (``shape_inference.py``) walk a graph with the shape rules of
every op family in ``edge_infer/ops/``, which itself builds on ``ir.graph``: they are loaded on
first use, so that importing the IR's data structures does not import the op layer above it.
"""
from .graph import DTYPES, VERIFY_SHAPES_KEY, Graph, Node, Tensor, claim_name, concrete_input_shapes

__all__ = ["DTYPES", "VERIFY_SHAPES_KEY", "Graph", "Node", "Tensor", "claim_name", "concrete_input_shapes",
           "infer_shapes", "infer_node"]


def __getattr__(name: str):
    if name in ("infer_shapes", "infer_node"):
        from . import shape_inference
        return getattr(shape_inference, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
