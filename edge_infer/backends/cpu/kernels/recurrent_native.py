"""The native recurrence of LSTM/GRU/RNN (src/recurrent.c): one C call per direction runs
every time step, where the numpy loop pays ~20 ufunc calls per step. Used for float32 with
every activation but Softplus; ``direction_call`` returns None otherwise and the numpy
loop serves. The ctypes struct mirrors ``ei_recurrent_f32_args``."""
from __future__ import annotations

import ctypes
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from .. import native as _native

#: activation name -> code of src/recurrent.c
NATIVE_ACTIVATIONS = {"Relu": 0, "Tanh": 1, "Sigmoid": 2, "Affine": 3, "LeakyRelu": 4,
                      "ThresholdedRelu": 5, "ScaledTanh": 6, "HardSigmoid": 7, "Elu": 8, "Softsign": 9}
OPS = {"RNN": 0, "GRU": 1, "LSTM": 2}

_F3 = ctypes.c_float * 3


class RecurrentArgs(ctypes.Structure):
    _fields_ = ([(n, ctypes.c_void_p) for n in ("xp", "rt", "rt_h", "rb_h", "peep", "lens", "h", "c", "y",
                                                 "scratch")] +
                [(n, ctypes.c_int64) for n in ("seq", "batch", "hidden", "xp_t", "xp_b", "y_t", "y_b")] +
                [(n, ctypes.c_int32) for n in ("op", "reverse", "input_forget", "linear_before_reset",
                                               "has_clip")] +
                [("act", ctypes.c_int32 * 3), ("alpha", _F3), ("beta", _F3), ("clip", ctypes.c_float)])


def usable(dtype, specs: Sequence[Sequence[Tuple[str, float, float]]], lens: Optional[np.ndarray]) -> bool:
    """The native loop covers this node: float32, its activations, int32 sequence_lens."""
    return (_native.lib is not None and hasattr(_native.lib, "ei_recurrent_f32") and dtype == np.float32
            and all(name in NATIVE_ACTIVATIONS for d in specs for name, _, _ in d)
            and (lens is None or (lens.dtype == np.int32 and lens.flags.c_contiguous)))


def _addr(a: Optional[np.ndarray]) -> Optional[int]:
    return None if a is None else a.ctypes.data


def direction_call(op: str, specs: List[Tuple[str, float, float]], reverse: bool, xp3: np.ndarray,
                   y3: Optional[np.ndarray], h: np.ndarray, c: Optional[np.ndarray], rt: np.ndarray,
                   rt_h: Optional[np.ndarray], rb_h: Optional[np.ndarray], peep: Optional[np.ndarray],
                   lens: Optional[np.ndarray], scratch: np.ndarray, clip: Optional[float],
                   input_forget: int, lbr: int) -> Callable[[], None]:
    """The call running one direction. ``xp3`` (seq, batch, gates*hidden) and ``y3``
    (seq, batch, hidden) are views in any layout with contiguous rows; the rest contiguous."""
    f4 = 4
    seq, batch, _ = xp3.shape
    hidden = h.shape[1]
    acts = [NATIVE_ACTIVATIONS[n] for n, _, _ in specs] + [0] * (3 - len(specs))
    alphas = [float(a) for _, a, _ in specs] + [0.0] * (3 - len(specs))
    betas = [float(b) for _, _, b in specs] + [0.0] * (3 - len(specs))
    args = RecurrentArgs(
        _addr(xp3), _addr(rt), _addr(rt_h), _addr(rb_h) if lbr else None, _addr(peep), _addr(lens),
        _addr(h), _addr(c), _addr(y3), _addr(scratch),
        seq, batch, hidden, xp3.strides[0] // f4, xp3.strides[1] // f4,
        0 if y3 is None else y3.strides[0] // f4, 0 if y3 is None else y3.strides[1] // f4,
        OPS[op], int(reverse), int(input_forget), int(lbr), int(clip is not None),
        (ctypes.c_int32 * 3)(*acts), _F3(*alphas), _F3(*betas), float(clip or 0.0))
    return _native.native_step("ei_recurrent_f32", args, xp3, y3, h, c, rt, rt_h, rb_h, peep, lens, scratch)
