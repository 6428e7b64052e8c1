"""Resize and Upsample: modes and positive finite scales."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node
from .schema import BOOL, FLOAT, FLOATS, INTS, STR, const, fail, op


def _check_resize(node: Node, graph: Graph) -> None:
    k = 2 if node.op == "Resize" else 1
    scales = const(graph, node.inputs[k]) if len(node.inputs) > k else None
    if scales is None:
        scales = node.attrs.get("scales")
    if scales is not None:
        s = np.asarray(scales, np.float64)
        if s.size and not (np.all(np.isfinite(s)) and np.all(s > 0)):
            fail(node, f"input {k} (scales)", "scales must be positive and finite")
    sizes = const(graph, node.inputs[3]) if node.op == "Resize" and len(node.inputs) > 3 else None
    if sizes is not None and np.any(np.asarray(sizes) < 0):
        fail(node, "input 3 (sizes)", "sizes must be non-negative")


_MODE = STR("nearest", "linear", "cubic", "bilinear")
SCHEMAS = {
    "Resize": op((1, 4), check=_check_resize, mode=_MODE,
                 coordinate_transformation_mode=STR("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                                    "align_corners", "asymmetric", "tf_crop_and_resize"),
                 nearest_mode=STR("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"),
                 cubic_coeff_a=FLOAT(), exclude_outside=BOOL, extrapolation_value=FLOAT(), antialias=BOOL,
                 axes=INTS(), keep_aspect_ratio_policy=STR("stretch", "not_larger", "not_smaller"),
                 data_layout=STR("NCHW", "NHWC")),
    "Upsample": op((1, 2), check=_check_resize, mode=_MODE, scales=FLOATS()),
}
