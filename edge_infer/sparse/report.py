"""Compression report of a graph's weights: per tensor and for the whole model."""
from __future__ import annotations

from typing import List

import numpy as np

from ..ir import Graph
from .encodings import SparseArray


def tensor_row(t) -> dict:
    d = t.data
    dense = int(np.prod(d.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
    fp32 = int(np.prod(d.shape, dtype=np.int64)) * 4
    row = {"name": t.name, "dtype": t.dtype, "shape": list(d.shape), "encoding": "dense",
           "bytes": int(d.nbytes), "dense_bytes": dense, "fp32_bytes": fp32}
    if isinstance(d, SparseArray):
        row["encoding"] = d.encoding + (f" {d.block[0]}x{d.block[1]}" if d.block else "") + \
            (f" {d.indices.dtype.name}" if d.indices is not None else "")
        row["sparsity"] = round(1.0 - d.density, 4)
    row["ratio"] = round(dense / max(row["bytes"], 1), 3)
    row["ratio_vs_fp32"] = round(fp32 / max(row["bytes"], 1), 3)
    return row


def compression(g: Graph) -> dict:
    """Per-tensor rows of the encoded tensors and totals over every constant."""
    consts = [t for t in g.tensors.values() if t.is_const]
    rows = [tensor_row(t) for t in consts]
    total = sum(r["bytes"] for r in rows)
    dense = sum(r["dense_bytes"] for r in rows)
    fp32 = sum(r["fp32_bytes"] if r["dtype"] in ("float32", "int8") else r["dense_bytes"] for r in rows)
    enc = [r for r in rows if r["encoding"] != "dense"]
    return {"tensors": sorted(enc, key=lambda r: -r["dense_bytes"]),
            "encoded_tensors": len(enc), "weight_bytes": total, "dense_weight_bytes": dense,
            "fp32_weight_bytes": fp32, "ratio": round(dense / max(total, 1), 3),
            "ratio_vs_fp32": round(fp32 / max(total, 1), 3),
            "encoded_ratio": round(sum(r["dense_bytes"] for r in enc) / max(sum(r["bytes"] for r in enc), 1), 3)}


def format_compression(rep: dict, limit: int = 12) -> str:
    lines = [f"  sparse: {rep['encoded_tensors']} encoded weight(s); weights {rep['dense_weight_bytes']:,} B dense -> "
             f"{rep['weight_bytes']:,} B ({rep['ratio']:.2f}x; {rep['ratio_vs_fp32']:.2f}x vs fp32; "
             f"encoded tensors alone {rep['encoded_ratio']:.2f}x)"]
    for r in rep["tensors"][:limit]:
        lines.append(f"    {r['name']:<32} {str(r['shape']):<18} {r['encoding']:<18} sparsity {r.get('sparsity', 0):.2f} "
                     f"{r['dense_bytes']:>10,} -> {r['bytes']:>9,} B ({r['ratio']:.2f}x)")
    if len(rep["tensors"]) > limit:
        lines.append(f"    ... {len(rep['tensors']) - limit} more")
    return "\n".join(lines)


def format_summary(rep: dict) -> str:
    """convert's printed lines for a sparsity report (pruning + compression)."""
    lines = []
    pr = rep.get("pruning")
    if pr:
        pruned = [r for r in pr["layers"] if r["pattern"] != "none"]
        lines.append(f"  pruning: {len(pruned)} layer(s) pruned ({pr['pattern']}, {pr['scope']}), "
                     f"left alone: {', '.join(f'{k} ({v})' for k, v in list(pr['protected'].items())[:4]) or 'none'}")
        acc = pr.get("accuracy")
        if acc:
            lines.append(f"  pruned vs dense on {acc['samples']} sample(s): accuracy drop {acc['drop']:.4f} "
                         f"({acc['metric']}), output relative error {acc['rel_error']:.3g}")
        b = pr.get("budget")
        if b:
            lines.append(f"  accuracy budget {b['max_accuracy_drop']}: {'met' if b['met'] else 'NOT met'} "
                         f"(drop {b['final_drop']:.4f}); per-layer sparsity "
                         + ", ".join(f"{k}={v:.2f}" for k, v in b["chosen"].items()))
    comp = rep.get("compression")
    if comp and comp["encoded_tensors"]:
        lines.append(format_compression(comp))
        v = rep.get("verification")
        if v:
            lines.append(f"  sparse kernels verified against the dense pruned weights: {v['summary']}")
    return "\n".join(lines)
