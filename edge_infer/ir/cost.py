"""Static cost of a graph: op count, parameters, FLOPs and bytes moved.

``graph_cost`` works on a copy with concrete input shapes (the shapes the converter verified
the graph at, else symbolic dims as 1), with shapes
inferred and shape arithmetic folded (as a runtime plan would), so every tensor
size is known. Counting conventions:

* FLOPs: a multiply-add is 2. Conv: 2 * N * M * OH*OW... * (C/group) * k...;
  ConvTranspose: 2 * N * C * H*W... * (M/group) * k...; Gemm/MatMul: 2 * M * N * K
  (per batch); + 1 per output element for a bias / C, a residual, and each
  activation of a fused op's epilogue; BatchNormalization 2 per element;
  element-wise ops (activations included) 1 per output element; pools
  1 per window element per output; reductions and Softmax-like ops 1 per input
  element (Softmax 3); data movement (Reshape, Transpose, Concat, ...) 0.
* bytes moved: per op, the bytes of every input it reads (weights included) plus
  every output it writes; nodes that fold away at plan time (shape arithmetic)
  are not counted.
* parameters: elements of every constant a node reads.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from ..errors import EdgeInferError
from .graph import Graph, Node, concrete_input_shapes
from .shape_inference import infer_node, infer_shapes

ELEMENTWISE_FREE = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
    "Gather", "GatherElements", "Expand", "Tile", "Pad", "Identity", "Dropout", "Shape", "Size",
    "ConstantOfShape", "Cast", "CastLike", "Range", "DepthToSpace", "SpaceToDepth", "Resize",
    "Upsample"})
REDUCTIONS = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                        "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                        "ReduceSumSquare", "ArgMax", "ArgMin", "GlobalAveragePool",
                        "GlobalMaxPool", "LRN", "InstanceNormalization", "LogSoftmax", "CumSum"})


def _numel(graph: Graph, name: str) -> int:
    t = graph.tensors.get(name) if name else None
    if t is None or t.shape is None or not t.is_static:
        return 0
    return int(np.prod(t.shape, dtype=np.int64))


def _nbytes(graph: Graph, name: str) -> int:
    t = graph.tensors.get(name) if name else None
    if t is None:
        return 0
    if t.is_const:
        return int(t.data.nbytes)
    return _numel(graph, name) * np.dtype(t.dtype).itemsize


def _shape(graph: Graph, name: str):
    t = graph.tensors.get(name) if name else None
    return None if t is None else (t.data.shape if t.is_const else t.shape)


def _prod(xs) -> int:
    return int(np.prod([int(x) for x in xs], dtype=np.int64)) if xs is not None else 0


def node_flops(node: Node, graph: Graph) -> int:
    """FLOPs of one node (shapes must be inferred)."""
    op = node.op
    out = node.outputs[0] if node.outputs else ""
    n_out = _numel(graph, out)
    epi = 0
    if op.startswith("Fused"):
        # the base counts Conv's bias and Gemm's C; the epilogue adds a residual / MatMul bias
        extra_at = {"FusedConv": 3, "FusedMatMul": 2}.get(op)
        extra = 1 if extra_at is not None and len(node.inputs) > extra_at and node.inputs[extra_at] else 0
        epi = n_out * (extra + (1 if node.attrs.get("activation") else 0))
        op = op[len("Fused"):]
    if op == "Conv":
        w = _shape(graph, node.inputs[1])
        if w is None or len(w) < 3:
            return epi
        bias = n_out if len(node.inputs) > 2 and node.inputs[2] else 0
        return 2 * n_out * _prod(w[1:]) + bias + epi
    if op == "ConvTranspose":
        w = _shape(graph, node.inputs[1])
        if w is None:
            return 0
        n_in = _numel(graph, node.inputs[0])
        bias = n_out if len(node.inputs) > 2 and node.inputs[2] else 0
        return 2 * n_in * _prod(w[1:]) + bias
    if op == "Gemm":
        a = _shape(graph, node.inputs[0])
        if a is None or len(a) != 2:
            return epi
        k = int(a[0] if node.attrs.get("transA", 0) else a[1])
        c = n_out if len(node.inputs) > 2 and node.inputs[2] else 0
        return 2 * n_out * k + c + epi
    if op == "MatMul":
        a = _shape(graph, node.inputs[0])
        if a is None or len(a) == 0:
            return epi
        return 2 * n_out * int(a[-1]) + epi
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return n_out * _prod(node.attrs.get("kernel_shape") or [])
    if op == "BatchNormalization":
        return 2 * n_out
    if op == "Softmax":
        return 3 * _numel(graph, node.inputs[0])
    if op in REDUCTIONS:
        return _numel(graph, node.inputs[0])
    if op in ELEMENTWISE_FREE:
        return 0
    if op in ("LayerNormalization", "GroupNormalization"):
        return 8 * n_out           # mean, deviation, square, sum, scale, affine (two passes)
    if op in ("LSTM", "GRU", "RNN"):
        return _recurrent_flops(node, graph)
    if op == "Einsum":
        return _einsum_flops(node, graph)
    return n_out


def _recurrent_flops(node: Node, graph: Graph) -> int:
    """2 * steps * batch * directions * (input + hidden) * gates * hidden, plus ~10 per gate value."""
    from ..ops.sequence import RNN_GATES
    x, w = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        return 0
    nd, gh, n_in = (int(d) for d in w)
    hidden = gh // RNN_GATES[node.op]
    rows = int(x[0]) * int(x[1])
    return rows * nd * gh * (2 * (n_in + hidden) + 10)


def _einsum_flops(node: Node, graph: Graph) -> int:
    """2 * (product of every letter's size) per contraction of two operands."""
    from ..ops.sequence import parse_einsum
    shapes = [_shape(graph, i) for i in node.inputs]
    if any(s is None for s in shapes):
        return 0
    terms, _ = parse_einsum(node.attrs.get("equation", ""), [len(s) for s in shapes])
    sizes, ell = {}, 1
    for t, s in zip(terms, shapes):
        head, dots, tail = t.partition("...")
        n_ell = len(s) - len(head) - len(tail) if dots else 0
        sizes.update(zip(head, s))
        sizes.update(zip(tail, s[len(s) - len(tail):] if tail else ()))
        ell = max(ell, _prod(s[len(head):len(head) + n_ell]))
    return 2 * max(len(shapes) - 1, 1) * ell * _prod(sizes.values())


def _static_copy(graph: Graph) -> Graph:
    """A copy with concrete input shapes (``concrete_input_shapes``: the converter's verified
    shapes, else symbolic dims as 1), shapes inferred and shape arithmetic folded."""
    from ..backends.cpu import fold_node
    g = graph.copy()
    concrete = concrete_input_shapes(graph)
    for name in g.inputs:
        t = g.tensors[name]
        if t.shape is not None:
            t.shape = concrete[name]
    try:
        infer_shapes(g, fold=fold_node)
    except EdgeInferError:
        # best effort: whatever can be inferred node by node
        for node in g.nodes:
            try:
                infer_node(node, g)
            except EdgeInferError:
                pass
    return g


def graph_cost(graph: Graph) -> Dict[str, int]:
    """{"ops", "parameters", "flops", "bytes_moved"} of ``graph`` (see the module doc)."""
    g = _static_copy(graph)
    original_consts = {k for k, t in graph.tensors.items() if t.is_const}
    flops = moved = 0
    read_consts = set()
    for node in g.nodes:
        for i in node.inputs:
            if i in original_consts:
                read_consts.add(i)
        outs = [o for o in node.outputs if o]
        if outs and all(o not in original_consts and g.tensors[o].is_const for o in outs):
            continue                       # folded at plan time: does not run
        flops += node_flops(node, g)
        moved += sum(_nbytes(g, i) for i in node.inputs if i) + sum(_nbytes(g, o) for o in outs)
    params = sum(int(graph.tensors[c].data.size) for c in read_consts)
    return {"ops": len(graph.nodes), "parameters": int(params), "flops": int(flops),
            "bytes_moved": int(moved)}
