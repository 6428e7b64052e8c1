"""ONNX frontend: read an ONNX model into the edge_infer IR.

The IR speaks ONNX at opset 21 (see ``edge_infer.ir.graph``). Models of opset
7..latest are accepted and normalised into that one form, so kernels and shape
rules only ever see one version of each op:

* every attribute of the opset-21 schema is present, with ONNX's defaults
  filled in. Attributes whose default depends on a rank (Conv ``strides``,
  ``pads``, ``dilations``, ``kernel_shape``; Transpose ``perm``) are filled
  when the frontend knows that rank (from declared types or ONNX's own shape
  inference) and left absent otherwise; ``Shape.end`` and ``Split.num_outputs``
  (with a ``split`` input) and ``Dropout.seed`` stay absent as in ONNX;
* attributes that later opsets turned into inputs (Clip min/max, Pad, Split,
  ReduceX axes, Squeeze/Unsqueeze axes, Slice, TopK k, Dropout ratio,
  Resize/Upsample scales) are inputs, fed by constant tensors;
* ``Constant`` nodes become constant tensors; ``Cast.to`` (and other dtype
  attributes) are numpy dtype names; ``ConstantOfShape.value`` becomes
  ``value`` (a Python scalar) plus ``dtype`` (a name);
* Softmax/LogSoftmax/Hardmax of opset < 13 (coerce-to-2D semantics) become
  the opset-13 op, through Flatten/Reshape when the axis is not the last one;
* Upsample and Resize-10 become Resize with ``asymmetric`` coordinates.

Opsets above 21 are accepted where they only added types: attributes new
after 21 must hold their default value, else the node is rejected.

``onnx`` is imported lazily: it is only needed to convert (the ``convert`` extra).
"""
from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import ConversionError, GraphError, UnsupportedOpError
from ..ir.graph import DTYPES, Graph, Node, Tensor
from .onnx_common import IR_OPSET, ONNX_TO_DTYPE, contiguous as _contiguous, schema as _schema

if TYPE_CHECKING:  # only for annotations: onnx is imported lazily
    import onnx

#: the oldest default-domain opset accepted (older ones had legacy broadcasting)
MIN_OPSET = 7
#: characters of the model and graph doc strings kept in the graph metadata
DOC_STRING_MAX = 2000

#: attributes holding an ONNX element type, converted to a numpy dtype name
DTYPE_ATTRS = {
    "Cast": ("to",), "EyeLike": ("dtype",), "RandomNormal": ("dtype",),
    "RandomUniform": ("dtype",), "RandomNormalLike": ("dtype",),
    "RandomUniformLike": ("dtype",), "Multinomial": ("dtype",), "Bernoulli": ("dtype",),
}

ModelLike = Union[str, os.PathLike, bytes, "onnx.ModelProto"]


# -- public entry point --------------------------------------------------------

def load_onnx(path_or_model: ModelLike,
              input_shapes: Optional[Dict[str, Sequence[int]]] = None) -> Graph:
    """Convert an ONNX model into an IR :class:`Graph`.

    ``path_or_model``: a file path (weights in external data files are read
    from the model's directory), the serialized bytes, or an ``onnx.ModelProto``
    (external data then resolves against the current directory).
    ``input_shapes``: ``{input name: shape}`` pins graph input dims (symbolic
    dims become ints); unknown names or rank mismatches raise ConversionError.

    Raises ConversionError for unreadable or malformed models and unsupported
    dtypes, and UnsupportedOpError (one message, every op type with its count)
    when some ops have no CPU kernel.
    """
    onnx = _import_onnx()
    model, base_dir, label = _read_model(onnx, path_or_model)
    if len(model.functions):
        # model-local functions are called like custom-domain ops: inline them
        try:
            import onnx.inliner
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:  # noqa: BLE001 (any failure means: cannot convert)
            raise ConversionError(f"{label}: cannot inline model-local functions: {e}") from None
    conv = _Converter(onnx, model, base_dir, label)
    graph = conv.convert()
    if input_shapes:
        _pin_input_shapes(graph, input_shapes)
    return graph


# -- reading -------------------------------------------------------------------

def _import_onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConversionError("reading ONNX models needs the 'onnx' package: "
                              "pip install 'edge-infer[convert]'") from None
    return onnx


def _read_model(onnx, src) -> Tuple["onnx.ModelProto", str, str]:
    """Parse ``src`` into a ModelProto; return it, the external-data dir and a label."""
    if isinstance(src, onnx.ModelProto):
        return _check_model_proto(src, "model"), os.getcwd(), "model"
    if isinstance(src, (bytes, bytearray, memoryview)):
        return _parse_model(onnx, bytes(src), "model bytes"), os.getcwd(), "model bytes"
    if not isinstance(src, (str, os.PathLike)):
        raise ConversionError(f"load_onnx: expected a path, bytes or onnx.ModelProto, "
                              f"got {type(src).__name__}")
    path = os.fspath(src)
    if not os.path.exists(path):
        raise ConversionError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ConversionError(f"{path}: is a directory, not an ONNX model file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConversionError(f"{path}: cannot read: {e.strerror or e}") from None
    return _parse_model(onnx, data, path), os.path.dirname(os.path.abspath(path)), path


def _parse_model(onnx, data: bytes, label: str):
    if not data:
        raise ConversionError(f"{label}: empty file, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # noqa: BLE001  (DecodeError, RuntimeError from upb...)
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConversionError(f"{label}: not a valid ONNX model (truncated, corrupt or another "
                              f"format; protobuf: {msg})") from None
    return _check_model_proto(model, label)


def _check_model_proto(model, label: str):
    # Random bytes sometimes parse as a protobuf with only unknown fields:
    # a real model has an IR version, a graph and a default-domain opset.
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise ConversionError(f"{label}: not an ONNX model (no IR version or no graph)")
    if not model.graph.output:
        raise ConversionError(f"{label}: malformed ONNX model: the graph has no outputs")
    return model


def _dtype_name(elem_type: int, what: str) -> str:
    name = ONNX_TO_DTYPE.get(elem_type)
    if name is None:
        try:
            import onnx
            tname = onnx.TensorProto.DataType.Name(elem_type)
        except Exception:  # noqa: BLE001
            tname = f"#{elem_type}"
        raise ConversionError(f"{what}: dtype {tname} is not supported "
                              f"(supported: {', '.join(DTYPES)})")
    return name


# -- attribute helpers ---------------------------------------------------------

def _attr_value(onnx, a, where: str):
    """An AttributeProto as a JSON value (tensors stay TensorProto for the normalizer)."""
    A = onnx.AttributeProto
    if a.type == A.FLOAT:
        return float(a.f)
    if a.type == A.INT:
        return int(a.i)
    if a.type == A.STRING:
        return a.s.decode("utf-8", "replace")
    if a.type == A.FLOATS:
        return [float(v) for v in a.floats]
    if a.type == A.INTS:
        return [int(v) for v in a.ints]
    if a.type == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if a.type == A.TENSOR:
        return a.t
    if a.type == A.SPARSE_TENSOR:
        return a.sparse_tensor
    raise ConversionError(f"{where}: attribute {a.name!r} of type "
                          f"{A.AttributeType.Name(a.type)} is not supported")


_DEFAULTS: Dict[Tuple[str, int], Dict[str, object]] = {}


def _defaults(onnx, schema) -> Dict[str, object]:
    """{attribute: default} of a schema, as JSON values (a fresh dict)."""
    if schema is None:
        return {}
    key = (schema.name, schema.since_version)
    if key not in _DEFAULTS:
        out = {}
        for name, a in schema.attributes.items():
            dv = a.default_value
            if dv is not None and dv.type != 0:
                out[name] = _attr_value(onnx, dv, schema.name)
        _DEFAULTS[key] = out
    return {k: (list(v) if isinstance(v, list) else v) for k, v in _DEFAULTS[key].items()}


# -- the converter -------------------------------------------------------------

class _Converter:
    """Holds the state of one conversion; normalizers call its helpers."""

    def __init__(self, onnx, model, base_dir: str, label: str):
        self.onnx = onnx
        self.model = model
        self.base_dir = base_dir
        self.label = label
        self.opset = self._default_opset()
        self.graph = Graph(model.graph.name or "graph")
        self.inits = {t.name: t for t in model.graph.initializer}
        self.sparse_inits = {t.values.name: t for t in model.graph.sparse_initializer}
        self._const_cache: Dict[str, np.ndarray] = {}
        self.used_names = self._all_names()
        self.node_names: set = set()
        self.reserved_node_names = {n.name for n in model.graph.node if n.name}
        self._emitted = 0
        self._check_declared_dims()
        self.types = self._collect_types()
        self.unsupported: Counter = Counter()
        self.node_name = ""           # IR name of the ONNX node being converted
        self._emitted_nodes: List[Node] = []

    # setup ---------------------------------------------------------------
    def _default_opset(self) -> int:
        ver = None
        for o in self.model.opset_import:
            if o.domain in ("", "ai.onnx"):
                ver = int(o.version)
        if ver is None:
            if any(n.domain in ("", "ai.onnx") for n in self.model.graph.node):
                raise ConversionError(f"{self.label}: model uses ONNX ops but imports no "
                                      "default-domain opset")
            # only other domains' ops (ai.onnx.ml...): each is reported as unsupported
            ver = IR_OPSET
        latest = self.onnx.defs.onnx_opset_version()
        if ver < MIN_OPSET:
            # Older opsets had legacy broadcasting and attributes; accept them only
            # when every op used is still the same schema at MIN_OPSET.
            changed = sorted({n.op_type for n in self.model.graph.node if n.domain in ("", "ai.onnx")
                              and (_schema(self.onnx, n.op_type, ver) is None or
                                   _schema(self.onnx, n.op_type, ver).since_version !=
                                   getattr(_schema(self.onnx, n.op_type, MIN_OPSET), "since_version", -1))})
            if changed:
                raise ConversionError(
                    f"{self.label}: ONNX opset {ver} is too old (minimum {MIN_OPSET}; "
                    f"{', '.join(changed)} changed since); upgrade it with onnx.version_converter")
        if ver > latest:
            raise ConversionError(f"{self.label}: ONNX opset {ver} is newer than the installed "
                                  f"onnx package knows ({latest}); upgrade onnx")
        return ver

    def _all_names(self) -> set:
        g = self.model.graph
        names = {v.name for v in g.input} | {v.name for v in g.output} | set(self.inits)
        for n in g.node:
            names.update(n.input)
            names.update(n.output)
        return names

    def _collect_types(self) -> Dict[str, Tuple[int, Optional[tuple]]]:
        """name -> (ONNX elem type, shape or None) for every tensor whose type is
        declared or that ONNX's shape inference can type. Used only for rank-
        and dtype-dependent defaults, never stored on intermediates."""
        types: Dict[str, Tuple[int, Optional[tuple]]] = {}

        def add(vi):
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is None:
                return
            shape = None
            if tt.HasField("shape"):
                shape = tuple(d.dim_value if d.HasField("dim_value") else
                              (d.dim_param or None) for d in tt.shape.dim)
            types[vi.name] = (tt.elem_type, shape)

        for t in self.model.graph.initializer:
            types[t.name] = (t.data_type, tuple(t.dims))
        for vi in list(self._inferred_value_infos()) + list(self.model.graph.value_info) + \
                list(self.model.graph.input) + list(self.model.graph.output):
            if vi.name in self.inits:
                continue
            add(vi)
        return types

    def _check_declared_dims(self) -> None:
        """Refuse a negative dim anywhere the file declares one, before ONNX's own (C++) shape
        inference sees it: its Slice rule asserts on one and aborts the process."""
        g = self.model.graph
        for kind, vis in (("input", g.input), ("output", g.output), ("value_info", g.value_info)):
            for vi in vis:
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value")]
                    if any(d < 0 for d in dims):
                        raise ConversionError(f"{kind} {vi.name!r}: negative dim in {dims}")
        tensors = [(t.name, t) for t in g.initializer] + [
            (s.values.name, t) for s in g.sparse_initializer for t in (s.values, s.indices)]
        for name, t in tensors:
            if any(d < 0 for d in t.dims):
                raise ConversionError(f"initializer {name!r}: negative dim in dims {list(t.dims)}")
        for s in g.sparse_initializer:
            if any(d < 0 for d in s.dims):
                raise ConversionError(f"initializer {s.values.name!r}: negative dim in dims {list(s.dims)}")

    def _inferred_value_infos(self):
        """Run ONNX shape inference on a light copy of the graph (big
        initializers replaced by typed inputs, so nothing big is copied)."""
        onnx = self.onnx
        g = self.model.graph
        try:
            light = onnx.ModelProto()
            light.ir_version = max(self.model.ir_version, 4)
            light.opset_import.extend(self.model.opset_import)
            lg = light.graph
            lg.node.extend(g.node)
            lg.input.extend(v for v in g.input if v.name not in self.inits)
            lg.output.extend(g.output)
            lg.value_info.extend(g.value_info)
            for t in g.initializer:
                n = int(np.prod(t.dims)) if len(t.dims) else 1
                if n <= 64 and not onnx.external_data_helper.uses_external_data(t):
                    lg.initializer.append(t)   # small: may be a shape value
                else:
                    lg.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False)
            return list(inferred.graph.value_info)
        except Exception:  # noqa: BLE001  (inference is a nicety, never fatal)
            return []

    # helpers for normalizers --------------------------------------------------
    def rank(self, name: str) -> Optional[int]:
        """Rank of ``name`` if known."""
        if not name:
            return None
        t = self.graph.tensors.get(name)
        if t is not None and t.shape is not None and (t.is_const or name in self.graph.inputs):
            return len(t.shape)
        info = self.types.get(name)
        if info is None or info[1] is None:
            return None
        return len(info[1])

    def static_shape(self, name: str) -> Optional[Tuple[int, ...]]:
        info = self.types.get(name)
        if info is None or info[1] is None or not all(isinstance(d, int) for d in info[1]):
            return None
        return info[1]

    def elem_dtype(self, name: str, default: str = "float32") -> str:
        """numpy dtype name of ``name`` when declared, else ``default``."""
        info = self.types.get(name)
        if info is None:
            return default
        return ONNX_TO_DTYPE.get(info[0], default)

    def const(self, name: str) -> Optional[np.ndarray]:
        """The value of ``name`` if it is an initializer or an already-seen constant."""
        if not name:
            return None
        t = self.graph.tensors.get(name)
        if t is not None and t.is_const:
            return t.data
        if name in self.inits or name in self.sparse_inits:
            if name not in self._const_cache:
                self._const_cache[name] = self._init_array(name)
            return self._const_cache[name]
        return None

    def new_name(self, base: str) -> str:
        """A tensor name used nowhere in the model."""
        name, i = base, 1
        while name in self.used_names or name in self.graph.tensors:
            name = f"{base}_{i}"
            i += 1
        self.used_names.add(name)
        return name

    def add_const(self, base: str, value, dtype: Optional[str] = None) -> str:
        """Add a constant tensor (named after the current node) and return its name."""
        arr = _contiguous(np.asarray(value, dtype=dtype))
        name = self.new_name(f"{self.node_name}_{base}")
        self.graph.add_const(name, arr)
        return name

    def emit(self, op: str, inputs: Sequence[str], outputs: Sequence[str],
             attrs: Dict[str, object], src_schema=None, final: bool = False) -> Node:
        """Add an IR node, completing its attributes to the opset-21 schema.

        ``src_schema`` (the node's own schema at the model's opset) lets
        attributes that no longer exist at opset 21 be dropped when they hold
        their old default; any other leftover attribute is an error.
        ``final``: ``attrs`` are already in IR form (e.g. ConstantOfShape's
        ``value``/``dtype``, which are the IR's own, not ONNX's).
        """
        attrs = self._check_json(op, dict(attrs)) if final else \
            self._finalize_attrs(op, dict(attrs), src_schema)
        if self._emitted:    # a helper node of a multi-node lowering
            name = self._unique_node_name(f"{self.node_name}_{op}")
        else:
            name = self.node_name
        self._emitted += 1
        node = Node(op, list(inputs), list(outputs), attrs, name)
        for o in node.outputs:
            if o and o not in self.graph.tensors:
                self.graph.tensors[o] = Tensor(o)
        self.graph.nodes.append(node)
        self._emitted_nodes.append(node)
        return node

    def _finalize_attrs(self, op: str, attrs: Dict[str, object], src_schema) -> Dict[str, object]:
        s21 = _schema(self.onnx, op, IR_OPSET)
        if s21 is not None:
            known = set(s21.attributes)
            src_defaults = _defaults(self.onnx, src_schema)
            latest_defaults = _defaults(self.onnx, _schema(self.onnx, op, self.onnx.defs.onnx_opset_version()))
            for k in [k for k in attrs if k not in known]:
                v = attrs[k]
                if k in src_defaults and src_defaults[k] == v or \
                        k in latest_defaults and latest_defaults[k] == v:
                    del attrs[k]     # an old or newer attribute at its default: no meaning
                else:
                    raise ConversionError(
                        f"node {self.node_name!r} ({op}, opset {self.opset}): attribute "
                        f"{k}={v!r} has no equivalent at opset {IR_OPSET}")
            for k, v in _defaults(self.onnx, s21).items():
                attrs.setdefault(k, v)
        for k in DTYPE_ATTRS.get(op, ()):
            if isinstance(attrs.get(k), int):
                attrs[k] = _dtype_name(attrs[k], f"node {self.node_name!r} ({op}) attribute {k!r}")
        return self._check_json(op, attrs)

    def _check_json(self, op: str, attrs: Dict[str, object]) -> Dict[str, object]:
        for k, v in attrs.items():
            if not isinstance(v, (int, float, str, list, bool)):
                raise ConversionError(f"node {self.node_name!r} ({op}): attribute {k!r} "
                                      f"is a {type(v).__name__}, not a JSON value")
        return attrs

    def _unique_node_name(self, base: str) -> str:
        """``base`` or ``base_N``: unused so far and by no named ONNX node."""
        name, i = base, 1
        while name in self.node_names or name in self.reserved_node_names:
            name = f"{base}_{i}"
            i += 1
        self.node_names.add(name)
        return name

    # initializers ---------------------------------------------------------------
    def _init_array(self, name: str) -> np.ndarray:
        if name in self.sparse_inits:
            return self._sparse_array(self.sparse_inits[name], f"initializer {name!r}")
        return self._tensor_array(self.inits[name], f"initializer {name!r}")

    def _tensor_array(self, t, what: str) -> np.ndarray:
        onnx = self.onnx
        _dtype_name(t.data_type, what)
        if any(d < 0 for d in t.dims):       # numpy's reshape would take a negative dim as "infer it"
            raise ConversionError(f"{what}: negative dim in dims {list(t.dims)}")
        if onnx.external_data_helper.uses_external_data(t):
            loc = dict((kv.key, kv.value) for kv in t.external_data).get("location", "")
            if not os.path.isfile(os.path.join(self.base_dir, loc)):
                raise ConversionError(f"{what}: external data file {loc!r} not found "
                                      f"(looked in {self.base_dir})")
        try:
            arr = onnx.numpy_helper.to_array(t, self.base_dir)
        except Exception as e:  # noqa: BLE001  (truncated file, bad offsets, ...)
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConversionError(f"{what}: cannot read tensor data: {msg}") from None
        return _contiguous(arr)

    def _sparse_array(self, sp, what: str) -> np.ndarray:
        values = self._tensor_array(sp.values, what)
        idx = self._tensor_array(sp.indices, what).astype(np.int64)
        dims = tuple(int(d) for d in sp.dims)
        from ..ops.resources import check_sparse_coo
        idx = check_sparse_coo(idx, values, dims, what)   # numpy would wrap a negative index
        dense = np.zeros(dims, values.dtype)
        dense.reshape(-1)[idx] = values
        return dense

    # main -----------------------------------------------------------------------
    def convert(self) -> Graph:
        onnx_graph = self.model.graph
        for k, node in enumerate(onnx_graph.node):
            self._convert_node(node, k)
        self._count_unsupported_emitted()
        if self.unsupported:
            counts = self.unsupported
            items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            hint = ""
            if any(op.startswith("com.microsoft.") for op in counts):
                # onnxruntime's transformer optimizer writes these fused forms; the exported
                # model (MatMul/Softmax chains, LayerNormalization) converts as it is
                hint = ("; com.microsoft ops are onnxruntime contrib ops (only "
                        f"{', '.join(sorted(CONTRIB_LOWERINGS))} are lowered): convert the model as "
                        "exported, before onnxruntime's transformer optimizer")
            raise UnsupportedOpError("unsupported ops: " + ", ".join(f"{op} ({n})" for op, n in items) + hint)
        self._add_initializers()
        self._add_inputs()
        self._add_outputs()
        g = self.graph
        g.metadata.update(self._metadata())
        try:
            g.validate()
        except GraphError as e:
            raise ConversionError(f"{self.label}: malformed model: {e}") from None
        return g

    def _metadata(self) -> Dict[str, object]:
        m = self.model
        meta: Dict[str, object] = {"source_format": "onnx", "source_opset": self.opset,
                                   "source_ir_version": int(m.ir_version)}
        if m.producer_name:
            meta["producer"] = f"{m.producer_name} {m.producer_version}".strip()
        if m.metadata_props:
            meta["model_metadata"] = {p.key: p.value for p in m.metadata_props}
        # exporters note the input size here too (verify_shapes.py reads it); bounded: free text
        if m.doc_string:
            meta["doc_string"] = m.doc_string[:DOC_STRING_MAX]
        if m.graph.doc_string:
            meta["graph_doc_string"] = m.graph.doc_string[:DOC_STRING_MAX]
        return meta

    def _count_unsupported_emitted(self) -> None:
        from .. import ops
        for node in self._emitted_nodes:
            if not ops.supported(node.op):
                self.unsupported[node.op] += 1

    def _convert_node(self, node, k: int) -> None:
        onnx = self.onnx
        self._emitted = 0
        if node.name and node.name not in self.node_names:
            self.node_name = node.name      # keep ONNX names (first one wins on duplicates)
            self.node_names.add(node.name)
        else:
            self.node_name = self._unique_node_name(node.name or f"{node.op_type}_{k}")
        op = node.op_type
        if node.domain == "com.microsoft" and op in CONTRIB_LOWERINGS:
            # onnxruntime's fused forms: lowered into the standard chains (onnx_contrib.py)
            where = f"node {self.node_name!r} (com.microsoft.{op})"
            CONTRIB_LOWERINGS[op](self, node, {a.name: _attr_value(onnx, a, where) for a in node.attribute})
            return
        if node.domain == "com.microsoft" and op in MS_NORMALIZERS:
            given = {a.name: _attr_value(onnx, a, f"node {self.node_name!r} ({op})") for a in node.attribute}
            MS_NORMALIZERS[op](self, node, dict(given), given, None)
            return
        if node.domain not in ("", "ai.onnx"):
            self.unsupported[f"{node.domain}.{op}"] += 1
            return
        A = onnx.AttributeProto
        if any(a.type in (A.GRAPH, A.GRAPHS) for a in node.attribute):
            self.unsupported[op] += 1     # control flow (If/Loop/Scan): no subgraphs in the IR
            return
        schema = _schema(onnx, op, self.opset)
        if schema is None:
            # An op newer than the model's declared opset: be lenient and
            # read it with the newest schema; unknown ops are unsupported.
            schema = _schema(onnx, op, onnx.defs.onnx_opset_version())
            if schema is None:
                self.unsupported[op] += 1
                return
        where = f"node {self.node_name!r} ({op})"
        _check_arity_and_attr_types(onnx, node, schema, where)
        given = {a.name: _attr_value(onnx, a, where) for a in node.attribute}
        attrs = dict(_defaults(onnx, schema))
        attrs.update(given)
        fn = NORMALIZERS.get(op, _norm_default)
        try:
            fn(self, node, attrs, given, schema)
        except ConversionError:
            from .. import ops
            if ops.supported(op) or op in NORMALIZERS:
                raise
            # the op has no kernel anyway: say so, in the one list of unsupported ops
            self.unsupported[op] += 1

    def _add_initializers(self) -> None:
        g = self.graph
        for name in list(self.inits) + list(self.sparse_inits):
            if name in g.tensors and g.tensors[name].is_const:
                continue
            arr = self.const(name)
            g.add_tensor(name, arr.dtype.name, arr.shape, arr)
        self._const_cache.clear()

    def _add_inputs(self) -> None:
        g = self.graph
        dim_params = set()
        for vi in self.model.graph.input:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                dim_params.update(d.dim_param for d in vi.type.tensor_type.shape.dim if d.dim_param)
        fresh = set()
        for vi in self.model.graph.input:
            if vi.name in self.inits or vi.name in self.sparse_inits:
                continue   # IR<4 style: initializers listed as inputs are constants
            if vi.name in g.tensors and g.tensors[vi.name].is_const:
                continue
            if not vi.type.HasField("tensor_type"):
                kind = vi.type.WhichOneof("value") or "unknown"
                raise ConversionError(f"graph input {vi.name!r}: {kind} inputs are not supported "
                                      "(only tensors)")
            tt = vi.type.tensor_type
            if tt.elem_type == 0:
                raise ConversionError(f"graph input {vi.name!r} has no element type")
            dtype = _dtype_name(tt.elem_type, f"graph input {vi.name!r}")
            shape = None
            if tt.HasField("shape"):
                dims: List[object] = []
                for j, d in enumerate(tt.shape.dim):
                    if d.HasField("dim_value"):
                        dims.append(int(d.dim_value))
                    elif d.dim_param:
                        dims.append(d.dim_param)
                    else:
                        # an unknown dim: give it a fresh symbol of its own
                        base, i = f"{vi.name}_dim{j}", 1
                        sym = base
                        while sym in dim_params or sym in fresh:
                            sym = f"{base}_{i}"
                            i += 1
                        fresh.add(sym)
                        dims.append(sym)
                shape = tuple(dims)
            if vi.name in g.tensors and not g.tensors[vi.name].is_const:
                # produced by a node too: malformed, validate() reports it
                raise ConversionError(f"{self.label}: malformed model: graph input {vi.name!r} "
                                      "is also produced by a node")
            g.add_input(vi.name, dtype, shape)

    def _add_outputs(self) -> None:
        g = self.graph
        for vi in self.model.graph.output:
            if not vi.name:
                raise ConversionError(f"{self.label}: malformed model: a graph output has no name")
            if vi.type.HasField("tensor_type"):
                et = vi.type.tensor_type.elem_type
                dtype = _dtype_name(et, f"graph output {vi.name!r}") if et else None
            elif vi.type.WhichOneof("value"):
                raise ConversionError(f"graph output {vi.name!r}: {vi.type.WhichOneof('value')} "
                                      "outputs are not supported (only tensors)")
            else:
                dtype = None
            t = g.tensors.get(vi.name)
            if t is None:
                raise ConversionError(f"{self.label}: malformed model: graph output {vi.name!r} "
                                      "is never produced")
            if dtype is not None and not t.is_const and vi.name not in g.inputs:
                t.dtype = dtype
            g.outputs.append(vi.name)


def _check_arity_and_attr_types(onnx, node, schema, where: str) -> None:
    """What the op's ONNX schema fixes before any normalizer reads the node: the number of
    inputs and outputs, the required inputs present, each attribute of the declared type
    (a hostile file can give any; a normalizer would otherwise index or int() it blindly)."""
    n_in, n_out = len(node.input), len(node.output)
    if not schema.min_input <= n_in <= schema.max_input:
        raise ConversionError(f"{where}: {n_in} inputs given, the op takes "
                              f"{schema.min_input}..{schema.max_input}")
    if not schema.min_output <= n_out <= schema.max_output:
        raise ConversionError(f"{where}: {n_out} outputs given, the op takes "
                              f"{schema.min_output}..{schema.max_output}")
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    for i, formal in enumerate(list(schema.inputs)[:n_in]):
        if formal.option == single and not node.input[i]:
            raise ConversionError(f"{where}: required input {i} ({formal.name}) is empty")
    for a in node.attribute:
        decl = schema.attributes.get(a.name)
        if decl is not None and int(a.type) != int(decl.type):
            raise ConversionError(f"{where}: attribute {a.name!r} is of type "
                                  f"{onnx.AttributeProto.AttributeType.Name(a.type)}, the op declares "
                                  f"{onnx.AttributeProto.AttributeType.Name(int(decl.type))}")


# -- input shape pinning ---------------------------------------------------------

def _pin_input_shapes(graph: Graph, input_shapes: Dict[str, Sequence[int]]) -> None:
    """Replace input dims by the given ints; a symbol pinned in one input is
    pinned everywhere it appears."""
    unknown = [k for k in input_shapes if k not in graph.inputs]
    if unknown:
        raise ConversionError(f"input_shapes names unknown input(s) {unknown}; "
                              f"model inputs are {list(graph.inputs)}")
    symbols: Dict[str, int] = {}
    for name, shape in input_shapes.items():
        t = graph.tensors[name]
        try:
            dims = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ConversionError(f"input_shapes[{name!r}]: expected a tuple of ints, got {shape!r}") from None
        if any(d < 0 for d in dims):
            raise ConversionError(f"input_shapes[{name!r}]: negative dim in {dims}")
        if t.shape is not None:
            if len(t.shape) != len(dims):
                raise ConversionError(f"input_shapes[{name!r}]: rank {len(dims)} {dims} does not match "
                                      f"the model's rank-{len(t.shape)} input {tuple(t.shape)}")
            for decl, d in zip(t.shape, dims):
                if isinstance(decl, int) and decl != d:
                    raise ConversionError(f"input_shapes[{name!r}]: {dims} conflicts with the "
                                          f"model's fixed shape {tuple(t.shape)}")
                if isinstance(decl, str):
                    if symbols.get(decl, d) != d:
                        raise ConversionError(f"input_shapes: dim {decl!r} pinned to both "
                                              f"{symbols[decl]} and {d}")
                    symbols[decl] = d
        t.shape = dims
    for name in graph.inputs:
        t = graph.tensors[name]
        if name not in input_shapes and t.shape is not None:
            t.shape = tuple(symbols.get(d, d) if isinstance(d, str) else d for d in t.shape)


# the per-op normalizers (they read the constants and helpers above)
from .onnx_normalizers import NORMALIZERS, _norm_default  # noqa: E402
from .onnx_sequence import NORMALIZERS as _SEQUENCE_NORMALIZERS  # noqa: E402
from .onnx_contrib import LOWERINGS as CONTRIB_LOWERINGS  # noqa: E402
from .onnx_attention import NORMALIZERS as _ATTENTION_NORMALIZERS  # noqa: E402
from .onnx_qoperator import MS_NORMALIZERS, NORMALIZERS as _QOPERATOR  # noqa: E402
NORMALIZERS.update(_ATTENTION_NORMALIZERS)
NORMALIZERS.update(_SEQUENCE_NORMALIZERS)
NORMALIZERS.update(_QOPERATOR)
