"""Device target profiles: cores, SIMD, caches, memory budget, backends per device class.

Profiles are JSON files in the top-level ``targets/`` folder (installed as the
``edge_infer._targets`` package). ``load_target`` also accepts a path to a JSON file.

Optional ``"require_signed": true`` makes ``convert`` for the profile sign (it needs a key)
and runtimes refuse the artifact unless trusted keys verify its signature (docs/format.md,
"Security: signatures").
"""
from __future__ import annotations

import json
import os
from typing import Dict, List

from .errors import EdgeInferError

REQUIRED = ("name", "cpu", "cache", "memory_budget_mb", "threads", "backends")


def _profile_dir() -> str:
    try:
        from . import _targets  # installed: the targets/ folder mapped into the package
        return os.path.dirname(_targets.__file__)
    except ImportError:  # running from a source checkout
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "targets")


def list_targets() -> List[str]:
    """Names of the bundled target profiles."""
    return sorted(f[:-5] for f in os.listdir(_profile_dir()) if f.endswith(".json"))


def load_target(name_or_path: str) -> Dict:
    """A target profile by name (``rpi4``) or from a JSON file path."""
    path = name_or_path if name_or_path.endswith(".json") else os.path.join(_profile_dir(), name_or_path + ".json")
    if not os.path.isfile(path):
        raise EdgeInferError(f"unknown target {name_or_path!r}; known: {', '.join(list_targets())}")
    try:
        with open(path) as f:
            prof = json.load(f)
    except (OSError, ValueError) as e:
        raise EdgeInferError(f"target profile {path}: {e}") from None
    missing = [k for k in REQUIRED if k not in prof]
    if missing:
        raise EdgeInferError(f"target profile {path} lacks {missing}")
    if type(prof.get("require_signed", False)) is not bool:
        raise EdgeInferError(f"target profile {path}: require_signed must be true or false")
    return prof
