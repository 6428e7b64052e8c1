"""Common-subexpression elimination.

* constants with the same dtype, shape, quantization and bytes become one (readers
  of the duplicates read the first; dead-code elimination drops the rest);
* nodes with the same op, the same inputs (after the renames above; the two
  operands of a commutative binary op in either order) and the same attributes
  compute the same values: later ones are dropped, their readers read the first's
  outputs. Random ops are never merged; a node writing a graph output is kept
  (the output's name must survive).
"""
from __future__ import annotations

import hashlib
import json
from typing import Dict, List, Tuple

import numpy as np

from ..ir import Graph
from ..ir.shape_inference import NONDETERMINISTIC

#: binary ops whose result does not depend on operand order (bit for bit in IEEE)
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean", "Equal", "And", "Or", "Xor",
                         "BitwiseAnd", "BitwiseOr", "BitwiseXor"})


def _fingerprint(data: np.ndarray) -> bytes:
    flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if flat.size <= 4096:
        return flat.tobytes()
    step = max(1, flat.size // 2048)
    return hashlib.blake2b(flat[::step].tobytes() + flat[-64:].tobytes(), digest_size=16).digest()


def _const_renames(graph: Graph) -> Dict[str, str]:
    """duplicate constant name -> canonical name (the first in tensor order)."""
    groups: Dict[Tuple, List[str]] = {}
    for name, t in graph.tensors.items():
        if t.is_const:
            key = (t.dtype, tuple(t.data.shape),
                   json.dumps(t.quant, sort_keys=True, default=str) if t.quant else "")
            groups.setdefault(key, []).append(name)
    renames: Dict[str, str] = {}
    for names in groups.values():
        if len(names) < 2:
            continue                     # unique shape: nothing to compare
        # a cheap fingerprint (a strided sample of the bytes) splits most groups;
        # arrays sharing one are compared in full
        by_print: Dict[bytes, List[str]] = {}
        for name in names:
            by_print.setdefault(_fingerprint(graph.tensors[name].data), []).append(name)
        for same in by_print.values():
            canon: List[np.ndarray] = []
            canon_names: List[str] = []
            for name in same:
                b = np.ascontiguousarray(graph.tensors[name].data).reshape(-1).view(np.uint8)
                for a, first in zip(canon, canon_names):
                    if a.shape == b.shape and np.array_equal(a, b):
                        renames[name] = first
                        break
                else:
                    canon.append(b)
                    canon_names.append(name)
    return renames


def _attr_key(attrs: dict) -> str:
    return json.dumps(attrs, sort_keys=True, default=str)


def eliminate_common_subexpressions(graph: Graph) -> int:
    changes = 0
    rename = _const_renames(graph)
    protected = set(graph.outputs) | set(graph.inputs)
    rename = {k: v for k, v in rename.items() if k not in protected}
    graph.toposort()
    seen: Dict[Tuple, List[str]] = {}
    keep = []
    for node in graph.nodes:
        new_inputs = [rename.get(i, i) if i else i for i in node.inputs]
        if new_inputs != node.inputs:
            node.inputs = new_inputs
            changes += 1
        outs = [o for o in node.outputs if o]
        if not outs or node.op in NONDETERMINISTIC:
            keep.append(node)
            continue
        ins = tuple(node.inputs)
        if node.op in COMMUTATIVE and len(ins) == 2:
            ins = tuple(sorted(ins))
        key = (node.op, ins, _attr_key(node.attrs), len(node.outputs),
               tuple(bool(o) for o in node.outputs))
        first = seen.get(key)
        if first is not None and not any(o in protected for o in outs):
            for mine, theirs in zip(node.outputs, first):
                if mine:
                    rename[mine] = theirs
            changes += 1
            continue
        if first is None:
            seen[key] = list(node.outputs)
        keep.append(node)
    graph.nodes = keep
    return changes
