"""Put the graph into the backend's preferred data layout (NHWC), once, at convert time.

Every 4-D spatial op (Conv, FusedConv, ConvTranspose, MaxPool without Indices, AveragePool, the
global pools, BatchNormalization in inference form, LRN, InstanceNormalization,
GroupNormalization)
gets ``data_layout="NHWC"``: it reads and writes channels-last tensors; weights
stay OIHW (the kernels pack them at prepare). Graph inputs and outputs keep the
user's layout, so the API does not change: Transposes are inserted where a
tensor must cross between layouts, and only there.

How. Each tensor of the source graph is a *logical* value (NCHW, as the model
says); the pass tracks which *stored versions* of it exist: the plain one (the
tensor itself) and permuted ones, ``stored = logical.transpose(perm)`` (NHWC is
perm (0, 2, 3, 1)). It walks the nodes in order and:

* spatial ops take the NHWC version of their input (made by a Transpose if it
  does not exist yet) and produce NHWC versions;
* layout-agnostic ops run on whichever permuted version their inputs have,
  with their axes remapped: element-wise unary ops; broadcasting binary and
  variadic ops (constant operands are permuted once, here); Concat, Split,
  Softmax/LogSoftmax/Hardmax, Reduce*, ArgMax/ArgMin (``axis``/``axes``, also
  with keepdims=0), Slice (``axes``), Pad (``pads``/``axes``), Gather, Resize
  (scales/sizes/roi, or ``axes``);
* a Transpose reading a permuted version is absorbed: its output is the same
  stored data with a composed perm (no node at all); so is an NHWC -> NCHW Transpose of
  plain data (a TensorFlow export's, before each conv): its input is the output's NHWC
  version, and the NCHW form is made only where something reads it;
* Reshape / Flatten / Squeeze / Unsqueeze become a Reshape of the stored data
  when the reshape only merges or splits dims that are laid out contiguously
  and in order in storage (e.g. Flatten after a global pool, a channel split),
  writing a version whose layout follows from it; when the dims to merge are
  out of order (a channel shuffle's merge, a flatten of a spatial map) one
  Transpose puts them in order first, and when that order is the plain layout
  the plain version is used;
* ``Shape`` of a permuted version reads the stored shape and gathers it back;
* every other op reads plain versions.

A plain version that some reader needs (or a graph output) is made by one
Transpose writing the original tensor name, shared by all its readers. So the
only transposes left are at real layout boundaries: for a conv stack ending in
GlobalAveragePool + Flatten + Gemm, exactly one, after the input.

The pass is a no-op unless the graph's preferred layout is NHWC:
``graph.metadata["preferred_layout"]`` (set by ``convert(layout=...)``), else
``DEFAULT_LAYOUT`` for the numpy CPU backend (docs/layout.md has the
measurements behind it). A second run finds no NCHW spatial op and changes
nothing. The graph is left topologically ordered and shape-inferred.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..ir import Graph, Node
from ..ops.elementwise import LAYOUT_FREE_UNARY
from ..ops.reduce import REDUCE_OPS
from ..ops.shapes import is_int
from ..ops.tensor import shape_range
from .layout_perms import NHWC, Perm, between, drop_axes, identity, inverse, is_identity, permute_shape, reshape_layout
from .rewrite import ensure_shapes

#: layout the numpy CPU backend prefers when nothing else says (see docs/layout.md)
DEFAULT_LAYOUT = "NHWC"
#: per backend, for ``convert(layout="auto")``; the native backend will be NHWC-only
BACKEND_LAYOUTS = {"cpu": DEFAULT_LAYOUT, "native": "NHWC"}
LAYOUT_CHOICES = ("auto", "nchw", "nhwc")

SPATIAL = frozenset({"Conv", "FusedConv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
                     "GlobalMaxPool", "BatchNormalization", "LRN", "InstanceNormalization",
                     "GroupNormalization"})

UNARY = LAYOUT_FREE_UNARY | {"Identity", "Dropout",
                             "QuantizeLinear", "DequantizeLinear"}  # per tensor (scalar scale / zero point) only
BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Sum", "Mean",
                       "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
                       "Xor", "PRelu", "Where", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
AXIS_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def resolve_layout(layout: Optional[str] = "auto", target: Optional[dict] = None,
                   backend: str = "cpu") -> str:
    """"NCHW" or "NHWC" for ``convert(layout=...)``: an explicit choice wins; "auto"
    takes the target profile's ``preferred_layout`` if it has one, else the backend's."""
    choice = (layout or "auto").lower()
    if choice not in LAYOUT_CHOICES:
        from ..errors import ConversionError
        raise ConversionError(f"layout must be one of {', '.join(LAYOUT_CHOICES)}, got {layout!r}")
    if choice != "auto":
        return choice.upper()
    pref = (target or {}).get("preferred_layout")
    if isinstance(pref, str) and pref.upper() in ("NCHW", "NHWC"):
        return pref.upper()
    return BACKEND_LAYOUTS.get(backend, DEFAULT_LAYOUT)


def preferred_layout(graph: Graph) -> str:
    """The layout this graph should be put in: metadata["preferred_layout"], else the default."""
    pref = graph.metadata.get("preferred_layout")
    if isinstance(pref, str) and pref.upper() in ("NCHW", "NHWC"):
        return pref.upper()
    return DEFAULT_LAYOUT


class _Abort(Exception):
    """This node cannot run on the permuted version: read the plain one instead."""


class LayoutRewriter:
    def __init__(self, graph: Graph):
        self.g = graph
        self.consts = {k for k, t in graph.tensors.items() if t.is_const}
        #: tensor -> {perm: stored tensor name}; absent = only the plain version (itself)
        self.versions: Dict[str, Dict[Perm, str]] = {}
        self.const_cache: Dict[Tuple[str, Perm], str] = {}
        self.out: List[Node] = []
        self.names = {n.name for n in graph.nodes}
        self.changes = 0
        self.journal: List[Tuple[str, Optional[Dict[Perm, str]]]] = []

    # -- undo (a node that turns out not to fit leaves no trace) ---------------------------
    def _put(self, name: str, value: Optional[Dict[Perm, str]]) -> None:
        old = self.versions.get(name)
        self.journal.append((name, None if old is None else dict(old)))
        if value is None:
            self.versions.pop(name, None)
        else:
            self.versions[name] = value

    def mark(self):
        return len(self.out), self.changes, len(self.journal)

    def rollback(self, mark) -> None:
        n_out, changes, n_journal = mark
        del self.out[n_out:]
        self.changes = changes
        while len(self.journal) > n_journal:
            name, old = self.journal.pop()
            if old is None:
                self.versions.pop(name, None)
            else:
                self.versions[name] = old

    # -- naming and emission ------------------------------------------------------------
    def node_name(self, prefix: str) -> str:
        name, i = prefix, 1
        while name in self.names:
            name, i = f"{prefix}_{i}", i + 1
        self.names.add(name)
        return name

    def new_tensor(self, prefix: str, like: str, shape) -> str:
        name = self.g.unique_name(prefix)
        t = self.g.tensors.get(like)
        self.g.add_tensor(name, t.dtype if t is not None else "float32", shape)
        return name

    def shape(self, name: str):
        t = self.g.tensors.get(name)
        return None if t is None or t.shape is None else tuple(t.shape)

    def rank(self, name: str) -> Optional[int]:
        s = self.shape(name)
        return None if s is None else len(s)

    def const_value(self, name: str) -> Optional[np.ndarray]:
        if not name or name not in self.consts:
            return None
        t = self.g.tensors[name]
        return None if t.quant is not None else t.data

    def add_const(self, prefix: str, value) -> str:
        name = self.g.unique_name(prefix)
        self.g.add_const(name, np.asarray(value))
        self.consts.add(name)
        return name

    def emit(self, op: str, inputs: List[str], outputs: List[str], attrs: dict, prefix: str,
             exact: bool = False) -> Node:
        """Append a new node (named ``prefix`` itself when ``exact``: it replaces a node of that name)."""
        node = Node(op, list(inputs), list(outputs), dict(attrs), prefix if exact else self.node_name(prefix))
        self.out.append(node)
        self.changes += 1
        return node

    # -- versions ------------------------------------------------------------------------
    def vers(self, name: str) -> Dict[Perm, str]:
        if name in self.versions:
            return self.versions[name]
        r = self.rank(name)
        return {identity(r): name} if r is not None else {}

    def has_plain(self, name: str) -> bool:
        return name not in self.versions or any(is_identity(p) for p in self.versions[name])

    def alt_perms(self, name: str) -> List[Perm]:
        return [p for p in self.versions.get(name, {}) if not is_identity(p)]

    def get(self, name: str, perm: Perm) -> str:
        """The name of ``name``'s version stored as ``perm`` (made if needed)."""
        if not name:
            return name
        if name not in self.versions and is_identity(perm):
            return name
        have = self.vers(name)
        if perm in have:
            return have[perm]
        c = self.const_value(name)
        if c is not None and c.ndim == len(perm):
            key = (name, perm)
            if key not in self.const_cache:
                self.const_cache[key] = self.add_const(f"{name}_{_tag(perm)}",
                                                       np.ascontiguousarray(c.transpose(perm)))
            return self.const_cache[key]
        # from the plain version when there is one, else from any stored version
        src_perm = next((p for p in have if is_identity(p)), None)
        if src_perm is None:
            src_perm = next(iter(have))
        src = have[src_perm]
        if is_identity(perm):
            out = name                       # the plain version keeps the tensor's name
        else:
            out = self.new_tensor(f"{name}_{_tag(perm)}", name, permute_shape(self.shape(name), perm))
        self.emit("Transpose", [src], [out], {"perm": between(src_perm, perm)}, f"{name}_to_{_tag(perm)}")
        self._put(name, {**have, perm: out})
        return out

    def plain(self, name: str) -> str:
        r = self.rank(name)
        if name not in self.versions or r is None:
            return name
        return self.get(name, identity(r))

    def set_output(self, name: str, perm: Perm, stored: str) -> None:
        """``stored`` holds output ``name`` laid out as ``perm``."""
        if is_identity(perm) and stored == name:
            self._put(name, None)
        else:
            self._put(name, {perm: stored})

    def out_name(self, name: str, perm: Perm, shape=None) -> str:
        """A fresh tensor for output ``name`` stored as ``perm`` (``name`` itself when plain)."""
        if is_identity(perm):
            return name
        if shape is None:
            shape = permute_shape(self.shape(name), perm)
        return self.new_tensor(f"{name}_{_tag(perm)}", name, shape)

    # -- the walk ------------------------------------------------------------------------
    def run(self) -> int:
        for node in self.g.nodes:
            mark = self.mark()
            saved = (list(node.inputs), list(node.outputs), dict(node.attrs))
            try:
                handled = self.visit(node)
            except _Abort:
                handled = False
            if not handled:
                self.rollback(mark)
                node.inputs, node.outputs, node.attrs = saved
                node.inputs = [self.plain(i) if i else i for i in node.inputs]
                self.out.append(node)
        # graph outputs keep the user's layout and name
        for o in self.g.outputs:
            if o in self.versions:
                src = self.plain(o)
                if src != o:
                    self.alias_output(o, src)
        self.g.nodes = self.out
        return self.changes

    def alias_output(self, o: str, src: str) -> None:
        """Graph output ``o`` is the data of tensor ``src`` (an absorbed Transpose whose
        perms cancelled): the node writing ``src`` writes ``o`` instead, when nothing
        else needs the name ``src``; else an Identity copies it."""
        writer = next((n for n in self.out if src in n.outputs), None)
        if writer is None or src in self.g.outputs or src in self.g.inputs:
            self.emit("Identity", [src], [o], {}, f"{o}_out")
            return
        for n in self.out:
            n.inputs = [o if i == src else i for i in n.inputs]
            n.outputs = [o if x == src else x for x in n.outputs]
        for vs in self.versions.values():
            for p, name in list(vs.items()):
                if name == src:
                    vs[p] = o
        self.changes += 1

    def visit(self, node: Node) -> bool:
        op = node.op
        if op in SPATIAL and spatial_convertible(self.g, node):
            return self.spatial(node)
        if op == "Transpose":
            return self.transpose(node)
        if op in RESHAPES:
            return self.reshape(node)
        if op == "Shape":
            return self.shape_op(node)
        if op == "CastLike" and node.inputs and self.alt_perms(node.inputs[0]):
            return self.elementwise(node, [0])
        carriers = self.carriers(node)
        if not carriers:
            return False
        return self.elementwise(node, carriers)

    def carriers(self, node: Node) -> List[int]:
        """Inputs of ``node`` whose layout the op can follow (empty: not layout-agnostic)."""
        op = node.op
        if op in UNARY or op in AXIS_OPS or op in REDUCE_OPS or op in ("ArgMax", "ArgMin", "Split",
                                                                         "Slice", "Pad", "Gather",
                                                                         "Resize"):
            return [0]
        if op in BROADCAST or op == "Concat":
            return [k for k, i in enumerate(node.inputs) if i]
        return []

    # -- spatial ops ---------------------------------------------------------------------
    def spatial(self, node: Node) -> bool:
        x = self.get(node.inputs[0], NHWC)
        ins = [x] + [self.plain(i) if i else i for i in node.inputs[1:]]
        if node.op == "FusedConv" and len(node.inputs) > 3 and node.inputs[3]:
            z = node.inputs[3]
            zc = self.const_value(z)
            if zc is not None:
                ins[3] = self.permuted_const(z, zc, NHWC)
            else:
                ins[3] = self.get(z, NHWC)
        y = node.outputs[0]
        yn = self.out_name(y, NHWC)
        node.inputs = ins
        node.outputs = [yn] + list(node.outputs[1:])
        node.attrs = dict(node.attrs, data_layout="NHWC")
        self.set_output(y, NHWC, yn)
        self.out.append(node)
        self.changes += 1
        return True

    def broadcast_operand(self, name: str, shape, perm: Perm) -> str:
        """A computed lower-rank operand (a per-channel (C, 1, 1) scale the graph
        computes) as the rank-len(perm) tensor it broadcasts as, permuted: a Reshape,
        plus a Transpose when its non-unit dims change order."""
        key = "\0bcast:" + name              # journaled like versions: undone with the node
        if perm in self.versions.get(key, {}):
            return self.versions[key][perm]
        r = len(perm)
        full = (1,) * (r - len(shape)) + tuple(shape)
        target = [full[a] for a in perm]
        if sum(1 for d in target if not is_int(d)) > 1:
            raise _Abort()
        src = self.plain(name)
        order = [a for a in perm if full[a] != 1]
        steps = [(target, None)] if order == sorted(order) else [(list(full), None), (None, list(perm))]
        for k, (tshape, tperm) in enumerate(steps):
            last = k == len(steps) - 1
            out = self.new_tensor(f"{name}_{_tag(perm)}" if last else f"{name}_r{r}", name,
                                  tuple(target) if last else full)
            if tperm is None:
                dims = [-1 if not is_int(d) else int(d) for d in tshape]
                shape_c = self.add_const(f"{out}_shape", np.array(dims, np.int64))
                self.emit("Reshape", [src, shape_c], [out], {}, f"{name}_bcast")
            else:
                self.emit("Transpose", [src], [out], {"perm": tperm}, f"{name}_to_{_tag(perm)}")
            src = out
        self._put(key, {**self.versions.get(key, {}), perm: src})
        return src

    def permuted_const(self, name: str, c: np.ndarray, perm: Perm) -> str:
        """A constant broadcasting against a rank-len(perm) operand, permuted like it."""
        r = len(perm)
        if c.size == 1 and c.ndim <= r:
            return name
        key = (name, perm)
        if key not in self.const_cache:
            full = c.reshape((1,) * (r - c.ndim) + c.shape)
            self.const_cache[key] = self.add_const(f"{name}_{_tag(perm)}",
                                                   np.ascontiguousarray(full.transpose(perm)))
        return self.const_cache[key]

    # -- layout-agnostic ops -------------------------------------------------------------
    def elementwise(self, node: Node, carriers: List[int]) -> bool:
        # which permuted layout to run in: the one most carrier inputs already have
        cands: Dict[Perm, int] = {}
        for k in carriers:
            i = node.inputs[k]
            for p in self.alt_perms(i):
                cands[p] = cands.get(p, 0) + 1
        if not cands:
            return False
        plain_missing = sum(1 for k in carriers if not self.has_plain(node.inputs[k]))
        for perm, have in sorted(cands.items(), key=lambda kv: -kv[1]):
            missing = sum(1 for k in carriers if node.inputs[k] and perm not in self.vers(node.inputs[k])
                          and self.const_value(node.inputs[k]) is None)
            if missing > plain_missing:
                continue                        # reading the plain versions is cheaper
            mark = self.mark()
            plan = self.plan(node, perm)
            if plan is None:
                self.rollback(mark)
                continue
            ins, attrs, out_perms = plan
            outs = []
            for o, op_perm in zip(node.outputs, out_perms):
                if not o:
                    outs.append(o)
                    continue
                on = self.out_name(o, op_perm) if op_perm is not None else o
                outs.append(on)
            node.inputs, node.attrs = ins, attrs
            orig = list(node.outputs)
            node.outputs = outs
            for o, on, op_perm in zip(orig, outs, out_perms):
                if o and op_perm is not None:
                    self.set_output(o, op_perm, on)
            self.out.append(node)
            self.changes += 1
            return True
        return False

    def plan(self, node: Node, perm: Perm):
        """(inputs, attrs, output perms) of ``node`` run on data stored as ``perm``, or None."""
        g, op, r = self.g, node.op, len(perm)
        inv = inverse(perm)
        x0 = node.inputs[0]
        if any(t is not None and t.quant is not None
               for t in (g.tensors.get(n) for n in list(node.inputs) + list(node.outputs) if n)):
            return None
        attrs = dict(node.attrs)
        nout = len(node.outputs)

        def carrier(name):
            c = self.const_value(name)
            if c is not None:
                if c.ndim > r:
                    raise _Abort()
                return self.permuted_const(name, c, perm)
            if self.rank(name) != r:
                s = self.shape(name)
                if s is None or len(s) > r:
                    raise _Abort()
                if all(is_int(d) and d == 1 for d in s):
                    return self.plain(name)
                return self.broadcast_operand(name, s, perm)
            return self.get(name, perm)

        try:
            if op in UNARY:
                if self.rank(x0) != r:
                    return None
                extra = node.inputs[1:]
                for e in extra:
                    if e and not _single(self, e):
                        return None
                return [self.get(x0, perm)] + [self.plain(e) if e else e for e in extra], attrs, [perm] * nout
            if op == "CastLike":
                return [self.get(x0, perm), node.inputs[1]], attrs, [perm]
            if op in BROADCAST or op == "Concat":
                if self.rank(node.outputs[0]) != r:
                    return None
                if op == "Concat":
                    attrs["axis"] = inv[_norm(attrs.get("axis", 0), r)]
                    if any(self.rank(i) != r for i in node.inputs if i):
                        return None
                return [carrier(i) if i else i for i in node.inputs], attrs, [perm]
            if self.rank(x0) != r:
                return None
            if op in AXIS_OPS:
                attrs["axis"] = inv[_norm(attrs.get("axis", -1), r)]
                return [self.get(x0, perm)], attrs, [perm]
            if op == "Split":
                attrs["axis"] = inv[_norm(attrs.get("axis", 0), r)]
                return [self.get(x0, perm)] + [self.plain(i) if i else i for i in node.inputs[1:]], \
                    attrs, [perm] * nout
            if op in REDUCE_OPS or op in ("ArgMax", "ArgMin"):
                return self.plan_reduce(node, perm, attrs)
            if op == "Slice":
                return self.plan_slice(node, perm, attrs)
            if op == "Pad":
                return self.plan_pad(node, perm, attrs)
            if op == "Gather":
                return self.plan_gather(node, perm, attrs)
            if op == "Resize":
                return self.plan_resize(node, perm, attrs)
        except _Abort:
            return None
        return None

    def plan_reduce(self, node: Node, perm: Perm, attrs: dict):
        r = len(perm)
        inv = inverse(perm)
        keep = int(attrs.get("keepdims", 1))
        ins = [self.get(node.inputs[0], perm)]
        if node.op in ("ArgMax", "ArgMin"):
            axes = [_norm(attrs.get("axis", 0), r)]
            attrs["axis"] = inv[axes[0]]
        else:
            axes_name = node.inputs[1] if len(node.inputs) > 1 else ""
            if axes_name:
                vals = self.const_value(axes_name)
                if vals is None:
                    return None
                axes = sorted({_norm(int(a), r) for a in np.asarray(vals).reshape(-1)})
                if not axes and attrs.get("noop_with_empty_axes", 0):
                    return ins + [axes_name], attrs, [perm]
                if not axes:
                    axes = list(range(r))
                ins.append(self.add_const(f"{axes_name}_{_tag(perm)}",
                                          np.array(sorted(inv[a] for a in axes), np.int64)))
            elif "axes" in attrs and attrs["axes"] is not None:
                axes = sorted({_norm(int(a), r) for a in attrs["axes"]})
                attrs["axes"] = sorted(inv[a] for a in axes)
            else:
                if attrs.get("noop_with_empty_axes", 0):
                    return ins, attrs, [perm]
                axes = list(range(r))
            ins += [self.plain(i) if i else i for i in node.inputs[2:]]
        if keep:
            return ins, attrs, [perm]
        return ins, attrs, [drop_axes(perm, axes)]

    def plan_slice(self, node: Node, perm: Perm, attrs: dict):
        r = len(perm)
        inv = inverse(perm)
        ins = list(node.inputs) + [""] * (5 - len(node.inputs))
        starts = self.const_value(ins[1])
        if ins[3]:
            axes = self.const_value(ins[3])
            if axes is None:
                return None
            axes = [_norm(int(a), r) for a in np.asarray(axes).reshape(-1)]
        else:
            n = starts.size if starts is not None else (self.shape(ins[1]) or (None,))[0]
            if not is_int(n):
                return None
            axes = list(range(int(n)))
        new_axes = self.add_const(f"{ins[3] or node.name + '_axes'}_{_tag(perm)}",
                                  np.array([inv[a] for a in axes], np.int64))
        out = [self.get(ins[0], perm), ins[1], ins[2], new_axes, ins[4]]
        out = [self.plain(i) if (i and k != 0 and k != 3) else i for k, i in enumerate(out)]
        while out and not out[-1]:
            out.pop()
        return out, attrs, [perm]

    def plan_pad(self, node: Node, perm: Perm, attrs: dict):
        r = len(perm)
        inv = inverse(perm)
        ins = list(node.inputs) + [""] * (4 - len(node.inputs))
        if ins[3]:
            axes = self.const_value(ins[3])
            if axes is None:
                return None
            new = np.array([inv[_norm(int(a), r)] for a in np.asarray(axes).reshape(-1)], np.int64)
            ins[3] = self.add_const(f"{ins[3]}_{_tag(perm)}", new)
        else:
            pads = self.const_value(ins[1])
            if pads is None or pads.size != 2 * r:
                return None
            pads = np.asarray(pads).reshape(-1)
            new = np.concatenate([pads[:r][list(perm)], pads[r:][list(perm)]]).astype(pads.dtype)
            ins[1] = self.add_const(f"{ins[1]}_{_tag(perm)}", new)
        ins[0] = self.get(ins[0], perm)
        ins = [self.plain(i) if (i and k == 2) else i for k, i in enumerate(ins)]
        while ins and not ins[-1]:
            ins.pop()
        return ins, attrs, [perm]

    def plan_gather(self, node: Node, perm: Perm, attrs: dict):
        r = len(perm)
        inv = inverse(perm)
        idx = node.inputs[1]
        k = self.rank(idx)
        if k is None:
            return None
        a = _norm(attrs.get("axis", 0), r)
        attrs["axis"] = inv[a]
        # output logical axes: j < a stay, axis a becomes k index axes, j > a shift by k - 1
        order: List[int] = []
        for src in perm:
            if src == a:
                order.extend(range(a, a + k))
            else:
                order.append(src if src < a else src + k - 1)
        return [self.get(node.inputs[0], perm), self.plain(idx)], attrs, [tuple(order)]

    def plan_resize(self, node: Node, perm: Perm, attrs: dict):
        r = len(perm)
        inv = inverse(perm)
        ins = list(node.inputs) + [""] * (4 - len(node.inputs))
        if attrs.get("axes"):
            attrs["axes"] = [inv[_norm(int(a), r)] for a in attrs["axes"]]
            ins = [ins[0]] + [self.plain(i) if i else i for i in ins[1:]]
        else:
            for k in (1, 2, 3):
                name = ins[k]
                if not name:
                    continue
                s = self.shape(name)
                if s is not None and len(s) == 1 and s[0] == 0:
                    continue                     # an empty placeholder
                v = self.const_value(name)
                if v is None:
                    return None
                v = np.asarray(v).reshape(-1)
                if k == 1:
                    if v.size != 2 * r:
                        return None
                    new = np.concatenate([v[:r][list(perm)], v[r:][list(perm)]])
                else:
                    if v.size != r:
                        return None
                    new = v[list(perm)]
                ins[k] = self.add_const(f"{name}_{_tag(perm)}", new.astype(v.dtype))
        ins[0] = self.get(ins[0], perm)
        while ins and not ins[-1]:
            ins.pop()
        return ins, attrs, [perm]

    # -- transposes, reshapes, shapes --------------------------------------------------------
    def transpose(self, node: Node) -> bool:
        x, y = node.inputs[0], node.outputs[0]
        alts = self.alt_perms(x)
        if not alts and self.rank(x) == 4 and [_norm(int(a), 4) for a in node.attrs.get("perm") or []] \
                == list(inverse(NHWC)) and self.const_value(x) is None:
            # NHWC data made NCHW (a TensorFlow export's Transpose before each conv): x is y's
            # NHWC version, so spatial ops read x itself; y's plain form is made only if read
            self._put(y, {NHWC: x})
            self.changes += 1
            return True
        if self.has_plain(x) or not alts:
            return False
        r = len(alts[0])
        q = node.attrs.get("perm") or list(range(r))[::-1]
        if len(q) != r:
            return False
        q = [_norm(int(a), r) for a in q]
        s = alts[0]
        qinv = inverse(q)
        p_out = tuple(qinv[a] for a in s)
        # y's stored version is x's stored data: no node at all
        self._put(y, {p_out: self.versions[x][s]})
        self.changes += 1
        return True

    def reshape(self, node: Node) -> bool:
        x, y = node.inputs[0], node.outputs[0]
        alts = self.alt_perms(x)
        if self.has_plain(x) or not alts:
            return False
        lin, lout = self.shape(x), self.shape(y)
        if lin is None or lout is None:
            return False
        for s in alts:
            res = reshape_layout(lin, lout, s)
            if res is None:
                continue
            fix, p_out = res
            src_perm = s if fix is None else fix
            if fix is not None and is_identity(fix):
                return False                     # that is the plain version: share it
            target = [lout[b] for b in p_out]
            syms = [i for i, d in enumerate(target) if not is_int(d)]
            if len(syms) > 1:
                continue
            target = [-1 if i in syms else int(d) for i, d in enumerate(target)]
            src = self.get(x, src_perm)
            shape_c = self.add_const(f"{y}_shape_{_tag(p_out)}", np.array(target, np.int64))
            yn = self.out_name(y, p_out, permute_shape(lout, p_out))
            self.emit("Reshape", [src, shape_c], [yn], {}, node.name or self.node_name("Reshape"), exact=True)
            self.set_output(y, p_out, yn)
            return True
        return False

    def shape_op(self, node: Node) -> bool:
        x = node.inputs[0]
        alts = self.alt_perms(x)
        if self.has_plain(x) or not alts:
            return False
        s = alts[0]
        r = len(s)
        start, end = shape_range(node, r)
        idx = np.array(inverse(s)[start:end], np.int64)
        tmp = self.new_tensor(f"{node.outputs[0]}_stored", node.outputs[0], (r,))
        self.g.tensors[tmp].dtype = "int64"
        self.emit("Shape", [self.versions[x][s]], [tmp], {}, node.name or self.node_name("Shape"), exact=True)
        self.emit("Gather", [tmp, self.add_const(f"{node.outputs[0]}_order", idx)], [node.outputs[0]],
                  {"axis": 0}, f"{node.name or 'Shape'}_order")
        return True


def _tag(perm: Sequence[int]) -> str:
    return "nhwc" if tuple(perm) == NHWC else "p" + "".join(map(str, perm))


def _norm(axis, r: int) -> int:
    a = int(axis)
    if not -r <= a < r:
        raise _Abort()
    return a + r if a < 0 else a


def _single(rw: LayoutRewriter, name: str) -> bool:
    s = rw.shape(name)
    return s is not None and all(is_int(d) and d == 1 for d in s)


def spatial_convertible(graph: Graph, node: Node) -> bool:
    """True for a 4-D spatial op still in NCHW that has an NHWC kernel."""
    if str(node.attrs.get("data_layout") or "NCHW") != "NCHW" or not node.inputs or not node.inputs[0]:
        return False
    x = graph.tensors.get(node.inputs[0])
    if x is None or x.shape is None or len(x.shape) != 4 or x.quant is not None or x.is_const:
        return False
    y = graph.tensors.get(node.outputs[0])
    if y is None or y.quant is not None:
        return False
    if node.op == "MaxPool" and len(node.outputs) > 1 and node.outputs[1]:
        return False                 # Indices are NCHW flat positions
    if node.op == "BatchNormalization" and any(o for o in node.outputs[1:]):
        return False                 # training outputs
    if node.op in ("Conv", "FusedConv", "ConvTranspose"):
        w = graph.tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if w is None or w.shape is None or len(w.shape) != 4:
            return False
    if node.op == "FusedConv" and len(node.inputs) > 3 and node.inputs[3]:
        z = graph.tensors.get(node.inputs[3])        # the residual: 4-D, or a constant
        if z is None or z.quant is not None or (not z.is_const and (z.shape is None or len(z.shape) != 4)):
            return False
        if z.is_const and z.data.ndim > 4:
            return False
    return True


def _prune_tensors(graph: Graph) -> None:
    """Drop tensors nothing produces or reads any more (the NCHW originals the pass replaced)."""
    used = set(graph.inputs) | set(graph.outputs)
    for n in graph.nodes:
        used.update(i for i in n.inputs if i)
        used.update(o for o in n.outputs if o)
    graph.tensors = {k: t for k, t in graph.tensors.items() if k in used}


def convert_layout(graph: Graph) -> int:
    """Convert every 4-D spatial op to NHWC when the graph prefers it (see the module doc)."""
    if preferred_layout(graph) != "NHWC":
        return 0
    ensure_shapes(graph)
    if not any(n.op in SPATIAL and spatial_convertible(graph, n) for n in graph.nodes):
        return 0
    rw = LayoutRewriter(graph)
    changes = rw.run()
    _prune_tensors(graph)
    ensure_shapes(graph)
    return changes
