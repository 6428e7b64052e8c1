"""Padding arithmetic shared by shape rules and kernels (Conv, pools, ConvTranspose)."""
from __future__ import annotations

import math
from typing import List, Sequence, Tuple


def resolve_pads(in_spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int], pads: Sequence[int], auto_pad: str = "NOTSET",
                 ceil_mode: bool = False) -> Tuple[List[int], List[int]]:
    """Return (pads as [b1..bn, e1..en], output spatial size) for a sliding window op."""
    n = len(in_spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(in_spatial[i] / strides[i]) for i in range(n)]
        begin, end = [], []
        for i in range(n):
            eff_k = (kernel[i] - 1) * dilations[i] + 1
            total = max(0, (out[i] - 1) * strides[i] + eff_k - in_spatial[i])
            small, big = total // 2, total - total // 2
            if auto_pad == "SAME_UPPER":
                begin.append(small); end.append(big)
            else:
                begin.append(big); end.append(small)
        return begin + end, out
    if auto_pad == "VALID":
        pads = [0] * (2 * n)
    pads = list(pads) if pads else [0] * (2 * n)
    out = []
    for i in range(n):
        eff_k = (kernel[i] - 1) * dilations[i] + 1
        span = in_spatial[i] + pads[i] + pads[i + n] - eff_k
        if ceil_mode:
            o = math.ceil(span / strides[i]) + 1
            # the last window must start inside the input or left padding (ONNX/PyTorch rule)
            if (o - 1) * strides[i] >= in_spatial[i] + pads[i]:
                o -= 1
        else:
            o = span // strides[i] + 1
        out.append(int(o))
    return pads, out
