"""Fuzzing (issue #16): mutated artifacts with valid checksums, loaded and run in a subprocess
with both kernel sets. Every outcome must be a deterministic run or an edge_infer error; a
signal, a hang or a raw exception fails. Fixed seed in CI; ``EDGE_INFER_FUZZ_CASES=N`` for a
longer run."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fuzz_cases import make_cases, make_doc_cases

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = int(os.environ.get("EDGE_INFER_FUZZ_CASES", "150"))


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    written = make_cases(16, CASES, str(folder))
    assert len(written) > CASES // 2          # most mutations reach the loader
    written += make_doc_cases(17, CASES // 2, str(folder))   # the stored graph document itself
    return str(folder), dict((os.path.basename(p), d) for p, d in written)


@pytest.mark.parametrize("native", ["1", "0"])
def test_fuzz_artifacts(cases, native):
    folder, desc = cases
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]))
    if native == "0":
        env["EDGE_INFER_NO_NATIVE"] = "1"
    r = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_cases.py"), folder], capture_output=True,
                       text=True, env=env, timeout=60 + 2 * CASES)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert r.returncode == 0, f"subprocess died ({r.returncode}) after {len(lines)} files: {r.stderr[-800:]}"
    bad = [(x, desc[x["file"]]) for x in lines if x["outcome"] not in ("ok", "error")]
    assert not bad, bad[:5]
    assert len(lines) == len(desc)
    outcomes = {x["outcome"] for x in lines}
    assert outcomes == {"ok", "error"}        # both kinds seen: the mutations are not all fatal
