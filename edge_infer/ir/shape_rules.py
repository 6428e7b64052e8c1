"""Shape rules for every op; split by family, each module registers with ``rule``."""
from . import shape_rules_fused, shape_rules_nn, shape_rules_quant, shape_rules_seq, shape_rules_tensor  # noqa: F401
from . import shape_rules_dynamic  # noqa: F401,E402  (uses shape_rules_tensor helpers)
