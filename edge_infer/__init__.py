"""edge_infer: convert neural networks on a workstation, run them fast and small on the edge."""
from .errors import (ArtifactError, BackendError, ConversionError, EdgeInferError, GraphError,
                     InputError, ShapeError, UnsupportedOpError)
from .version import __version__

__all__ = ["__version__", "ArtifactError", "BackendError", "ConversionError", "EdgeInferError",
           "GraphError", "InputError", "ShapeError", "UnsupportedOpError", "Runtime", "convert", "verify"]


def __getattr__(name):
    # Lazy so that `import edge_infer` stays cheap on the device.
    if name == "Runtime":
        from .runtime import Runtime
        return Runtime
    if name == "convert":
        from .convert import convert
        return convert
    if name == "verify":
        from .verify import verify
        return verify
    raise AttributeError(name)
