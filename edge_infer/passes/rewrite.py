"""Helpers shared by the graph passes (not a pass itself).

* ``ensure_shapes``: best-effort shape inference, so pattern checks can compare shapes;
* ``Rewriter``: producer/consumer maps of one sweep, node removal/replacement that keeps
  the execution order (a replacement takes the place of an anchor node), then commit;
* constant helpers: scalar and per-channel views of constants, new constants;
* ``fold_affine_into``: fold ``y * scale + shift`` (per output channel) into the
  weights and bias of a Conv / ConvTranspose / Gemm / MatMul (or their fused forms
  without epilogue), in float64, cast back once; new arrays, never in place;
* ``record_decision``: per-node fusion decisions in ``graph.metadata["fusion_decisions"]``.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from ..errors import EdgeInferError
from ..ir import Graph, Node
from ..ir.shape_inference import infer_node

FLOAT_DTYPES = ("float32", "float64")

#: attributes of the fused ops that are not the base op's
EPILOGUE_ATTRS = ("activation", "activation_params")


def ensure_shapes(graph: Graph) -> None:
    """Infer dtypes and shapes of every node output, in order; a node whose rule fails
    leaves its outputs as they were (unknown shapes just disable shape-checked rewrites)."""
    graph.toposort()
    for node in graph.nodes:
        try:
            infer_node(node, graph)
        except (EdgeInferError, ValueError, TypeError, KeyError, IndexError):
            pass


def is_float(graph: Graph, name: str) -> bool:
    t = graph.tensors.get(name)
    return t is not None and t.dtype in FLOAT_DTYPES


def const(graph: Graph, name: str) -> Optional[np.ndarray]:
    """The value of constant ``name`` (None if not a plain, unquantized constant)."""
    if not name:
        return None
    t = graph.tensors.get(name)
    if t is None or not t.is_const or t.quant is not None:
        return None
    return t.data


def scalar(graph: Graph, name: str) -> Optional[float]:
    """The value of a numeric constant holding exactly one element, else None."""
    v = const(graph, name)
    if v is None or v.size != 1 or v.dtype.kind not in "iuf":
        return None
    return float(v.reshape(-1)[0])


def close(a: Optional[float], b: float, rtol: float = 1e-6) -> bool:
    return a is not None and abs(a - b) <= rtol * max(abs(b), 1e-30)


def static_shape(graph: Graph, name: str):
    """A tensor's shape tuple (ints and symbols) or None if unknown."""
    t = graph.tensors.get(name)
    return None if t is None or t.shape is None else tuple(t.shape)


def per_channel(c: np.ndarray, rank: int, axis: int, m: int) -> Optional[np.ndarray]:
    """A constant that broadcasts against a rank-``rank`` output only along ``axis``
    (of size ``m``) as a float64 vector of length ``m``; None if it broadcasts any
    other way (or would grow the output's rank or shape)."""
    if c is None or c.dtype.kind != "f" or c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + tuple(c.shape)
    for k, d in enumerate(shape):
        if d != 1 and not (k == axis and d == m):
            return None
    flat = c.astype(np.float64).reshape(-1)
    vec = np.full(m, flat[0]) if flat.size == 1 else flat.copy()
    return vec if vec.size == m else None


def new_const(graph: Graph, prefix: str, value: np.ndarray) -> str:
    name = graph.unique_name(prefix)
    graph.add_const(name, value)
    return name


def strip_epilogue(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if k not in EPILOGUE_ATTRS}


class Rewriter:
    """One sweep of pattern rewrites over a graph.

    Matches read ``prod``/``cons`` (built once); every node a rewrite removes is
    marked dead so later matches in the same sweep skip it. ``commit`` rebuilds the
    node list: replacements take the position of their anchor (the last node of
    the matched pattern, whose inputs are all computed by then).
    """

    def __init__(self, graph: Graph, shapes: bool = True):
        if shapes:
            ensure_shapes(graph)
        self.g = graph
        self.prod: Dict[str, Node] = graph.producers()
        self.cons: Dict[str, List[Node]] = graph.consumers()
        self.outputs = set(graph.outputs)
        self.dead = set()
        self.insert: Dict[int, List[Node]] = {}
        self.rename: Dict[str, str] = {}
        self.changes = 0

    def alive(self, node: Optional[Node]) -> bool:
        return node is not None and id(node) not in self.dead

    def producer(self, name: str, *ops: str) -> Optional[Node]:
        """The live node producing ``name`` (of one of ``ops`` if given), else None."""
        n = self.prod.get(name) if name else None
        if not self.alive(n) or (ops and n.op not in ops):
            return None
        return n

    def sole_consumer(self, name: str) -> Optional[Node]:
        """The one node that reads ``name`` (once), when ``name`` is not a graph output."""
        if not name or name in self.outputs:
            return None
        users = self.cons.get(name, [])
        if len(users) != 1 or not self.alive(users[0]) or users[0].inputs.count(name) != 1:
            return None
        return users[0]

    def private(self, name: str, reader: Node) -> bool:
        """True when ``reader`` is the only node reading ``name`` (once) and it is no graph output."""
        return self.sole_consumer(name) is reader

    def reconnect(self, node: Node, k: int, name: str) -> None:
        """Make input ``k`` of a live ``node`` read ``name``, keeping the consumer map right."""
        old = node.inputs[k]
        if old and node in self.cons.get(old, []):
            self.cons[old].remove(node)
        node.inputs[k] = name
        if name:
            self.cons.setdefault(name, []).append(node)

    def replace(self, old: Sequence[Node], new: Sequence[Node], anchor: Optional[Node] = None) -> None:
        """Remove ``old`` nodes; insert ``new`` where ``anchor`` (default: old[-1]) was."""
        anchor = anchor if anchor is not None else old[-1]
        for n in old:
            self.dead.add(id(n))
        self.insert.setdefault(id(anchor), []).extend(new)
        self.changes += 1

    def track(self, old: Sequence[Node], new: Sequence[Node]) -> None:
        """Bring the producer/consumer maps up to date with a ``replace(old, new)``, so
        later matches of this sweep see the new nodes (and may replace them in turn)."""
        for n in old:
            for i in n.inputs:
                if i and i in self.cons:
                    self.cons[i] = [c for c in self.cons[i] if c is not n]
        for n in new:
            for o in n.outputs:
                self.prod[o] = n
            for i in n.inputs:
                if i:
                    self.cons.setdefault(i, []).append(n)

    def remove_as_alias(self, node: Node, out: str, src: str) -> None:
        """Drop ``node``; readers of its output ``out`` read ``src`` instead."""
        self.dead.add(id(node))
        self.rename[out] = src
        self.changes += 1

    def commit(self) -> int:
        if not self.changes:
            return 0
        g = self.g
        nodes = []
        for n in g.nodes:
            # a node inserted by this sweep may have been replaced again later in it
            nodes.extend(m for m in self.insert.get(id(n), ()) if id(m) not in self.dead)
            if id(n) not in self.dead:
                nodes.append(n)
        if self.rename:
            def root(x):
                seen = 0
                while x in self.rename and seen < 10000:
                    x, seen = self.rename[x], seen + 1
                return x
            for n in nodes:
                n.inputs = [root(i) if i else i for i in n.inputs]
        g.nodes = nodes
        # tensors no node writes any more stay until dead-code elimination prunes them;
        # give freshly introduced outputs their shapes now
        ensure_shapes(g)
        return self.changes


# -- folding an affine map into a producer's weights -----------------------------------

def _opt(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def channels_last(node: Node) -> bool:
    """True for a node computing in NHWC (``data_layout="NHWC"``, set by the layout pass);
    its tensors then hold channels on the last axis (weights keep the ONNX layout)."""
    return str(node.attrs.get("data_layout") or "NCHW") == "NHWC"


def channel_axis(graph: Graph, node: Node):
    """(rank, axis, channels) of ``node``'s output along its output-channel axis, or None.

    Conv-like ops: axis 1, or the last axis in NHWC (channels = W.shape[0], or
    W.shape[1]*group transposed); Gemm: axis 1 of the 2-D output; MatMul with a
    constant 2-D B: the last axis."""
    op = node.op
    w = const(graph, _opt(node, 1))
    if op in ("Conv", "FusedConv"):
        if w is None or w.ndim < 3:
            return None
        return w.ndim, (w.ndim - 1 if channels_last(node) else 1), int(w.shape[0])
    if op == "ConvTranspose":
        if w is None or w.ndim < 3:
            return None
        return (w.ndim, (w.ndim - 1 if channels_last(node) else 1),
                int(w.shape[1]) * int(node.attrs.get("group", 1)))
    if op in ("Gemm", "FusedGemm"):
        if w is None or w.ndim != 2:
            return None
        return 2, 1, int(w.shape[0] if node.attrs.get("transB", 0) else w.shape[1])
    if op in ("MatMul", "FusedMatMul"):
        a = static_shape(graph, node.inputs[0])
        if w is None or w.ndim != 2 or a is None or len(a) < 2:
            return None
        return len(a), len(a) - 1, int(w.shape[1])
    return None


def _finite(*arrs) -> bool:
    return all(a is None or bool(np.all(np.isfinite(a))) for a in arrs)


def fold_affine_into(graph: Graph, node: Node, scale: Optional[np.ndarray],
                     shift: Optional[np.ndarray]) -> bool:
    """Rewrite ``node`` (in place, new constants) so that its output becomes
    ``y * scale + shift`` with float64 per-output-channel vectors (None: 1 / 0).
    Returns False (graph untouched) when ``node`` cannot absorb it."""
    info = channel_axis(graph, node)
    if info is None:
        return False
    if node.op.startswith("Fused") and (node.attrs.get("activation") or _opt(node, 3)):
        return False                      # an epilogue (activation, residual) is in the way
    _, _, m = info
    wname = node.inputs[1]
    w = const(graph, wname)
    if w is None or w.dtype.name not in FLOAT_DTYPES:
        return False
    dt = w.dtype
    out = node.outputs[0]
    if graph.tensors.get(out) is not None and graph.tensors[out].dtype != dt.name:
        return False
    s = np.ones(m) if scale is None else np.asarray(scale, np.float64).reshape(-1)
    t = None if shift is None else np.asarray(shift, np.float64).reshape(-1)
    if s.size != m or (t is not None and t.size != m) or not _finite(s, t):
        return False
    w64 = w.astype(np.float64)
    op = node.op
    bias_idx = 2
    if op in ("Conv", "FusedConv"):
        new_w = w64 * s.reshape((m,) + (1,) * (w.ndim - 1))
    elif op == "ConvTranspose":
        group = int(node.attrs.get("group", 1))
        c, mg = w.shape[0], w.shape[1]
        if c % group:
            return False
        new_w = (w64.reshape((group, c // group, mg) + w.shape[2:])
                 * s.reshape((group, 1, mg) + (1,) * (w.ndim - 2))).reshape(w.shape)
    elif op in ("Gemm", "FusedGemm"):
        new_w = w64 * (s[:, None] if node.attrs.get("transB", 0) else s[None, :])
    else:  # MatMul / FusedMatMul
        new_w = w64 * s[None, :]

    # bias: b * s + t (Gemm: beta * C * s + t, beta becomes 1)
    bname = _opt(node, bias_idx)
    b = const(graph, bname) if bname else None
    if bname and b is None:
        return False                      # a computed bias cannot be rescaled here
    new_b = None
    if b is not None:
        b64 = b.astype(np.float64)
        if op in ("Gemm", "FusedGemm"):
            if b.ndim > 2:
                return False
            b64 = b64 * float(node.attrs.get("beta", 1.0))
            new_b = b64 * s if b.ndim == 0 or b.shape[-1] in (1, m) else None
            if new_b is None:
                return False
            if new_b.ndim == 2 and new_b.shape[-1] != m:
                return False
        elif op in ("MatMul", "FusedMatMul"):
            try:
                new_b = b64 * s
            except ValueError:
                return False
        else:
            if b.size != m:
                return False
            new_b = b64.reshape(-1) * s
        if t is not None:
            new_b = new_b + t
    elif t is not None and np.any(t != 0):
        new_b = t
    new_w = new_w.astype(dt)
    if new_b is not None:
        new_b = np.asarray(new_b).astype(dt)
    if not _finite(new_w, new_b):
        return False

    base = node.name or node.op
    inputs = list(node.inputs)
    inputs[1] = new_const(graph, f"{wname}_folded", new_w)
    if new_b is not None:
        while len(inputs) <= bias_idx:
            inputs.append("")
        inputs[bias_idx] = new_const(graph, f"{bname or base + '.bias'}_folded", new_b)
    if op == "MatMul" and new_b is not None:
        # plain MatMul has no bias slot: it becomes a FusedMatMul without activation
        node.op = "FusedMatMul"
        node.attrs = dict(node.attrs, activation="", activation_params=[])
    if op in ("Gemm", "FusedGemm") and new_b is not None:
        node.attrs = dict(node.attrs, beta=1.0)       # beta is folded into the new C
    node.inputs = inputs
    return True


# -- fusion decisions ---------------------------------------------------------------------

def record_decision(graph: Graph, entry: dict) -> None:
    """Add or update the decision for (node, pattern) in graph.metadata["fusion_decisions"].

    A fresh list every time: Graph.copy shares metadata values between copies."""
    old = list(graph.metadata.get("fusion_decisions") or [])
    key = (entry.get("node"), entry.get("pattern"))
    out, found = [], False
    for e in old:
        if (e.get("node"), e.get("pattern")) == key:
            out.append(dict(entry))
            found = True
        else:
            out.append(e)
    if not found:
        out.append(dict(entry))
    graph.metadata["fusion_decisions"] = out


def activation_of(graph: Graph, node: Node):
    """(activation name, params) when ``node`` is an activation the fused kernels
    can apply in place as an epilogue, else None."""
    op = node.op
    a = node.attrs
    if op in ("Relu", "Sigmoid", "Tanh", "HardSwish", "SiLU"):
        return op, []
    if op == "LeakyRelu":
        return op, [float(a.get("alpha", 0.01))]
    if op == "HardSigmoid":
        return op, [float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))]
    if op == "Gelu":
        approx = a.get("approximate", "none") or "none"
        if approx == "tanh":
            return "GeluTanh", []
        return ("Gelu", []) if approx == "none" else None
    if op == "Clip":
        lo, hi = _opt(node, 1), _opt(node, 2)
        vlo, vhi = scalar(graph, lo), scalar(graph, hi)
        if vlo is None or vhi is None:
            return None
        return "Clip", [vlo, vhi]
    return None


def node_index(graph: Graph) -> Dict[int, int]:
    return {id(n): k for k, n in enumerate(graph.nodes)}


def names(nodes: Iterable[Node]) -> List[str]:
    return [n.name for n in nodes]
