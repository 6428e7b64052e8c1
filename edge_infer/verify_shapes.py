"""The input shapes a conversion is verified at, for models with symbolic (dynamic) dims.

A model exported with dynamic height and width (the default of the popular YOLO and OCR
exporters) has no one input shape; the converter still runs it once, on seeded inputs, to
check the optimized graph against the source (and to count its cost). Those inputs must be
shapes the model accepts: a 1x1 image breaks a detector's upsample-and-concat (its stride-16
and stride-32 maps are both 1x1) and a recognizer's 3x3 pool. ``choose_verify_shapes`` picks,
in this order:

1. ``explicit`` shapes (``--verify-shape NAME=...``; ``--input-shape`` pins the graph itself,
   so its inputs arrive static);
2. a size recorded in the model: ONNX ``metadata_props`` or doc strings (``imgsz``,
   ``img_size``, ``image_size``, ``input_size``, ``input_shape``: YOLO exports write
   ``imgsz="[640, 640]"``). TFLite files carry concrete shapes, which the importer keeps;
3. the target profile's ``input_size`` or the calibration recipe's ``size`` (e.g. 640x640
   for the ``yolo`` recipe);
4. else the smallest size the graph accepts: every non-batch symbol takes the same candidate
   value, multiples of the model's recorded ``stride`` (default 32) from small upward, then
   1..255, each checked by shape inference alone (strides, pooling windows, concat and
   broadcast agreement, shape arithmetic folded; no kernel runs on data).

A batch symbol (axis 0) is 1. Hinted shapes (2, 3) that shape inference refuses are skipped.
The graph itself stays dynamic: these shapes only feed the verification run, the cost report
and seeded calibration (``graph.metadata["verify_shapes"]``, see ``ir.concrete_input_shapes``).
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import ConversionError, EdgeInferError
from .ir import Graph
from .ir.graph import VERIFY_SHAPES_SEARCHED
from .ir.shape_inference import infer_shapes

#: metadata keys that exporters use for the input image size ([H, W], one int, or a full shape)
SIZE_KEYS = ("imgsz", "img_size", "image_size", "input_size", "input_shape")
#: largest multiple of the stride tried, then the small sizes below 256 one by one
MAX_SIZE = 1280
SMALL_SIZES = range(1, 256)
#: folded during the search: shape arithmetic is tiny; bigger constant subgraphs need no value
FOLD_MAX_ELEMENTS = 4096
#: the source of shapes found by the search (not a size the model or the user gave)
SEARCHED = VERIFY_SHAPES_SEARCHED

Shapes = Dict[str, Tuple[int, ...]]


def symbolic_inputs(graph: Graph) -> Dict[str, tuple]:
    """{input name: declared shape} of the inputs with a symbolic dim."""
    return {n: tuple(graph.tensors[n].shape) for n in graph.inputs
            if graph.tensors[n].shape is not None
            and any(not isinstance(d, (int, np.integer)) for d in graph.tensors[n].shape)}


def shape_problem(graph: Graph, shapes: Shapes) -> Optional[str]:
    """None if shape inference accepts ``graph`` at these input shapes, else why not."""
    from .backends.cpu import fold_node
    g = graph.copy()
    for name, shape in shapes.items():
        g.tensors[name].shape = tuple(int(d) for d in shape)

    def fold_small(node, gr):
        outs = [gr.tensors[o] for o in node.outputs if o]
        if all(t.shape is not None and all(isinstance(d, int) for d in t.shape)
               and int(np.prod(t.shape, dtype=np.int64)) <= FOLD_MAX_ELEMENTS for t in outs):
            fold_node(node, gr)
    try:
        infer_shapes(g, fold=fold_small)
    except (EdgeInferError, ValueError, TypeError, IndexError, KeyError, MemoryError) as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def _ints(text: str) -> List[int]:
    return [int(v) for v in re.findall(r"\d+", text)]


def recorded_size(graph: Graph) -> Optional[Tuple[str, List[int]]]:
    """(where, [H, W] or a full shape) from the model's metadata or doc strings, else None."""
    meta = graph.metadata.get("model_metadata") or {}
    for key in SIZE_KEYS:
        for k, v in meta.items():
            if k.lower() == key:
                vals = _ints(str(v))
                if vals and all(d > 0 for d in vals):
                    return f"model metadata {k}={v}", vals
    for field in ("doc_string", "graph_doc_string"):
        doc = str(graph.metadata.get(field) or "")
        m = re.search(r"\b(" + "|".join(SIZE_KEYS) + r")\b\s*[=:]?\s*[\[(]?\s*(\d+)(?:\s*[,x]\s*(\d+))*",
                      doc, re.IGNORECASE)
        if m:
            vals = _ints(m.group(0)[len(m.group(1)):])
            if vals and all(d > 0 for d in vals):
                return f"model doc string ({m.group(0).strip()})", vals
    return None


def model_stride(graph: Graph) -> int:
    """The stride recorded in the model's metadata (YOLO exports: ``stride``), else 32."""
    meta = graph.metadata.get("model_metadata") or {}
    vals = _ints(str(meta.get("stride", "")))
    return max(vals) if vals and max(vals) > 0 else 32


def _spatial_axes(shape: tuple) -> Tuple[int, int]:
    """(H axis, W axis) of a rank-4 image input: NHWC when only the last dim looks like channels."""
    def chan(d):
        return isinstance(d, (int, np.integer)) and d in (1, 3, 4)
    return (1, 2) if chan(shape[3]) and not chan(shape[1]) else (2, 3)


def _bind(graph: Graph, bound: Dict[str, int], name: str, shape: Sequence[int], where: str) -> None:
    """Record the symbol values that a concrete ``shape`` of input ``name`` gives."""
    decl = graph.tensors[name].shape
    if len(shape) != len(decl):
        raise ConversionError(f"{where} {name}={','.join(map(str, shape))}: input {name!r} has rank "
                              f"{len(decl)} ({_fmt(decl)})")
    for d, v in zip(decl, shape):
        if isinstance(d, (int, np.integer)):
            if int(d) != int(v):
                raise ConversionError(f"{where} {name}={','.join(map(str, shape))}: input {name!r} has a "
                                      f"fixed dim {d} there ({_fmt(decl)})")
        elif bound.setdefault(d, int(v)) != int(v):
            raise ConversionError(f"{where}: symbol {d!r} given as both {bound[d]} and {v}")


def _resolve(graph: Graph, bound: Dict[str, int], fill: Optional[int]) -> Optional[Shapes]:
    """Concrete shapes of all inputs: bound symbols, batch symbols 1, the rest ``fill``
    (None: unresolved symbols remain -> None)."""
    shapes = {}
    for name in graph.inputs:
        decl = graph.tensors[name].shape
        if decl is None:
            continue
        dims = []
        for axis, d in enumerate(decl):
            if isinstance(d, (int, np.integer)):
                dims.append(int(d))
            elif d in bound:
                dims.append(bound[d])
            elif axis == 0:
                dims.append(1)
            elif fill is None:
                return None
            else:
                dims.append(fill)
        shapes[name] = tuple(dims)
    return shapes


def _size_binding(graph: Graph, size: List[int]) -> Dict[str, int]:
    """Symbol values from an image size: [H, W] (or one int) onto each rank-4 input's spatial
    symbols, a full shape onto inputs of that rank."""
    bound: Dict[str, int] = {}
    for name, decl in symbolic_inputs(graph).items():
        if len(size) == len(decl) and len(size) > 2:
            pairs = list(zip(decl, size))
        elif len(decl) == 4 and len(size) in (1, 2):
            h, w = (size[0], size[-1])
            ah, aw = _spatial_axes(decl)
            pairs = [(decl[ah], h), (decl[aw], w)]
        else:
            continue
        for d, v in pairs:
            if not isinstance(d, (int, np.integer)):
                bound.setdefault(d, int(v))
    return bound


def _fmt(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _hints(graph: Graph, profile: Optional[dict], recipe) -> List[Tuple[str, List[int]]]:
    out = []
    rec = recorded_size(graph)
    if rec:
        out.append(rec)
    size = (profile or {}).get("input_size")
    if size:
        out.append((f"target {profile.get('name', '?')} input_size", [size] if isinstance(size, int) else list(size)))
    if recipe is not None:
        from .quantize.calibration import load_recipe
        r = load_recipe(recipe) or {}
        if r.get("size"):
            out.append((f"calibration recipe {r.get('name') or 'given'} size", list(r["size"])))
    return out


def choose_verify_shapes(graph: Graph, explicit: Optional[Dict[str, Sequence[int]]] = None,
                         profile: Optional[dict] = None, recipe=None) -> Tuple[Shapes, str]:
    """(a concrete shape per input, where it came from), see the module docstring.

    Raises ConversionError naming the symbolic inputs when no shape is accepted."""
    sym = symbolic_inputs(graph)
    bound: Dict[str, int] = {}
    for name, shape in (explicit or {}).items():
        if name not in graph.inputs:
            raise ConversionError(f"--verify-shape {name}=...: the model has no input {name!r} "
                                  f"(inputs: {', '.join(graph.inputs)})")
        if graph.tensors[name].shape is not None:
            _bind(graph, bound, name, shape, "--verify-shape")
    if not sym:
        return {n: tuple(int(d) for d in graph.tensors[n].shape) for n in graph.inputs
                if graph.tensors[n].shape is not None}, "static input shapes"
    shapes = _resolve(graph, bound, None)
    if shapes is not None:                       # nothing but batch dims left open
        problem = shape_problem(graph, shapes)
        if problem and explicit:
            raise ConversionError(f"--verify-shape: the model does not accept {_describe(shapes)}: {problem}")
        if not problem:
            return shapes, "--verify-shape" if explicit else "batch dims as 1"
    for where, size in _hints(graph, profile, recipe):
        b = {**_size_binding(graph, size), **bound}
        if len(b) == len(bound):
            continue                             # the hint sizes nothing that is open
        shapes = _resolve(graph, b, None)
        if shapes is None:
            shapes = _search(graph, b, model_stride(graph))
        if shapes is not None and shape_problem(graph, shapes) is None:
            return shapes, where
    shapes = _search(graph, bound, model_stride(graph))
    if shapes is None:
        first = shape_problem(graph, _resolve(graph, bound, model_stride(graph)))
        names = ", ".join(f"{n} {_fmt(s)}" for n, s in sym.items())
        example = " ".join(f"--input-shape {n}=" + ",".join(str(d) if isinstance(d, (int, np.integer)) else
                                                              ("1" if i == 0 else str(d)) for i, d in enumerate(s))
                           for n, s in sym.items())
        raise ConversionError(f"no input shape found to verify the conversion at: symbolic input(s) {names} "
                              f"fail shape inference at every size tried (multiples of {model_stride(graph)} "
                              f"up to {MAX_SIZE}, then 1..{SMALL_SIZES[-1]}; at {model_stride(graph)}: {first}); "
                              f"give the size: {example} (or --verify-shape to keep the artifact dynamic)")
    return shapes, SEARCHED


def _search(graph: Graph, bound: Dict[str, int], stride: int) -> Optional[Shapes]:
    """The first candidate fill value (see the module docstring) shape inference accepts."""
    tried = set()
    for s in list(range(stride, MAX_SIZE + 1, stride)) + list(SMALL_SIZES):
        if s in tried:
            continue
        tried.add(s)
        shapes = _resolve(graph, bound, s)
        if shape_problem(graph, shapes) is None:
            return shapes
    return None


def _describe(shapes: Shapes) -> str:
    return ", ".join(f"{n}={','.join(map(str, s))}" for n, s in shapes.items())


def format_shapes(shapes: Dict[str, Sequence[int]], dynamic: Dict[str, Sequence]) -> str:
    """``images [1, 3, 320, 320] (dynamic: batch, height, width)`` per input, for the CLI;
    ``dynamic``: {input: declared shape} of the symbolic inputs."""
    out = []
    for n, s in shapes.items():
        syms = [str(d) for d in dynamic.get(n, ()) if not isinstance(d, (int, np.integer))]
        out.append(f"{n} {_fmt(s)}" + (f" (dynamic: {', '.join(syms)})" if syms else ""))
    return "; ".join(out)
