"""numpy CPU backend."""
from .backend import CpuBackend
from .executor import CpuExecutable, PrepareContext, fold_node
from .registry import KERNELS, kernel

__all__ = ["CpuBackend", "CpuExecutable", "PrepareContext", "fold_node", "KERNELS", "kernel"]
