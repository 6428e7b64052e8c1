"""CPU kernels, one module per op family; importing registers them."""
from . import conv, dynamic, elementwise, fused, integer, nn, pool, recurrent, reduce, tensor, transformer  # noqa: F401
# int8 kernels last: install_int8_dispatch wraps the float kernels registered above
from . import int8_conv, int8_elementwise, int8_gemm, int8_pool, int8_qdq, int8_spatial  # noqa: F401,E402
from .int8_common import install_int8_dispatch  # noqa: E402

install_int8_dispatch()
# sparse last: its dispatch wraps the dtype dispatchers (a sparse weight picks its kernel first)
from .sparse import install_sparse_dispatch  # noqa: E402

install_sparse_dispatch()
