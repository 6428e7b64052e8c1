"""Runs that read the caller's input array in place instead of copying it into the arena.

A plan's native steps hold the addresses of their buffers in their argument structs. When
every step that reads a graph input is one of the native kernels in ``READS_IN_PLACE``, the
fields of those steps that hold the input buffer's address are pointed at the caller's array
for one run (and back afterwards), so the copy of the input into the arena is skipped: 40 us
a run for a 1x3x224x224 float image (5% of MobileNetV3-small's int8 run), 250 us for 640x640.
The arena keeps the input's bytes (later tensors reuse them once the input is dead; only the
readers' fields are redirected, never a later tensor at the same address), so this costs no
memory.

``READS_IN_PLACE`` lists the kernels read for this: each computes every address of its input
from its argument struct during the call (no pointer table made at prepare), reads it with
unaligned loads (a numpy array is 16-byte aligned, the arena 64) and never writes it. Where
it is not so the plan keeps copying: a reader that is another kernel or a numpy step (it holds
a view of the arena), an input that is a graph output, an in-place output or a view placed in
the input's bytes, a pointer field into the middle of the input. (The first version checked
every plan by a run on a poisoned arena instead of a list: that run at plan time raised the
640x640 detectors' peak RSS by a third.)
"""
from __future__ import annotations

import ctypes
from typing import Dict, List, Optional, Tuple

import numpy as np

#: (struct, field name) pairs holding one input's address
Fields = List[Tuple[ctypes.Structure, str]]

#: the native kernels that may read a caller's array in place (see above): the float input's
#: NCHW -> NHWC copy (layout.c), its quantization (qdq.c) and the int8 stem reading it (int8_stem.c)
READS_IN_PLACE = frozenset({"ei_interleave", "ei_quantize_f32", "ei_int8_stem_q"})


def _scan(struct: ctypes.Structure, lo: int, hi: int, found: Fields, depth: int = 0) -> bool:
    """Collect ``struct``'s pointer fields (nested structs too) equal to ``lo``; False where
    a field points inside ``(lo, hi)`` (a kernel's pointer into the middle of the input)."""
    for name, ftype, *_ in struct._fields_:
        value = getattr(struct, name)
        if isinstance(value, ctypes.Structure):
            if depth > 4 or not _scan(value, lo, hi, found, depth + 1):
                return False
        elif ftype is ctypes.c_void_p and value is not None:
            if value == lo:
                found.append((struct, name))
            elif lo < value < hi:
                return False
    return True


def input_fields(graph, nodes, steps, buffers, arena_plan) -> Optional[Dict[str, Fields]]:
    """{input name: fields of its readers' native steps holding its buffer's address} for
    the inputs whose readers may read the caller's array in place; None where no input may."""
    out: Dict[str, Fields] = {}
    for name in graph.inputs:
        buf = buffers.get(name)
        if buf is None or name in graph.outputs or not buf.flags.c_contiguous or buf.size == 0:
            continue
        if name in arena_plan.aliases.values() or name in arena_plan.aliases or name in arena_plan.views or \
                any(root == name for root, _ in arena_plan.views.values()):
            continue
        readers = [k for k, n in enumerate(nodes) if name in n.inputs]
        lo = buf.ctypes.data
        found: Fields = []
        ok = bool(readers)
        for k in readers:
            keep = getattr(steps[k], "native_keep", None)
            if getattr(steps[k], "native_name", None) not in READS_IN_PLACE or keep is None or \
                    not isinstance(keep[1], ctypes.Structure):
                ok = False                       # a numpy step or another kernel reads the arena
                break
            before = len(found)
            if not _scan(keep[1], lo, lo + buf.nbytes, found) or len(found) == before:
                ok = False                       # a pointer into the middle, or none found
                break
        if ok:
            out[name] = found
    return out or None


_char_at = ctypes.c_char.from_buffer


def address(arr: np.ndarray) -> int:
    """The data address of the C-contiguous ``arr``: through the buffer protocol where it is
    writable (0.3 us; ``arr.ctypes.data`` builds a helper object per call, 1.1 us)."""
    return ctypes.addressof(_char_at(arr)) if arr.flags.writeable else arr.ctypes.data


def point(fields: Fields, address: int) -> None:
    """Set every field of ``fields`` to ``address``."""
    for struct, name in fields:
        setattr(struct, name, address)
