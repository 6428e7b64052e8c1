"""TFLite export of the ops segmentation and pose models use: DEPTH_TO_SPACE / SPACE_TO_DEPTH
(builtins) and the custom ops LiteRT's XNNPACK delegate runs for MediaPipe-style models
(``MaxPoolingWithArgmax2D``, ``MaxUnpooling2D``, ``Convolution2DTransposeBias``).

* ``fuse_space_depth`` (run on the prepared graph): the importer turns DEPTH_TO_SPACE /
  SPACE_TO_DEPTH into Reshape -> Transpose -> Reshape in NHWC; a chain that moves every
  element as one of them does (checked on an arange, not assumed from the shapes) becomes a
  ``DepthToSpace`` / ``SpaceToDepth`` node with ``data_layout="NHWC"`` again (an exporter-only
  form: the IR's own ops are NCHW).
* ``DepthToSpace`` DCR and ``SpaceToDepth`` are TFLite's (NHWC, DCR order); NCHW nodes (ONNX)
  are written between TRANSPOSEs, which cancel against the layout pass's boundary Transposes
  (``export_tflite_xnnpack.fold_transpose_pairs``). CRD is RESHAPE -> 6-D TRANSPOSE -> RESHAPE
  (XNNPACK delegates that; GATHER of the channels it does not). int8 stays int8 (TFLite wants
  equal parameters: a QUANTIZE after where the IR's differ).
* ``MaxPool`` with Indices -> ``MaxPoolingWithArgmax2D``, ``MaxUnpool`` -> ``MaxUnpooling2D``:
  the indices are whatever the custom pool writes (XNNPACK: window positions in a float32
  tensor), so they may only feed MaxUnpool nodes that undo that same pool (same window,
  output shape = the pool's input). Only XNNPACK implements these two ops; LiteRT's builtin
  resolver refuses them, as it does for MediaPipe's own files. Float only (an int8 tensor is
  dequantized before and quantized after: max and placement are exact either way).
* ``custom_transpose_conv=True``: a float ConvTranspose with a bias as
  ``Convolution2DTransposeBias`` (MediaPipe's form; also XNNPACK only) instead of TRANSPOSE_CONV.
"""
from __future__ import annotations

import struct
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .export_tflite_common import ExportError, _q8, _same_params
from .ir import Graph, Node
from .ir.padding import resolve_pads
from .tflite_format import SAME, VALID

#: TfLitePadding in the custom ops' option structs (not the schema's SAME 0 / VALID 1)
_C_PADDING = {SAME: 1, VALID: 2}


# -- DEPTH_TO_SPACE / SPACE_TO_DEPTH ---------------------------------------------------------------

def _nhwc_space_depth(x: np.ndarray, op: str, b: int, mode: str = "DCR") -> np.ndarray:
    """numpy NHWC DepthToSpace (DCR or CRD) / SpaceToDepth: where each element goes."""
    n, h, w, c = x.shape
    if op == "DepthToSpace":
        if mode == "CRD":
            return x.reshape(n, h, w, c // (b * b), b, b).transpose(0, 1, 4, 2, 5, 3).reshape(n, h * b, w * b, -1)
        return x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * b, w * b, -1)
    return x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, h // b, w // b, -1)


def _chain_as_space_depth(g: Graph, r1: Node, consumers) -> Optional[Tuple[Node, Node, str, int]]:
    """(transpose, last reshape, op, block) when r1 -> Transpose -> Reshape is NHWC
    DepthToSpace (DCR) or SpaceToDepth, else None."""
    nxt = consumers.get(r1.outputs[0], [])
    if len(nxt) != 1 or nxt[0].op != "Transpose" or r1.outputs[0] in g.outputs:
        return None
    tr = nxt[0]
    last = consumers.get(tr.outputs[0], [])
    if len(last) != 1 or last[0].op != "Reshape" or tr.outputs[0] in g.outputs:
        return None
    r2 = last[0]
    xt, yt = g.tensors[r1.inputs[0]], g.tensors[r2.outputs[0]]
    if xt.shape is None or yt.shape is None or len(xt.shape) != 4 or len(yt.shape) != 4 \
            or not all(isinstance(d, (int, np.integer)) for d in tuple(xt.shape) + tuple(yt.shape)):
        return None
    if xt.dtype != yt.dtype or (xt.quant is None) != (yt.quant is None) \
            or (xt.quant is not None and not _same_params(xt.quant, yt.quant)):
        return None
    xs, ys = [int(d) for d in xt.shape], [int(d) for d in yt.shape]
    if ys[1] > xs[1] and ys[1] % xs[1] == 0:
        op, b = "DepthToSpace", ys[1] // xs[1]
    elif xs[1] > ys[1] and xs[1] % ys[1] == 0:
        op, b = "SpaceToDepth", xs[1] // ys[1]
    else:
        return None
    mid, mid2 = g.tensors[r1.outputs[0]].shape, g.tensors[tr.outputs[0]].shape
    if b < 2 or mid is None or mid2 is None:
        return None
    if op == "DepthToSpace" and (xs[3] % (b * b) or ys != [xs[0], xs[1] * b, xs[2] * b, xs[3] // (b * b)]):
        return None
    if op == "SpaceToDepth" and (xs[2] % b or ys != [xs[0], xs[1] // b, xs[2] // b, xs[3] * b * b]):
        return None
    idx = np.arange(int(np.prod(xs)), dtype=np.int64).reshape(xs)
    perm = tr.attrs.get("perm") or list(range(len(mid)))[::-1]
    moved = idx.reshape([int(d) for d in mid]).transpose(perm).reshape(ys)
    if not np.array_equal(moved, _nhwc_space_depth(idx, op, b)):
        return None
    return tr, r2, op, b


def fuse_space_depth(g: Graph) -> int:
    """Turn NHWC Reshape -> Transpose -> Reshape chains that are DEPTH_TO_SPACE / SPACE_TO_DEPTH
    (the importer's form) back into one exporter-only NHWC node each; returns how many."""
    consumers: dict = {}
    for n in g.nodes:
        for i in n.inputs:
            if i:
                consumers.setdefault(i, []).append(n)
    found = []
    for n in g.nodes:
        if n.op == "Reshape":
            m = _chain_as_space_depth(g, n, consumers)
            if m is not None:
                found.append((n,) + m)
    if not found:
        return 0
    gone = set()
    for r1, tr, r2, op, b in found:
        gone |= {id(r1), id(tr), id(r2)}
    kept = [n for n in g.nodes if id(n) not in gone]
    for r1, tr, r2, op, b in found:
        node = Node(op, [r1.inputs[0]], [r2.outputs[0]],
                    dict(blocksize=b, data_layout="NHWC", **({"mode": "DCR"} if op == "DepthToSpace" else {})),
                    name=(r1.name or r2.outputs[0]) + "_" + op)
        kept.append(node)
    g.nodes = kept
    g.toposort()
    return len(found)


def emit_space_depth(ex, node: Node) -> None:
    """DepthToSpace / SpaceToDepth, NHWC (exporter form) or NCHW (the IR's)."""
    b = int(node.attrs.get("blocksize", 0))
    mode = str(node.attrs.get("mode", "DCR") or "DCR")
    xname, yname = node.inputs[0], node.outputs[0]
    xs, ys = ex.shape(xname), ex.shape(yname)
    if len(xs) != 4 or b < 1:
        raise ExportError(f"node {node.name!r}: {node.op} of a {len(xs)}-D tensor has no TFLite form")
    nhwc = (node.attrs.get("data_layout") or "NCHW") == "NHWC"
    xt, yt = ex.g.tensors[xname], ex.g.tensors[yname]
    x, y = ex.tid(xname), ex.tid(yname)
    xs_l = xs if nhwc else (xs[0], xs[2], xs[3], xs[1])
    ys_l = ys if nhwc else (ys[0], ys[2], ys[3], ys[1])
    if not nhwc:
        xn = ex.temp("s2d_in", xname, shape=xs_l)
        ex.w.op("TRANSPOSE", [x, ex.ints([0, 2, 3, 1], "perm")], [xn])
        x = xn
    # TFLite's int8 DEPTH_TO_SPACE / SPACE_TO_DEPTH need equal parameters: move at x's, then requantize
    requant = _q8(xt) and _q8(yt) and not _same_params(xt.quant, yt.quant)
    out = ex.temp("s2d_out", yname, shape=ys_l, quant=xt.quant) if (requant or not nhwc) else y
    if node.op == "DepthToSpace" and mode == "CRD":
        n, h, w, c = xs_l
        mid = ex.temp("d2s_blocks", xname, shape=(n, h, w, c // (b * b), b, b), quant=xt.quant)
        ex.w.op("RESHAPE", [x, ex.ints(ex.w.tensors[mid]["shape"])], [mid], {"new_shape": ex.w.tensors[mid]["shape"]})
        moved = ex.temp("d2s_moved", xname, shape=(n, h, b, w, b, c // (b * b)), quant=xt.quant)
        ex.w.op("TRANSPOSE", [mid, ex.ints([0, 1, 4, 2, 5, 3], "perm")], [moved])
        ex.w.op("RESHAPE", [moved, ex.ints(ys_l)], [out], {"new_shape": list(ys_l)})
    else:
        name = "DEPTH_TO_SPACE" if node.op == "DepthToSpace" else "SPACE_TO_DEPTH"
        ex.w.op(name, [x], [out], {"block_size": b})
    if requant:
        dst = y if nhwc else ex.temp("s2d_rq", yname, shape=ys_l)
        ex.w.op("QUANTIZE", [out], [dst])
        out = dst
    if not nhwc:
        ex.w.op("TRANSPOSE", [out, ex.ints([0, 3, 1, 2], "perm")], [y])


# -- MaxPoolingWithArgmax2D / MaxUnpooling2D -------------------------------------------------------

def _pool_padding(node: Node, in_sp: Sequence[int], kernel: List[int], strides: List[int]) -> int:
    """SAME or VALID (TFLite's) giving the node's pads and output size, else ExportError."""
    a = node.attrs
    if any(int(d) != 1 for d in (a.get("dilations") or [1, 1])) or int(a.get("storage_order", 0)):
        raise ExportError(f"node {node.name!r}: dilated or column-major argmax pools have no TFLite form")
    pads, out = resolve_pads(list(in_sp), kernel, strides, [1, 1], list(a.get("pads") or [0] * 4),
                             str(a.get("auto_pad", "NOTSET") or "NOTSET"), bool(a.get("ceil_mode", 0)))
    for padding, auto in ((VALID, "VALID"), (SAME, "SAME_UPPER")):
        p, o = resolve_pads(list(in_sp), kernel, strides, [1, 1], [0] * 4, auto)
        if list(p) == list(pads) and list(o) == list(out):
            return padding
    raise ExportError(f"node {node.name!r}: pads {list(pads)} are neither SAME nor VALID")


def _pool_options(padding: int, kernel: List[int], strides: List[int]) -> bytes:
    """TfLitePoolParams: padding, stride w / h, filter w / h, activation; then the 16 bytes of
    computed padding the kernel fills in."""
    return struct.pack("<6i", _C_PADDING[padding], strides[1], strides[0], kernel[1], kernel[0], 0) + bytes(16)


def _to_nhwc_float(ex, name: str, base: str) -> int:
    """TFLite tensor of NCHW IR tensor ``name`` in NHWC float32 (TRANSPOSE, DEQUANTIZE if int8)."""
    t = ex.g.tensors[ex.alias.get(name, name)]
    n, c, h, w = ex.shape(name)
    xn = ex.temp(base, name, shape=(n, h, w, c))
    ex.w.op("TRANSPOSE", [ex.tid(name), ex.ints([0, 2, 3, 1], "perm")], [xn])
    if _q8(t):
        xf = ex.temp(base + "_float", name, shape=(n, h, w, c), quant=None, dtype="float32")
        ex.w.op("DEQUANTIZE", [xn], [xf])
        xn = xf
    return xn


def _from_nhwc_float(ex, yf: int, yname: str) -> None:
    """Write float NHWC ``yf`` to NCHW IR tensor ``yname`` (QUANTIZE if int8, TRANSPOSE)."""
    yt = ex.g.tensors[yname]
    if _q8(yt):
        yq = ex.temp(yname + "_nhwc", yname, shape=ex.w.tensors[yf]["shape"])
        ex.w.op("QUANTIZE", [yf], [yq])
        yf = yq
    ex.w.op("TRANSPOSE", [yf, ex.ints([0, 3, 1, 2], "perm")], [ex.tid(yname)])


def emit_max_pool_argmax(ex, node: Node) -> None:
    """NCHW MaxPool with Indices -> custom MaxPoolingWithArgmax2D (NHWC, between TRANSPOSEs)."""
    xname, (yname, iname) = node.inputs[0], node.outputs[:2]
    xs = ex.shape(xname)
    if len(xs) != 4 or (node.attrs.get("data_layout") or "NCHW") != "NCHW":
        raise ExportError(f"node {node.name!r}: only 2-D NCHW MaxPool with Indices exports")
    if iname in ex.g.outputs or any(n.op != "MaxUnpool" or n.inputs[1] != iname or iname in n.inputs[:1] + n.inputs[2:]
                                    for n in ex.g.nodes if iname in n.inputs):
        raise ExportError(f"node {node.name!r}: MaxPool indices exported to TFLite may only feed MaxUnpool "
                            "(MaxPoolingWithArgmax2D writes window positions, not ONNX's flat indices)")
    kernel = [int(k) for k in node.attrs["kernel_shape"]]
    strides = [int(s) for s in (node.attrs.get("strides") or [1, 1])]
    padding = _pool_padding(node, xs[2:], kernel, strides)
    x = _to_nhwc_float(ex, xname, "argmax_in")
    n, c = xs[0], xs[1]
    ys = ex.shape(yname)
    pooled = (n, ys[2], ys[3], c)
    yf = ex.temp("argmax_out", yname, shape=pooled, quant=None, dtype="float32")
    idx = ex.temp("argmax_indices", yname, shape=pooled, quant=None, dtype="float32")
    ex.w.op("CUSTOM", [x], [yf, idx], custom="MaxPoolingWithArgmax2D",
            custom_options=_pool_options(padding, kernel, strides))
    _from_nhwc_float(ex, yf, yname)
    ex.__dict__.setdefault("argmax_indices", {})[iname] = (idx, tuple(xs), kernel, strides)


def emit_max_unpool(ex, node: Node) -> None:
    """NCHW MaxUnpool of a MaxPoolingWithArgmax2D's indices -> custom MaxUnpooling2D."""
    xname, iname = node.inputs[0], node.inputs[1]
    found = ex.__dict__.get("argmax_indices", {}).get(iname)
    if found is None:
        raise ExportError(f"node {node.name!r}: MaxUnpool exports only with indices of a MaxPool "
                            "exported in the same file")
    idx, pool_in, kernel, strides = found
    if [int(k) for k in node.attrs["kernel_shape"]] != kernel \
            or [int(s) for s in (node.attrs.get("strides") or [1, 1])] != strides:
        raise ExportError(f"node {node.name!r}: MaxUnpool window differs from its MaxPool's")
    ys = ex.shape(node.outputs[0])
    if tuple(ys) != tuple(pool_in):
        raise ExportError(f"node {node.name!r}: MaxUnpool output {ys} differs from the pooled input {pool_in}")
    pads = [int(p) for p in (node.attrs.get("pads") or [0] * 4)]
    xs = ex.shape(xname)
    if any(pads) or any((ys[2 + i] - kernel[i]) // strides[i] + 1 != xs[2 + i] for i in range(2)):
        # LiteRT's XNNPACK unpools VALID windows only ("invalid padding mode" for SAME)
        raise ExportError(f"node {node.name!r}: only VALID MaxUnpool has a TFLite (XNNPACK) form")
    x = _to_nhwc_float(ex, xname, "unpool_in")
    n, c, h, w = ys
    yf = ex.temp("unpool_out", node.outputs[0], shape=(n, h, w, c), quant=None, dtype="float32")
    ex.w.op("CUSTOM", [x, idx], [yf], custom="MaxUnpooling2D", custom_options=_pool_options(VALID, kernel, strides))
    _from_nhwc_float(ex, yf, node.outputs[0])


def write_transpose_conv_bias(ex, x: int, wid: int, bid: int, y: int, padding: int, strides: List[int]) -> None:
    """MediaPipe's custom Convolution2DTransposeBias (input, OHWI weights, bias; the output
    shape is its output tensor's); TfLiteTransposeConvParams: padding, stride w / h."""
    ex.w.op("CUSTOM", [x, wid, bid], [y], custom="Convolution2DTransposeBias",
            custom_options=struct.pack("<3i", _C_PADDING[padding], strides[1], strides[0]))


#: IR op -> emitter, for the exporter's dispatch
EMITTERS = {"DepthToSpace": emit_space_depth, "SpaceToDepth": emit_space_depth, "MaxUnpool": emit_max_unpool}
