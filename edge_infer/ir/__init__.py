"""Framework-neutral graph IR."""
from .graph import DTYPES, Graph, Node, Tensor
from .shape_inference import infer_shapes, infer_node

__all__ = ["DTYPES", "Graph", "Node", "Tensor", "infer_shapes", "infer_node"]
