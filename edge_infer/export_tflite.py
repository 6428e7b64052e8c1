"""IR graph (or .eim artifact) -> TFLite flatbuffer that LiteRT / tflite-runtime run.

>>> from edge_infer.export_tflite import export_tflite                     # doctest: +SKIP
>>> data = export_tflite("model.eim", "model.tflite")                      # also returns the bytes

Steps: the graph is specialised to static shapes (symbolic dims -> 1: TFLite's shapes
are static), spatial ops still in NCHW are put in NHWC by the layout pass (Transposes at
the layout boundaries only, so graph inputs and outputs keep their layout), then every
node becomes one or a few builtin ops (docs/tflite.md has the table). int8 graphs carry
TFLite's own scheme (edge_infer/quantize), so scales and zero points are copied: weights
per output channel (``quantized_dimension`` follows the weight transposition), int32
biases, QUANTIZE / DEQUANTIZE at the fp32 boundaries. Where TFLite's int8 kernels demand
parameters the IR does not have (LOGISTIC's fixed 1/256 output, CONCATENATION inputs at the
output's parameters, the intermediate of a conv + residual add) a QUANTIZE requantizes.

Sparse weights (``edge_infer.sparse.SparseArray``) are written dense by default; with
``sparse=True`` in TFLite's sparsity format (every dim dense but the last, CSR, int32 arrays
as LiteRT's sparse kernel reads them): float FULLY_CONNECTED weights as they are (LiteRT runs
them sparse), CONV_2D weights behind DENSIFY. LiteRT's builtin kernels run such files; its
default XNNPACK delegate misreads sparse FULLY_CONNECTED weights (measured here).

Forms LiteRT's XNNPACK delegate takes where the plain one is left out (PAD, SPLIT / SLICE,
nearest upsampling as CONCATENATION + RESHAPE, int8 clamps as ADD, ...) are in
``export_tflite_xnnpack``; DEPTH_TO_SPACE / SPACE_TO_DEPTH and MediaPipe's custom ops in
``export_tflite_vision``.

``unsupported_reason(node, graph)`` says why a node cannot be exported (None when it can),
for the LiteRT backend's ``supports``.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import EdgeInferError
from .ir import Graph, Node
from .ir.padding import resolve_pads
from . import export_tflite_vision as vision
from . import export_tflite_xnnpack as xnn
from .export_tflite_common import (_BUILTIN_OPS, _ELEMENTWISE, _REDUCE, _UNARY, ExportError,  # noqa: F401
                                   _Q, _q8, _same_params, _tensor_dense)    # (ExportError: public)
from .export_tflite_ops import ActivationOps, TensorOps
from .tflite_format import ACT_NONE, ACT_RELU, ACT_RELU6, DENSE, SAME, SPARSE_CSR, VALID, ModelWriter

__all__ = ["export_tflite", "graph_to_tflite", "unsupported_reason", "ExportError", "EXPORTED_OPS"]

#: every IR op the exporter writes (the builtin maps and export_tflite_vision's ops)
EXPORTED_OPS = tuple(sorted(set(_BUILTIN_OPS) | set(vision.EMITTERS)))


class _Exporter(ActivationOps, TensorOps):
    def __init__(self, graph: Graph, sparse: bool = False, reference_mean: bool = False,
                 custom_transpose_conv: bool = False):
        self.g = graph
        #: write SparseArray weights of float FULLY_CONNECTED in TFLite's sparsity format
        self.sparse = sparse
        #: int8 average pools (global too) as AVERAGE_POOL_2D, which TFLite's reference kernels round
        #: as the IR does, instead of MEAN / float AVERAGE_POOL_2D between DEQUANTIZE and QUANTIZE
        #: (XNNPACK has no int8 average pool: those it delegates, within a step)
        self.reference_mean = reference_mean
        #: float ConvTranspose with a bias as MediaPipe's custom Convolution2DTransposeBias
        self.custom_transpose_conv = custom_transpose_conv
        self.w = ModelWriter("edge_infer")
        self.ids: Dict[str, int] = {}
        self.alias: Dict[str, str] = {}
        self.k = 0

    # -- tensors ---------------------------------------------------------------------------
    def tq(self, quant: Optional[dict], axis: Optional[int] = None) -> Optional[dict]:
        if quant is None:
            return None
        s = [float(v) for v in quant["scale"]]
        z = [int(v) for v in (quant.get("zero_point") or [0] * len(s))]
        if len(z) == 1 and len(s) > 1:
            z = z * len(s)
        ax = axis if axis is not None else quant.get("axis")
        return {"scale": s, "zero_point": z, "axis": int(ax or 0) if len(s) > 1 else 0}

    def tid(self, name: str) -> int:
        """TFLite index of IR tensor ``name`` (a constant is written as it is)."""
        name = self.alias.get(name, name)
        if name in self.ids:
            return self.ids[name]
        t = self.g.tensors[name]
        data = _tensor_dense(t)
        dt = t.dtype if data is None else data.dtype.name
        if dt == "float64":
            dt, data = "float32", None if data is None else data.astype(np.float32)
        if dt == "int64" and data is not None and t.quant is None:
            if data.size == 0 or (np.abs(data).max() < 2 ** 31):
                dt, data = "int32", data.astype(np.int32)
        shape = tuple(t.shape) if t.shape is not None else (data.shape if data is not None else ())
        if data is not None:
            shape = data.shape
        self.ids[name] = self.w.tensor(name, dt, shape, data, self.tq(t.quant))
        return self.ids[name]

    def const(self, base: str, value, dtype: Optional[str] = None, quant: Optional[dict] = None,
              sparsity: Optional[dict] = None, raw: Optional[bytes] = None, shape=None) -> int:
        arr = np.asarray(value, dtype=dtype) if raw is None else None
        self.k += 1
        return self.w.tensor(f"{base}_{self.k}", dtype or arr.dtype.name,
                             shape if shape is not None else arr.shape, arr, quant, sparsity, raw)

    def temp(self, base: str, like: str, shape=None, quant="same", dtype: Optional[str] = None) -> int:
        t = self.g.tensors[self.alias.get(like, like)]
        self.k += 1
        q = t.quant if quant == "same" else quant
        return self.w.tensor(f"{base}_{self.k}", dtype or t.dtype, tuple(shape if shape is not None else t.shape),
                             None, self.tq(q))

    def shape(self, name: str) -> Tuple[int, ...]:
        t = self.g.tensors[self.alias.get(name, name)]
        if t.shape is None:
            raise ExportError(f"tensor {name!r} has no known shape")
        return tuple(int(d) for d in t.shape)

    def cval(self, name: str) -> Optional[np.ndarray]:
        if not name:
            return None
        t = self.g.tensors[self.alias.get(name, name)]
        return _tensor_dense(t)

    def ints(self, values, base="shape") -> int:
        return self.const(base, np.asarray(values, np.int64).astype(np.int32), "int32")


    # -- geometry --------------------------------------------------------------------------------
    def window(self, node: Node, in_sp: Sequence[int], kernel: Sequence[int]):
        """(TFLite padding, explicit pads or None) for a 2-D window op: SAME or VALID when they
        give the IR's pads, else VALID after an explicit pad."""
        a = node.attrs
        strides = [int(s) for s in (a.get("strides") or [1, 1])]
        dil = [int(d) for d in (a.get("dilations") or [1, 1])]
        pads, out = resolve_pads(list(in_sp), list(kernel), strides, dil, list(a.get("pads") or [0] * 4),
                                 str(a.get("auto_pad", "NOTSET") or "NOTSET"), bool(a.get("ceil_mode", 0)))
        same, out_same = resolve_pads(list(in_sp), list(kernel), strides, dil, [0] * 4, "SAME_UPPER")
        if list(pads) == list(same) and list(out) == list(out_same):
            return SAME, None, strides, dil
        if not any(pads):
            return VALID, None, strides, dil
        return VALID, pads, strides, dil

    def pad_explicit(self, x: int, xname: str, pads: Sequence[int], value, base: str) -> int:
        """PADV2 of NHWC tensor x by spatial ``pads`` [t, l, b, r] with ``value`` (raw, x's dtype)."""
        xs = self.shape(xname)
        xt = self.g.tensors[self.alias.get(xname, xname)]
        paddings = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
        shape = (xs[0], xs[1] + pads[0] + pads[2], xs[2] + pads[1] + pads[3], xs[3])
        out = self.temp(base + "_padded", xname, shape=shape)
        xnn.write_pad(self, x, self.const("paddings", paddings, "int32"), value, xt, out)
        return out

    # -- per op ------------------------------------------------------------------------------------
    def emit(self, node: Node) -> None:
        op = node.op
        fn = getattr(self, "op_" + op, None)
        if op in _ELEMENTWISE:
            self.elementwise(node)
        elif op in _UNARY:
            self.unary(node)
        elif op in _REDUCE:
            self.reduce(node)
        elif fn is not None:
            fn(node)
        elif op in vision.EMITTERS:
            vision.EMITTERS[op](self, node)
        else:
            raise ExportError(f"node {node.name!r}: op {op} has no TFLite export")

    def out_ids(self, node: Node) -> List[int]:
        return [self.tid(o) if o else -1 for o in node.outputs]

    def op_Conv(self, node: Node) -> None:
        self.conv(node)

    op_FusedConv = op_Conv

    def conv(self, node: Node) -> None:
        g = self.g
        if (node.attrs.get("data_layout") or "NCHW") != "NHWC":
            raise ExportError(f"node {node.name!r}: only NHWC convolutions export (run the layout pass)")
        xname, wname = node.inputs[0], node.inputs[1]
        bname = node.inputs[2] if len(node.inputs) > 2 else ""
        zname = node.inputs[3] if node.op == "FusedConv" and len(node.inputs) > 3 else ""
        W = self.cval(wname)
        if W is None or W.ndim != 4:
            raise ExportError(f"node {node.name!r}: TFLite convolutions need constant 2-D weights")
        xs = self.shape(xname)
        c_in = xs[3]
        group = int(node.attrs.get("group", 1))
        m = W.shape[0]
        kernel = [int(k) for k in W.shape[2:]]
        padding, pads, strides, dil = self.window(node, xs[1:3], kernel)
        wt = g.tensors[wname]
        x = self.tid(xname)
        yname = node.outputs[0]
        yt = g.tensors[yname]
        if pads is not None:
            zp = int(g.tensors[xname].quant["zero_point"][0]) if _q8(g.tensors[xname]) else 0
            x = self.pad_explicit(x, xname, pads, zp, node.name)
            xs = tuple(self.w.tensors[x]["shape"])
        act, rest = self.fused_act(node)
        if zname:
            act_conv, after_add = ACT_NONE, act
        else:
            act_conv, after_add = act, None
        y = self.tid(yname)
        conv_out = y
        if zname or rest:
            conv_out = self.temp(node.name + "_conv", yname,
                                 quant=self.residual_params(yt, g.tensors[zname], act) if zname else "same")
        bias = self.bias(bname, m, node, wt, g.tensors[xname])
        opts = {"padding": padding, "stride_w": strides[1], "stride_h": strides[0],
                "dilation_w_factor": dil[1], "dilation_h_factor": dil[0], "fused_activation_function": act_conv}
        depthwise = group > 1 and group == c_in and m % c_in == 0 and W.shape[1] == 1
        if not depthwise:           # grouped filters (I = C / group) are CONV_2D's own grouped form
            wq = self.tq(wt.quant, 0)
            if self.sparse and self._sparse(wt) is not None:
                # a sparse constant behind DENSIFY, as the TFLite converter writes sparse convs
                wsp = self.sparse_weights(W.transpose(0, 2, 3, 1), node, wq)
                wid = self.w.tensor(f"{wname}_dense_{self.k}", W.dtype.name, (m, *kernel, W.shape[1]), None, wq)
                self.w.op("DENSIFY", [wsp], [wid])
            else:
                wid = self.const(wname, np.ascontiguousarray(W.transpose(0, 2, 3, 1)), W.dtype.name, wq)
            self.w.op("CONV_2D", [x, wid, bias], [conv_out], opts, version=3 if _q8(yt) else 1)
        else:
            wq = self.tq(wt.quant, 3)
            wid = self.const(wname, np.ascontiguousarray(W.transpose(1, 2, 3, 0)), W.dtype.name, wq)
            self.w.op("DEPTHWISE_CONV_2D", [x, wid, bias], [conv_out], dict(opts, depth_multiplier=m // c_in),
                      version=3 if _q8(yt) else 1)
        if zname:
            add_out = self.temp(node.name + "_residual", yname) if rest else y
            self.w.op("ADD", [conv_out, self.tid(zname)], [add_out], {"fused_activation_function": after_add})
            conv_out = add_out
        if rest:
            self.activation_op(rest[0], rest[1], conv_out, y, yname)

    @staticmethod
    def residual_params(yt, zt, act: int) -> Optional[dict]:
        """int8 parameters for the conv output before its residual add (TFLite has no fused
        form; the IR has no tensor there): a range covering y - z over y's and z's ranges,
        from y's lower end when a Relu / Relu6 clamps it (saturating below -z_max then changes
        nothing). Two roundings where the IR has one: up to about (s_t / s_y + 1) / 2 steps."""
        if not (_q8(yt) and _q8(zt)):
            return None

        def rng(t):
            s, z = float(t.quant["scale"][0]), int(t.quant["zero_point"][0])
            return s * (-128 - z), s * (127 - z)
        (ylo, yhi), (zlo, zhi) = rng(yt), rng(zt)
        lo = (max(ylo, 0.0) if act in (ACT_RELU, ACT_RELU6) else ylo) - zhi
        hi = yhi - zlo
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = (hi - lo) / 255.0 or 1.0
        zp = int(np.clip(round(-128 - lo / scale), -128, 127))
        return {"scale": [float(np.float32(scale))], "zero_point": [zp], "axis": None}

    def bias(self, bname: str, m: int, node: Node, wt, xt) -> int:
        """The bias tensor of a conv / FC: the IR's, or zeros (LiteRT wants one)."""
        if bname:
            b = self.cval(bname)
            bt = self.g.tensors[bname]
            if b is None:
                raise ExportError(f"node {node.name!r}: the bias must be a constant")
            quant = bt.quant
            if quant is None and b.dtype == np.int32 and _q8(xt) and wt.quant is not None:
                quant = self.implied_bias_quant(m, wt, xt)     # an imported model's bias: s_x * s_w
            return self.const(bname, b.reshape(-1), b.dtype.name if b.dtype != np.float64 else "float32",
                              self.tq(quant, 0))
        if _q8(xt) and wt.quant is not None:
            return self.const("bias", np.zeros(m, np.int32), "int32", self.implied_bias_quant(m, wt, xt))
        return self.const("bias", np.zeros(m, np.float32))

    @staticmethod
    def implied_bias_quant(m: int, wt, xt) -> dict:
        """int32 bias parameters of an int8 conv / FC: s_x * s_w[c], zero point 0."""
        sw = np.asarray(wt.quant["scale"], np.float64)
        s = (np.float64(xt.quant["scale"][0]) * sw).astype(np.float32)
        s = np.broadcast_to(s, (m,)) if s.size == 1 else s
        return {"scale": s.tolist(), "zero_point": [0] * m, "axis": 0}

    def fc(self, node: Node, a: str, W: np.ndarray, wquant: Optional[dict], bname_or_arr, act: int,
           rest, keep_dims: bool, sparse=None) -> None:
        """FULLY_CONNECTED y = a @ W.T + bias with W [N, K] (IR weights already transposed)."""
        yname = node.outputs[0]
        y = self.tid(yname)
        out = self.temp(node.name + "_fc", yname) if rest else y
        n = W.shape[0]
        xt = self.g.tensors[a]
        if isinstance(bname_or_arr, str):
            bid = self.bias(bname_or_arr, n, node, _Q(wquant), xt)
        else:
            bid = self.const("bias", np.asarray(bname_or_arr, np.float32).reshape(-1))
        if sparse is not None and self.sparse:
            wid = self.sparse_weights(W, node)
        else:
            wid = self.const(node.name + "_weights", np.ascontiguousarray(W), W.dtype.name, self.tq(wquant, 0))
        self.w.op("FULLY_CONNECTED", [self.tid(a), wid, bid], [out],
                  {"fused_activation_function": act, "keep_num_dims": bool(keep_dims)},
                  version=5 if _q8(xt) else 1)
        if rest:
            self.activation_op(rest[0], rest[1], out, y, yname)

    def sparse_weights(self, W: np.ndarray, node: Node, quant: Optional[dict] = None) -> int:
        """A constant in TFLite's sparsity format: every dim dense but the last, which is CSR
        (int32 arrays: what LiteRT's sparse FULLY_CONNECTED kernel reads)."""
        W = np.ascontiguousarray(W)
        rows_shape = W.shape[:-1]
        flat = W.reshape(-1, W.shape[-1])
        rows, cols = np.nonzero(flat)
        counts = np.bincount(rows, minlength=flat.shape[0])
        segments = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        sp = {"traversal_order": list(range(W.ndim)), "block_map": [],
              "dim_metadata": [{"format": DENSE, "dense_size": int(d)} for d in rows_shape]
              + [{"format": SPARSE_CSR, "segments": segments, "indices": cols.astype(np.int32)}]}
        return self.const(node.name + "_weights", None, W.dtype.name, quant, sparsity=sp,
                          raw=flat[rows, cols].astype(W.dtype.newbyteorder("<")).tobytes(), shape=W.shape)

    def op_Gemm(self, node: Node) -> None:
        a = node.attrs
        A, B = node.inputs[0], node.inputs[1]
        C = node.inputs[2] if len(node.inputs) > 2 else ""
        if int(a.get("transA", 0)):
            raise ExportError(f"node {node.name!r}: Gemm with transA has no FULLY_CONNECTED form")
        bt = self.g.tensors[B]
        Bv = self.cval(B)
        if Bv is None or Bv.ndim != 2:
            raise ExportError(f"node {node.name!r}: Gemm needs constant 2-D B")
        sparse = self._sparse(bt)
        W = Bv if int(a.get("transB", 0)) else Bv.T
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        q8 = _q8(bt)
        if alpha != 1.0:
            if q8:
                raise ExportError(f"node {node.name!r}: int8 Gemm with alpha != 1")
            W = (W * alpha).astype(np.float32)
        act, rest = self.fused_act(node) if node.op == "FusedGemm" else (ACT_NONE, None)
        bias: Union[str, np.ndarray] = ""
        if C:
            Cv = self.cval(C)
            ok_shape = Cv is not None and Cv.size == W.shape[0] and (Cv.ndim == 1 or Cv.shape[-1] == W.shape[0])
            if not ok_shape:
                raise ExportError(f"node {node.name!r}: Gemm C must be a constant [N] bias")
            if q8:
                if beta != 1.0:
                    raise ExportError(f"node {node.name!r}: int8 Gemm with beta != 1")
                bias = C
            else:
                bias = (Cv.reshape(-1) * beta).astype(np.float32)
        wq = dict(bt.quant, axis=0) if bt.quant is not None else None
        self.fc(node, A, np.ascontiguousarray(W), wq, bias, act, rest, keep_dims=False,
                sparse=sparse if not q8 and alpha == 1.0 else None)

    op_FusedGemm = op_Gemm

    @staticmethod
    def _sparse(t):
        try:
            from .sparse.encodings import SparseArray
        except ImportError:
            return None
        return t.data if isinstance(t.data, SparseArray) else None

    def op_MatMul(self, node: Node) -> None:
        A, B = node.inputs[0], node.inputs[1]
        Bv = self.cval(B)
        bt = self.g.tensors[B]
        act, rest = self.fused_act(node) if node.op == "FusedMatMul" else (ACT_NONE, None)
        extra = node.inputs[2] if node.op == "FusedMatMul" and len(node.inputs) > 2 else ""
        if Bv is not None and Bv.ndim == 2:
            bias: Union[str, np.ndarray] = ""
            ev = self.cval(extra) if extra else None
            q8 = _q8(self.g.tensors[A])
            if extra and (ev is None or ev.size != Bv.shape[1]
                          or q8 and not (ev.dtype == np.int32 and self.g.tensors[extra].quant is not None)):
                raise ExportError(f"node {node.name!r}: FusedMatMul bias must be a constant [N] "
                                  "(float, or int32 at s_x s_w in int8)")
            if extra:
                bias = extra if q8 else ev.reshape(-1).astype(np.float32)
            wq = dict(bt.quant, axis=0) if bt.quant is not None else None
            self.fc(node, A, np.ascontiguousarray(Bv.T), wq, bias, act, rest,
                    keep_dims=len(self.shape(A)) > 2)
            return
        if _q8(self.g.tensors[A]) or extra or act or rest:
            raise ExportError(f"node {node.name!r}: MatMul of two computed tensors exports in float only")
        self.w.op("BATCH_MATMUL", [self.tid(A), self.tid(B)], self.out_ids(node), {"adj_x": False, "adj_y": False})

    op_FusedMatMul = op_MatMul

    def op_ConvTranspose(self, node: Node) -> None:
        a = node.attrs
        xname, wname = node.inputs[0], node.inputs[1]
        bname = node.inputs[2] if len(node.inputs) > 2 else ""
        W = self.cval(wname)
        xs = self.shape(xname)
        ys = self.shape(node.outputs[0])
        xt, yt, wt = self.g.tensors[xname], self.g.tensors[node.outputs[0]], self.g.tensors[wname]
        q8 = _q8(xt)
        if W is None or W.ndim != 4 or len(xs) != 4 or int(a.get("group", 1)) != 1 \
                or any(int(d) != 1 for d in (a.get("dilations") or [1, 1])):
            raise ExportError(f"node {node.name!r}: only 2-D ConvTranspose (group 1, no dilation) exports")
        if q8 and not (_q8(yt) and W.dtype == np.int8 and wt.quant is not None):
            raise ExportError(f"node {node.name!r}: int8 ConvTranspose needs int8 output and weights")
        nhwc = (a.get("data_layout") or "NCHW") == "NHWC"
        if nhwc:                  # the geometry below reads NCHW shapes
            xs, ys = (xs[0], xs[3], xs[1], xs[2]), (ys[0], ys[3], ys[1], ys[2])
        strides = [int(s) for s in (a.get("strides") or [1, 1])]
        from .ops.conv import conv_transpose_geometry
        pads, out = conv_transpose_geometry(list(xs[2:]), list(W.shape[2:]), a)
        padding = None
        for p_type in (SAME, VALID):
            # TFLite checks in = ceil(out / s) (SAME) or ceil((out - k + 1) / s) (VALID), pads
            # total // 2 at the start (SAME) or none, and cuts the rest at the end
            ok = True
            for i in range(2):
                k, s = W.shape[2 + i], strides[i]
                total = s * (xs[2 + i] - 1) + k - out[i]
                begin = total // 2 if p_type == SAME else 0
                span = out[i] if p_type == SAME else out[i] - k + 1
                ok &= total >= 0 and pads[i] == begin and pads[2 + i] == total - begin and -(-span // s) == xs[2 + i]
            if ok:
                padding = p_type
                break
        if padding is None:
            raise ExportError(f"node {node.name!r}: ConvTranspose pads {pads} are neither SAME nor VALID")
        x = self.tid(xname)
        if nhwc:
            xn, yn = x, self.out_ids(node)[0]
        else:
            xn = self.temp("ct_in", xname, shape=(xs[0], xs[2], xs[3], xs[1]))
            self.w.op("TRANSPOSE", [x, self.ints([0, 2, 3, 1], "perm")], [xn])
            yn = self.temp("ct_out", node.outputs[0], shape=(ys[0], ys[2], ys[3], ys[1]))
        m = W.shape[1]
        if q8:
            # (O, H, W, I) int8 weights per output channel (the IR's axis 1 -> TFLite's 0), an
            # int32 bias at s_x s_w: the IR's own integers, so TFLite's accumulator is ours
            sw = np.broadcast_to(np.asarray(wt.quant["scale"], np.float32).reshape(-1), (m,))
            wid = self.const(wname, np.ascontiguousarray(W.transpose(1, 2, 3, 0)), "int8",
                             {"scale": [float(v) for v in sw], "zero_point": [0] * m, "axis": 0})
            bq = {"scale": [float(v) for v in (np.float32(xt.quant["scale"][0]) * sw).astype(np.float32)],
                  "zero_point": [0] * m, "axis": 0}
            bias = self.cval(bname).reshape(-1).astype(np.int32) if bname else np.zeros(m, np.int32)
            bid = self.const("ct_bias", bias, "int32", bq)
        else:
            wid = self.const(wname, np.ascontiguousarray(W.transpose(1, 2, 3, 0)), "float32")     # (O, H, W, I)
            bid = self.const(bname, self.cval(bname).reshape(-1).astype(np.float32)) if bname else None
        ins = [self.ints([ys[0], ys[2], ys[3], ys[1]], "output_shape"), wid, xn] + ([bid] if bid is not None else [])
        if self.custom_transpose_conv and bid is not None and not q8:
            vision.write_transpose_conv_bias(self, xn, wid, bid, yn, padding, strides)
        else:
            self.w.op("TRANSPOSE_CONV", ins, [yn], {"padding": padding, "stride_w": strides[1],
                                                    "stride_h": strides[0]}, version=3 if bid is not None else 1)
        if not nhwc:
            self.w.op("TRANSPOSE", [yn, self.ints([0, 3, 1, 2], "perm")], self.out_ids(node))

    def pool(self, node: Node, name: str) -> None:
        if (node.attrs.get("data_layout") or "NCHW") != "NHWC" or len(self.shape(node.inputs[0])) != 4:
            raise ExportError(f"node {node.name!r}: only 2-D NHWC pools export")
        if len(node.outputs) > 1 and node.outputs[1]:
            raise ExportError(f"node {node.name!r}: MaxPool indices have no TFLite form")
        xname = node.inputs[0]
        xs = self.shape(xname)
        k = [int(v) for v in node.attrs["kernel_shape"]]
        padding, pads, strides, dil = self.window(node, xs[1:3], k)
        if any(d != 1 for d in dil):
            raise ExportError(f"node {node.name!r}: dilated pools have no TFLite form")
        x = self.tid(xname)
        xt = self.g.tensors[xname]
        if pads is not None:
            if name == "MAX_POOL_2D":
                low = xnn.max_pool_pad_value(self, xname, -128 if _q8(xt) else np.finfo(np.float32).min)
                x = self.pad_explicit(x, xname, pads, low, node.name)
            elif int(node.attrs.get("count_include_pad", 0)):
                x = self.pad_explicit(x, xname, pads, int(xt.quant["zero_point"][0]) if _q8(xt) else 0, node.name)
            elif _q8(xt):
                raise ExportError(f"node {node.name!r}: int8 AveragePool pads {pads} exclude padding but are not SAME")
            else:
                # float: average over the zero-padded input, then rescale each output by
                # window size / taps inside the input
                x = self.pad_explicit(x, xname, pads, 0.0, node.name)
                ys = self.shape(node.outputs[0])
                ones = np.pad(np.ones(xs[1:3]), ((pads[0], pads[2]), (pads[1], pads[3])))
                count = np.array([[ones[i * strides[0]:i * strides[0] + k[0], j * strides[1]:j * strides[1] + k[1]].sum()
                                   for j in range(ys[2])] for i in range(ys[1])])
                mid = self.temp(node.name + "_incl", node.outputs[0])
                self.w.op(name, [x], [mid], {"padding": VALID, "stride_w": strides[1], "stride_h": strides[0],
                                             "filter_width": k[1], "filter_height": k[0],
                                             "fused_activation_function": ACT_NONE})
                corr = (k[0] * k[1] / np.maximum(count, 1)).astype(np.float32).reshape(1, ys[1], ys[2], 1)
                self.w.op("MUL", [mid, self.const("count_correction", corr)], self.out_ids(node),
                          {"fused_activation_function": ACT_NONE})
                return
        elif padding == SAME and name == "AVERAGE_POOL_2D" and int(node.attrs.get("count_include_pad", 0)) \
                and any(resolve_pads(list(xs[1:3]), k, strides, [1, 1], [0] * 4, "SAME_UPPER")[0]):
            x = self.pad_explicit(x, xname, resolve_pads(list(xs[1:3]), k, strides, [1, 1], [0] * 4,
                                                        "SAME_UPPER")[0],
                                  int(xt.quant["zero_point"][0]) if _q8(xt) else 0, node.name)
            padding = VALID
        yname = node.outputs[0]
        y = self.tid(yname)
        yt = self.g.tensors[yname]
        opts = {"padding": padding, "stride_w": strides[1], "stride_h": strides[0], "filter_width": k[1],
                "filter_height": k[0], "fused_activation_function": ACT_NONE}
        if name == "AVERAGE_POOL_2D" and _q8(xt) and not self.reference_mean:
            xnn.int8_average_pool(self, x, y, opts)
            return
        if _q8(xt) and not _same_params(xt.quant, yt.quant):
            mid = self.temp(node.name + "_pool", yname, quant=xt.quant)
            self.w.op(name, [x], [mid], opts)
            self.w.op("QUANTIZE", [mid], [y])
            return
        self.w.op(name, [x], [y], opts)

    def op_MaxPool(self, node: Node) -> None:
        if len(node.outputs) > 1 and node.outputs[1]:
            vision.emit_max_pool_argmax(self, node)
            return
        self.pool(node, "MAX_POOL_2D")

    def op_AveragePool(self, node: Node) -> None:
        self.pool(node, "AVERAGE_POOL_2D")

    def global_pool(self, node: Node, name: str) -> None:
        xs = self.shape(node.inputs[0])
        last = (node.attrs.get("data_layout") or "NCHW") == "NHWC"
        axes = list(range(1, len(xs) - 1)) if last else list(range(2, len(xs)))
        self.w.op(name, [self.tid(node.inputs[0]), self.ints(axes, "axes")], self.out_ids(node), {"keep_dims": True})

    def op_GlobalAveragePool(self, node: Node) -> None:
        xt, yt = self.g.tensors[node.inputs[0]], self.g.tensors[node.outputs[0]]
        xs = self.shape(node.inputs[0])
        if self.reference_mean and _q8(xt) and _same_params(xt.quant, yt.quant) and len(xs) == 4 \
                and (node.attrs.get("data_layout") or "NCHW") == "NHWC":
            # the IR's int8 mean at equal parameters rounds as AVERAGE_POOL_2D does (TFLite's
            # MEAN requantizes with a multiplier even then): a whole-map pool, bit for bit
            self.w.op("AVERAGE_POOL_2D", [self.tid(node.inputs[0])], self.out_ids(node),
                      {"padding": VALID, "stride_w": 1, "stride_h": 1, "filter_width": xs[2],
                       "filter_height": xs[1], "fused_activation_function": ACT_NONE})
            return
        self.global_pool(node, "MEAN")

    def op_GlobalMaxPool(self, node: Node) -> None:
        self.global_pool(node, "REDUCE_MAX")


    # -- whole graph ---------------------------------------------------------------------------
    def run(self) -> bytes:
        g = self.g
        for name in g.inputs:
            self.tid(name)
        for node in g.nodes:
            self.emit(node)
        outs = []
        for o in g.outputs:
            outs.append(self.tid(o))
        xnn.fold_transpose_pairs(self.w, [self.ids[i] for i in g.inputs], outs)
        return self.w.finish([self.ids[i] for i in g.inputs], outs, g.name or "main")


def prepare_graph(graph: Graph, input_shapes: Optional[Dict[str, Sequence[int]]] = None) -> Graph:
    """A copy of ``graph`` with static shapes (symbolic dims -> 1 unless given) and every
    convertible spatial op in NHWC: the form the exporter maps op by op."""
    from .passes.convert_layout import convert_layout
    from .runtime import specialize
    shapes = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        given = (input_shapes or {}).get(name)
        shapes[name] = tuple(given) if given is not None else tuple(
            d if isinstance(d, (int, np.integer)) else 1 for d in (t.shape or ()))
    g = specialize(graph, shapes)
    if any(n.op in ("Conv", "FusedConv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                    "BatchNormalization") and (n.attrs.get("data_layout") or "NCHW") != "NHWC" for n in g.nodes):
        g.metadata["preferred_layout"] = "NHWC"
        convert_layout(g)
    g.toposort()
    vision.fuse_space_depth(g)
    return g


def graph_to_tflite(graph: Graph, input_shapes: Optional[Dict[str, Sequence[int]]] = None,
                    prepared: bool = False, sparse: bool = False, reference_mean: bool = False,
                    custom_transpose_conv: bool = False) -> bytes:
    """The bytes of a .tflite model computing ``graph`` (see the module doc). ``sparse``:
    SparseArray weights in TFLite's sparsity format (float FULLY_CONNECTED weights directly,
    CONV_2D weights behind DENSIFY); LiteRT's XNNPACK delegate, on by default, misreads sparse
    FULLY_CONNECTED weights as dense: run such a file with
    ``OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES``. Default: dense. ``reference_mean``: int8
    average pools (global ones too) as AVERAGE_POOL_2D, which TFLite's reference kernels round as
    the IR does (XNNPACK does not delegate it); default MEAN over the whole map, else a float pool
    between DEQUANTIZE and QUANTIZE, delegated, within a step.
    ``custom_transpose_conv``: a float ConvTranspose with a bias as MediaPipe's custom
    Convolution2DTransposeBias (XNNPACK runs it; LiteRT's builtin kernels do not)."""
    g = graph if prepared else prepare_graph(graph, input_shapes)
    try:
        return _Exporter(g, sparse, reference_mean, custom_transpose_conv).run()
    except EdgeInferError:
        raise
    except (KeyError, ValueError, IndexError, TypeError) as e:
        raise ExportError(f"TFLite export failed: {type(e).__name__}: {e}") from None


def export_tflite(graph_or_artifact_path: Union[Graph, str, os.PathLike], out_path: Union[str, os.PathLike, None] = None,
                  input_shapes: Optional[Dict[str, Sequence[int]]] = None, sparse: bool = False,
                  reference_mean: bool = False, custom_transpose_conv: bool = False) -> bytes:
    """Export a Graph, an .eim artifact or an .onnx / .tflite model as a TFLite flatbuffer.

    Returns the bytes; also writes them to ``out_path`` when given. Models (.onnx) are
    imported and optimized as ``convert`` does (no verification) before export."""
    src = graph_or_artifact_path
    if isinstance(src, Graph):
        graph = src
    else:
        path = os.fspath(src)
        if path.lower().endswith((".onnx", ".tflite")):
            from .frontends import load_model
            from .passes import optimize
            graph = load_model(path, input_shapes=input_shapes)
            graph.validate()
            graph.metadata["preferred_layout"] = "NHWC"
            optimize(graph, 3)
        else:
            from .artifact import load_artifact
            graph = load_artifact(path)[0]
    data = graph_to_tflite(graph, input_shapes, sparse=sparse, reference_mean=reference_mean,
                           custom_transpose_conv=custom_transpose_conv)
    if out_path is not None:
        from .artifact import _atomic_write     # a failed write leaves no temporary file
        _atomic_write(os.fspath(out_path), lambda f: f.write(data))
    return data


def unsupported_reason(node: Node, graph: Graph) -> Optional[str]:
    """Why ``node`` (in a graph with static shapes) cannot be exported to TFLite; None if it can."""
    if node.op not in EXPORTED_OPS:
        return f"{node.op} has no TFLite export"
    g = Graph(graph.name)
    g.tensors = graph.tensors
    g.inputs = [i for i in node.inputs if i and not graph.tensors[i].is_const]
    g.outputs = [o for o in node.outputs if o]
    g.nodes = [node]
    ex = _Exporter(g)
    try:
        for i in g.inputs:
            ex.tid(i)
        ex.emit(node)
    except EdgeInferError as e:
        return str(e)
    except (KeyError, ValueError, IndexError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    return None
