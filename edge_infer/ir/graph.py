"""The framework-neutral graph IR: tensors, nodes and the graph that holds them.

Op names and attribute conventions follow ONNX (that is what most models arrive
as), but nothing here imports onnx: frontends normalise their input into this
form, with every attribute present (defaults filled in) and every attribute a
JSON value (int, float, str, or a list of them), so a graph serialises as-is
into an .eim artifact.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import GraphError

Dim = Union[int, str]
Shape = Optional[Tuple[Dim, ...]]

DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "uint16",
          "int32", "uint32", "int64", "uint64", "bool")


def claim_name(base: str, taken: set) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first not in ``taken``, which it is added to."""
    name, k = base, 1
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


@dataclass
class Tensor:
    """A named value: graph input, intermediate, output or constant.

    ``shape`` is a tuple of ints and symbolic dims (strings), or None when even
    the rank is unknown. ``data`` holds a constant's value. ``quant`` holds
    quantization parameters: ``{"scale": [...], "zero_point": [...], "axis": int|None}``.
    """
    name: str
    dtype: str = "float32"
    shape: Shape = None
    data: Optional[np.ndarray] = None
    quant: Optional[dict] = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def is_static(self) -> bool:
        """True when the shape is fully known (no symbolic dims)."""
        return self.shape is not None and all(isinstance(d, (int, np.integer)) for d in self.shape)

    @property
    def size(self) -> int:
        if not self.is_static:
            raise GraphError(f"tensor {self.name!r} has no static shape: {self.shape}")
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass
class Node:
    """One op application. Missing optional inputs are the empty string."""
    op: str
    inputs: List[str]
    outputs: List[str]
    attrs: Dict[str, object] = field(default_factory=dict)
    name: str = ""

    def __repr__(self) -> str:
        return f"Node({self.op} {self.name!r}: {self.inputs} -> {self.outputs})"


class Graph:
    """A dataflow graph. ``nodes`` is kept in a topological order by ``toposort``."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.tensors: Dict[str, Tensor] = {}
        self.nodes: List[Node] = []
        self.inputs: List[str] = []
        self.outputs: List[str] = []
        self.metadata: Dict[str, object] = {}

    # construction -------------------------------------------------------
    def add_tensor(self, name: str, dtype: str = "float32", shape: Shape = None,
                   data: Optional[np.ndarray] = None, quant: Optional[dict] = None) -> Tensor:
        if dtype not in DTYPES:
            raise GraphError(f"tensor {name!r}: unsupported dtype {dtype!r}")
        t = Tensor(name, dtype, None if shape is None else tuple(shape), data, quant)
        self.tensors[name] = t
        return t

    def add_const(self, name: str, value) -> Tensor:
        arr = np.asarray(value)
        if arr.dtype.name not in DTYPES:
            raise GraphError(f"constant {name!r}: unsupported dtype {arr.dtype}")
        return self.add_tensor(name, arr.dtype.name, arr.shape, arr)

    def add_input(self, name: str, dtype: str, shape: Shape) -> Tensor:
        t = self.add_tensor(name, dtype, shape)
        self.inputs.append(name)
        return t

    def add_node(self, op: str, inputs: List[str], outputs: List[str], name: str = "",
                 **attrs) -> Node:
        node = Node(op, list(inputs), list(outputs), dict(attrs), name or self.unique_node_name(op))
        for o in node.outputs:
            if o and o not in self.tensors:
                self.tensors[o] = Tensor(o)
        self.nodes.append(node)
        return node

    def unique_name(self, prefix: str) -> str:
        if prefix not in self.tensors:
            return prefix
        i = 1
        while f"{prefix}_{i}" in self.tensors:
            i += 1
        return f"{prefix}_{i}"

    def unique_node_name(self, prefix: str) -> str:
        names = {n.name for n in self.nodes}
        i = len(self.nodes)
        while f"{prefix}_{i}" in names:
            i += 1
        return f"{prefix}_{i}"

    # queries -------------------------------------------------------------
    def producers(self) -> Dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> Dict[str, List[Node]]:
        out: Dict[str, List[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def constants(self) -> Dict[str, Tensor]:
        return {k: t for k, t in self.tensors.items() if t.is_const}

    # order and validity ---------------------------------------------------
    def toposort(self) -> None:
        """Reorder ``nodes`` topologically (stable); raise GraphError on a cycle."""
        prod = {}
        for n in self.nodes:
            for o in n.outputs:
                if o:
                    prod[o] = n
        indeg = {id(n): 0 for n in self.nodes}
        users: Dict[int, List[Node]] = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            for i in set(x for x in n.inputs if x):
                p = prod.get(i)
                if p is not None and p is not n:
                    indeg[id(n)] += 1
                    users[id(p)].append(n)
                elif p is n:
                    raise GraphError(f"cycle: node {n.name!r} ({n.op}) consumes its own output {i!r}")
        order: List[Node] = []
        ready = [n for n in self.nodes if indeg[id(n)] == 0]
        pos = {id(n): k for k, n in enumerate(self.nodes)}
        import heapq
        heap = [(pos[id(n)], id(n), n) for n in ready]
        heapq.heapify(heap)
        while heap:
            _, _, n = heapq.heappop(heap)
            order.append(n)
            for u in users[id(n)]:
                indeg[id(u)] -= 1
                if indeg[id(u)] == 0:
                    heapq.heappush(heap, (pos[id(u)], id(u), u))
        if len(order) != len(self.nodes):
            stuck = [n.name or n.op for n in self.nodes if indeg[id(n)] > 0]
            raise GraphError(f"cycle in graph through nodes: {', '.join(stuck[:8])}")
        self.nodes = order

    def validate(self) -> None:
        """Check structure: unique producers, no dangling inputs, known dtypes, no cycles."""
        seen_out = {}
        for n in self.nodes:
            if not n.op:
                raise GraphError(f"node {n.name!r} has no op")
            for o in n.outputs:
                if not o:
                    continue
                if o in seen_out:
                    raise GraphError(f"tensor {o!r} produced by both {seen_out[o]!r} and {n.name!r}")
                if o in self.inputs or (o in self.tensors and self.tensors[o].is_const):
                    raise GraphError(f"node {n.name!r} overwrites input or constant {o!r}")
                seen_out[o] = n.name
        for name in self.inputs:
            if name not in self.tensors:
                raise GraphError(f"graph input {name!r} has no tensor")
        for n in self.nodes:
            for i in n.inputs:
                if not i:
                    continue
                if i not in self.tensors:
                    raise GraphError(f"node {n.name!r} ({n.op}) reads undefined tensor {i!r}")
                t = self.tensors[i]
                if not (t.is_const or i in self.inputs or i in seen_out):
                    raise GraphError(f"node {n.name!r} ({n.op}) reads dangling tensor {i!r}: "
                                     "no node produces it and it is neither an input nor a constant")
        for o in self.outputs:
            if o not in self.tensors or not (o in seen_out or o in self.inputs or self.tensors[o].is_const):
                raise GraphError(f"graph output {o!r} is never produced")
        for t in self.tensors.values():
            if t.dtype not in DTYPES:
                raise GraphError(f"tensor {t.name!r}: unsupported dtype {t.dtype!r}")
            if t.is_const and t.shape is not None and tuple(t.data.shape) != tuple(t.shape):
                raise GraphError(f"constant {t.name!r}: data shape {t.data.shape} != declared {t.shape}")
        self.toposort()

    def prune(self) -> None:
        """Drop nodes and tensors that no graph output depends on."""
        prod = self.producers()
        live, stack = set(), list(self.outputs)
        while stack:
            t = stack.pop()
            if t in live:
                continue
            live.add(t)
            n = prod.get(t)
            if n is not None:
                stack.extend(i for i in n.inputs if i)
                stack.extend(o for o in n.outputs if o)
        self.nodes = [n for n in self.nodes if any(o in live for o in n.outputs)]
        keep = live | set(self.inputs)
        self.tensors = {k: t for k, t in self.tensors.items() if k in keep}

    def copy(self) -> "Graph":
        """A structural copy: new Tensor and Node objects, constant arrays shared."""
        g = Graph(self.name)
        g.tensors = {k: Tensor(t.name, t.dtype, t.shape, t.data, None if t.quant is None else dict(t.quant))
                     for k, t in self.tensors.items()}
        g.nodes = [Node(n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.name) for n in self.nodes]
        g.inputs = list(self.inputs)
        g.outputs = list(self.outputs)
        g.metadata = dict(self.metadata)
        return g

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {len(self.nodes)} nodes, inputs={self.inputs}, "
                f"outputs={self.outputs})")


#: graph.metadata key: {input name: shape} the converter verified the graph at (verify_shapes.py);
#: seeded inputs, cost reports and calibration on random data use it for symbolic dims
VERIFY_SHAPES_KEY = "verify_shapes"
#: graph.metadata["verify_shapes_source"] when verify_shapes.py searched the size itself (no size
#: the model or the user gave): calibration then does not take it for the input's real size
VERIFY_SHAPES_SEARCHED = "smallest size shape inference accepts"


def concrete_input_shapes(graph: Graph, shapes: Optional[Dict[str, Sequence[int]]] = None
                          ) -> Dict[str, Tuple[int, ...]]:
    """A concrete shape per graph input: ``shapes`` where given, else the shape the converter
    verified the graph at (``graph.metadata["verify_shapes"]``), else the declared shape with
    symbolic dims as 1 (an input of unknown shape: ``()``)."""
    recorded = graph.metadata.get(VERIFY_SHAPES_KEY) or {}
    out = {}
    for name in graph.inputs:
        if shapes and name in shapes:
            out[name] = tuple(int(d) for d in shapes[name])
        elif name in recorded:
            out[name] = tuple(int(d) for d in recorded[name])
        else:
            out[name] = tuple(d if isinstance(d, (int, np.integer)) else 1
                              for d in (graph.tensors[name].shape or ()))
    return out
