"""The shared op math of edge_infer/ops/ that every backend's kernels take: the broadcast loop
(ops.elementwise.broadcast_plan) against numpy's broadcasting, and the conv geometry
(ops.conv.conv_geometry) against the shape rules and onnxruntime's output shapes."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from edge_infer.errors import ShapeError
from edge_infer.ir import Node
from edge_infer.ops.conv import conv_geometry
from edge_infer.ops.elementwise import broadcast_plan


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.data())
def test_broadcast_plan_reads_what_numpy_broadcasting_reads(y_shape, data):
    def operand():
        rank = data.draw(st.integers(0, len(y_shape)))
        tail = y_shape[len(y_shape) - rank:]
        return tuple(d if data.draw(st.booleans()) else 1 for d in tail)
    a_shape, b_shape = operand(), operand()
    y_shape = tuple(y_shape)
    dims, sa, sb = broadcast_plan(a_shape, b_shape, y_shape)
    n = int(np.prod(y_shape))
    assert int(np.prod(dims)) == n
    a, b = np.arange(int(np.prod(a_shape))), np.arange(int(np.prod(b_shape)))
    want_a = np.broadcast_to(a.reshape(a_shape), y_shape).ravel()
    want_b = np.broadcast_to(b.reshape(b_shape), y_shape).ravel()
    idx = np.array(np.unravel_index(np.arange(n), dims)).T.reshape(n, len(dims))    # the kernels' loop
    assert np.array_equal(idx @ np.array(sa), want_a)
    assert np.array_equal(idx @ np.array(sb), want_b)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("group, k, stride, pad, dil", [(1, 3, 1, 1, 1), (2, 3, 2, 0, 1), (4, 1, 1, 0, 1),
                                                       (1, 3, 2, 1, 2)])
def test_conv_geometry_matches_onnxruntime_output(layout, group, k, stride, pad, dil):
    import onnxruntime as ort
    from onnx import helper, numpy_helper, TensorProto
    c, m, h, w = 4, 8, 11, 9
    wt = np.ones((m, c // group, k, k), np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=group, kernel_shape=[k, k], strides=[stride] * 2,
                            pads=[pad] * 4, dilations=[dil] * 2)
    model = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                            [1, c, h, w])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                                [numpy_helper.from_array(wt, "w")]),
                              opset_imports=[helper.make_opsetid("", 17)])
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros((1, c, h, w), np.float32)})[0]
    attrs = dict(group=group, kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4, dilations=[dil] * 2,
                 data_layout=layout)
    ir = Node("Conv", ["x", "w"], ["y"], attrs, name="c")
    nhwc = layout == "NHWC"
    x_shape = (1, h, w, c) if nhwc else (1, c, h, w)
    y_shape = (y.shape[0], *y.shape[2:], y.shape[1]) if nhwc else y.shape
    g = conv_geometry(ir, x_shape, wt.shape, y_shape)
    assert (g.n, g.c, g.m, g.group, g.cg, g.mg) == (1, c, m, group, c // group, m // group)
    assert g.out_sp == tuple(y.shape[2:]) and g.last == nhwc
    with pytest.raises(ShapeError, match="'c'"):
        conv_geometry(ir, x_shape, wt.shape, tuple(d + 1 for d in y_shape))
    with pytest.raises(ShapeError, match="group"):
        conv_geometry(Node("Conv", ["x", "w"], ["y"], dict(attrs, group=3), name="c"), x_shape, wt.shape, y_shape)


def _family_of_schema():
    from edge_infer import ops
    fams = {}
    for name in ("conv", "pool", "gemm", "elementwise", "norm", "tensor", "quantize", "reduce", "resize",
                 "dynamic", "sequence"):
        for op in getattr(ops, name).SCHEMAS:
            fams.setdefault(op, set()).add(f"edge_infer.ops.{name}")
    return fams


def test_each_op_family_defines_its_shape_rule_cost_and_int8_limits():
    """An op's shape rule, FLOP count and int8 limits live in the module of its schema (one
    definition each, registered in ops/shapes.py, ops/cost.py, ops/int8.py)."""
    from edge_infer.ops.cost import FLOPS
    from edge_infer.ops.int8 import INT8_LIMITS, INT8_OPS
    from edge_infer.ops.shapes import SHAPE_RULES
    fams = _family_of_schema()
    assert set(fams) <= set(SHAPE_RULES), sorted(set(fams) - set(SHAPE_RULES))
    for table in (SHAPE_RULES, FLOPS, INT8_LIMITS):
        for op, fn in table.items():
            if op in fams:
                assert fn.__module__ in fams[op] | {"edge_infer.ops.cost"}, (op, fn.__module__, fams[op])
    assert set(INT8_LIMITS) <= INT8_OPS


def test_int8_limits_are_asked_per_family():
    """ops.int8_ok reaches a family's limit: a depthwise conv over more taps than the exact
    float32 sums allow is refused (conv.py), a 3x3 one accepted."""
    from edge_infer.ir import Graph, Tensor
    from edge_infer.ops import int8_ok
    from edge_infer.ops.qmath import EXACT_K
    for k, ok in ((3, True), (int(np.sqrt(EXACT_K)) + 1, False)):
        g = Graph("dw")
        g.tensors["x"] = Tensor("x", "float32", (1, 4, 40, 40))
        g.tensors["w"] = Tensor("w", "float32", (4, 1, k, k), np.ones((4, 1, k, k), np.float32))
        g.tensors["y"] = Tensor("y", "float32", (1, 4, 40 - k + 1, 40 - k + 1))
        node = Node("Conv", ["x", "w"], ["y"], {"group": 4}, name="dw")
        g.nodes, g.inputs, g.outputs = [node], ["x"], ["y"]
        assert (int8_ok(node, g) is None) == ok, (k, int8_ok(node, g))


def test_every_backend_dispatches_through_its_kernel_table():
    """supported_ops is the table's op list; the OpenCL and CUDA int8 kernels are the tables'
    int8 entries, so one read says what runs for a Conv on int8 tensors."""
    from edge_infer.backends.cpu import CpuBackend
    from edge_infer.backends.cuda import CudaBackend
    from edge_infer.backends.opencl import OpenCLBackend
    for b in (CpuBackend(), OpenCLBackend(), CudaBackend()):
        table = b.kernel_table()
        assert list(b.supported_ops()) == table.ops() and "Conv" in table, b.name
        kinds = {e.dtype for e in table.entries("Conv")}
        assert "int8" in kinds and kinds & {"any", "float"}, (b.name, kinds)
    ocl = {e.dtype: e.prepare.__name__ for e in OpenCLBackend().kernel_table().entries("Conv")}
    assert ocl == {"int8": "int8_conv", "any": "conv"}


def test_tflite_importer_keeps_no_int8_list_of_its_own():
    """What the TFLite importer keeps int8 is ops/int8.py's answer (INT8_OPS, each op's
    @int8_limit), as for the quantizer and the QDQ importer: it holds no list of its own
    (tests/test_tflite.py::test_import_int8_asks_the_op_layer_what_stays_int8 shows a limit
    that refuses sending the conv to float)."""
    from edge_infer.frontends.tflite import importer, tables
    from edge_infer.ops import int8
    assert not [n for n in vars(tables) if "INT8" in n]
    assert importer.INT8_OPS is int8.INT8_OPS and importer.INT8_LIMITS is int8.INT8_LIMITS
