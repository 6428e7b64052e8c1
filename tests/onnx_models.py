"""Test helpers around ONNX models: the real architectures shipped inside the
onnx package ("light" models), seeded random weights for them, the ONNX node
conformance cases, onnxruntime reference runs and small model builders.

Heavy artifacts (randomized models, generated node-test data) are cached under
``$EDGE_INFER_TEST_CACHE`` or ``~/.cache/edge_infer_tests``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

import onnx
from onnx import helper, numpy_helper

LIGHT_MODELS = ("light_bvlc_alexnet", "light_densenet121", "light_inception_v1",
                "light_inception_v2", "light_resnet50", "light_shufflenet",
                "light_squeezenet", "light_vgg19", "light_zfnet512")

#: bump when randomize_light_model changes, so cached models are redrawn
RANDOMIZE_VERSION = 5

_ONNX_TEST_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def cache_dir(*parts: str) -> str:
    """A directory for cached test artifacts (created if needed)."""
    root = os.environ.get("EDGE_INFER_TEST_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "edge_infer_tests")
    path = os.path.join(root, *parts)
    os.makedirs(path, exist_ok=True)
    return path


# -- light models -----------------------------------------------------------------

def light_model_path(name: str) -> str:
    """Path of a "light" model shipped with onnx (``light_resnet50`` or ``resnet50``)."""
    if not name.startswith("light_"):
        name = "light_" + name
    path = os.path.join(_ONNX_TEST_DATA, "light", name + ".onnx")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} (onnx {onnx.__version__} does not ship {name})")
    return path


def _consumers(graph) -> Dict[str, List[Tuple[object, int]]]:
    out: Dict[str, List[Tuple[object, int]]] = {}
    for n in graph.node:
        for k, i in enumerate(n.input):
            out.setdefault(i, []).append((n, k))
    return out


#: ops a weight passes through unchanged in role (scale layers unsqueeze theirs)
_PASS_THROUGH = ("Unsqueeze", "Reshape", "Identity", "Squeeze", "Flatten", "Cast")


def _residual_branch_ends(graph) -> set:
    """Outputs of BatchNormalizations that end a residual branch: added (Sum/Add)
    to a tensor that is not itself a BN output (the identity shortcut).

    Each such add doubles the activation variance with O(1) branch weights;
    ResNet-50 has 16 of them (logits std ~1e4), so these BNs get small scales.
    """
    producers = {o: n for n in graph.node for o in n.output}
    ends = set()
    for n in graph.node:
        if n.op_type not in ("Sum", "Add") or len(n.input) < 2:
            continue
        kinds = [producers[i].op_type if i in producers else None for i in n.input]
        if None in kinds:
            continue            # adds a constant/initializer: a bias, not a residual
        if any(k != "BatchNormalization" for k in kinds):
            ends.update(i for i, k in zip(n.input, kinds) if k == "BatchNormalization")
    return ends


def _reshaped(shape: Tuple[int, ...], node, inits) -> Tuple[int, ...]:
    """The shape of ``node``'s output when a weight of ``shape`` passes through it."""
    try:
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in inits:
            target = [int(d) for d in numpy_helper.to_array(inits[node.input[1]])]
            target = [shape[i] if d == 0 else d for i, d in enumerate(target)]
            return tuple(np.empty(shape, np.uint8).reshape(target).shape)
        if node.op_type in ("Unsqueeze", "Squeeze"):
            axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
            if node.op_type == "Unsqueeze" and axes is not None:
                out = list(shape)
                for a in sorted(x % (len(shape) + len(axes)) for x in axes):
                    out.insert(a, 1)
                return tuple(out)
            if node.op_type == "Squeeze":
                return tuple(d for i, d in enumerate(shape) if d != 1 or (axes and i not in axes))
        if node.op_type == "Flatten":
            return (int(np.prod(shape[:1])), int(np.prod(shape[1:])))
    except (ValueError, IndexError):
        pass
    return shape


def _role(name: str, consumers, residual_ends=frozenset(), shape=(), inits=None
          ) -> Tuple[str, object, int, Tuple[int, ...]]:
    """(role, consuming node, input index, shape as the consumer sees it) of a
    weight, looking through Unsqueeze/Reshape (the fc weights are reshaped)."""
    seen = set()
    while name not in seen:
        seen.add(name)
        uses = consumers.get(name, [])
        if not uses:
            return "unused", None, -1, shape
        node, k = uses[0]
        if node.op_type in _PASS_THROUGH and k == 0:
            shape = _reshaped(shape, node, inits or {})
            name = node.output[0]
            continue
        return _classify(node, k, residual_ends) + (shape,)
    return "other", None, -1, shape


def _classify(node, k: int, residual_ends) -> Tuple[str, object, int]:
    """The role of input ``k`` of ``node``."""
    op = node.op_type
    if op in ("Conv", "ConvTranspose", "Gemm", "MatMul") and k == 1:
        return "weight", node, k
    if op in ("Conv", "ConvTranspose", "Gemm") and k == 2:
        return "bias", node, k
    if op == "BatchNormalization" and k >= 1:
        if k == 1 and node.output[0] in residual_ends:
            return "residual_scale", node, k
        return ("bn_scale", "bn_bias", "bn_mean", "bn_var")[k - 1], node, k
    if op == "Mul":
        return "scale", node, k
    if op in ("Add", "Sum", "Sub"):
        return "shift", node, k
    if op == "PRelu" and k == 1:
        return "slope", node, k
    return "other", node, k


def _fan_in(shape: Tuple[int, ...], node) -> int:
    if node is None or not shape:
        return max(1, int(np.prod(shape or (1,))))
    op = node.op_type
    if op == "Gemm":
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        return int(shape[1] if trans_b else shape[0])
    if op == "MatMul":
        return int(shape[-2]) if len(shape) >= 2 else int(shape[0])
    if op == "ConvTranspose":
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        return int(shape[0] // max(group, 1) * np.prod(shape[2:], dtype=np.int64))
    return int(np.prod(shape[1:], dtype=np.int64))    # Conv: C/group * kh * kw


#: E[gain^2] of a random BN (scale, var ~U(0.5, 1.5): E[s^2] E[1/var] = 13/12 ln 3)
#: and of a random channel scale ~U(0.5, 1.5)
_BN_GAIN2 = 13.0 / 12.0 * np.log(3.0)
_SCALE_GAIN2 = 13.0 / 12.0


def _affine_gain2(node, consumers, weight_like: set) -> float:
    """E[gain^2] of the BN / per-channel scale layers right after ``node``:
    the He std is divided by its square root so conv + BN keeps E[x^2]."""
    gain, name, seen = 1.0, node.output[0], set()
    while name not in seen:
        seen.add(name)
        uses = consumers.get(name, [])
        if len(uses) != 1:
            break
        nxt, k = uses[0]
        if nxt.op_type == "BatchNormalization" and k == 0:
            gain *= _BN_GAIN2
        elif nxt.op_type == "Mul" and any(i in weight_like for i in nxt.input):
            gain *= _SCALE_GAIN2
        elif not (nxt.op_type == "Add" and any(i in weight_like for i in nxt.input)):
            break
        name = nxt.output[0]
    return gain


def _draw(role: str, shape: Tuple[int, ...], node, rng: np.random.Generator,
          gain2: float = 1.0) -> np.ndarray:
    """Random values for a weight of this role, scaled to keep activations O(1)."""
    shape = tuple(int(d) for d in shape)
    if role == "weight":
        std = np.sqrt(2.0 / _fan_in(shape, node) / gain2)   # He: keeps ReLU nets O(1)
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))
    if role in ("bn_scale", "scale", "bn_var"):
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)   # var > 0: sqrt is safe
    if role == "residual_scale":
        return rng.uniform(0.1, 0.3, shape).astype(np.float32)
    if role == "slope":
        return rng.uniform(0.0, 0.3, shape).astype(np.float32)
    # biases, BN shift and mean, residual shifts, anything else: small
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05))


def randomize_light_model(model: "onnx.ModelProto", seed: int = 0) -> "onnx.ModelProto":
    """A copy of a light model with seeded random weights.

    The light models replace each weight by ``ConstantOfShape(<name>__SHAPE)``
    filled with 0.02. Each such weight becomes an initializer of that shape,
    drawn by its role (found from the node input it feeds, looking through
    Unsqueeze/Reshape): He-normal conv/gemm weights, small biases, BN scale and
    var ~U(0.5, 1.5), BN bias and mean small, channel scales ~U(0.5, 1.5);
    BNs ending a residual branch get scales ~U(0.1, 0.3) so the identity adds
    do not double the activation variance block after block.

    The few real float parameters some files keep (a first layer's BN
    statistics, a few biases) are redrawn the same way: real statistics next
    to random conv weights (variances down to 1e-44) would blow activations up.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in g.initializer}
    consumers = _consumers(g)
    ends = _residual_branch_ends(g)

    # name -> shape of every weight to draw, in graph order (so a seed is stable)
    targets: Dict[str, Tuple[int, ...]] = {}
    generated = []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            if value is not None and value.data_type != onnx.TensorProto.FLOAT:
                continue
            targets[n.output[0]] = tuple(numpy_helper.to_array(inits[n.input[0]]).tolist())
            generated.append(n)
    for t in g.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and t.name not in targets:
            if _role(t.name, consumers)[0] not in ("other", "unused"):  # a real parameter
                targets[t.name] = tuple(t.dims)

    # tensors derived from weights (the scale layers unsqueeze theirs)
    weight_like = set(targets)
    for n in g.node:
        if n.op_type in _PASS_THROUGH and n.input and n.input[0] in weight_like:
            weight_like.add(n.output[0])
    arrays = {}
    for name, shape in targets.items():
        role, node, _, seen_shape = _role(name, consumers, ends, shape, inits)
        gain2 = _affine_gain2(node, consumers, weight_like) if role == "weight" else 1.0
        arr = _draw(role, seen_shape, node, rng, gain2)
        arrays[name] = arr.reshape(shape)

    # drop the generator nodes and their __SHAPE initializers
    gen_outputs = {n.output[0] for n in generated}
    shape_inits = {n.input[0] for n in generated}
    still_used = {i for n in g.node if n.output[0] not in gen_outputs for i in n.input}
    drop_inits = {s for s in shape_inits if s not in still_used} | (set(arrays) & set(inits))
    kept_nodes = [n for n in g.node if not (n.op_type == "ConstantOfShape" and n.output[0] in gen_outputs)]
    del g.node[:]
    g.node.extend(kept_nodes)
    kept_inits = [t for t in g.initializer if t.name not in drop_inits]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    listed = {v.name for v in g.input}
    kept_inputs = [v for v in g.input if v.name not in drop_inits or v.name in arrays]
    del g.input[:]
    g.input.extend(kept_inputs)
    for name, arr in arrays.items():
        g.initializer.append(numpy_helper.from_array(arr, name))
        if m.ir_version < 4 and name not in listed:
            # IR v3 wants every initializer listed among the graph inputs
            g.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, arr.shape))
    return m


def randomized_light_model_path(name: str, seed: int = 0) -> str:
    """Path of ``randomize_light_model(name, seed)`` saved in the cache (made once)."""
    base = name if name.startswith("light_") else "light_" + name
    path = os.path.join(cache_dir("light_models"),
                        f"{base}_seed{seed}_v{RANDOMIZE_VERSION}_onnx{onnx.__version__}.onnx")
    if not os.path.exists(path):
        model = randomize_light_model(onnx.load(light_model_path(base)), seed)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(model.SerializeToString())
        os.replace(tmp, path)      # atomic: parallel workers never read half a file
    return path


def with_extra_outputs(model: "onnx.ModelProto", names: Iterable[str]) -> "onnx.ModelProto":
    """``model`` (modified in place and returned) with more graph outputs (float, any shape)."""
    have = {o.name for o in model.graph.output}
    for n in names:
        if n not in have:
            model.graph.output.append(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    return model


def softmax_inputs(model: "onnx.ModelProto") -> List[str]:
    """Names of the tensors fed to the model's Softmax nodes (the logits)."""
    return [n.input[0] for n in model.graph.node if n.op_type == "Softmax"]


# -- onnxruntime ---------------------------------------------------------------------

def ort_run(model, feeds: Dict[str, np.ndarray], optimize: bool = True,
            threads: int = 0) -> Dict[str, np.ndarray]:
    """Run a model (ModelProto, bytes or path) with onnxruntime's CPU provider."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        so.intra_op_num_threads = threads
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def rel_l2(ours: np.ndarray, ref: np.ndarray) -> float:
    """||a - b|| / ||b|| in float64 (0 when both are zero)."""
    a = np.asarray(ours, np.float64).ravel()
    b = np.asarray(ref, np.float64).ravel()
    den = np.linalg.norm(b)
    num = np.linalg.norm(a - b)
    return float(num / den) if den else float(num)


# -- ONNX node conformance cases --------------------------------------------------------

def node_test_dir() -> str:
    """The directory of ONNX's node test cases (``test_*/model.onnx`` + data sets).

    The onnx wheel may ship them under ``onnx/backend/test/data/node``; when
    it does not, they are generated once from ``onnx.backend.test.case.node``
    (the same code ONNX uses to write them) into the cache.
    """
    shipped = os.path.join(_ONNX_TEST_DATA, "node")
    if os.path.isdir(shipped) and any(d.startswith("test_") for d in os.listdir(shipped)):
        return shipped
    target = os.path.join(cache_dir(), f"onnx_node_tests_{onnx.__version__}")
    if os.path.exists(os.path.join(target, "COMPLETE")):
        return target
    tmp = tempfile.mkdtemp(dir=cache_dir(), prefix="node_tests_")
    _generate_node_tests(tmp)
    with open(os.path.join(tmp, "COMPLETE"), "w") as f:
        f.write(onnx.__version__)
    try:
        os.replace(tmp, target) if not os.path.exists(target) else shutil.rmtree(tmp)
    except OSError:            # another worker won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _generate_node_tests(out_dir: str) -> None:
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    for case in cases:
        d = os.path.join(out_dir, case.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        g = case.model.graph
        tensor_io = all(v.type.HasField("tensor_type") for v in list(g.input) + list(g.output))
        if not tensor_io:
            continue      # sequence/map/optional values: the IR has tensors only
        for i, (inputs, outputs) in enumerate(case.data_sets or []):
            ds = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(ds, exist_ok=True)
            for prefix, values, vis in (("input", inputs, g.input), ("output", outputs, g.output)):
                for j, v in enumerate(values):
                    t = v if isinstance(v, onnx.TensorProto) else numpy_helper.from_array(
                        np.asarray(v), vis[j].name if j < len(vis) else "")
                    with open(os.path.join(ds, f"{prefix}_{j}.pb"), "wb") as f:
                        f.write(t.SerializeToString())


def node_test_cases() -> List[str]:
    """Names of all node test case directories, sorted."""
    root = node_test_dir()
    return sorted(d for d in os.listdir(root) if d.startswith("test_")
                  and os.path.exists(os.path.join(root, d, "model.onnx")))


def load_data_sets(case_dir: str) -> List[Tuple[List[np.ndarray], List[np.ndarray]]]:
    """[(inputs, outputs)] of a node test case, in graph input/output order."""
    sets = []
    for ds in sorted(d for d in os.listdir(case_dir) if d.startswith("test_data_set_")):
        path = os.path.join(case_dir, ds)

        def read(prefix):
            files = sorted((f for f in os.listdir(path) if f.startswith(prefix + "_")),
                           key=lambda f: int(f[len(prefix) + 1:-3]))
            out = []
            for f in files:
                t = onnx.TensorProto()
                with open(os.path.join(path, f), "rb") as fh:
                    t.ParseFromString(fh.read())
                out.append(numpy_helper.to_array(t))
            return out
        sets.append((read("input"), read("output")))
    return sets


def model_ops(model: "onnx.ModelProto") -> List[str]:
    """Op types used by a model's main graph (``domain.Op`` outside the default domain)."""
    ops = []
    for n in model.graph.node:
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        if op not in ops:
            ops.append(op)
    return ops


# -- small model builders -----------------------------------------------------------------

def make_model(nodes: Sequence, inputs: Sequence, outputs: Sequence, opset: int = 21,
               initializers: Sequence = (), extra_opsets: Dict[str, int] = None,
               ir_version: Optional[int] = None, name: str = "test") -> "onnx.ModelProto":
    """A ModelProto from helper-made nodes and value infos at ``opset``."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    imports = [helper.make_opsetid("", opset)]
    for dom, ver in (extra_opsets or {}).items():
        imports.append(helper.make_opsetid(dom, ver))
    model = helper.make_model(graph, opset_imports=imports)
    # an IR version the installed onnxruntime accepts for this opset
    model.ir_version = ir_version or min(helper.find_min_ir_version_for(
        [helper.make_opsetid("", opset)], True), 10)
    return model


def vi(name: str, shape, dtype=onnx.TensorProto.FLOAT):
    """A tensor value info (``shape`` None for unknown rank)."""
    return helper.make_tensor_value_info(name, dtype, shape)


def tiny_chain(n_ops: int = 300):
    """The dispatch-overhead model (benchmarks/compare.py, overhead_bench.py, the loop tests):
    a chain of ``n_ops`` tiny Add / Mul / Relu ops on a (1, 8) float32 input, as an IR Graph."""
    from edge_infer.ir import Graph
    g = Graph("tiny")
    g.add_input("x", "float32", (1, 8))
    g.add_const("c", np.full((1, 8), 0.5, np.float32))
    prev = "x"
    for k in range(n_ops):
        op = ("Add", "Mul", "Relu")[k % 3]
        g.add_node(op, [prev, "c"] if op != "Relu" else [prev], [f"t{k}"])
        prev = f"t{k}"
    g.outputs = [prev]
    return g
