"""Framework-neutral graph IR."""
from .graph import DTYPES, VERIFY_SHAPES_KEY, Graph, Node, Tensor, claim_name, concrete_input_shapes
from .shape_inference import infer_shapes, infer_node

__all__ = ["DTYPES", "VERIFY_SHAPES_KEY", "Graph", "Node", "Tensor", "claim_name", "concrete_input_shapes",
           "infer_shapes", "infer_node"]
