"""The streaming pipeline: source -> preprocess -> infer -> postprocess -> sinks.

Each stage runs in its own thread; stages are joined by bounded queues of depth 3 (triple
buffering), so decoding, preprocessing, inference and postprocessing of consecutive frames
overlap (numpy, OpenCV and the BLAS release the GIL).

* File sources (video files, image folders, finite synthetic sources): every queue blocks when
  full, so nothing is dropped and every frame comes out, in order.
* Live sources (cameras, streams, paced synthetic sources): the queues in front of inference
  drop their *oldest* frame when full, so inference always works on recent frames; drops are
  counted (``dropped``, ``edge_infer_frames_dropped_total``). A live source that fails (a camera
  unplugged, a stream cut) is closed and reopened with exponential backoff while the rest of
  the pipeline keeps running.
* ``run()`` turns Ctrl-C / SIGTERM into a clean stop: capture stops, the frames in flight drain
  through the sinks, sinks are closed (a video file is finalised). A second signal abandons the
  frames in flight.
"""
from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from ..monitor.registry import Registry
from ..monitor.sampler import record_op_times
from .postprocess import make_postprocess
from .preprocess import Preprocessor
from .sinks import Sink, open_sink
from .sources import Source, open_source

__all__ = ["Pipeline", "FrameItem", "STAGES", "run_stream"]

log = logging.getLogger("edge_infer.pipeline")

STAGES = ("capture", "preprocess", "infer", "postprocess", "sink")
QUEUES = ("frames", "tensors", "outputs", "results")   # between consecutive stages
_END = object()


class _Aborted(Exception):
    pass


class FrameItem:
    """One frame on its way through the pipeline.

    Timing (seconds, ``time.perf_counter`` clock): ``latency`` capture to result (the frame
    read, to the sinks receiving its result) = ``queue_wait`` (time spent waiting in the queues
    between stages, behind other frames) + ``times`` (this frame's own work per stage:
    ``preprocess``, ``infer``, ``postprocess``); ``inference``: the model run alone."""
    __slots__ = ("index", "image", "info", "t_capture", "wall_time", "tensor", "meta", "outputs", "result",
                 "latency", "queue_wait", "times", "t_put", "inference")

    def __init__(self, index: int, image: np.ndarray, info: Dict[str, Any], t_capture: float, wall_time: float):
        self.index, self.image, self.info = index, image, info
        self.t_capture, self.wall_time = t_capture, wall_time
        self.tensor = self.meta = self.outputs = self.result = self.latency = self.inference = None
        self.queue_wait, self.times, self.t_put = 0.0, {}, t_capture


class Pipeline:
    """Stream frames from ``source`` through ``model`` into ``sinks``.

    ``model``: a :class:`~edge_infer.Runtime`, a path to an ``.eim``, or anything with
    ``run(feeds) -> {name: array}`` and ``inputs``. ``source``: a Source or a spec for
    :func:`open_source` (``0``, ``"video.mp4"``, ``"rtsp://..."``, ``"frames/"``, ``"synthetic"``).
    ``preprocess``: a recipe (dict, JSON path or ``calibration/`` name; default: from the model
    input shape) or a callable ``frame -> tensor`` / ``(tensor, meta)``. ``postprocess``: a spec
    for :func:`make_postprocess` (``"classify:5"``, ``"yolo"``, ``"ssd"``, ``"segment"``) or a
    callable ``(outputs, meta) -> result``. ``sinks``: Sinks or specs for :func:`open_sink`.

    ``live`` overrides the source's drop policy; ``max_frames`` stops after that many frames;
    ``reconnect_backoff`` is (first delay, max delay) in seconds; ``profile_every=N`` times every
    Nth inference per op (``edge_infer_op_seconds``); a stage that fails on
    ``max_consecutive_errors`` frames in a row stops the pipeline with that error.
    ``trusted_keys``: as for ``Runtime``, when ``model`` is a path (it loads only if signed by
    one of these Ed25519 public keys).
    """

    def __init__(self, model, source: Union[Source, str, int], preprocess=None, postprocess=None,
                 sinks: Sequence[Union[Sink, str]] = (), *, live: Optional[bool] = None, queue_depth: int = 3,
                 registry: Optional[Registry] = None, max_frames: Optional[int] = None,
                 reconnect_backoff=(0.5, 10.0), profile_every: int = 0, max_consecutive_errors: int = 10,
                 labels=None, input_name: Optional[str] = None, trusted_keys=None):
        if isinstance(model, (str, os.PathLike)):
            from ..runtime import Runtime
            model = Runtime(model, trusted_keys=trusted_keys)
        self.model = model
        self.source = open_source(source)
        self.live = self.source.live if live is None else bool(live)
        if callable(preprocess) and not isinstance(preprocess, (dict, str, os.PathLike)):
            self.pre = preprocess
        else:
            self.pre = Preprocessor.for_model(model, preprocess)
        recipe = getattr(self.pre, "recipe", None) or {}
        self.input_name = input_name or recipe.get("input") or model.inputs[0].name
        self.post = make_postprocess(postprocess, labels=labels, model=model)
        self.sinks: List[Sink] = [open_sink(s, fps=self.source.fps) for s in sinks]
        self.max_frames = max_frames
        self.backoff = (float(reconnect_backoff[0]), float(reconnect_backoff[1]))
        self.profile_every = int(profile_every)
        self.max_consecutive_errors = max(1, int(max_consecutive_errors))
        self.queues = {name: queue.Queue(maxsize=queue_depth) for name in QUEUES}

        self.registry = registry if registry is not None else Registry()
        r = self.registry
        self.m_stage = {s: r.summary("edge_infer_stage_seconds", "time per frame in each pipeline stage",
                                     {"stage": s}) for s in STAGES}
        self.m_latency = r.summary("edge_infer_latency_seconds", "capture to result per frame: queue waits + "
                                   "preprocess + inference + postprocess (grows when frames queue up)")
        self.m_inference = r.summary("edge_infer_inference_seconds", "model run time per frame (no queue wait)")
        self.m_queue_wait = r.summary("edge_infer_queue_wait_seconds", "time per frame spent waiting in the "
                                      "queues between stages, behind other frames")
        self.m_frames = r.counter("edge_infer_frames_total", "frames through the whole pipeline")
        self.m_captured = r.counter("edge_infer_frames_captured_total", "frames read from the source")
        self.m_dropped = {q: r.counter("edge_infer_frames_dropped_total", "live frames dropped (oldest first)",
                                       {"queue": q}) for q in ("frames", "tensors")}
        self.m_reconnects = r.counter("edge_infer_reconnects_total", "live source reopened after a failure")
        self.m_errors = r.counter("edge_infer_errors_total", "errors (failed frames, failed requests)")
        for name, q in self.queues.items():
            r.gauge("edge_infer_queue_depth", "items waiting between stages", {"queue": name}, fn=q.qsize)
        backend = getattr(getattr(model, "backend", None), "name", None)
        if backend:
            r.gauge("edge_infer_backend_info", "backend in use", {"backend": backend}).set(1)

        self.counts = {"captured": 0, "completed": 0, "dropped": 0, "reconnects": 0, "errors": 0}
        self._count_lock = threading.Lock()
        self._stop = threading.Event()      # stop capturing; drain what is in flight
        self._abort = threading.Event()     # stop everything now
        self._threads: List[threading.Thread] = []
        self._fatal: Optional[BaseException] = None
        self._t_start = self._t_end = None
        self.last_error: Optional[str] = None

    # plumbing ---------------------------------------------------------------------
    def _count(self, key: str, n: int = 1) -> None:
        with self._count_lock:
            self.counts[key] += n

    def _put(self, qname: str, item, drop: bool) -> None:
        q = self.queues[qname]
        if isinstance(item, FrameItem):
            item.t_put = time.perf_counter()        # its wait in this queue starts now
        if drop:
            while True:
                try:
                    q.put_nowait(item)
                    return
                except queue.Full:
                    try:
                        q.get_nowait()       # the oldest frame goes
                    except queue.Empty:
                        continue
                    self.m_dropped[qname].inc()
                    self._count("dropped")
        while True:
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                if self._abort.is_set():
                    raise _Aborted() from None

    def _get(self, qname: str):
        q = self.queues[qname]
        while True:
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                if self._abort.is_set():
                    raise _Aborted() from None

    def _error(self, stage: str, exc: BaseException, streak: int) -> None:
        self._count("errors")
        self.m_errors.inc()
        self.last_error = f"{stage}: {type(exc).__name__}: {exc}"
        log.warning("pipeline %s failed on a frame: %s", stage, exc)
        if streak >= self.max_consecutive_errors and self._fatal is None:
            self._fatal = exc
            log.error("pipeline %s failed %d frames in a row; stopping", stage, streak)
            self._stop.set()
            self._abort.set()

    # stages -----------------------------------------------------------------------
    def _reconnect(self) -> bool:
        """Reopen the live source with backoff; False when stopped meanwhile."""
        self._count("reconnects")
        self.m_reconnects.inc()
        delay = self.backoff[0]
        while not self._stop.is_set():
            try:
                self.source.close()
            except Exception:  # noqa: BLE001
                pass
            if self._stop.wait(delay):
                return False
            try:
                self.source.open()
                log.info("source %s reopened", self.source.name)
                return True
            except Exception as e:  # noqa: BLE001  (still gone: wait longer)
                log.warning("source %s: reopen failed (%s); retrying in %.1f s", self.source.name, e,
                            min(delay * 2, self.backoff[1]))
                delay = min(delay * 2, self.backoff[1])
        return False

    def _capture(self) -> None:
        src, n, streak = self.source, 0, 0
        clock = time.perf_counter
        try:
            while not self._stop.is_set():
                if self.max_frames is not None and n >= self.max_frames:
                    break
                t0 = clock()
                try:
                    item = src.read()
                except Exception as e:  # noqa: BLE001  (a broken read is a failed source)
                    streak += 1
                    if not self.live:
                        self._error("capture", e, self.max_consecutive_errors)
                        break
                    self._error("capture", e, 0)
                    item = None
                if item is None:
                    if not self.live or getattr(src, "finished", False) or not self._reconnect():
                        break
                    continue
                streak = 0
                img, info = item if isinstance(item, tuple) else (item, {})
                t1 = clock()
                self.m_stage["capture"].observe(t1 - t0)
                frame = FrameItem(n, img, info or {}, t1, time.time())
                n += 1
                self._count("captured")
                self.m_captured.inc()
                self._put("frames", frame, drop=self.live)
        except _Aborted:
            pass
        finally:
            try:
                src.close()
            except Exception:  # noqa: BLE001
                pass
            self._finish("frames")

    def _finish(self, qname: str) -> None:
        try:
            self._put(qname, _END, drop=False)
        except _Aborted:
            pass

    def _worker(self, stage: str, q_in: str, q_out: Optional[str], fn: Callable, drop: bool) -> None:
        streak = 0
        clock = time.perf_counter
        try:
            while True:
                item = self._get(q_in)
                if item is _END:
                    break
                t0 = clock()
                item.queue_wait += t0 - item.t_put
                try:
                    fn(item)
                except Exception as e:  # noqa: BLE001  (one bad frame must not end a service)
                    streak += 1
                    self._error(stage, e, streak)
                    continue
                streak = 0
                dt = clock() - t0
                self.m_stage[stage].observe(dt)
                item.times[stage] = dt
                if q_out is not None:
                    self._put(q_out, item, drop)
        except _Aborted:
            pass
        finally:
            if q_out is not None:
                self._finish(q_out)
            if stage == "sink":
                self._close_sinks()

    def _do_pre(self, item: FrameItem) -> None:
        out = self.pre(item.image)
        if isinstance(out, tuple):
            item.tensor, item.meta = out
        else:
            h, w = item.image.shape[:2]
            item.tensor, item.meta = out, {"frame_size": (h, w), "input_size": (h, w), "scale": (1.0, 1.0),
                                           "offset": (0.0, 0.0)}

    def _do_infer(self, item: FrameItem) -> None:
        feeds = {self.input_name: item.tensor}
        t0 = time.perf_counter()
        if self.profile_every and item.index % self.profile_every == 0 and hasattr(self.model, "run_profiled"):
            item.outputs, times = self.model.run_profiled(feeds)
            record_op_times(self.registry, times)
        else:
            item.outputs = self.model.run(feeds)
        item.inference = time.perf_counter() - t0
        self.m_inference.observe(item.inference)
        item.tensor = None

    def _do_post(self, item: FrameItem) -> None:
        item.result = self.post(item.outputs, item.meta)

    def _do_sink(self, item: FrameItem) -> None:
        item.latency = time.perf_counter() - item.t_capture
        self.m_latency.observe(item.latency)
        self.m_queue_wait.observe(item.queue_wait)
        for s in self.sinks:
            s.write(item, item.result)
            if s.stop_requested:
                self.stop()
        self._count("completed")
        self.m_frames.inc()

    def _close_sinks(self) -> None:
        for s in self.sinks:
            try:
                s.close()
            except Exception as e:  # noqa: BLE001
                log.warning("closing sink %r failed: %s", s, e)

    # control ----------------------------------------------------------------------
    def start(self) -> "Pipeline":
        """Open the source (errors raise here) and start the stage threads."""
        if self._threads:
            raise RuntimeError("pipeline already started")
        self.source.open()
        self._plan_before_first_frame()
        self._t_start = time.perf_counter()
        live = self.live
        specs = [("capture", self._capture, ()),
                 ("preprocess", self._worker, ("preprocess", "frames", "tensors", self._do_pre, live)),
                 ("infer", self._worker, ("infer", "tensors", "outputs", self._do_infer, False)),
                 ("postprocess", self._worker, ("postprocess", "outputs", "results", self._do_post, False)),
                 ("sink", self._worker, ("sink", "results", None, self._do_sink, False))]
        for name, target, args in specs:
            t = threading.Thread(target=target, args=args, name=f"edge-infer-{name}", daemon=True)
            self._threads.append(t)
        for t in self._threads:
            t.start()
        return self

    def _plan_before_first_frame(self) -> None:
        """Plan a Runtime now for the shape frames will have, so that the first frame's latency
        (and a live source's first drops) is inference, not planning. Frames go one at a time, so
        a symbolic batch dim is 1; a model with other symbolic dims is planned on its first frame,
        whose shape only the preprocessing decides."""
        from ..runtime import Runtime
        if not isinstance(self.model, Runtime):
            return
        shapes = {}
        for t in self.model.inputs:
            if not t.shape or not all(isinstance(v, int) for v in t.shape[1:]):
                return
            shapes[t.name] = (t.shape[0] if isinstance(t.shape[0], int) else 1,) + tuple(t.shape[1:])
        self.model.plan(shapes)

    def stop(self) -> None:
        """Stop capturing; frames in flight still go through (graceful)."""
        self._stop.set()

    def abort(self) -> None:
        """Stop now; frames in flight are abandoned (sinks are still closed)."""
        self._stop.set()
        self._abort.set()

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def wait(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Wait for the stages to finish (the source ended or ``stop()``); the stats.
        Raises the error that stopped the pipeline, if one did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            while t.is_alive():
                t.join(0.1)      # short joins: signal handlers run meanwhile
                if deadline is not None and time.monotonic() > deadline:
                    return self.stats()
        if self._t_end is None:
            self._t_end = time.perf_counter()
        if self._fatal is not None:
            raise self._fatal
        return self.stats()

    def run(self, handle_signals: bool = True) -> Dict[str, Any]:
        """``start()`` + ``wait()``; Ctrl-C / SIGTERM stop cleanly (main thread only)."""
        restore = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            def on_signal(signum, _frame):
                if self._stop.is_set():
                    self.abort()
                else:
                    log.info("signal %d: stopping (again to abandon frames in flight)", signum)
                    self.stop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    restore[sig] = signal.signal(sig, on_signal)
                except (ValueError, OSError):
                    pass
        try:
            self.start()
            return self.wait()
        finally:
            for sig, h in restore.items():
                signal.signal(sig, h)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        self.wait()

    def stats(self) -> Dict[str, Any]:
        end = self._t_end or time.perf_counter()
        elapsed = (end - self._t_start) if self._t_start else 0.0
        def ms(m):
            return {f"p{int(q * 100)}": (round(v * 1e3, 3) if v == v else None) for q, v in m.quantiles().items()}
        with self._count_lock:
            c = dict(self.counts)
        return {
            "frames_in": c["captured"], "frames_out": c["completed"], "dropped": c["dropped"],
            "reconnects": c["reconnects"], "errors": c["errors"], "elapsed_s": round(elapsed, 4),
            "fps": round(c["completed"] / elapsed, 3) if elapsed > 0 else 0.0,
            "stage_ms": {s: round(m.mean * 1e3, 4) if m.count else None for s, m in self.m_stage.items()},
            "latency_ms": ms(self.m_latency), "inference_ms": ms(self.m_inference),
            "queue_wait_ms": ms(self.m_queue_wait),
            "live": self.live, "last_error": self.last_error,
        }


def run_stream(artifact: str, source, sinks: Sequence[str] = ("-",), recipe=None, postprocess=None,
               labels=None, metrics_port: Optional[int] = None, metrics_host: str = "127.0.0.1",
               metrics_jsonl: Optional[str] = None, monitor: bool = False, max_frames: Optional[int] = None,
               backend: str = "auto", threads: Optional[int] = None, profile_every: int = 0,
               stream=None, trusted_keys=None) -> Dict[str, Any]:
    """What ``edge-infer stream`` does: a pipeline with monitoring; returns the stats.
    ``trusted_keys``: as for ``Runtime`` (only artifacts signed by one of them load)."""
    from ..monitor import MetricsServer, Sampler, TerminalView
    from ..runtime import Runtime
    stream = stream or sys.stderr
    rt = Runtime(artifact, backend=backend, threads=threads, trusted_keys=trusted_keys)
    reg = Registry()
    pipe = Pipeline(rt, source, preprocess=recipe, postprocess=postprocess, sinks=sinks, registry=reg,
                    labels=labels, max_frames=max_frames, profile_every=profile_every)
    view = TerminalView(reg, stream=stream) if monitor else None
    sampler = Sampler(reg, interval=0.1, runtime=rt, jsonl=metrics_jsonl, view=view)
    server = None
    if metrics_port is not None:
        server = MetricsServer(reg, port=metrics_port, host=metrics_host).start()
        print(f"edge-infer: metrics at {server.url}", file=stream)
    sampler.start()
    try:
        stats = pipe.run()
    finally:
        sampler.stop()
        if server is not None:
            server.close()
        if view is not None:
            view.stop()
    return stats
