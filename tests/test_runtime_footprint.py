"""What a runtime-only process keeps resident: the artifact's weight pages after planning and
running (memory/pages.py), the modules loading and running import, and the nearest Resize's
per-block gather (no per-value index arrays)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge_infer.artifact import load_artifact, save_artifact
from edge_infer.backends.cpu import native
from edge_infer.memory.pages import drop_maps, private_copy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMAPS = "/proc/self/smaps"


def _map_rss(path: str) -> int:
    """Resident bytes of this process's mappings of ``path`` (Linux smaps)."""
    real, total, cur = os.path.realpath(path), 0, False
    with open(SMAPS) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and not parts[0].endswith(":"):
                cur = len(parts) > 5 and parts[5] == real
            elif cur and parts[0] == "Rss:":
                total += int(parts[1]) * 1024
    return total


def _detector_onnx(path: str, hw: int = 64, seed: int = 0) -> None:
    """Conv 3x3 + bias + Relu, depthwise 3x3 + bias, Add of a constant, nearest Resize x2 (NCHW)."""
    rng = np.random.default_rng(seed)
    c = 32
    inits = [numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b2"),
             numpy_helper.from_array(rng.standard_normal((1, c, 1, 1)).astype(np.float32), "k"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4, group=c),
             helper.make_node("Add", ["c2", "k"], ["a"]),
             helper.make_node("Resize", ["a", "", "scales"], ["y"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor")]
    graph = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    import onnx
    onnx.save(model, path)


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    import edge_infer
    d = tmp_path_factory.mktemp("footprint")
    src, eim = str(d / "det.onnx"), str(d / "det.eim")
    _detector_onnx(src)
    edge_infer.convert(src, eim, verify_samples=1)
    return src, eim


def test_private_copy_and_drop_maps_keep_values(tmp_path):
    """private_copy copies views of a read-only file map only; drop_maps leaves none of the
    map resident and the values intact (they come back from the file)."""
    from edge_infer.ir import Graph
    g = Graph("w")
    g.add_input("x", "float32", (1, 4096))
    g.add_const("w", np.random.default_rng(0).standard_normal((4096, 64)).astype(np.float32))
    g.add_node("MatMul", ["x", "w"], ["y"])
    g.outputs = ["y"]
    path = str(tmp_path / "w.eim")
    save_artifact(path, g, {})
    loaded, _ = load_artifact(path)
    w = loaded.tensors["w"].data
    own = private_copy(w)
    assert own is not w and not np.shares_memory(own, w) and own.flags.writeable
    np.testing.assert_array_equal(own, g.tensors["w"].data)
    anon = g.tensors["w"].data
    assert private_copy(anon) is anon
    assert drop_maps([w, anon, None]) >= w.nbytes
    assert drop_maps([anon]) == 0                       # anonymous memory is never advised
    if os.path.exists(SMAPS):
        float(w.sum())                                  # every page of the weight back in
        assert _map_rss(path) >= w.nbytes // 2
        drop_maps([w])
        assert _map_rss(path) == 0
    np.testing.assert_array_equal(w, g.tensors["w"].data)


@pytest.mark.skipif(native.lib is None or not os.path.exists(SMAPS), reason="native kernels and smaps needed")
def test_runs_read_no_weight_pages(detector):
    """Once a plan is prepared, no page of the artifact's map stays resident, and running it
    maps none back: packed weights, biases, depthwise taps and constant operands are the
    kernels' own copies (on current kernels one read of a 128-byte bias mapped up to 2 MB
    of the file). The outputs still match onnxruntime."""
    import onnxruntime as ort
    from edge_infer import Runtime
    src, eim = detector
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    rt = Runtime(eim, backend="cpu", threads=2)
    rt.plan({"x": x.shape})
    assert _map_rss(eim) == 0
    for _ in range(2):
        y = rt.run(x)["y"]
    assert _map_rss(eim) == 0
    want = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_nearest_resize_has_no_per_value_index(detector):
    """The float nearest Resize gathers whole pixels (NHWC: all channels at once): its
    prepared step holds at most one index per output pixel, never one per value."""
    from edge_infer import Runtime
    src, eim = detector
    rt = Runtime(eim, backend="cpu", threads=1)
    ex = rt.plan({"x": (1, 3, 64, 64)})
    out = ex.buffers["y"] if "y" in ex.buffers else None
    node = next(n for n in ex.nodes if n.op == "Resize")
    step = ex.steps[ex.nodes.index(node)]
    held = [a for a in _closure_arrays(step) if a.dtype.kind in "iu" and a.dtype.itemsize == 8]
    pixels = 128 * 128
    assert held and max(a.size for a in held) <= 3 * pixels, [a.shape for a in held]
    assert out is None or out.size >= 32 * pixels


def _closure_arrays(fn):
    """Arrays a step closure holds (its cells, and a native step's kept arguments)."""
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        v = cell.cell_contents
        found += [v] if isinstance(v, np.ndarray) else []
    keep = getattr(fn, "native_keep", None)
    if keep is not None:
        found += [v for v in keep[2] if isinstance(v, np.ndarray)]
    return found


RUNTIME_ONLY = """
import sys
import numpy as np
numpy_own = set(sys.modules)          # what numpy itself imports (numpy 1.x: hashlib) is not ours
from edge_infer import Runtime
rt = Runtime(sys.argv[1], backend="cpu", threads=1)
rt.run(np.zeros((1, 3, 64, 64), np.float32))
heavy = ["onnx", "onnxruntime", "scipy", "psutil", "cryptography", "hashlib", "subprocess", "tflite",
         "edge_infer.convert", "edge_infer.passes", "edge_infer.quantize", "edge_infer.frontends",
         "edge_infer.calibration", "edge_infer.verify", "edge_infer.difftest", "edge_infer.export_tflite",
         "edge_infer.backends.opencl", "edge_infer.backends.cuda", "edge_infer.backends.litert"]
print(" ".join(m for m in heavy if m in sys.modules and m not in numpy_own))
"""


def test_runtime_only_process_imports_no_converter(detector):
    """A process that loads an artifact and runs it imports neither the converter (passes,
    quantizer, frontends, onnx), nor other backends' modules, nor hashlib (libcrypto,
    ~3.6 MB resident: only signed artifacts need it) or subprocess, beyond what numpy imports."""
    src, eim = detector
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", RUNTIME_ONLY, eim], capture_output=True, text=True,
                         timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", out.stdout
