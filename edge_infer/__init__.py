"""edge_infer: convert neural networks on a workstation, run them fast and small on the edge."""
from .errors import (ArtifactError, BackendError, ConversionError, EdgeInferError, GraphError,
                     InputError, ShapeError, UnsupportedOpError)
from .version import __version__
# Bound eagerly: the functions share their modules' names, and a lazily imported
# submodule would otherwise replace the function attribute on the package.
from .convert import convert
from .verify import verify
from .runtime import Runtime

__all__ = ["__version__", "ArtifactError", "BackendError", "ConversionError", "EdgeInferError",
           "GraphError", "InputError", "ShapeError", "UnsupportedOpError", "Runtime", "convert", "verify"]
from .batcher import Batcher; __all__ += ["Batcher"]  # noqa: E402,E702
