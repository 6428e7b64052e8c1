"""CPU kernels, one module per op family; importing registers them."""
from . import conv, elementwise, nn, pool, reduce, tensor  # noqa: F401
