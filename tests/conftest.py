import os
import sys

import numpy as np
import pytest

try:
    from hypothesis import settings
except ImportError:             # the aarch64 smoke test's sysroot (numpy, psutil, pytest only)
    settings = None

# CI runs the property tests on a fixed sequence of examples: a failure there is reproducible
# and a landing does not depend on luck; locally they draw fresh examples each run
if settings is not None:
    settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_graph(graph, feeds):
    """Run an IR graph on the CPU backend (shapes inferred, then executed)."""
    from edge_infer.runtime import Runtime
    return Runtime(graph, backend="cpu").run(feeds)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
