"""Element-wise ops: unary math and activations, binary and variadic ops, Softmax."""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .schema import BOOL, FLOAT, INT, STR, UNBOUNDED, check_axis, op, rank

UNARY = ("Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Ceil", "Cos", "Cosh",
         "Erf", "Exp", "Floor", "Identity", "IsNaN", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu",
         "Round", "Sigmoid", "SiLU", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh",
         "HardSwish")
BINARY = ("Add", "And", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal", "Greater", "GreaterOrEqual",
          "Less", "LessOrEqual", "Mul", "Or", "Pow", "PRelu", "Sub", "Xor")
VARIADIC = ("Max", "Mean", "Min", "Sum")


def _check_softmax(node: Node, graph: Graph) -> None:
    if "axis" in node.attrs:
        check_axis(node, "attribute 'axis'", node.attrs["axis"], rank(graph, node.inputs[0]))


SCHEMAS = {op_name: op() for op_name in UNARY}
SCHEMAS.update({op_name: op((2, 2)) for op_name in BINARY})
SCHEMAS.update({op_name: op((1, UNBOUNDED)) for op_name in VARIADIC})
SCHEMAS.update({
    "Celu": op(alpha=FLOAT()),
    "Elu": op(alpha=FLOAT()),
    "Selu": op(alpha=FLOAT(), gamma=FLOAT()),
    "LeakyRelu": op(alpha=FLOAT()),
    "ThresholdedRelu": op(alpha=FLOAT()),
    "HardSigmoid": op(alpha=FLOAT(), beta=FLOAT()),
    "Shrink": op(bias=FLOAT(), lambd=FLOAT(0)),
    "Gelu": op(approximate=STR("none", "tanh")),
    "IsInf": op(detect_negative=BOOL, detect_positive=BOOL),
    "Clip": op((1, 3), min=FLOAT(), max=FLOAT()),
    "Mod": op((2, 2), fmod=BOOL),
    "BitShift": op((2, 2), direction=STR("LEFT", "RIGHT")),
    "Where": op((3, 3)),
    "Cast": op(), "CastLike": op((2, 2)),
    "Dropout": op((1, 3), (1, 2)),
    "Softmax": op(check=_check_softmax, axis=INT()),
    "LogSoftmax": op(check=_check_softmax, axis=INT()),
})
