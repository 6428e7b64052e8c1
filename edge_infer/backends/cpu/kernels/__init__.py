"""CPU kernels, one module per op family; importing registers them in the registry
(``registry.py``: entries keyed by op, dtype, sparse encoding and layout, so the order of
these imports does not matter)."""
from . import (conv, conv_transpose, dynamic, elementwise, fused, int8_conv, int8_elementwise,  # noqa: F401
               int8_gemm, int8_pool, int8_qdq, int8_spatial, integer, nn, pool, recurrent, reduce, sparse, tensor,
               transformer)
