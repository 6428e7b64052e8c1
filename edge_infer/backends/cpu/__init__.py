"""numpy CPU backend."""
from .executor import CpuBackend, CpuExecutable, PrepareContext, fold_node
from .registry import KERNELS, kernel

__all__ = ["CpuBackend", "CpuExecutable", "PrepareContext", "fold_node", "KERNELS", "kernel"]
