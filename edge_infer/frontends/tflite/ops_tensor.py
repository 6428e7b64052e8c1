"""TFLite quantize, cast and data-movement ops -> IR (methods of the importer: ``self`` is
``importer._Importer``)."""
from __future__ import annotations

from typing import List

import numpy as np

from ...errors import UnsupportedOpError
from .reader import _Malformed, _opt, _options


class TensorOps:
    def op_dequantize(self, op, ins, outs) -> None:
        self.need(ins, 1, "DEQUANTIZE")
        if self.is_const(ins[0]):
            # fp16 / int8 weights: dequantized once, here
            w, q, _ = self.weights(ins[0])
            if q is not None:
                w = self.g.tensors[self.float_of(self.const("dequantize", w, q))].data
            self.folded[outs[0]] = self.check_folded(outs[0], np.asarray(w, np.float32))
            return
        x = self.value(ins[0])
        y = self.output(outs[0])
        if self.g.tensors[x].dtype == "float16":
            self.node("Cast", [x], [y], to="float32", saturate=1)
        elif self.g.tensors[x].quant is None:
            raise UnsupportedOpError("DEQUANTIZE of an unquantized tensor")
        else:
            self.dequantize(x, y)

    def op_quantize(self, op, ins, outs) -> None:
        self.need(ins, 1, "QUANTIZE")
        x = self.value(ins[0])
        y = self.output(outs[0])
        if self.g.tensors[y].quant is None:
            raise UnsupportedOpError("QUANTIZE to an unquantized tensor")
        self.quantize(self.float_of(x), y)              # int8 -> int8 requantizes through float

    def op_densify(self, op, ins, outs) -> None:
        self.need(ins, 1, "DENSIFY")
        self.folded[outs[0]] = self.check_folded(outs[0], self.array(ins[0]))

    def check_folded(self, i: int, value: np.ndarray) -> np.ndarray:
        if i in self.names or i in self.folded:
            raise _Malformed(f"tensor {i} is written twice")
        if tuple(value.shape) != self.shape_of(i):
            raise _Malformed(f"tensor {i}: declared shape {self.shape_of(i)}, computed {value.shape}")
        return value

    def op_cast(self, op, ins, outs) -> None:
        self.need(ins, 1, "CAST")
        y = self.output(outs[0])
        self.node("Cast", [self.value(ins[0])], [y], to=self.g.tensors[y].dtype, saturate=1)

    def op_transpose(self, op, ins, outs) -> None:
        self.need(ins, 2, "TRANSPOSE")
        perm = self.const_ints(ins[1], "TRANSPOSE perm")
        r = len(self.shape_of(ins[0]))
        if sorted(p % max(r, 1) for p in perm) != list(range(r)):
            raise _Malformed(f"TRANSPOSE: perm {perm} for rank {r}")
        self.emit("Transpose", [self.value(ins[0])], self.output(outs[0]), perm=[p % r for p in perm])

    def slice_nodes(self, x_i: int, y_i: int, starts, ends, steps) -> None:
        x = self.value(x_i)
        y = self.output(y_i)
        r = len(starts)
        mid = self.temp(y, "_slice")
        self.emit("Slice", [x, self.const("starts", np.array(starts, np.int64)),
                            self.const("ends", np.array(ends, np.int64)),
                            self.const("axes", np.arange(r, dtype=np.int64)),
                            self.const("steps", np.array(steps, np.int64))], mid)
        self.emit("Reshape", [mid, self.const("shape", np.array(self.shape_of(y_i), np.int64))], y, allowzero=0)

    def op_slice(self, op, ins, outs) -> None:
        self.need(ins, 3, "SLICE")
        xs = self.shape_of(ins[0])
        begin = self.const_ints(ins[1], "SLICE begin")
        size = self.const_ints(ins[2], "SLICE size")
        if len(begin) != len(xs) or len(size) != len(xs):
            raise _Malformed("SLICE: begin/size do not match the input rank")
        ends = [d if s == -1 else b + s for b, s, d in zip(begin, size, xs)]
        self.slice_nodes(ins[0], outs[0], begin, ends, [1] * len(xs))

    def op_strided_slice(self, op, ins, outs) -> None:
        self.need(ins, 4, "STRIDED_SLICE")
        o = _options(op, "StridedSliceOptions")
        xs = self.shape_of(ins[0])
        begin = self.const_ints(ins[1], "STRIDED_SLICE begin")
        end = self.const_ints(ins[2], "STRIDED_SLICE end")
        stride = self.const_ints(ins[3], "STRIDED_SLICE strides")
        m = len(begin)
        if len(end) != m or len(stride) != m or 0 in stride:
            raise _Malformed("STRIDED_SLICE: begin, end and strides differ in length (or a stride is 0)")
        bm, em = int(_opt(o, "BeginMask", 0)), int(_opt(o, "EndMask", 0))
        ell, new, shrink = int(_opt(o, "EllipsisMask", 0)), int(_opt(o, "NewAxisMask", 0)), \
            int(_opt(o, "ShrinkAxisMask", 0))
        offset = bool(_opt(o, "Offset", False))
        # expand the spec over the input dims (numpy semantics of TF's strided slice)
        per_dim = []                       # (begin, end, step, shrink) per input dim
        n_real = sum(1 for k in range(m) if not (new >> k) & 1 and not (ell >> k) & 1)
        d = 0
        for k in range(m):
            if (ell >> k) & 1:
                for _ in range(max(0, len(xs) - n_real - d + sum(
                        1 for j in range(k) if not (new >> j) & 1 and not (ell >> j) & 1))):
                    per_dim.append((0, xs[d], 1, False))
                    d += 1
                continue
            if (new >> k) & 1:
                continue                   # new axes only change the final shape (the declared one)
            if d >= len(xs):
                raise _Malformed("STRIDED_SLICE: the spec has more dims than the input")
            n = xs[d]
            b, e, s = begin[k], end[k] + (begin[k] if offset else 0), stride[k]
            if (shrink >> k) & 1:
                b = b + n if b < 0 else b
                if not 0 <= b < n:
                    raise _Malformed(f"STRIDED_SLICE: index {begin[k]} out of range for dim of {n}")
                per_dim.append((b, b + 1, 1, True))
            else:
                sl = slice(None if (bm >> k) & 1 else b, None if (em >> k) & 1 else e, s)
                b2, e2, s2 = sl.indices(n)
                if s2 < 0 and e2 < 0:
                    e2 = -(1 << 62)
                per_dim.append((b2, e2, s2, False))
            d += 1
        while d < len(xs):
            per_dim.append((0, xs[d], 1, False))
            d += 1
        self.slice_nodes(ins[0], outs[0], [p[0] for p in per_dim], [p[1] for p in per_dim],
                         [p[2] for p in per_dim])

    def op_split(self, op, ins, outs) -> None:
        self.need(ins, 2, "SPLIT")
        axis = self.const_ints(ins[0], "SPLIT axis")[0]
        xs = self.shape_of(ins[1])
        n = len(outs)
        axis %= max(len(xs), 1)
        if n < 1 or xs[axis] % n:
            raise _Malformed(f"SPLIT: {xs[axis]} not divisible into {n}")
        self._split(ins[1], outs, axis, [xs[axis] // n] * n)

    def op_split_v(self, op, ins, outs) -> None:
        self.need(ins, 3, "SPLIT_V")
        xs = self.shape_of(ins[0])
        sizes = self.const_ints(ins[1], "SPLIT_V sizes")
        axis = self.const_ints(ins[2], "SPLIT_V axis")[0] % max(len(xs), 1)
        if -1 in sizes:
            sizes[sizes.index(-1)] = xs[axis] - (sum(sizes) + 1)
        if len(sizes) != len(outs) or sum(sizes) != xs[axis] or min(sizes) < 0:
            raise _Malformed(f"SPLIT_V: sizes {sizes} for dim {xs[axis]}")
        self._split(ins[0], outs, axis, sizes)

    def _split(self, x_i: int, outs: List[int], axis: int, sizes: List[int]) -> None:
        x = self.value(x_i)
        ys = [self.output(o) for o in outs]
        ok = all(self.int8_ok("Split", [x], y) for y in ys) if self.g.tensors[x].quant is not None else True
        split = self.const("split", np.array(sizes, np.int64))
        if ok:
            self.node("Split", [x, split], ys, axis=axis)
            return
        fys = [self.temp(y, "_float", "float32", None) for y in ys]
        self.node("Split", [self.float_of(x), split], fys, axis=axis)
        for f, y in zip(fys, ys):
            self.quantize(f, y)

    def op_pack(self, op, ins, outs) -> None:
        o = _options(op, "PackOptions")
        if not ins:
            raise _Malformed("PACK without inputs")
        xs = self.shape_of(ins[0])
        axis = int(_opt(o, "Axis", 0)) % (len(xs) + 1)
        expanded = []
        for i in ins:
            x = self.value(i)
            shape = list(self.shape_of(i))
            shape.insert(axis, 1)
            t = self.temp(x, "_expanded")
            self.node("Reshape", [x, self.const("shape", np.array(shape, np.int64))], [t], allowzero=0)
            expanded.append(t)
        self.emit("Concat", expanded, self.output(outs[0]), axis=axis)

    def op_gather(self, op, ins, outs) -> None:
        self.need(ins, 2, "GATHER")
        o = _options(op, "GatherOptions")
        if int(_opt(o, "BatchDims", 0)):
            raise UnsupportedOpError("GATHER with batch_dims is not supported")
        r = len(self.shape_of(ins[0]))
        self.emit("Gather", [self.value(ins[0]), self.value(ins[1])], self.output(outs[0]),
                  axis=int(_opt(o, "Axis", 0)) % max(r, 1))

    def op_depth_to_space(self, op, ins, outs) -> None:
        self._space_depth(op, ins, outs, "DEPTH_TO_SPACE", "DepthToSpaceOptions")

    def op_space_to_depth(self, op, ins, outs) -> None:
        self._space_depth(op, ins, outs, "SPACE_TO_DEPTH", "SpaceToDepthOptions")

    def _space_depth(self, op, ins, outs, name: str, table: str) -> None:
        """NHWC DEPTH_TO_SPACE / SPACE_TO_DEPTH as Reshape -> Transpose -> Reshape, in NHWC
        (data movement: int8 stays int8, TFLite requires equal parameters)."""
        self.need(ins, 1, name)
        b = int(_opt(_options(op, table), "BlockSize", 0))
        xs = self.shape_of(ins[0])
        if b < 1 or len(xs) != 4:
            raise _Malformed(f"{name}: block size {b} on shape {xs}")
        n, h, w, c = xs
        if name == "DEPTH_TO_SPACE":
            if c % (b * b):
                raise _Malformed(f"DEPTH_TO_SPACE: {c} channels not divisible by {b}x{b}")
            mid, out = (n, h, w, b, b, c // (b * b)), (n, h * b, w * b, c // (b * b))
        else:
            if h % b or w % b:
                raise _Malformed(f"SPACE_TO_DEPTH: {h}x{w} not divisible by block {b}")
            mid, out = (n, h // b, b, w // b, b, c), (n, h // b, w // b, b * b * c)
        x = self.value(ins[0])
        y = self.output(outs[0])
        r1, t = self.temp(y, "_blocks"), self.temp(y, "_moved")
        self.emit("Reshape", [x, self.const("shape", np.array(mid, np.int64))], r1, allowzero=0)
        self.emit("Transpose", [r1], t, perm=[0, 1, 3, 2, 4, 5])
        self.emit("Reshape", [t, self.const("shape", np.array(out, np.int64))], y, allowzero=0)
