"""The device-side runtime: load an artifact, plan per input shape, run."""
from __future__ import annotations

import os
import threading
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from .backends import Backend, Executable, get_backend
from .backends.specialize import specialize  # noqa: F401  (public here since 0.1)
from .errors import ArtifactError, EdgeInferError, InputError
from .ir import Graph, concrete_input_shapes, infer_shapes
from .memory.budget import MemoryBudgetError, default_memory_limit, mib, parse_size  # noqa: F401


class TensorInfo(NamedTuple):
    """Name, shape (ints, or strings for symbolic dims) and dtype of a model input or output."""
    name: str
    shape: Tuple
    dtype: str


def _bind_symbols(declared: Tuple, actual: Tuple, symbols: Dict[str, int], name: str) -> None:
    if len(declared) != len(actual):
        raise InputError(f"input {name!r}: expected rank {len(declared)} {tuple(declared)}, "
                         f"got shape {tuple(actual)}")
    for d, a in zip(declared, actual):
        if isinstance(d, int):
            if d != a:
                raise InputError(f"input {name!r}: expected shape {tuple(declared)}, got {tuple(actual)}")
        elif d in symbols and symbols[d] != a:
            raise InputError(f"input {name!r}: dim {d!r} is {a} here but {symbols[d]} in another input")
        else:
            symbols[d] = a


_blas_limiter = None
_malloc_trim = False     # libc's malloc_trim (glibc), None where there is none; looked up once


def _trim_heap() -> None:
    """Give the heap pages freed by planning (graph copies, shape inference, packing
    temporaries) back to the system: glibc keeps them resident otherwise, and the run that
    follows touches the arena and workspaces on top (0.5-1 MB of peak RSS, ~1 ms)."""
    global _malloc_trim
    if _malloc_trim is False:
        _malloc_trim = None
        try:
            import ctypes
            import sys
            # the process's own symbols: libc's on Linux (malloc_trim is glibc's; musl has none)
            fn = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform.startswith("linux") else None
            if fn is not None:
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
                _malloc_trim = fn
        except (OSError, AttributeError):
            pass
    if _malloc_trim is not None:
        _malloc_trim(0)

def _limit_blas_threads(n: int) -> None:
    """Cap the BLAS thread pool at ``n`` (process-wide: BLAS has one pool).
    Uses threadpoolctl when installed; otherwise BLAS keeps its own setting."""
    global _blas_limiter
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    _blas_limiter = threadpool_limits(limits=n, user_api="blas")


def _scratch_stats(ex) -> dict:
    """A plan's scratch: {role: bytes} of the buffers shared by role (in its workspace) and
    how many kernels' scratch lies in arena bytes free during their step."""
    plan = ex.arena_plan
    return {"scratch_bytes": dict(ex.scratch_bytes),
            "scratch_in_arena": len(plan.scratch_offsets) if plan is not None else 0}


class Runtime:
    """Runs a converted model.

    >>> rt = Runtime("model.eim")                      # doctest: +SKIP
    >>> out = rt.run({"input": x})                     # doctest: +SKIP

    ``model`` is a path to an ``.eim`` artifact (or an in-memory ``Graph``).
    A plan is built once per distinct set of input shapes and cached.

    ``trusted_keys``: Ed25519 public keys (file paths or key bytes, e.g. ``["release.pub"]``).
    Given, the artifact must be signed by one of them; its signature is verified before
    anything else of the file is read, and an unsigned file, another signer or a changed
    byte raises ArtifactError (docs/format.md, "Security: signatures"). Not given, the keys
    listed in ``$EDGE_INFER_TRUSTED_KEYS`` (a device-wide policy) apply the same way.
    """

    def __init__(self, model: Union[str, os.PathLike, Graph], backend: str = "auto",
                 threads: Optional[int] = None, memory_limit: Union[int, str, None] = None,
                 trusted_keys=None):
        if isinstance(model, Graph):
            if trusted_keys is not None:
                raise ArtifactError("trusted_keys given, but an in-memory Graph carries no signature")
            self.graph, self.meta = model, {}
        else:
            from .artifact import load_artifact
            self.graph, self.meta = load_artifact(os.fspath(model), trusted_keys=trusted_keys)
        self._describe_shapes()
        #: the backend asked for; "auto" is chosen per input shapes by ``backends.picker``
        self.requested_backend = backend
        if backend != "auto":
            get_backend(backend)          # an unknown or unavailable backend fails here, at once
        self._choices: Dict[Tuple, "Choice"] = {}
        self._choice: Optional["Choice"] = None
        self.threads = threads or int(self.meta.get("target", {}).get("threads", 0) or 0) or (os.cpu_count() or 1)
        #: bytes that activations plus workspaces may use (None: unbounded): the bound of one
        #: plan (kernels tile to fit), and of all plans a dynamically shaped model keeps
        if memory_limit is not None:
            self.memory_limit, self.memory_limit_source = parse_size(memory_limit), "argument"
        else:
            self.memory_limit, self.memory_limit_source = default_memory_limit(self.meta)
        #: a limit the caller (or the artifact, ``convert --memory-limit``) set is a bound: only
        #: backends that size their memory up front are picked (a target's budget or the
        #: available memory is checked where plans are sized, but excludes no backend)
        #: (a backend asked for by name is refused only under a limit given here)
        self.memory_bound = self.memory_limit is not None and (
            self.memory_limit_source == "argument"
            or (backend == "auto" and self.memory_limit_source.startswith("artifact")))
        if self.memory_bound and backend != "auto" and not get_backend(backend).plans_memory:
            from .backends.picker import NO_MEMORY_BOUND
            from .errors import BackendError
            raise BackendError(f"backend {backend!r} {NO_MEMORY_BOUND}; drop the memory limit or "
                               "use another backend")
        #: dynamically shaped models (a symbolic input dim) plan arenas in the process's buddy pool
        self.dynamic = any(not isinstance(d, (int, np.integer)) for n in self.graph.inputs
                           for d in (self.graph.tensors[n].shape or ("?",)))
        self._slots = None                   # memory.slots.SlotSet of a dynamic model (made on first plan)
        self._slots_lock = threading.Lock()
        _limit_blas_threads(self.threads)
        #: input shapes -> pool of executables; at most ``max_shapes`` shapes kept
        self._plans: Dict[Tuple, "PlanPool"] = {}
        self.max_shapes = 16
        #: most executables (each with its own arena) per shape, i.e. concurrent runs
        self.max_concurrency = max(2, os.cpu_count() or 2)
        self._lock = threading.Lock()
        #: ((shape, dtype) per input; for one input the pair itself) of feeds that passed the
        #: input checks once -> their shape's pool: a repeated run is one dict lookup
        self._fast: Dict[Tuple, "PlanPool"] = {}
        self._one = self.graph.inputs[0] if len(self.graph.inputs) == 1 else None
        _trim_heap()                         # the JSON graph text and shape inference's copy

    # description -----------------------------------------------------------
    def _describe_shapes(self) -> None:
        # Output shapes with symbolic dims, for rt.outputs; plans re-infer with real shapes.
        try:
            g = self.graph.copy()
            infer_shapes(g)
            self._out_info = {n: g.tensors[n] for n in g.outputs}
        except EdgeInferError:
            self._out_info = {}

    @property
    def inputs(self) -> List[TensorInfo]:
        return [TensorInfo(n, tuple(self.graph.tensors[n].shape or ()), self.graph.tensors[n].dtype)
                for n in self.graph.inputs]

    @property
    def outputs(self) -> List[TensorInfo]:
        info = [self._out_info.get(n, self.graph.tensors[n]) for n in self.graph.outputs]
        return [TensorInfo(t.name, tuple(t.shape) if t.shape is not None else None, t.dtype) for t in info]

    # backend choice ------------------------------------------------------------
    def default_shapes(self) -> Optional[Dict[str, Tuple[int, ...]]]:
        """Concrete input shapes the model is planned for before its first run (the shapes the
        converter verified a dynamic model at, else symbolic dims 1), or None where an input's
        shape is unknown."""
        if any(self.graph.tensors[n].shape is None for n in self.graph.inputs):
            return None
        return concrete_input_shapes(self.graph)

    def _choose(self, shapes: Optional[Dict[str, Tuple[int, ...]]], graph: Optional[Graph] = None) -> "Choice":
        """The picker's choice for these input shapes (made once per shape, then kept)."""
        from .backends.picker import pick
        key = None if shapes is None else tuple(tuple(shapes[n]) for n in self.graph.inputs)
        choice = self._choices.get(key)
        if choice is None:
            g = graph if graph is not None else (self.graph if shapes is None else specialize(self.graph, shapes))
            prefer = (self.meta.get("target") or {}).get("backends") or ()
            choice = pick(g, self.requested_backend, prefer, self.threads, memory_bound=self.memory_bound)
            self._choices[key] = choice
        self._choice = choice
        return choice

    @property
    def backend(self) -> Backend:
        """The backend of the latest plan (before any run: the choice for the default input
        shapes: ``default_shapes``). A partition is a backend named like ``opencl+cpu``."""
        if self._choice is None:
            self._choose(self.default_shapes())
        return self._choice.backend

    def backend_report(self, shapes: Optional[Dict[str, Tuple[int, ...]]] = None) -> dict:
        """Why the backend was chosen: candidates, availability, coverage, estimated and measured
        costs, the choice (for ``shapes``; default: the latest plan's). ``format_report`` prints it."""
        choice = self._choose(shapes) if shapes is not None else (self._choice or self._choose(self.default_shapes()))
        return dict(choice.report)

    # running -----------------------------------------------------------------
    def _check_feeds(self, feeds) -> Dict[str, np.ndarray]:
        names = self.graph.inputs
        if not isinstance(feeds, dict):
            if len(names) != 1:
                raise InputError(f"model has {len(names)} inputs ({', '.join(names)}); pass a dict")
            feeds = {names[0]: feeds}
        unknown = [k for k in feeds if k not in names]
        if unknown:
            raise InputError(f"unknown input name(s) {unknown}; model inputs are {names}")
        missing = [k for k in names if k not in feeds]
        if missing:
            raise InputError(f"missing input(s) {missing}")
        out, symbols = {}, {}
        for name in names:
            t = self.graph.tensors[name]
            arr = np.asarray(feeds[name])
            want = np.dtype(t.dtype)
            if arr.dtype != want:
                if not (arr.dtype.kind == want.kind == "f") and not (
                        arr.dtype.kind in "iu" and want.kind in "iu" and np.can_cast(arr.dtype, want)):
                    raise InputError(f"input {name!r}: expected dtype {t.dtype}, got {arr.dtype}")
            if t.shape is not None:
                _bind_symbols(tuple(t.shape), arr.shape, symbols, name)
            out[name] = arr
        return out

    def _pool(self, shapes: Dict[str, Tuple[int, ...]]) -> "PlanPool":
        key = tuple(tuple(shapes[n]) for n in self.graph.inputs)
        pool = self._plans.get(key)
        if pool is None:
            with self._lock:
                pool = self._plans.get(key)
                if pool is None:
                    g = specialize(self.graph, shapes)
                    backend = self._choose(shapes, g).backend
                    pool = self._new_pool(g, backend, key)
                    ex = pool.acquire()  # build one now: errors surface here
                    pool.release(ex)
                    self._check_memory(ex, shapes, pool)
                    self._evict_over_budget()
                    if len(self._plans) >= self.max_shapes:
                        self._plans.pop(next(iter(self._plans)))
                        self._fast = {}          # it may point at the dropped pool
                    self._plans[key] = pool
                    _trim_heap()
        return pool

    def _prepare_options(self) -> dict:
        return {"memory_limit": self.memory_limit}

    def _new_pool(self, g: Graph, backend: Backend, key: Tuple):
        """The executables of one input shape: a PlanPool of its own (static shapes), or, for
        a dynamically shaped model, a view of the run slots whose arena block the plans of
        every shape share (memory/slots.py)."""
        opts = self._prepare_options()
        if not self.dynamic:
            return PlanPool(g, lambda gr: backend.prepare(gr, threads=self.threads, **opts), self.max_concurrency)
        from .memory.slots import ShapePool, SlotSet
        with self._slots_lock:
            if self._slots is None:
                self._slots = SlotSet(None, self.max_concurrency, self.max_shapes)
        return ShapePool(self._slots, key, g,
                         lambda gr, alloc: backend.prepare(gr, threads=self.threads, arena_alloc=alloc, **opts))

    def _check_memory(self, ex: Executable, shapes, pool: "PlanPool" = None) -> None:
        # Refuse before the first run, saying the least memory this plan needs (backends
        # that plan under the limit themselves, as the CPU one, refuse earlier); then cap
        # the concurrent runs of this shape at what the limit holds.
        plan = ex.arena_plan
        if self.memory_limit is None or plan is None:
            return
        need = plan.size + int(ex.workspace_bytes)
        if need > self.memory_limit:
            raise MemoryBudgetError(
                f"model needs at least {mib(need)} for activations and workspace "
                f"(arena {mib(plan.size)}) with input shapes {dict(shapes)}; "
                f"memory limit is {mib(self.memory_limit)}")
        if pool is not None:
            pool.need = need
            pool.max_size = max(1, min(pool.max_size, self.memory_limit // max(need, 1)))

    def _evict_over_budget(self) -> None:
        # A dynamically shaped model keeps plans for many shapes in its slots: drop the oldest
        # while all of them hold more than the memory limit.
        if self.dynamic and self.memory_limit is not None and self._slots is not None:
            self._slots.trim_to(self.memory_limit)

    def memory_stats(self) -> dict:
        """What this Runtime holds and may hold: the memory limit and where it came from, per
        cached input shape the arena and workspace bytes and executables, and the process's
        dynamic pool (buddy allocator: used, free, largest free block, fragmentation)."""
        from .memory.pool import DYNAMIC_POOL
        plans = []
        if self._slots is not None:             # dynamic: plans live in the slots' blocks
            for k, slot in enumerate(list(self._slots.slots)):
                for key, ex in list(slot.plans.items()):
                    plan = ex.arena_plan
                    plans.append({"input_shapes": [list(s) for s in key], "slot": k,
                                  "arena_bytes": plan.size if plan is not None else None,
                                  "workspace_bytes": int(ex.workspace_bytes), **_scratch_stats(ex),
                                  **_staged_stats(ex)})
            held = self._slots.held_bytes()
        else:
            for key, pool in list(self._plans.items()):
                ex = pool._idle[-1] if pool._idle else None
                plan = ex.arena_plan if ex is not None else None
                plans.append({"input_shapes": [list(s) for s in key], "executables": pool.size,
                              "arena_bytes": plan.size if plan is not None else None,
                              "workspace_bytes": int(ex.workspace_bytes) if ex is not None else None,
                              **(_scratch_stats(ex) if ex is not None else {}), **_staged_stats(ex)})
            held = sum(((p["arena_bytes"] or 0) + (p["workspace_bytes"] or 0)) * p["executables"] for p in plans)
        return {"memory_limit": self.memory_limit, "memory_limit_source": self.memory_limit_source,
                "dynamic": self.dynamic, "plans": plans, "held_bytes": held,
                "slots": self._slots.stats() if self._slots is not None else [],
                "dynamic_pool": DYNAMIC_POOL.stats()}

    def plan(self, shapes: Dict[str, Tuple[int, ...]]) -> Executable:
        """A prepared plan for these input shapes (built and cached on first use)."""
        pool = self._pool(shapes)
        ex = pool.acquire()
        pool.release(ex)
        return ex

    def run(self, feeds) -> Dict[str, np.ndarray]:
        """Run the model. ``feeds``: {input name: array}, or a bare array for one-input models.
        Returns {output name: array}, arrays of their own (a later run does not change them).
        Safe to call from many threads at once: each concurrent run gets its own plan (own
        arena); weights are shared read-only. The feeds are never written; on the CPU backend a
        C-contiguous float input may be read in place during the run instead of copied first,
        so another thread must not write it while the call is in progress."""
        # fast path: arrays whose (shape, dtype) per input already passed the checks, and the
        # pool of their shapes, found with one dict lookup (``_fast``; emptied when a shape's
        # plans are dropped)
        key = None
        if type(feeds) is np.ndarray and self._one is not None:
            key = (feeds.shape, feeds.dtype)
            pool = self._fast.get(key)
            feeds = {self._one: feeds}
        elif type(feeds) is dict and len(feeds) == len(self.graph.inputs):
            if self._one is not None:
                arr = feeds.get(self._one)
                key = (arr.shape, arr.dtype) if type(arr) is np.ndarray else None
            else:
                arrays = [feeds.get(n) for n in self.graph.inputs]
                if all(type(a) is np.ndarray for a in arrays):
                    key = tuple((a.shape, a.dtype) for a in arrays)
            pool = self._fast.get(key)
        else:
            pool = None
        if pool is None:
            feeds = self._check_feeds(feeds)
            pool = self._pool({k: v.shape for k, v in feeds.items()})
            if key is not None and len(self._fast) < 64:
                self._fast[key] = pool
        ex = pool.acquire()
        try:
            return ex.run(feeds)
        finally:
            pool.release(ex)

    def run_profiled(self, feeds):
        """Run once; also return per-node ``(name, op, seconds)`` timings."""
        feeds = self._check_feeds(feeds)
        pool = self._pool({k: v.shape for k, v in feeds.items()})
        ex = pool.acquire()
        try:
            return ex.run_profiled(feeds)
        finally:
            pool.release(ex)


def _staged_stats(ex) -> dict:
    """``{"staged": ...}`` for a plan made in stages (shapes decided by run-time values): its
    cut, re-plans, re-uses and the cached (sizes, values) keys; else nothing."""
    from .backends.cpu.staged import StagedExecutable
    return {"staged": ex.stats()} if isinstance(ex, StagedExecutable) else {}


class PlanPool:
    """Executables of one specialized graph, one per concurrent run.

    A run takes an idle executable (its arena is then its own), or builds a new
    one while fewer than ``max_size`` exist, else waits for one to come back.
    """

    def __init__(self, graph: Graph, build, max_size: int):
        self.graph = graph
        self._build = build
        self.max_size = max(1, max_size)
        self._idle: List[Executable] = []
        self._count = 0
        self._waiters = 0                    # acquires waiting on ``_cond``
        self._cond = threading.Condition()

    def acquire(self) -> Executable:
        try:
            return self._idle.pop()          # atomic under the GIL: no lock on the common path
        except IndexError:
            pass
        with self._cond:
            self._waiters += 1
            try:
                while not self._idle and self._count >= self.max_size:
                    self._cond.wait()
                if self._idle:
                    return self._idle.pop()
                self._count += 1
            finally:
                self._waiters -= 1
        try:
            return self._build(self.graph)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def release(self, ex: Executable) -> None:
        # a waiter counts itself (under the lock) before it looks at ``_idle``: a waiter this
        # append missed is counted here and woken; one counted later finds the executable
        self._idle.append(ex)
        if self._waiters:
            with self._cond:
                self._cond.notify()

    @property
    def size(self) -> int:
        return self._count
