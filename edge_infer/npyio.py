"""Reading user-supplied ``.npy`` / ``.npz`` files safely: never unpickling, every member
read at once, and every way numpy can fail on a bad file turned into one edge_infer error."""
from __future__ import annotations

import zipfile
from typing import Dict, Type, Union

import numpy as np

from .errors import EdgeInferError

#: what numpy raises on a truncated, empty, pickled or otherwise malformed array file
_READ_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, TypeError, MemoryError)


def read_array_file(path: str, error: Type[EdgeInferError] = EdgeInferError,
                    allow_empty: bool = False) -> Union[np.ndarray, Dict[str, np.ndarray]]:
    """The array in a ``.npy``, or ``{member name: array}`` of an ``.npz``, read completely.

    A file numpy cannot read without unpickling (object arrays, in a ``.npy`` or as an
    ``.npz`` member), an empty or truncated file, and (unless ``allow_empty``) an array
    with no elements are refused with ``error`` naming the file (and member)."""
    try:
        data = np.load(path, allow_pickle=False)
    except _READ_ERRORS as e:
        raise error(f"{path}: not a .npy/.npz array file ({_why(e)})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        out = {}
        with data:
            for name in data.files:
                try:
                    out[name] = data[name]        # numpy reads (and checks) members lazily
                except _READ_ERRORS as e:
                    raise error(f"{path}: member {name!r} is not a plain array ({_why(e)})") from None
        if not out:
            raise error(f"{path}: the .npz holds no arrays")
        for name, arr in out.items():
            _check_array(arr, f"{path}: member {name!r}", error, allow_empty)
        return out
    _check_array(data, path, error, allow_empty)
    return data


def _check_array(arr: np.ndarray, where: str, error, allow_empty: bool) -> None:
    if arr.dtype.kind not in "biufc":
        raise error(f"{where}: dtype {arr.dtype} is not numeric")
    if arr.size == 0 and not allow_empty:
        raise error(f"{where}: the array is empty (shape {arr.shape})")


def _why(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
