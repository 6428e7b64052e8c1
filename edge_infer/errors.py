"""Exception types of edge_infer.

Every error a user can cause derives from :class:`EdgeInferError`, so the CLI
can turn it into one line on stderr and exit status 2.
"""


class EdgeInferError(Exception):
    """Base class of all errors raised on bad user input or bad files."""


class GraphError(EdgeInferError, ValueError):
    """The graph is malformed: a cycle, a dangling input, a dtype mismatch."""


class ShapeError(EdgeInferError, ValueError):
    """Shapes of an op's inputs do not agree, or an input has the wrong shape."""


class UnsupportedOpError(EdgeInferError):
    """The model contains ops that edge_infer cannot convert or run."""


class ConversionError(EdgeInferError):
    """The source model could not be read or converted."""


class QuantizationDriftError(ConversionError):
    """The int8 model no longer does what the float model does (an output collapsed, see
    quantize/drift.py); nothing was written. ``report``: the quantization report."""

    def __init__(self, message: str, report: dict = None):
        super().__init__(message)
        self.report = report or {}


class QuantizationDriftWarning(UserWarning):
    """``convert(allow_drift=True)`` wrote an int8 model whose output collapsed."""


class ArtifactError(EdgeInferError):
    """An .eim file is truncated, corrupt, of another version or hostile."""


class InputError(EdgeInferError, ValueError):
    """The inputs given to Runtime.run do not match the model."""


class BackendError(EdgeInferError):
    """A requested backend is unknown or unavailable on this machine."""


class KeyFileError(EdgeInferError):
    """A signing or trusted key is missing, unreadable or not an Ed25519 key (or the
    ``cryptography`` package that signatures need is not installed)."""
