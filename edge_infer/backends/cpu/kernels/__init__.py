"""CPU kernels, one module per op family; importing registers them."""
from . import conv, elementwise, fused, nn, pool, reduce, tensor  # noqa: F401
