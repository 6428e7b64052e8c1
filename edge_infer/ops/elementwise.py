"""Element-wise ops: unary math and activations, binary and variadic ops, Softmax."""
from __future__ import annotations

from typing import List, Sequence, Tuple

from ..errors import ShapeError
from ..ir.graph import Graph, Node
from .cost import flops, free, numel, per_input
from .int8 import int8_limit
from .schema import BOOL, FLOAT, INT, STR, UNBOUNDED, check_axis, op, rank
from .shapes import broadcast_shapes, dtype_name, operand_dtype, rule

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


# -- broadcasting, as every backend's binary kernels index it ------------------------------------

def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> List[int]:
    """Element strides of a contiguous array of ``shape`` read broadcast to ``out_shape``
    (0 along the dims it is broadcast over)."""
    full = [1] * (len(out_shape) - len(shape)) + list(shape)
    strides, acc = [0] * len(full), 1
    for k in range(len(full) - 1, -1, -1):
        strides[k] = acc if full[k] != 1 else 0
        acc *= full[k]
    return strides


def collapse_dims(shape: Sequence[int], *strides: Sequence[int]) -> Tuple[List[int], List[List[int]]]:
    """Drop size-1 dims and merge neighbours that are contiguous in every stride list."""
    dims = [(d, [s[k] for s in strides]) for k, d in enumerate(shape) if d != 1]
    out: List[Tuple[int, List[int]]] = []
    for d, st in dims:
        if out and all(ps == s * d for ps, s in zip(out[-1][1], st)):
            out[-1] = (out[-1][0] * d, st)
        else:
            out.append((d, st))
    return [d for d, _ in out], [[st[k] for _, st in out] for k in range(len(strides))]


def broadcast_plan(a_shape, b_shape, y_shape) -> Tuple[List[int], List[int], List[int]]:
    """(dims, a strides, b strides) of ``y = a op b`` with numpy broadcasting, dims merged as far
    as both operands allow (at least one dim): the loop every backend's binary kernel runs."""
    dims, (sa, sb) = collapse_dims(y_shape, broadcast_strides(a_shape, y_shape), broadcast_strides(b_shape, y_shape))
    if not dims:
        return [1], [0], [0]
    return dims, sa, sb


# -- shape rules (registered in ``shapes.SHAPE_RULES``; ``ir/shape_inference`` walks with them) --

@rule("Softmax", "LogSoftmax")
def _softmax(node: Node, ins):
    return [(ins[0].dtype, ins[0].shape)]


@rule("Dropout")
def _dropout(node: Node, ins):
    x = ins[0]
    return [(x.dtype, x.shape), ("bool", x.shape)]


#: unary math and activations: one input, the output of its shape and dtype
UNARY_OPS = ("Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
             "Selu", "Celu", "Softplus", "Softsign", "Gelu", "Mish", "ThresholdedRelu", "Shrink",
             "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
             "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
             "Atanh", "BitwiseNot", "Clip")
#: ops that act on each element of their one input alone, whatever the layout: what the layout
#: passes (``convert_layout``, ``cancel_transposes``) move transposes through
LAYOUT_FREE_UNARY = frozenset(UNARY_OPS) | {"SiLU", "Not", "IsNaN", "IsInf", "Cast"}


@rule("Identity", *UNARY_OPS)
def _unary(node, ins):
    return [(ins[0].dtype, ins[0].shape)]


@rule("Not", "IsNaN", "IsInf")
def _unary_bool(node, ins):
    return [("bool", ins[0].shape)]


@rule("PRelu")
def _prelu(node, ins):
    x, slope = ins
    if x.shape is not None and slope.shape is not None:
        # unidirectional: the slope broadcasts to x, never the other way
        if len(slope.shape) > len(x.shape) or broadcast_shapes(x.shape, slope.shape) != tuple(x.shape):
            raise ShapeError(f"slope {slope.shape} does not broadcast to input {x.shape}")
    return [(x.dtype, x.shape)]


def _broadcast_all(ins):
    shapes = [t.shape for t in ins if t is not None]
    if any(s is None for s in shapes):
        return None
    return broadcast_shapes(*shapes)


@rule("Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Sum", "Mean", "BitShift",
      "BitwiseAnd", "BitwiseOr", "BitwiseXor")
def _arith(node, ins):
    return [(operand_dtype(ins), _broadcast_all(ins))]


@rule("Pow")
def _pow(node, ins):
    # the exponent may have another type; the result has the base's
    return [(ins[0].dtype, _broadcast_all(ins))]


@rule("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")
def _compare(node, ins):
    return [("bool", _broadcast_all(ins))]


@rule("Where")
def _where(node, ins):
    return [(operand_dtype(ins[1:]), _broadcast_all(ins))]


@rule("Cast")
def _cast(node, ins):
    return [(dtype_name(node.attrs["to"]), ins[0].shape)]


@rule("CastLike")
def _cast_like(node, ins):
    return [(ins[1].dtype, ins[0].shape)]


@rule("SiLU")
def _silu(node: Node, ins):
    return [(ins[0].dtype, ins[0].shape)]


# -- cost (``ops/cost.py``: FLOPs per node) ------------------------------------------------------------

@flops("Softmax")
def _softmax_flops(node: Node, graph: Graph) -> int:
    return 3 * numel(graph, node.inputs[0])       # max, exp-and-sum, divide


flops("LogSoftmax")(per_input)
flops("Identity", "Dropout", "Cast", "CastLike")(free)


# -- int8 (``ops/int8.py``: what the int8 kernel of these ops covers) ------------------------------

@int8_limit("PRelu")
def _prelu_int8(node: Node, g: Graph):
    T = g.tensors
    if len(node.inputs) < 2 or not T[node.inputs[1]].is_const or sum(d != 1 for d in T[node.inputs[1]].data.shape) > 1:
        return "PRelu slope is not a constant along one axis"
    return None


@int8_limit("Softmax")
def _softmax_int8(node: Node, g: Graph):
    x = g.tensors[node.inputs[0]]
    ax = int(node.attrs.get("axis", -1)) % max(len(x.shape or ()), 1)
    if x.shape is None or any(d != 1 for d in x.shape[ax + 1:]):
        return "int8 Softmax runs over the last axis"
    return None


@int8_limit("Clip")
def _clip_int8(node: Node, g: Graph):
    for i in (1, 2):
        if len(node.inputs) > i and node.inputs[i] and not g.tensors[node.inputs[i]].is_const:
            return "clip bounds are not constants"
    return None
