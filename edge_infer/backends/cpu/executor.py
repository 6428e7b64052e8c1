"""The numpy CPU backend: binds kernels to preallocated buffers and runs them."""
from __future__ import annotations

import math
import time
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ...errors import GraphError
from ...ir import Graph, Node, Tensor
from ...ops.dynamic import DATA_DEPENDENT_OPS
from ..base import Executable
from ...memory.arena import ArenaHoles, ArenaPlan, arena_views, plan_arena
from ...memory.views import concat_slices, contiguous_views
from ...memory.budget import placeholder, refusal
from ...memory.pages import drop_maps, drop_pages
from ...memory.scratch import ScratchRoles, typed_view
from .registry import TABLE
from .fuse_int8_activation import fuse_int8_activations
from .fuse_int8_se import fuse_squeeze_excite
from .fuse_int8_input import fuse_int8_inputs
from .direct_input import address, input_fields, point
from .kernels.conv_native import residual_in_place, winograd_choice
from .kernels.elementwise import INPLACE_SAFE
from .native.kernels import aligned
from . import kernels as _kernels  # noqa: F401  (registers the kernels)
from . import native


class PrepareContext:
    """What a kernel's prepare step may see and ask for."""

    def __init__(self, graph: Graph, buffers: Dict[str, np.ndarray], threads: int = 1,
                 budget: Optional[int] = None, tile_cap: float = math.inf,
                 arena_plan: Optional[ArenaPlan] = None):
        self.graph = graph
        self.buffers = buffers
        self.threads = threads
        self.workspace_bytes = 0
        self.notes: Dict[str, str] = {}
        #: bytes all workspaces of the plan may take (the memory limit less the arena); None: unbounded
        self.budget = budget
        #: most bytes one tileable scratch may take (set by the executor when it retries smaller)
        self.tile_cap = tile_cap
        #: bytes of tileable scratch (im2col columns) allocated so far
        self.tiled_bytes = 0
        #: a workspace went over the budget: this plan is only counted, never run
        self.over_budget = False
        #: scratch shared by role (``scratch``): one buffer per role, its largest request
        #: (``arena_plan``: the buffers' arena, whose bytes free during a step take scratch first)
        holes = ArenaHoles(arena_plan) if arena_plan is not None and arena_plan.arena is not None else None
        self.roles = ScratchRoles(self._alloc, self._grown, holes, arena_plan.arena if holes else None)
        #: facts about the whole plan a kernel computes once and its later nodes read (e.g.
        #: conv_winograd.allowed: which convs may grow their weights), by name
        self.plan_facts: Dict[str, object] = {}
        #: index of the node being prepared (None: outside a plan's preparation)
        self.node_index: Optional[int] = None
        #: per node index: (workspace bytes, tileable bytes) it took outside the roles
        self.node_bytes: Dict[int, List[int]] = {}
        #: per node index: (node name, how it was tiled) of the kernels that split their work
        #: to fit the workspace budget or a scratch cap (``tiled_to_fit``)
        self._tiled_at: Dict[object, Tuple[str, str]] = {}
        #: {node name: None or why not} of the convs Winograd could compute (``Executable.winograd``)
        self.winograd: Dict[str, Optional[str]] = {}

    @property
    def workspace_budget(self) -> float:
        """Bytes a kernel may still take for a tileable scratch (math.inf: unbounded). A kernel
        whose preferred workspace is larger picks a smaller tile or another algorithm."""
        left = math.inf if self.budget is None else max(0, self.budget - self.workspace_bytes)
        return min(left, self.tile_cap)

    def tensor(self, name: str) -> Tensor:
        return self.graph.tensors[name]

    def value(self, name: str) -> Optional[np.ndarray]:
        """The array behind ``name``: constant data or the planned buffer; None for ''."""
        if not name:
            return None
        t = self.graph.tensors[name]
        if t.is_const:
            return t.data
        return self.buffers[name]

    def const(self, name: str) -> Optional[np.ndarray]:
        """The constant value of ``name``, or None if it is not a constant."""
        if not name:
            return None
        t = self.graph.tensors[name]
        return t.data if t.is_const else None

    def workspace(self, shape, dtype="float32", tileable: bool = False) -> np.ndarray:
        """Scratch memory owned by the plan, allocated now, reused every run. ``tileable``:
        its size came from ``workspace_budget`` (smaller tiles would shrink it). Over the
        budget, a placeholder is returned and the plan is only measured."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        self._grown(nbytes, tileable)
        if self.node_index is not None:
            own = self.node_bytes.setdefault(self.node_index, [0, 0])
            own[0] += nbytes
            own[1] += nbytes if tileable else 0
        if self.budget is not None and self.workspace_bytes > self.budget:
            self.over_budget = True
            return placeholder(shape, dt)
        return np.empty(shape, dt)

    def scratch(self, role: str, shape, dtype="float32", tileable: bool = False) -> np.ndarray:
        """Scratch for ``role``, shared by every kernel of the plan that asks for that role
        (``memory/scratch.py``): the kernel rewrites it fully in every run before reading it,
        and two buffers it uses at the same time have two roles. The plan holds one buffer
        per role, of its largest request. ``tileable``: the size came from
        ``workspace_budget`` (smaller tiles would shrink it). Over the budget: a placeholder."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        buf = self.roles.request(role, nbytes, self.node_index, tileable)
        return typed_view(buf, shape, dt)

    def scratch_fits(self, role: str, nbytes: int) -> bool:
        """Whether ``scratch(role, ...)`` of ``nbytes`` would fit: bytes of the arena free
        during this step, the role's buffer as it is, or what ``workspace_budget`` leaves."""
        return self.roles.fits(role, nbytes, self.node_index, self.workspace_budget)

    def scratch_held(self, role: str) -> int:
        """Bytes the plan's ``role`` scratch holds so far (0: none yet)."""
        return self.roles.held(role)

    def _grown(self, nbytes: int, tileable: bool) -> None:
        self.workspace_bytes += nbytes
        self.tiled_bytes += nbytes if tileable else 0

    def _alloc(self, nbytes: int, tileable: bool) -> np.ndarray:
        if self.budget is not None and self.workspace_bytes > self.budget:
            self.over_budget = True
            return placeholder((nbytes,), np.uint8)
        return aligned(nbytes)

    def begin_node(self, index: int) -> None:
        """``nodes[index]`` is prepared (again): what it took before is given back."""
        self.node_index = index
        own = self.node_bytes.pop(index, None)
        if own is not None:
            self.workspace_bytes -= own[0]
            self.tiled_bytes -= own[1]
        self._tiled_at.pop(index, None)
        self.roles.forget(index)

    def note(self, node: Node, text: str) -> None:
        """Record the algorithm a kernel chose for ``node`` (shown by inspect)."""
        self.notes[node.name] = text

    def tiled_to_fit(self, node: Node, how: str) -> None:
        """Record that ``node``'s kernel splits its work (bands of rows, fewer threads' tiles)
        to fit the workspace budget or a scratch cap: ``Executable.tiled``, what inspect lists."""
        key = self.node_index if self.node_index is not None else node.name
        self._tiled_at[key] = (node.name, how)

    @property
    def tiled(self) -> Dict[str, str]:
        """{node name: how it was tiled} (``tiled_to_fit``)."""
        return dict(self._tiled_at.values())


def allocate_buffers(graph: Graph, nodes: List[Node], limit: Optional[int] = None, arena_alloc=None,
                     threads: int = 1) -> Tuple[Dict[str, np.ndarray], ArenaPlan, Dict[str, object]]:
    """Views into one planned activation arena for every non-constant tensor.
    ``limit``: refuse (before allocating) an arena larger than this many bytes.
    ``arena_alloc(nbytes) -> (uint8 array, release)``: where the arena comes from (default:
    its own aligned allocation; dynamically shaped models use the process's buddy pool,
    ``memory.pool``); ``release`` is kept as ``plan.release``. Also returns the plan facts
    decided with the arena (``PrepareContext.plan_facts``): which convs run as Winograd, their
    scratch reserved in the arena where no free bytes of their step would hold it
    (``conv_native.winograd_choice``; not past ``limit``)."""
    names = []
    for name in list(graph.inputs) + [o for n in nodes for o in n.outputs if o]:
        t = graph.tensors[name]
        if t.is_const:
            continue
        if not t.is_static:
            raise GraphError(f"tensor {name!r} has no concrete shape ({t.shape}); pin input shapes")
        names.append(name)
    plan = plan_arena(graph, names, inplace_ops=INPLACE_SAFE, views=copy_views, inplace_inputs=residual_in_place)

    reserved_plans: Dict[tuple, ArenaPlan] = {}

    def with_reserve(reserve):
        # winograd_choice sizes the growth with every conv's reservation, and the plan kept
        # reserves those the allowance took: most often the same set, planned once
        key = tuple(sorted(reserve.items()))
        if key not in reserved_plans:
            reserved_plans[key] = plan_arena(graph, names, inplace_ops=INPLACE_SAFE, views=copy_views,
                                             inplace_inputs=residual_in_place, reserve=reserve)
        return reserved_plans[key]
    winograd, reserve = winograd_choice(graph, nodes, threads, plan, with_reserve)
    if reserve:
        wider = with_reserve(reserve)
        if limit is None or wider.size <= limit:
            plan = wider
    if limit is not None and plan.size > limit:
        raise refusal(plan.size, limit, plan.size, exact=False)  # nothing to tile: the arena alone
    if arena_alloc is None:
        arena = aligned(max(plan.size, 1))
    else:
        arena, plan.release = arena_alloc(max(plan.size, 1))
    plan.arena = arena
    return arena_views(graph, plan, arena), plan, {"winograd": winograd}


def copy_views(node: Node, graph: Graph):
    """The tensors of ``node`` the arena may place inside another's bytes (memory/views.py)
    where this backend's kernel is a plain copy between them: not an int8 Concat input with
    other quantization parameters than the output (that input is requantized)."""
    views = contiguous_views(node, graph) + [v for v in concat_slices(node, graph) if _writes_strided(v[0], node, graph)]
    if node.op == "Concat" and graph.tensors[node.outputs[0]].quant is not None:
        want = _qkey(graph.tensors[node.outputs[0]])
        views = [v for v in views if _qkey(graph.tensors[v[0]]) == want]
    return views


def _writes_strided(name: str, concat: Node, graph: Graph) -> bool:
    """Whether ``name`` may be a strided slice of ``concat``'s output: made by a nearest Resize
    (its native runs write at any strides; kernels/resize_native.py) and read by ``concat`` only."""
    if native.lib is None or name in graph.outputs:
        return False
    producer = [n for n in graph.nodes if name in n.outputs]
    readers = [n for n in graph.nodes if name in n.inputs]
    if len(producer) != 1 or readers != [concat] or concat.inputs.count(name) != 1:
        return False
    p = producer[0]
    return (p.op == "Resize" and p.attrs.get("mode", "nearest") == "nearest"
            and p.attrs.get("coordinate_transformation_mode") != "tf_crop_and_resize")


def _qkey(t: Tensor):
    q = t.quant or {}
    return (tuple(np.asarray(q.get("scale", []), np.float32).ravel().tolist()),
            tuple(np.asarray(q.get("zero_point", []), np.int64).ravel().tolist()))


def prepare_node(node: Node, ctx: PrepareContext) -> Callable[[], None]:
    return TABLE.prepare(node, ctx)


def fold_node(node: Node, graph: Graph) -> None:
    """Evaluate a node whose inputs are all known, storing results as constants."""
    from ...ops.resources import check_fold
    if node.op in DATA_DEPENDENT_OPS:
        # the size is known once it runs: its eval returns the outputs
        results = prepare_node(node, PrepareContext(graph, {}))()
        for o, arr in zip(node.outputs, results):
            if o:
                t = graph.tensors[o]
                t.data, t.shape = np.ascontiguousarray(arr, t.dtype), tuple(arr.shape)
        return
    check_fold(node, graph)     # before numpy is asked for the memory
    bufs = {o: np.empty(graph.tensors[o].shape, graph.tensors[o].dtype) for o in node.outputs if o}
    for o in bufs:  # a re-fold must write the fresh buffer, not the old constant
        graph.tensors[o].data = None
    ctx = PrepareContext(graph, bufs)
    prepare_node(node, ctx)()
    for o, arr in bufs.items():
        graph.tensors[o].data = arr


def group_native(steps: List[Callable[[], None]]) -> List[Callable[[], None]]:
    """``steps`` with every run of consecutive native steps (closures carrying
    ``.native_step``) replaced by one closure that runs them in one C call, GIL released:
    the compiled execution loop. Order and effects are those of the original list."""
    if native.lib is None:
        return list(steps)
    out: List[Callable[[], None]] = []
    run: List[Callable[[], None]] = []

    def flush(last: bool = False):
        # a single step too: ei_run_steps also sends the native pool's spinning workers to
        # sleep before the numpy/BLAS step that follows needs the cores; after the plan's
        # last steps they spin out their idle budget (a next run finds them awake)
        if run:
            out.append(native.run_steps_call(run, last=last))
        run.clear()
    for step in steps:
        if getattr(step, "native_step", None) is not None:
            run.append(step)
        else:
            flush()
            out.append(step)
    flush(last=True)
    return out


def _with_nodes(graph: Graph, nodes: List[Node]) -> Graph:
    g = Graph(graph.name)
    g.tensors, g.nodes, g.inputs, g.outputs = graph.tensors, nodes, graph.inputs, graph.outputs
    return g


def _prepare_at(ctx: PrepareContext, nodes: List[Node], k: int) -> Callable[[], None]:
    ctx.begin_node(k)
    step = prepare_node(nodes[k], ctx)
    # packing read these weights once: out of the RSS (runs map back what they read)
    drop_pages([ctx.const(i) for i in nodes[k].inputs if i])
    return step


def _settle(ctx: PrepareContext, nodes: List[Node], steps: List[Callable[[], None]]) -> None:
    """Prepare again the nodes holding views of a scratch buffer that was replaced (a role
    outgrew it). Requests are deterministic, so one round settles
    it; the bound guards a kernel that would ask for more each time."""
    for _ in range(4):
        if not ctx.roles.stale:
            break
        again, ctx.roles.stale = sorted(ctx.roles.stale), set()
        ctx.roles.repeats += len(again)
        for k in again:
            steps[k] = _prepare_at(ctx, nodes, k)
    ctx.node_index = None


def prepare_within(graph: Graph, nodes: List[Node], buffers, threads: int, budget: Optional[int],
                   arena_bytes: int = 0, arena_plan: Optional[ArenaPlan] = None,
                   facts: Optional[Dict[str, object]] = None) -> Tuple[PrepareContext, List[Callable[[], None]]]:
    """Prepare every node so that all workspaces fit ``budget`` bytes.

    First with no cap on tiles; if that goes over, again with the tileable scratch capped
    at what the fixed workspaces leave; then with the smallest tiles. Over the budget a
    workspace is only counted (a placeholder), so no attempt allocates past the limit, and
    the last attempt's count is the least the plan needs."""
    cap = math.inf
    for attempt in range(3):
        ctx = PrepareContext(graph, buffers, threads, budget, cap, arena_plan)
        ctx.plan_facts.update(facts or {})
        try:
            steps = [_prepare_at(ctx, nodes, k) for k in range(len(nodes))]
            _settle(ctx, nodes, steps)
        except Exception:
            if not ctx.over_budget:
                raise
            steps = None                 # a kernel could not be laid out on placeholders
        if not ctx.over_budget:
            return ctx, steps
        if cap == 0 or not ctx.tiled_bytes:
            break                        # the smallest tiles, or nothing to tile: this is the least
        fixed = ctx.workspace_bytes - ctx.tiled_bytes
        cap = max(0, budget - fixed) if attempt == 0 else 0
    raise refusal(arena_bytes + ctx.workspace_bytes, arena_bytes + budget, arena_bytes, exact=steps is not None)


class CpuExecutable(Executable):
    def __init__(self, graph: Graph, threads: int = 1, memory_limit: Optional[int] = None, arena_alloc=None):
        self.graph = graph
        running = [n for n in graph.nodes if not all(graph.tensors[o].is_const for o in n.outputs if o)]
        #: the plan's nodes: the running ones, int8 table activations fused into their convs;
        #: ``fused``: {activation node: conv node} of those (fuse_int8_activation.py)
        self.nodes, self.fused = fuse_int8_activations(graph, running)
        #: ``fused_inputs``: {QuantizeLinear / Transpose node: the stem conv quantizing the float
        #: input in its line buffers instead} (fuse_int8_input.py)
        self.nodes, self.fused_inputs = fuse_int8_inputs(graph, self.nodes)
        run_graph = graph if len(self.nodes) == len(graph.nodes) else _with_nodes(graph, self.nodes)
        self.buffers, self.arena_plan, facts = allocate_buffers(run_graph, self.nodes, memory_limit, arena_alloc,
                                                                threads)
        if self.arena_plan.release is not None:     # a pool's block: back to the pool with this plan
            weakref.finalize(self, self.arena_plan.release)
        budget = None if memory_limit is None else memory_limit - self.arena_plan.size
        try:
            ctx, steps = prepare_within(graph, self.nodes, self.buffers, threads, budget,
                                        self.arena_plan.size, self.arena_plan, facts)
        except BaseException:
            if self.arena_plan.release is not None:
                self.arena_plan.release()
            raise
        prepared = self.nodes
        #: int8 squeeze-excite blocks as one step each: {Mul node: [pool, conv, conv]} (fuse_int8_se.py;
        #: it packs the convs' weights again, so before the maps are dropped)
        self.nodes, self.steps, self.fused_se = fuse_squeeze_excite(graph, prepared, steps, ctx.notes)
        # packing is over: the weight maps' pages (and the folio remainders that the per-node
        # drops leave around small constants) out of the resident set; runs map back only
        # what they read (memory/pages.py)
        drop_maps(t.data for t in graph.tensors.values() if t.is_const)
        #: bytes for arena plus workspaces this plan was prepared under (None: unbounded)
        self.memory_limit = memory_limit
        #: what ``run`` executes: ``steps`` with native runs batched (``run_profiled`` keeps ``steps``)
        self.run_steps = group_native(self.steps)
        self.notes = ctx.notes
        self.tiled = ctx.tiled
        self.winograd = dict(ctx.winograd)
        self.workspace_bytes = ctx.workspace_bytes
        #: {role: bytes} of the scratch buffers shared by role (in ``workspace_bytes``); the
        #: scratch placed in the arena: ``arena_plan.scratch_offsets``
        self.scratch_bytes = ctx.roles.sizes()
        self.arena_plan.scratch_offsets = {f"{role}@{prepared[k].name}": off for (role, k), (off, _)
                                           in ctx.roles.arena_blocks().items()}
        #: node preparations repeated because a role grew after they were prepared
        self.scratch_repeats = ctx.roles.repeats
        self._in = [(name, self.buffers[name]) for name in graph.inputs if name in self.buffers]
        self._out = [(name, self.buffers.get(name, graph.tensors[name].data)) for name in graph.outputs]
        #: per input: (name, arena buffer, its readers' fields holding its address or None, the
        #: address): ``run`` points those fields at a caller's matching array for the run
        #: instead of copying it (direct_input.py)
        direct = input_fields(graph, self.nodes, self.steps, self.buffers, self.arena_plan) \
            if native.lib is not None else None
        self.direct_inputs = sorted(direct or ())
        self._in_direct = [(name, buf, (direct or {}).get(name), buf.ctypes.data) for name, buf in self._in]

    def step_summary(self) -> dict:
        slow = [n for n, st in zip(self.nodes, self.steps) if getattr(st, "native_step", None) is None]
        return {"steps": len(self.steps), "native_steps": len(self.steps) - len(slow),
                "numpy_steps": sorted({n.op for n in slow}),
                # int8 table activations run inside their conv's step: {activation: conv}
                "fused_activations": dict(self.fused),
                # int8 squeeze-excite blocks run as one step: {Mul: [pool, conv, conv]}
                "fused_squeeze_excite": dict(self.fused_se),
                # an int8 graph's input quantization (and transpose) done by its stem conv
                "fused_inputs": dict(self.fused_inputs),
                # each step outside the compiled loop and its kernel's note (why, where it says)
                "numpy_notes": {n.name: f"{n.op}: {self.notes.get(n.name, 'numpy kernel')}" for n in slow}}

    def _feed(self, feeds):
        for name, buf in self._in:
            np.copyto(buf, feeds[name], casting="same_kind")

    def run_views(self, feeds) -> Dict[str, np.ndarray]:
        """Run and return the buffers themselves (no copies; valid until the next run): how a
        staged plan hands the head's values to the rest."""
        self._feed(feeds)
        for step in self.run_steps:
            step()
        return self.buffers

    def run(self, feeds):
        moved = None
        for name, buf, fields, home in self._in_direct:
            arr = feeds[name]
            # the caller's array read in place: same dtype and shape, C-contiguous, aligned
            if fields is not None and type(arr) is np.ndarray and arr.dtype == buf.dtype and \
                    arr.shape == buf.shape and arr.flags.c_contiguous and arr.flags.aligned:
                point(fields, address(arr))
                moved = [(fields, home)] if moved is None else moved + [(fields, home)]
            else:
                np.copyto(buf, arr, casting="same_kind")
        try:
            for step in self.run_steps:
                step()
        finally:
            if moved is not None:     # back at the arena: run_views / run_profiled copy into it
                for fields, home in moved:
                    point(fields, home)
        return {name: np.array(buf) for name, buf in self._out}

    def run_profiled(self, feeds):
        self._feed(feeds)
        times = []
        clock = time.perf_counter
        for node, step in zip(self.nodes, self.steps):
            t0 = clock()
            step()
            times.append((node.name, node.op, clock() - t0))
        return {name: np.array(buf) for name, buf in self._out}, times
