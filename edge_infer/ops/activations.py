"""The one activation table: the code of every element-wise activation / unary op, its
parameter count and defaults, shared by the native C kernels, OpenCL and CUDA.

A fused activation (``FusedConv``'s ``activation``, a binary op's epilogue) and a unary op
travel to a kernel as (code, p0, p1). The code of a name is its position in ``ACTIVATIONS``,
everywhere: the C header ``backends/cpu/native/src/ei_activations.h`` (``EI_ACT_*``), the
OpenCL ``kernels/activations.cl`` and the CUDA ``kernels/activations.cuh`` (``ACT_*``) are
generated from this table and checked in; ``tests/test_activation_table.py`` regenerates them
and checks that each backend's name -> code map agrees. Each backend supports the names its
kernels implement (its map is a subset); what it runs for a code is what the name means.

Regenerate after editing the table::

    python -m edge_infer.ops.activations --write
"""
from __future__ import annotations

import math
import os
import sys
from typing import Dict, Iterable, Tuple

#: (name, parameter count, parameter defaults): the position is the code; "" is none (a copy)
ACTIVATIONS: Tuple[Tuple[str, int, Tuple[float, ...]], ...] = (
    ("", 0, ()),
    ("Relu", 0, ()),
    ("Clip", 2, (-math.inf, math.inf)),                 # min, max
    ("Sigmoid", 0, ()),
    ("Tanh", 0, ()),
    ("HardSigmoid", 2, (0.2, 0.5)),                     # alpha, beta
    ("LeakyRelu", 1, (0.01,)),                          # alpha
    ("HardSwish", 0, ()),
    ("SiLU", 0, ()),
    ("Gelu", 0, ()),
    ("GeluTanh", 0, ()),                                # Gelu, approximate="tanh"
    ("Elu", 1, (1.0,)),                                 # alpha
    ("Softplus", 0, ()),
    ("Softsign", 0, ()),
    ("Mish", 0, ()),
    ("Exp", 0, ()),
    ("Log", 0, ()),
    ("Abs", 0, ()),
    ("Neg", 0, ()),
    ("Sqrt", 0, ()),
    ("Reciprocal", 0, ()),
    ("Floor", 0, ()),
    ("Ceil", 0, ()),
    ("Erf", 0, ()),
    ("Selu", 2, (1.67326319217681884765625, 1.05070102214813232421875)),   # alpha, gamma
    ("Celu", 1, (1.0,)),                                # alpha
    ("Round", 0, ()),
)
#: other names for a code (Identity is a copy)
ALIASES = {"Identity": ""}

CODES: Dict[str, int] = {name: k for k, (name, _, _) in enumerate(ACTIVATIONS)}
CODES.update({alias: CODES[name] for alias, name in ALIASES.items()})
PARAMS: Dict[str, int] = {name: n for name, n, _ in ACTIVATIONS}
DEFAULTS: Dict[str, Tuple[float, ...]] = {name: d for name, _, d in ACTIVATIONS}

_HERE = os.path.dirname(os.path.abspath(__file__))
_BACKENDS = os.path.join(os.path.dirname(_HERE), "backends")
#: the generated files: path -> (macro prefix, comment style)
GENERATED = {
    os.path.join(_BACKENDS, "cpu", "native", "src", "ei_activations.h"): "EI_ACT_",
    os.path.join(_BACKENDS, "opencl", "kernels", "activations.cl"): "ACT_",
    os.path.join(_BACKENDS, "cuda", "kernels", "activations.cuh"): "ACT_",
}


def codes_for(names: Iterable[str]) -> Dict[str, int]:
    """{name: code} for the names a backend implements (each must be in the table)."""
    return {n: CODES[n] for n in names}


def fused_params(node, supported: Dict[str, int]) -> Tuple[int, float, float]:
    """(code, p0, p1) of a fused node's epilogue (attributes ``activation`` and
    ``activation_params``): parameters the node leaves out take the table's defaults, the same
    on every backend; an activation outside ``supported`` (the backend's name -> code map for
    epilogues) is an ``UnsupportedOpError`` naming the node."""
    from ..errors import UnsupportedOpError
    name = str(node.attrs.get("activation", "") or "")
    if name not in supported:
        raise UnsupportedOpError(f"{node.op} {node.name!r}: epilogue activation {name!r} is not supported here")
    given = [float(p) for p in node.attrs.get("activation_params", []) or []]
    p = given + list(DEFAULTS.get(name, ()))[len(given):] + [0.0, 0.0]
    return supported[name], p[0], p[1]


def macro(name: str) -> str:
    """The macro suffix of a name: NONE for "", else the name upper-cased."""
    return "NONE" if name == "" else name.upper()


def defines(prefix: str) -> str:
    """The ``#define`` lines of every code (``<prefix>RELU 1``, ...), and ``<prefix>COUNT``."""
    lines = [f"#define {prefix}{macro(name)} {k}" for k, (name, _, _) in enumerate(ACTIVATIONS)]
    lines.append(f"#define {prefix}COUNT {len(ACTIVATIONS)}")
    return "\n".join(lines) + "\n"


def generated_text(path: str) -> str:
    """The content of one generated file."""
    prefix = GENERATED[path]
    guard = "EI_ACTIVATIONS_H" if path.endswith(".h") else None
    head = ("/* Generated from edge_infer/ops/activations.py (python -m edge_infer.ops.activations "
            "--write): do not edit.\n * Activation / unary op codes, the same in the C, OpenCL and CUDA "
            "kernels. p0, p1 per code:\n")
    for name, n, d in ACTIVATIONS:
        if n:
            head += f" * {macro(name)}: {n} parameter(s), defaults {', '.join(repr(v) for v in d)}\n"
    head += " */\n"
    body = defines(prefix)
    if guard:
        return f"{head}#ifndef {guard}\n#define {guard}\n\n{body}\n#endif\n"
    return f"{head}{body}"


def write(check: bool = False) -> int:
    """Write every generated file (``check``: only report which ones differ). Returns how
    many differ."""
    stale = 0
    for path in GENERATED:
        text = generated_text(path)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale += 1
            if check:
                print(f"stale: {path}")
            else:
                with open(path, "w") as f:
                    f.write(text)
    return stale


if __name__ == "__main__":
    sys.exit(1 if write(check="--write" not in sys.argv) and "--write" not in sys.argv else 0)
