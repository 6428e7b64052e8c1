"""Op knowledge in one place: each op's schema (inputs, attributes, allowed ranges) and checks.

``validate_graph(graph, where)`` runs every node's schema plus the graph-wide checks (dims,
constants against their declared shapes, quantization parameters, sparse encodings, resource
limits). It runs at load (``artifact.load_artifact``, before any backend prepares) and at
convert (after the frontend, before the verification run), so no kernel, native or numpy,
sees an unchecked value. ``docs/format.md`` ("Security: validation") lists what is checked.
"""
from __future__ import annotations

from typing import Dict, Optional

from ..errors import ArtifactError, ConversionError, EdgeInferError
from ..ir.graph import Graph, Node
from . import conv, dynamic, elementwise, gemm, norm, pool, quantize, reduce, resize, sequence, tensor
from .resources import GENERATED_DEFAULT, ResourceLimitError, check_graph, default_limit
from .schema import ValidationError, check_node

SCHEMAS: Dict[str, dict] = {}
for _family in (conv, pool, gemm, elementwise, norm, tensor, quantize, reduce, resize, dynamic, sequence):
    SCHEMAS.update(_family.SCHEMAS)

_ERRORS = {"load": ArtifactError, "convert": ConversionError}

__all__ = ["SCHEMAS", "ValidationError", "ResourceLimitError", "validate_node", "validate_graph",
           "validate_meta", "default_limit", "supported", "int8_ok"]


def supported(op: str) -> bool:
    """Whether edge_infer runs ``op``: it has a schema here (and so, ``tests/test_validate.py``
    checks, a kernel on the reference CPU backend). What the frontends ask, rather than a
    backend's kernel table."""
    return op in SCHEMAS


def int8_ok(node: Node, graph: Graph) -> Optional[str]:
    """None when an int8 kernel can run ``node``, else why not (``ops/int8.py``)."""
    from .int8 import int8_ok as ok
    return ok(node, graph)


def validate_node(node: Node, graph: Graph) -> None:
    """Check ``node`` against its op's schema (ops without one: nothing to check here)."""
    schema = SCHEMAS.get(node.op)
    if schema is None:
        return
    try:
        check_node(node, graph, schema)
    except EdgeInferError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, OverflowError, ZeroDivisionError) as e:
        # a value of a type no schema expected (a list where an int goes, ...): still refused
        raise ValidationError(f"node {node.name!r} ({node.op}): malformed attributes or inputs "
                              f"({type(e).__name__}: {e})"[:300]) from e


def _check_tensors(graph: Graph) -> None:
    from ..sparse.encodings import SparseArray, validate as validate_sparse
    from .quantize import check_quant
    for t in graph.tensors.values():
        if t.shape is not None:
            for d in t.shape:
                if isinstance(d, str) and d:
                    continue
                if not (isinstance(d, int) or hasattr(d, "__index__")) or isinstance(d, bool) or int(d) < 0:
                    raise ValidationError(f"tensor {t.name!r}: dimension {d!r} is not a non-negative "
                                          f"integer or a symbol")
        if t.data is not None:
            if t.shape is not None and all(not isinstance(d, str) for d in t.shape) \
                    and tuple(int(d) for d in t.shape) != tuple(t.data.shape):
                raise ValidationError(f"tensor {t.name!r}: data of shape {list(t.data.shape)}, "
                                      f"declared {list(t.shape)}")
            if isinstance(t.data, SparseArray):
                err = validate_sparse(t.data)
                if err:
                    raise ValidationError(f"tensor {t.name!r}: sparse weights: {err}")
        if t.quant is not None:
            check_quant(t)


def _number(v, lo=0) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and lo <= v < 2 ** 62


def validate_meta(meta: dict, where: str = "load") -> None:
    """The metadata fields the runtime reads: ``target`` an object with a numeric ``threads``
    and ``memory_budget_mb`` and a list of backend names, ``memory_limit`` a byte count."""
    err = _ERRORS[where]
    target = meta.get("target")
    if target is not None and not isinstance(target, dict):
        raise err(f"meta 'target' must be an object, not {type(target).__name__}")
    target = target or {}
    for key, lo in (("threads", 0), ("memory_budget_mb", 0)):
        v = target.get(key)
        if v is not None and not (_number(v, lo) and (key != "threads" or v == int(v))):
            raise err(f"meta 'target' {key!r}: {v!r} is not a non-negative {'integer' if key == 'threads' else 'number'}"[:200])
    b = target.get("backends")
    if b is not None and not (isinstance(b, list) and all(isinstance(x, str) for x in b)):
        raise err("meta 'target' 'backends' must be a list of backend names")
    v = meta.get("memory_limit")
    if v is not None and not (_number(v, 1) and v == int(v)):
        raise err(f"meta 'memory_limit': {v!r} is not a positive byte count"[:200])


def validate_graph(graph: Graph, where: str = "load", max_bytes: Optional[int] = None,
                   profile: Optional[dict] = None, count_constants: bool = True) -> Dict[str, int]:
    """Validate every node and tensor of ``graph``; refuse with ArtifactError (``where="load"``)
    or ConversionError (``"convert"``) naming the node or tensor and the attribute.

    Resources: ``max_bytes`` caps each static tensor, the constants together (unless
    ``count_constants`` is False: mapped weights are file pages) and each value-sized op output;
    None takes the target ``profile``'s memory budget, else the memory available, with
    value-sized outputs capped at ``resources.GENERATED_DEFAULT``. Returns the byte counts."""
    err = _ERRORS[where]
    limit = max_bytes if max_bytes is not None else default_limit(profile)
    generated = max_bytes if max_bytes is not None else min(GENERATED_DEFAULT, limit or GENERATED_DEFAULT)
    try:
        _check_tensors(graph)
        for node in graph.nodes:
            validate_node(node, graph)
        return check_graph(graph, limit, generated, count_constants)
    except ValidationError as e:
        raise err(f"invalid graph: {e}") from e
