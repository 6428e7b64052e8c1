"""edge_infer: convert neural networks on a workstation, run them fast and small on the edge."""
import sys as _sys
import types as _types

from .errors import (ArtifactError, BackendError, ConversionError, EdgeInferError, GraphError,
                     InputError, KeyFileError, QuantizationDriftError, ShapeError, UnsupportedOpError)
from .version import __version__

__all__ = ["__version__", "ArtifactError", "BackendError", "ConversionError", "EdgeInferError",
           "GraphError", "InputError", "KeyFileError", "QuantizationDriftError", "ShapeError",
           "UnsupportedOpError", "Runtime", "convert", "verify",
           "Batcher"]

# The public names below are imported on first use, so a device process that only runs
# models (``from edge_infer import Runtime``) never loads the converter, the verifier or
# the batcher (concurrent.futures, logging, queue, ...: ~1 MB of RSS).
_LAZY = {"Runtime": ".runtime", "convert": ".convert", "verify": ".verify", "Batcher": ".batcher"}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


class _Package(_types.ModuleType):
    # ``convert`` and ``verify`` share their modules' names: importing the submodule makes
    # the import system set the package attribute to the module; keep the function instead.
    def __setattr__(self, name, value):
        if name in ("convert", "verify") and isinstance(value, _types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
