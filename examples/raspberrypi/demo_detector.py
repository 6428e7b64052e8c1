"""A tiny, hand-built YOLO-style detector for trying camera_detect.py without a trained model.

It finds bright squares about 10 input pixels wide: on a 16x16 grid of cells (stride 4) it
averages the 8x8 window centred on each cell; a window that is mostly bright reports an object
(class 0, "bright") of 10x10 centred on the cell. The output is YOLOv5-shaped, ``[1, 256, 6]`` =
(cx, cy, w, h, objectness, class score) in input pixels, so the same decoding and NMS as for a
real YOLO export run on it (use an IoU threshold of 0.3: neighbouring cells overlap). Pair it
with the synthetic ``squares`` source (letterboxed, a 240x320 frame becomes 48x64 in the input,
and its 48-pixel squares about 10 pixels); it finds about 93% of them at IoU > 0.5:

    python demo_detector.py demo_detector.onnx            # build the ONNX model (needs onnx)
    edge-infer convert demo_detector.onnx -o demo_detector.eim

Built with the ``onnx`` package only; edge_infer converts and runs it like any other model.
"""
from __future__ import annotations

import argparse

import numpy as np

SIZE, STRIDE, WINDOW = 64, 4, 8


def build_demo_detector(path: str, box: float = 10.0, window: int = WINDOW, threshold: float = 0.7) -> str:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = SIZE // STRIDE
    ys, xs = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
    centers = np.stack([(xs + 0.5) * STRIDE, (ys + 0.5) * STRIDE], axis=-1).reshape(1, g * g, 2).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.full((1, 3, 1, 1), 1 / 3, np.float32), "gray_w"),
        numpy_helper.from_array(np.array(threshold, np.float32), "half"),
        numpy_helper.from_array(np.array(20.0, np.float32), "gain"),
        numpy_helper.from_array(np.array([1, g * g, 1], np.int64), "cells_shape"),
        numpy_helper.from_array(centers, "centers"),
        numpy_helper.from_array(np.full((1, g * g, 2), box, np.float32), "wh"),
        numpy_helper.from_array(np.ones((1, g * g, 1), np.float32), "cls"),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "gray_w"], ["gray"], name="to_gray"),
        # window centred on each cell: starts at STRIDE*i + STRIDE/2 - WINDOW/2
        helper.make_node("AveragePool", ["gray"], ["cell"], kernel_shape=[window, window], strides=[STRIDE, STRIDE],
                         pads=[(window - STRIDE) // 2] * 4, count_include_pad=1, name="cells"),
        helper.make_node("Sub", ["cell", "half"], ["centred"]),
        helper.make_node("Mul", ["centred", "gain"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["obj_map"]),
        helper.make_node("Reshape", ["obj_map", "cells_shape"], ["obj"]),
        helper.make_node("Concat", ["centers", "wh", "obj", "cls"], ["output0"], axis=2),
    ]
    graph = helper.make_graph(
        nodes, "demo_detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, g * g, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="edge_infer-example")
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("output", nargs="?", default="demo_detector.onnx")
    print(build_demo_detector(ap.parse_args().output))
