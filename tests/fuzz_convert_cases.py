"""Structured mutations of ONNX and TFLite models for tests/test_fuzz_convert.py (issue #16).

``make_cases(seed, n, folder)`` writes ``n`` mutated copies of a small ONNX model (Conv,
BatchNormalization, Relu, MaxPool, a residual Add, Reshape, Gemm on a sparse initializer,
Softmax) and ``n`` of a small TFLite model (int8 CONV_2D, DEPTHWISE_CONV_2D, MAX_POOL_2D,
RESHAPE, FULLY_CONNECTED, float SOFTMAX after a DEQUANTIZE), each with one to three
mutations of what a hostile file can change: attributes and operator options, tensor and
initializer dims and data, sparse initializers, node inputs, opsets and op versions, input
shapes, quantization parameters, buffers.

``python fuzz_convert_cases.py FOLDER`` (run in a subprocess by the test) converts every
model there (``edge_infer.convert``), runs a converted artifact once on the CPU, and prints
one JSON line per file, ``{"file", "outcome"}``, after a ``"start"`` line (so a hang or a
signal names its file): ``ok`` (converted and ran), ``error`` (an edge_infer error) or
``raw`` (any other exception: a bug).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

HOSTILE_INTS = [-1048576, -3, -1, 0, 1, 2, 3, 7, 255, 65536, 2 ** 31 - 1, 2 ** 40, 2 ** 62]
HOSTILE_FLOATS = [0.0, -1.0, float("inf"), float("nan"), 1e-45, 1e38, -0.0]


# -- ONNX ----------------------------------------------------------------------------------

def onnx_base():
    """The ONNX model every ONNX case starts from (opset 13, batch 1, 2x8x8 input)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr), name)
    wg = (rng.standard_normal((64, 5)) * (rng.random((64, 5)) < 0.3)).astype(np.float32)
    idx = np.flatnonzero(wg).astype(np.int64)
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(wg.reshape(-1)[idx], "wg"),
                                       numpy_helper.from_array(idx, "wg_idx"), list(wg.shape))
    inits = [init("w", rng.standard_normal((4, 2, 3, 3)).astype(np.float32)),
             init("b", rng.standard_normal(4).astype(np.float32)),
             init("scale", rng.random(4).astype(np.float32) + 0.5),
             init("bias", rng.standard_normal(4).astype(np.float32)),
             init("mean", rng.standard_normal(4).astype(np.float32) * 0.1),
             init("var", rng.random(4).astype(np.float32) + 0.5),
             init("w2", rng.standard_normal((4, 4, 1, 1)).astype(np.float32)),
             init("shape", np.array([1, 64], np.int64)),
             init("gb", rng.standard_normal(5).astype(np.float32))]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], "conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[1, 1], dilations=[1, 1], group=1),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], "bn", epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r"], "relu"),
        helper.make_node("Conv", ["r", "w2"], ["c2"], "conv1x1", kernel_shape=[1, 1]),
        helper.make_node("Add", ["r", "c2"], ["a"], "add"),
        helper.make_node("MaxPool", ["a"], ["p"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "shape"], ["f"], "flat"),
        helper.make_node("Gemm", ["f", "wg", "gb"], ["g"], "gemm", alpha=1.0, beta=1.0, transB=0),
        helper.make_node("Softmax", ["g"], ["y"], "softmax", axis=1),
    ]
    graph = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits,
                              sparse_initializer=[sparse])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def onnx_base2():
    """A second ONNX base (opset 18): shape ops, Resize, Concat, Slice, Gather, Transpose, a
    ConvTranspose, int8 QDQ, ReduceMean, Pad and Split, on a [1, 3, 6, 6] input."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr), name)
    inits = [init("wt", rng.standard_normal((3, 2, 2, 2)).astype(np.float32)),
             init("scales", np.array([1, 1, 2, 2], np.float32)),
             init("starts", np.array([0, 1], np.int64)), init("ends", np.array([3, 11], np.int64)),
             init("axes", np.array([1, 3], np.int64)), init("gi", np.array([0, 2, 1], np.int64)),
             init("qs", np.float32(0.05)), init("qz", np.int8(3)), init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1],
                                                                                         np.int64)),
             init("split", np.array([7, 7], np.int64)), init("rax", np.array([2, 3], np.int64))]
    nodes = [
        helper.make_node("ConvTranspose", ["x", "wt"], ["ct"], "deconv", strides=[2, 2], kernel_shape=[2, 2],
                         group=1, output_padding=[0, 0]),
        helper.make_node("Resize", ["x", "", "scales"], ["rs"], "resize", mode="nearest"),
        helper.make_node("Concat", ["ct", "rs"], ["cat"], "concat", axis=1),
        helper.make_node("Slice", ["cat", "starts", "ends", "axes"], ["sl"], "slice"),
        helper.make_node("Gather", ["sl", "gi"], ["ga"], "gather", axis=1),
        helper.make_node("QuantizeLinear", ["ga", "qs", "qz"], ["q"], "quant"),
        helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["dq"], "dequant"),
        helper.make_node("Transpose", ["dq"], ["tr"], "transpose", perm=[0, 1, 3, 2]),
        helper.make_node("Pad", ["tr", "pads"], ["pd"], "pad", mode="reflect"),
        helper.make_node("Split", ["pd", "split"], ["s0", "s1"], "split", axis=3),
        helper.make_node("Add", ["s0", "s1"], ["ad"], "add"),
        helper.make_node("ReduceMean", ["ad", "rax"], ["y"], "mean", keepdims=1),
    ]
    graph = helper.make_graph(nodes, "fuzz2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 1, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _mutate_onnx(m, rng) -> str:
    from onnx import AttributeProto, TensorProto
    g = m.graph
    kind = int(rng.integers(9))
    node = g.node[int(rng.integers(len(g.node)))]
    if kind == 0 and len(node.attribute):                    # an attribute's value
        a = node.attribute[int(rng.integers(len(node.attribute)))]
        if a.type == AttributeProto.INTS and len(a.ints):
            a.ints[int(rng.integers(len(a.ints)))] = int(rng.choice(HOSTILE_INTS))
            if rng.random() < 0.2:
                a.ints.append(1)
            return f"attr {node.name}.{a.name}={list(a.ints)}"
        if a.type == AttributeProto.INT:
            a.i = int(rng.choice(HOSTILE_INTS))
            return f"attr {node.name}.{a.name}={a.i}"
        if a.type == AttributeProto.FLOAT:
            a.f = float(rng.choice(HOSTILE_FLOATS))
            return f"attr {node.name}.{a.name}={a.f}"
        return f"attr {node.name}.{a.name} unchanged"
    if kind == 1 and len(node.attribute):                    # an attribute of the wrong type
        a = node.attribute[int(rng.integers(len(node.attribute)))]
        was = a.name
        a.Clear()
        a.name = was
        choice = int(rng.integers(3))
        if choice == 0:
            a.type, a.s = AttributeProto.STRING, b"x"
        elif choice == 1:
            a.type, a.f = AttributeProto.FLOAT, 1.5
        else:
            a.type = AttributeProto.INTS
            a.ints.extend([])
        return f"attr {node.name}.{was} retyped {a.type}"
    if kind == 2:                                            # initializer dims
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        if len(t.dims):
            t.dims[int(rng.integers(len(t.dims)))] = int(rng.choice(HOSTILE_INTS[:10]))
        else:
            t.dims.append(int(rng.choice(HOSTILE_INTS[:10])))
        return f"init {t.name} dims {list(t.dims)}"
    if kind == 3:                                            # initializer data: truncated, retyped
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        if rng.random() < 0.5 and t.raw_data:
            t.raw_data = t.raw_data[: int(rng.integers(len(t.raw_data)))]
            return f"init {t.name} raw_data truncated to {len(t.raw_data)}"
        t.data_type = int(rng.choice([TensorProto.INT8, TensorProto.DOUBLE, TensorProto.STRING,
                                      TensorProto.FLOAT16, TensorProto.BOOL, 0, 99]))
        return f"init {t.name} data_type {t.data_type}"
    if kind == 4 and not len(g.sparse_initializer):          # no sparse initializer: a string attribute
        strs = [(n, a) for n in g.node for a in n.attribute if a.type == AttributeProto.STRING]
        if not strs:
            return "no string attribute"
        n, a = strs[int(rng.integers(len(strs)))]
        a.s = [b"", b"bogus", b"constant", b"linear", b"cubic", b"edge", b"\xff" * 3][int(rng.integers(7))]
        return f"attr {n.name}.{a.name}={a.s!r}"
    if kind == 4:                                            # the sparse initializer
        s = g.sparse_initializer[0]
        part = int(rng.integers(4))
        if part == 0:
            s.dims[int(rng.integers(len(s.dims)))] = int(rng.choice(HOSTILE_INTS[:10]))
            return f"sparse dims {list(s.dims)}"
        idx = np.frombuffer(s.indices.raw_data, np.int64).copy()
        if part == 1 and idx.size:
            idx[int(rng.integers(idx.size))] = int(rng.choice([-3, -1, 320, 2 ** 40, 0]))
        elif part == 2 and idx.size > 1:
            idx = idx[::-1].copy()                           # unordered
        else:
            s.values.raw_data = s.values.raw_data[: 4 * int(rng.integers(idx.size + 1))]
            s.values.dims[0] = len(s.values.raw_data) // 4
            return "sparse values shortened"
        s.indices.raw_data = idx.tobytes()
        return f"sparse indices part {part}"
    if kind == 5:                                            # node inputs
        choice = int(rng.integers(3))
        if not len(node.input):
            node.input.append("nosuch")
            return f"input {node.name} -> nosuch"
        if choice == 0:
            del node.input[int(rng.integers(len(node.input))):]
            return f"inputs {node.name} -> {list(node.input)}"
        if choice == 1:
            node.input[int(rng.integers(len(node.input)))] = "nosuch"
            return f"input {node.name} -> nosuch"
        node.input.append(node.input[0])
        return f"input {node.name} duplicated"
    if kind == 6:                                            # the opset
        m.opset_import[0].version = int(rng.choice([-1, 0, 1, 6, 7, 11, 22, 99, 2 ** 40]))
        return f"opset {m.opset_import[0].version}"
    if kind == 7:                                            # the input's dims
        dims = g.input[0].type.tensor_type.shape.dim
        d = dims[int(rng.integers(len(dims)))]
        if rng.random() < 0.3:
            d.dim_param = "N"
        else:
            d.dim_value = int(rng.choice([0, 3, 2 ** 20, 2 ** 40, -1]))
        return f"input dims {[x.dim_value or x.dim_param for x in dims]}"
    node.op_type = str(rng.choice(["Conv", "MaxPool", "Gemm", "Reshape", "ConstantOfShape", "Expand",
                                   "Tile", "Resize", "Transpose", "NoSuchOp"]))
    return f"op {node.name} -> {node.op_type}"


# -- TFLite --------------------------------------------------------------------------------

def tflite_base():
    """(ModelWriter, inputs, outputs) of the TFLite model every TFLite case starts from."""
    from edge_infer.tflite_format import SAME, VALID, ModelWriter
    rng = np.random.default_rng(0)
    w = ModelWriter("fuzz")
    q = lambda s, z=0: {"scale": [s], "zero_point": [z]}    # noqa: E731
    x = w.tensor("x", "int8", (1, 8, 8, 2), quant=q(0.05, -3))
    wc = w.tensor("wc", "int8", (4, 3, 3, 2), data=rng.integers(-127, 128, (4, 3, 3, 2)),
                  quant={"scale": [0.01, 0.02, 0.015, 0.01], "zero_point": [0, 0, 0, 0], "axis": 0})
    bc = w.tensor("bc", "int32", (4,), data=rng.integers(-500, 500, 4),
                  quant={"scale": [5e-4, 1e-3, 7.5e-4, 5e-4], "zero_point": [0, 0, 0, 0]})
    c = w.tensor("c", "int8", (1, 8, 8, 4), quant=q(0.1, -5))
    w.op("CONV_2D", [x, wc, bc], [c], {"padding": SAME, "stride_w": 1, "stride_h": 1,
                                        "fused_activation_function": 1, "dilation_w_factor": 1,
                                        "dilation_h_factor": 1})
    wd = w.tensor("wd", "int8", (1, 3, 3, 4), data=rng.integers(-127, 128, (1, 3, 3, 4)),
                  quant={"scale": [0.02] * 4, "zero_point": [0] * 4, "axis": 3})
    bd = w.tensor("bd", "int32", (4,), data=rng.integers(-100, 100, 4),
                  quant={"scale": [2e-3] * 4, "zero_point": [0] * 4})
    d = w.tensor("d", "int8", (1, 8, 8, 4), quant=q(0.1, 0))
    w.op("DEPTHWISE_CONV_2D", [c, wd, bd], [d], {"padding": SAME, "stride_w": 1, "stride_h": 1,
                                                  "depth_multiplier": 1, "dilation_w_factor": 1,
                                                  "dilation_h_factor": 1})
    p = w.tensor("p", "int8", (1, 4, 4, 4), quant=q(0.1, 0))
    w.op("MAX_POOL_2D", [d], [p], {"padding": VALID, "stride_w": 2, "stride_h": 2, "filter_width": 2,
                                   "filter_height": 2})
    shp = w.tensor("shp", "int32", (2,), data=np.array([1, 64]))
    f = w.tensor("f", "int8", (1, 64), quant=q(0.1, 0))
    w.op("RESHAPE", [p, shp], [f], {"new_shape": [1, 64]})
    wf = w.tensor("wf", "int8", (5, 64), data=rng.integers(-127, 128, (5, 64)), quant=q(0.01))
    bf = w.tensor("bf", "int32", (5,), data=rng.integers(-100, 100, 5), quant=q(1e-3))
    fo = w.tensor("fo", "int8", (1, 5), quant=q(0.2, 3))
    w.op("FULLY_CONNECTED", [f, wf, bf], [fo], {"fused_activation_function": 0})
    fl = w.tensor("fl", "float32", (1, 5))
    w.op("DEQUANTIZE", [fo], [fl])
    y = w.tensor("y", "float32", (1, 5))
    w.op("SOFTMAX", [fl], [y], {"beta": 1.0})
    return w, [x], [y]


def _mutate_tflite(w, rng) -> str:
    kind = int(rng.integers(7))
    if kind == 0:                                            # an operator option
        op = w.ops[int(rng.integers(len(w.ops)))]
        if not op["options"]:
            return f"{op['name']} has no options"
        key = sorted(op["options"])[int(rng.integers(len(op["options"])))]
        v = op["options"][key]
        if isinstance(v, list):
            v = list(v)
            v[int(rng.integers(len(v)))] = int(rng.choice(HOSTILE_INTS[:11]))
        elif isinstance(v, float):
            v = float(rng.choice(HOSTILE_FLOATS))
        else:
            v = int(rng.choice([-7, -1, 0, 1, 2, 3, 5, 6, 100, 127, 2 ** 31 - 1]))
        op["options"][key] = v
        return f"option {op['name']}.{key}={v}"
    t = w.tensors[int(rng.integers(len(w.tensors)))]
    if kind == 1:                                            # a tensor's shape
        if t["shape"]:
            t["shape"][int(rng.integers(len(t["shape"])))] = int(rng.choice(HOSTILE_INTS[:11]))
        if rng.random() < 0.2:
            t["shape"] = t["shape"][:-1]
        return f"tensor {t['name']} shape {t['shape']}"
    if kind == 2:                                            # a buffer: truncated or padded
        if not t["buffer"]:
            t["buffer"] = int(rng.integers(len(w.buffers) + 2)) - 1    # an index, possibly out of range
            return f"tensor {t['name']} buffer index {t['buffer']}"
        data = w.buffers[t["buffer"]]
        w.buffers[t["buffer"]] = data[: int(rng.integers(len(data)))] if rng.random() < 0.7 else data + bytes(13)
        return f"tensor {t['name']} buffer {len(data)} -> {len(w.buffers[t['buffer']])} bytes"
    if kind == 3:                                            # quantization parameters
        if t["quant"] is None:
            t["quant"] = {"scale": [0.1], "zero_point": [0]}
        qd = t["quant"] = dict(t["quant"])
        key = ["scale", "zero_point", "axis"][int(rng.integers(3))]
        if key == "scale":
            qd["scale"] = [float(rng.choice(HOSTILE_FLOATS))] * int(rng.choice([1, len(qd["scale"]), 3]))
        elif key == "zero_point":
            qd["zero_point"] = [int(rng.choice([-129, 128, 300, -2 ** 40, 2 ** 40, 7]))] * len(qd["zero_point"])
        else:
            qd["axis"] = int(rng.choice([-1, 1, 2, 3, 7, 2 ** 31 - 1]))
        return f"tensor {t['name']} quant {key}={qd[key]}"
    if kind == 4:                                            # a tensor's type
        t["type"] = int(rng.choice([0, 1, 2, 3, 4, 5, 9, 10, 17, 18, 99]))
        return f"tensor {t['name']} type {t['type']}"
    op = w.ops[int(rng.integers(len(w.ops)))]
    if kind == 5:                                            # operator inputs / outputs
        which = "inputs" if rng.random() < 0.7 else "outputs"
        lst = list(op[which])
        if lst and rng.random() < 0.5:
            lst[int(rng.integers(len(lst)))] = int(rng.choice([-1, -5, len(w.tensors), 2 ** 31 - 1, 0]))
        else:
            lst = lst[: int(rng.integers(len(lst) + 1))]
        op[which] = lst
        return f"{op['name']} {which} {lst}"
    name, custom, version = w.opcode_list[op["opcode"]]            # the op version
    w.opcode_list[op["opcode"]] = (name, custom, int(rng.choice([0, -1, 7, 127, 2 ** 31 - 1])))
    return f"{name} version {w.opcode_list[op['opcode']][2]}"


def tflite_base2():
    """(ModelWriter, inputs, outputs) of a second float TFLite base: PAD, TRANSPOSE_CONV,
    CONCATENATION, RESIZE_BILINEAR, STRIDED_SLICE, TRANSPOSE, MEAN, ADD, SPLIT, GATHER."""
    from edge_infer.tflite_format import SAME, ModelWriter
    rng = np.random.default_rng(1)
    w = ModelWriter("fuzz2")
    f = lambda name, shape: w.tensor(name, "float32", shape)     # noqa: E731
    i32 = lambda name, v: w.tensor(name, "int32", (len(v),), data=np.array(v))   # noqa: E731
    x = f("x", (1, 6, 6, 3))
    pads = w.tensor("pads", "int32", (4, 2), data=np.array([[0, 0], [1, 1], [1, 1], [0, 0]]))
    p = f("p", (1, 8, 8, 3))
    w.op("PAD", [x, pads], [p])
    wt = w.tensor("wt", "float32", (2, 2, 2, 3), data=rng.standard_normal((2, 2, 2, 3)))
    oshape = i32("oshape", [1, 16, 16, 2])
    ct = f("ct", (1, 16, 16, 2))
    w.op("TRANSPOSE_CONV", [oshape, wt, p], [ct], {"padding": SAME, "stride_w": 2, "stride_h": 2})
    size = i32("size", [16, 16])
    rz = f("rz", (1, 16, 16, 3))
    w.op("RESIZE_BILINEAR", [p, size], [rz], {"align_corners": False, "half_pixel_centers": True})
    cat = f("cat", (1, 16, 16, 5))
    w.op("CONCATENATION", [ct, rz], [cat], {"axis": 3, "fused_activation_function": 0})
    b, e, st = i32("b", [0, 1, 0, 0]), i32("e", [1, 15, 16, 4]), i32("st", [1, 2, 1, 1])
    ss = f("ss", (1, 7, 16, 4))
    w.op("STRIDED_SLICE", [cat, b, e, st], [ss], {"begin_mask": 0, "end_mask": 0, "shrink_axis_mask": 0})
    perm = i32("perm", [0, 2, 1, 3])
    tr = f("tr", (1, 16, 7, 4))
    w.op("TRANSPOSE", [ss, perm], [tr])
    sp_axis = w.tensor("sp_axis", "int32", (), data=np.array(3))
    s0, s1 = f("s0", (1, 16, 7, 2)), f("s1", (1, 16, 7, 2))
    w.op("SPLIT", [sp_axis, tr], [s0, s1], {"num_splits": 2})
    ad = f("ad", (1, 16, 7, 2))
    w.op("ADD", [s0, s1], [ad], {"fused_activation_function": 1})
    gi = i32("gi", [1, 0])
    ga = f("ga", (1, 16, 7, 2))
    w.op("GATHER", [ad, gi], [ga], {"axis": 3})
    rax = i32("rax", [1, 2])
    y = f("y", (1, 1, 1, 2))
    w.op("MEAN", [ga, rax], [y], {"keep_dims": True})
    return w, [x], [y]


# -- cases ----------------------------------------------------------------------------------

def make_cases(seed: int, n: int, folder: str) -> list:
    """Write ``n`` mutated ONNX and ``n`` mutated TFLite models to ``folder``; return their
    (file, description) pairs (a mutation that the writer cannot even serialise is skipped)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        m = onnx_base() if k % 2 == 0 else onnx_base2()
        desc = "; ".join(_mutate_onnx(m, rng) for _ in range(1 + int(rng.integers(2))))
        try:
            data = m.SerializeToString()
        except Exception:  # noqa: BLE001  (protobuf refuses to write it: not a file anyone can send)
            continue
        path = os.path.join(folder, f"case{k:05d}.onnx")
        with open(path, "wb") as f:
            f.write(data)
        out.append((path, desc))
    for k in range(n):
        w, ins, outs = tflite_base() if k % 2 == 0 else tflite_base2()
        desc = "; ".join(_mutate_tflite(w, rng) for _ in range(1 + int(rng.integers(2))))
        try:
            data = w.finish(ins, outs)
        except Exception:  # noqa: BLE001  (the flatbuffer builder refuses it)
            continue
        path = os.path.join(folder, f"case{k:05d}.tflite")
        with open(path, "wb") as f:
            f.write(data)
        out.append((path, desc))
    return out


def run_folder(folder: str, suffix: str = "") -> None:
    """Convert each model in ``folder`` (ending in ``suffix``) and run what converts once."""
    import tempfile
    from edge_infer import convert
    from edge_infer.runtime import Runtime
    from fuzz_cases import outcome, random_feeds

    def attempt(path, out):
        convert(path, out, max_bytes="256MB")
        rt = Runtime(out, backend="cpu", threads=1)
        rt.run(random_feeds(rt))
        return "ok"
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(folder)):
            if not name.endswith(suffix):
                continue
            print(json.dumps({"file": name, "outcome": "start"}), flush=True)
            res = outcome(name, lambda: attempt(os.path.join(folder, name), os.path.join(tmp, "out.eim")))
            print(json.dumps(res), flush=True)


if __name__ == "__main__":
    run_folder(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
