"""Dynamic batching around a Runtime: many callers submit single samples and get futures;
one dispatcher thread groups them into batches.

>>> with Batcher(rt, max_batch=16, max_wait_ms=20) as b:              # doctest: +SKIP
...     fut = b.submit(x, priority=1)      # x: one sample, [1, C, H, W] or [C, H, W]
...     out = fut.result()                 # {output name: this sample's row}

Batches
    A batch is dispatched when ``batch_limit`` compatible requests (same sample shapes) are
    waiting, or when the oldest waiting request has waited ``max_wait_ms`` (default 50 ms).
    Batch sizes are rounded up to a few *buckets* (powers of two up to ``max_batch``) by
    repeating the last sample, so the Runtime keeps a handful of plans rather than one per
    size; ``batch_sizes=None`` runs the exact sizes. A model whose batch dimension is fixed at 1
    gets its requests back to back; one fixed at B > 1 gets batches padded to B.

Priorities
    ``submit(..., priority=p)``: higher first. A waiting request gains one priority level per
    ``aging_ms`` (default 4 x ``max_wait_ms``), so the lowest priority is never starved: under
    any load it waits at most about ``(p_max - p) x aging_ms`` plus one batch. Equal effective
    priority: first come, first served.

Latency target
    With ``latency_target_ms`` (a p99 goal for submit -> result) the batch limit adapts (AIMD,
    as in Clipper): every ``adapt_every`` batches the p99 inference time of full batches is
    measured; when wait + that exceeds the target the limit shrinks (x0.7), when the next size
    would still fit with 20% to spare and batches fill up it grows by one. The wait is capped
    at ``target - inference time of a full batch``. Under overload (requests arrive faster than
    any batch size serves them) queueing exceeds any target; the limit then stays where one
    batch fits, which keeps throughput up.
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import InputError

__all__ = ["Batcher"]


class _Request:
    __slots__ = ("inputs", "priority", "t_submit", "seq", "future", "squeeze", "key")

    def __init__(self, inputs, priority, t_submit, seq, squeeze, key):
        self.inputs, self.priority, self.t_submit, self.seq = inputs, priority, t_submit, seq
        self.squeeze, self.key = squeeze, key
        self.future: Future = Future()


def _buckets(max_batch: int) -> List[int]:
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


class Batcher:
    """Dynamic batcher for a :class:`~edge_infer.Runtime` (or anything with ``run`` and
    ``inputs``). See the module docstring for the policy."""

    def __init__(self, runtime, max_batch: int = 8, max_wait_ms: float = 50.0,
                 latency_target_ms: Optional[float] = None, aging_ms: Optional[float] = None,
                 batch_sizes: Union[str, Sequence[int], None] = "pow2", workers: int = 1,
                 adapt_every: int = 16, registry=None):
        self.runtime = runtime
        infos = list(runtime.inputs)
        self.input_names = [i.name for i in infos]
        self._declared = {i.name: (tuple(i.shape) if i.shape is not None else None) for i in infos}
        self._dtypes = {i.name: np.dtype(i.dtype) for i in infos}
        fixed = {s[0] for s in self._declared.values() if s and isinstance(s[0], int)}
        if len(fixed) > 1:
            raise InputError(f"inputs disagree on the batch dimension: {sorted(fixed)}")
        self.fixed_batch: Optional[int] = fixed.pop() if fixed else None
        if self.fixed_batch is not None:
            max_batch = self.fixed_batch
        self.max_batch = max(1, int(max_batch))
        if self.fixed_batch is not None:
            self.batch_sizes = [self.fixed_batch]
        elif batch_sizes == "pow2":
            self.batch_sizes = _buckets(self.max_batch)
        elif batch_sizes is None:
            self.batch_sizes = None
        else:
            self.batch_sizes = sorted({int(b) for b in batch_sizes if 0 < int(b) <= self.max_batch} | {self.max_batch})
        self.max_wait = float(max_wait_ms) / 1e3
        self.aging = (float(aging_ms) if aging_ms is not None else 4 * max(float(max_wait_ms), 1.0)) / 1e3
        self.target = None if latency_target_ms is None else float(latency_target_ms) / 1e3
        self.batch_limit = self.max_batch
        self.adapt_every = max(1, int(adapt_every))

        self._cond = threading.Condition()
        self._levels: Dict[Tuple[int, Any], deque] = {}   # (priority, shape key) -> FIFO of requests
        self._pending_by_key: Dict[Any, int] = {}
        self._pending = 0
        self._seq = itertools.count()
        self._closed = False
        self._cancel_pending = False
        self._lat: deque = deque(maxlen=512)             # submit -> result latencies (s) since the last adaptation
        self._lat_recent: deque = deque(maxlen=4096)     # the latest, for stats()
        self._infer_est: Dict[int, float] = {}           # batch size -> EWMA inference time (s)
        self._recent_batches: deque = deque(maxlen=256)  # (requests, inference seconds) since adapting
        self._batches_since_adapt = 0
        self._full_batches = 0
        self._stats_lock = threading.Lock()
        self.counts = {"requests": 0, "batches": 0, "samples_run": 0, "padded": 0, "errors": 0}
        self.batch_size_hist: Dict[int, int] = {}
        self.workers = max(1, int(workers))
        self._slots = threading.Semaphore(self.workers)
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="edge-infer-batch") if self.workers > 1 else None

        self.registry = registry
        if registry is not None:
            self.m_batch = registry.summary("edge_infer_batch_size", "requests per batch")
            self.m_lat = registry.summary("edge_infer_request_latency_seconds", "batcher submit -> result")
            self.m_infer = registry.summary("edge_infer_batch_inference_seconds", "inference time per batch")
            self.m_req = registry.counter("edge_infer_requests_total", "requests completed by the batcher")
            self.m_err = registry.counter("edge_infer_errors_total", "errors (failed frames, failed requests)")
            registry.gauge("edge_infer_batcher_queue_depth", "requests waiting to be batched",
                           fn=lambda: self._pending)
            registry.gauge("edge_infer_batch_limit", "current batch size limit", fn=lambda: self.batch_limit)
        self._thread = threading.Thread(target=self._dispatch, name="edge-infer-batcher", daemon=True)
        self._thread.start()

    # submitting -------------------------------------------------------------------------
    def _sample(self, inputs) -> Tuple[Dict[str, np.ndarray], bool, Any]:
        if not isinstance(inputs, dict):
            if len(self.input_names) != 1:
                raise InputError(f"model has inputs {self.input_names}; submit a dict")
            inputs = {self.input_names[0]: inputs}
        unknown = [k for k in inputs if k not in self._declared]
        missing = [k for k in self.input_names if k not in inputs]
        if unknown or missing:
            raise InputError(f"inputs {sorted(inputs)} do not match the model's {self.input_names}")
        feeds, squeeze, key = {}, None, []
        for name in self.input_names:
            arr = np.asarray(inputs[name])
            want = self._dtypes[name]
            if arr.dtype != want:
                if arr.dtype.kind == want.kind or (arr.dtype.kind in "iu" and want.kind in "iuf"):
                    arr = arr.astype(want)
                else:
                    raise InputError(f"input {name!r}: expected dtype {want}, got {arr.dtype}")
            decl = self._declared[name]
            if decl is not None:
                if arr.ndim == len(decl) - 1:
                    arr, sq = arr[None], True
                elif arr.ndim == len(decl):
                    if arr.shape[0] != 1:
                        raise InputError(f"input {name!r}: submit one sample (batch 1), got shape {arr.shape}")
                    sq = False
                else:
                    raise InputError(f"input {name!r}: expected rank {len(decl)} (or {len(decl) - 1} without "
                                     f"the batch axis), got shape {arr.shape}")
                for d, a in zip(decl[1:], arr.shape[1:]):
                    if isinstance(d, int) and d != a:
                        raise InputError(f"input {name!r}: expected shape {decl}, got {arr.shape}")
            else:
                arr, sq = (arr, False) if arr.ndim and arr.shape[0] == 1 else (arr[None], True)
            squeeze = sq if squeeze is None else squeeze
            feeds[name] = arr
            key.append(arr.shape[1:])
        return feeds, bool(squeeze), tuple(key)

    def submit(self, inputs, priority: int = 0) -> Future:
        """Queue one sample; a Future of ``{output name: array}`` (this sample's rows, without
        the batch axis when the sample came without it)."""
        feeds, squeeze, key = self._sample(inputs)
        now = time.perf_counter()
        with self._cond:
            if self._closed:
                raise RuntimeError("batcher is closed")
            req = _Request(feeds, int(priority), now, next(self._seq), squeeze, key)
            self._levels.setdefault((req.priority, key), deque()).append(req)
            self._pending_by_key[key] = self._pending_by_key.get(key, 0) + 1
            self._pending += 1
            self._cond.notify()
        return req.future

    def run(self, inputs, priority: int = 0, timeout: Optional[float] = None) -> Dict[str, np.ndarray]:
        """``submit(...).result(timeout)``."""
        return self.submit(inputs, priority).result(timeout)

    # dispatching --------------------------------------------------------------------------
    def _eff(self, req: _Request, now: float) -> float:
        return req.priority + (now - req.t_submit) / self.aging

    def _best_level(self, now: float, key=None):
        best, best_eff = None, -math.inf
        for lk, dq in self._levels.items():
            if dq and (key is None or lk[1] == key):
                e = self._eff(dq[0], now)
                if e > best_eff or (e == best_eff and dq[0].seq < best[0].seq):
                    best, best_eff = dq, e
        return best

    def _wait_budget(self) -> float:
        if self.target is None:
            return self.max_wait
        est = self._infer_est.get(self._bucket(self.batch_limit))
        if est is None:
            return self.max_wait
        return max(0.0, min(self.max_wait, self.target - est))

    def _bucket(self, n: int) -> int:
        if self.batch_sizes is None:
            return n
        for b in self.batch_sizes:
            if b >= n:
                return b
        return self.batch_sizes[-1]

    def _take_batch(self) -> Optional[List[_Request]]:
        """Block until a batch is due; None when closed and drained."""
        with self._cond:
            while True:
                if self._pending == 0:
                    if self._closed:
                        return None
                    self._cond.wait()
                    continue
                if self._cancel_pending:
                    for dq in self._levels.values():
                        while dq:
                            dq.popleft().future.cancel()
                    self._pending = 0
                    self._pending_by_key.clear()
                    continue
                now = time.perf_counter()
                head = self._best_level(now)
                key = head[0].key
                limit = self.batch_limit
                oldest = min(dq[0].t_submit for dq in self._levels.values() if dq)
                due = oldest + self._wait_budget()
                if self._pending_by_key.get(key, 0) >= limit or now >= due or self._closed:
                    break
                self._cond.wait(due - now)
            batch: List[_Request] = []
            while len(batch) < limit:
                dq = self._best_level(now, key)
                if dq is None:
                    break
                batch.append(dq.popleft())
            self._pending -= len(batch)
            self._pending_by_key[key] -= len(batch)
            for lk in [lk for lk, dq in self._levels.items() if not dq]:
                del self._levels[lk]
            return batch

    def _dispatch(self) -> None:
        while True:
            while not self._slots.acquire(timeout=0.1):
                pass
            batch = self._take_batch()
            if batch is None:
                self._slots.release()
                break
            if self._pool is not None:
                self._pool.submit(self._run_batch, batch)
            else:
                self._run_batch(batch)

    def _run_batch(self, batch: List[_Request]) -> None:
        try:
            reqs = [r for r in batch if r.future.set_running_or_notify_cancel()]
            if not reqs:
                return
            n = len(reqs)
            size = self._bucket(n)
            feeds = {}
            for name in self.input_names:
                parts = [r.inputs[name] for r in reqs]
                if size > n:
                    parts += [parts[-1]] * (size - n)
                feeds[name] = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
            t0 = time.perf_counter()
            try:
                out = self.runtime.run(feeds)
            except BaseException as e:  # noqa: BLE001  (the callers get the error)
                with self._stats_lock:
                    self.counts["errors"] += n
                if self.registry is not None:
                    self.m_err.inc(n)
                for r in reqs:
                    r.future.set_exception(e)
                return
            t1 = time.perf_counter()
            dt = t1 - t0
            for i, r in enumerate(reqs):
                res = {}
                for k, v in out.items():
                    v = np.asarray(v)
                    if v.ndim and v.shape[0] == size:
                        res[k] = v[i].copy() if r.squeeze else v[i:i + 1].copy()
                    else:
                        res[k] = v
                r.future.set_result(res)
            self._account(reqs, n, size, dt, t1)
        finally:
            self._slots.release()

    def _account(self, reqs, n: int, size: int, dt: float, t_done: float) -> None:
        lats = [t_done - r.t_submit for r in reqs]
        with self._stats_lock:
            c = self.counts
            c["requests"] += n
            c["batches"] += 1
            c["samples_run"] += size
            c["padded"] += size - n
            self.batch_size_hist[n] = self.batch_size_hist.get(n, 0) + 1
            self._lat.extend(lats)
            self._lat_recent.extend(lats)
            self._recent_batches.append((n, dt))
            prev = self._infer_est.get(size)
            self._infer_est[size] = dt if prev is None else 0.8 * prev + 0.2 * dt
            if n >= self.batch_limit:
                self._full_batches += 1
            self._batches_since_adapt += 1
            if self.target is not None and self._batches_since_adapt >= self.adapt_every:
                self._adapt()
        if self.registry is not None:
            self.m_batch.observe(n)
            self.m_infer.observe(dt)
            self.m_req.inc(n)
            for x in lats:
                self.m_lat.observe(x)

    def _adapt(self) -> None:
        """AIMD on the batch limit (as Clipper does), called under the stats lock.

        The part of a request's latency the batch size controls is the wait plus one batch's
        inference, so the limit is held where ``wait + p99(inference of a full batch)`` fits the
        target: x0.7 when it does not, +1 when even the next size would fit with 20% to spare
        and batches are filling up. Queueing under overload is not the batch size's doing:
        shrinking batches then would only cut throughput, so measured request latency above the
        target alone does not shrink the limit (``stats()`` reports it against the target)."""
        recent = list(self._recent_batches)
        full = self._full_batches / max(self._batches_since_adapt, 1)
        limit = self.batch_limit
        largest = max((n for n, _ in recent), default=0)     # the batches really formed (<= limit)
        big = [dt for n, dt in recent if n >= max(1, int(largest * 0.75))]
        if big:
            t_inf = float(np.percentile(big, 99))
            budget = self.target - min(self.max_wait, max(0.0, self.target - t_inf))
            if t_inf > budget and largest > 1:
                limit = max(1, int(min(limit, largest) * 0.7))
            elif limit < self.max_batch and full >= 0.5:
                nxt_est = self._infer_est.get(self._bucket(limit + 1), t_inf * (limit + 1) / limit)
                if nxt_est + min(self.max_wait, max(0.0, self.target - nxt_est)) < 0.8 * self.target:
                    limit += 1
        if limit != self.batch_limit:
            self.batch_limit = limit
            self._lat.clear()
            self._recent_batches.clear()
        self._batches_since_adapt = 0
        self._full_batches = 0

    # lifecycle ----------------------------------------------------------------------------
    def close(self, wait: bool = True) -> None:
        """Stop accepting requests; ``wait``: finish the waiting ones (else cancel them)."""
        with self._cond:
            self._closed = True
            if not wait:
                self._cancel_pending = True
            self._cond.notify_all()
        self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def pending(self) -> int:
        return self._pending

    def stats(self) -> Dict[str, Any]:
        """Requests, batches, mean batch size, current limit, latency percentiles (recent)."""
        with self._stats_lock:
            c = dict(self.counts)
            lat = np.fromiter(self._lat_recent, float) if self._lat_recent else np.zeros(0)
            hist = dict(sorted(self.batch_size_hist.items()))
            est = {k: round(v * 1e3, 3) for k, v in sorted(self._infer_est.items())}
        out = {**c, "mean_batch": round(c["requests"] / c["batches"], 3) if c["batches"] else 0.0,
               "batch_limit": self.batch_limit, "batch_size_hist": hist, "inference_ms_by_size": est,
               "max_wait_ms": self.max_wait * 1e3, "fixed_batch": self.fixed_batch}
        if lat.size:
            out.update({f"p{q}_ms": round(float(np.percentile(lat, q)) * 1e3, 3) for q in (50, 90, 99)})
        return out
