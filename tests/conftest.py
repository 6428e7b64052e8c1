import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_graph(graph, feeds):
    """Run an IR graph on the CPU backend (shapes inferred, then executed)."""
    from edge_infer.runtime import Runtime
    return Runtime(graph, backend="cpu").run(feeds)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
