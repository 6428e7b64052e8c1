"""Dynamic batching under steady load: p99 latency against max_wait + one batch's inference,
and throughput batched against unbatched.

    python benchmarks/batcher_bench.py [--seconds 4] [--json]

Models: an MLP (784 -> 1024 -> 1024 -> 10, random weights; batching turns matrix-vector products
into matrix-matrix ones) and the bundled digits CNN.

1. Steady open-loop load: requests arrive as a Poisson process at ``--load`` x the batched
   throughput of part 2 (default 0.6: a steady load below capacity; above it queues grow and no
   batcher holds a latency bound), single samples, through a Batcher(max_batch=32, max_wait_ms=10). Reported: p50 / p99 submit -> result latency, the
   mean batch, and p99 of the batch inference time; target: p99 <= max_wait_ms + one batch's
   (p99) inference time.
2. Throughput: 16 threads calling ``rt.run`` one sample at a time (the Runtime runs them
   concurrently, one plan each) against the same 16 threads going through a Batcher with
   max_batch 16 (16 closed-loop callers never fill a larger batch, which would then always wait
   for the deadline).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import edge_infer  # noqa: E402
from edge_infer import Batcher  # noqa: E402
from edge_infer.data import digits_model_path, load_digits_samples  # noqa: E402
from edge_infer.monitor import Registry  # noqa: E402


def build_mlp(path: str) -> str:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    dims = [784, 1024, 1024, 10]
    nodes, inits, x = [], [], "input"
    for i in range(3):
        w = (rng.standard_normal((dims[i], dims[i + 1])) * (2 / dims[i]) ** 0.5).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(dims[i + 1], np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"g{i}"]))
        x = f"g{i}"
        if i < 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    nodes.append(helper.make_node("Identity", [x], ["logits"]))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 784])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def single_latency(rt, sample, n=200):
    feeds = sample[None]
    for _ in range(10):
        rt.run(feeds)
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        rt.run(feeds)
        t.append(time.perf_counter() - t0)
    return float(np.median(t))


def steady_load(rt, samples, rate, seconds, max_batch, max_wait_ms):
    """Open loop: Poisson arrivals at ``rate``/s; latencies of every request."""
    reg = Registry()
    lat, lock = [], threading.Lock()
    rng = np.random.default_rng(1)
    with Batcher(rt, max_batch=max_batch, max_wait_ms=max_wait_ms, registry=reg) as b:
        for k in range(3 * max_batch):                      # warm up every bucket's plan
            b.submit(samples[k % len(samples)])
        time.sleep(0.5)
        t_end = time.perf_counter() + seconds
        nxt = time.perf_counter()
        k = 0
        while True:
            nxt += rng.exponential(1 / rate)
            now = time.perf_counter()
            if nxt > t_end:
                break
            if nxt > now:
                time.sleep(nxt - now)
            t0 = time.perf_counter()
            f = b.submit(samples[k % len(samples)])
            k += 1

            def done(_f, t0=t0):
                with lock:
                    lat.append(time.perf_counter() - t0)
            f.add_done_callback(done)
        time.sleep(0.3)
        st = b.stats()
        infer = reg.get("edge_infer_batch_inference_seconds").values()
        batches = reg.get("edge_infer_batch_size").values()
    lat = np.array(lat[3 * max_batch:] if len(lat) > 6 * max_batch else lat)
    return {"offered_rps": round(rate, 1), "requests": k, "achieved_rps": round(k / seconds, 1),
            "p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 3), "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 3),
            "mean_batch": round(float(batches.mean()), 2), "max_batch_seen": int(batches.max()),
            "batch_infer_p99_ms": round(float(np.percentile(infer, 99)) * 1e3, 3),
            "bound_ms": round(max_wait_ms + float(np.percentile(infer, 99)) * 1e3, 3), "padded": st["padded"]}


def throughput(rt, samples, seconds, threads=16, batcher=None):
    count = [0] * threads
    stop = threading.Event()

    def worker(i):
        k = i
        while not stop.is_set():
            x = samples[k % len(samples)]
            if batcher is None:
                rt.run(x[None])
            else:
                batcher.submit(x).result()
            count[i] += 1
            k += threads
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(0.5)                                  # warm up
    c0, t0 = sum(count), time.perf_counter()
    time.sleep(seconds)
    c1, t1 = sum(count), time.perf_counter()
    stop.set()
    for t in ts:
        t.join()
    return (c1 - c0) / (t1 - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--load", type=float, default=0.6, help="offered load / batched 16-thread throughput")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=1,
                    help="inference threads (default 1: on a small machine the load generator and the "
                         "callers need the other cores; BLAS threads spinning on them inflate the tail)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = {"cores": os.cpu_count(), "threads": args.threads, "models": []}
    with tempfile.TemporaryDirectory() as tmp:
        edge_infer.convert(build_mlp(os.path.join(tmp, "mlp.onnx")), os.path.join(tmp, "mlp.eim"))
        edge_infer.convert(digits_model_path(), os.path.join(tmp, "digits.eim"))
        x, _ = load_digits_samples()
        models = [("mlp 784-1024-1024-10", os.path.join(tmp, "mlp.eim"),
                   np.random.default_rng(0).random((256, 784), dtype=np.float32)),
                  ("digits cnn", os.path.join(tmp, "digits.eim"), x)]
        for name, path, samples in models:
            rt = edge_infer.Runtime(path, threads=args.threads)
            t1 = single_latency(rt, samples[0])
            unbatched = throughput(rt, samples, args.seconds)
            # 16 closed-loop callers: a batch limit of 16 fills without waiting for the deadline
            with Batcher(rt, max_batch=16, max_wait_ms=args.max_wait_ms) as b:
                batched = throughput(rt, samples, args.seconds, batcher=b)
            steady = steady_load(rt, samples, args.load * batched, args.seconds, args.max_batch, args.max_wait_ms)
            out["models"].append({"model": name, "single_ms": round(t1 * 1e3, 3), "steady": steady,
                                  "unbatched_rps": round(unbatched, 1), "batched_rps": round(batched, 1),
                                  "speedup": round(batched / unbatched, 2)})
    if args.json:
        print(json.dumps(out, indent=2))
        return out
    print(f"batcher: max_batch {args.max_batch}, max_wait {args.max_wait_ms} ms; {args.threads} inference thread(s); "
          f"{out['cores']} CPU cores, load average {os.getloadavg()[0]:.2f}")
    for m in out["models"]:
        s = m["steady"]
        ok = "OK" if s["p99_ms"] <= s["bound_ms"] else "MISSED"
        print(f"  {m['model']}: one sample {m['single_ms']} ms")
        print(f"    steady load {s['offered_rps']} req/s, served {s['achieved_rps']}: "
              f"p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms vs max_wait + batch p99 {s['bound_ms']} ms "
              f"({args.max_wait_ms} + {s['batch_infer_p99_ms']}) {ok}; mean batch {s['mean_batch']}")
        print(f"    (steady load offered: {args.load}x the batched 16-thread throughput; "
              f"{s['offered_rps'] / m['unbatched_rps']:.2f}x the unbatched)")
        print(f"    16 threads: unbatched {m['unbatched_rps']} req/s, batched {m['batched_rps']} req/s "
              f"({m['speedup']}x)")
    return out


if __name__ == "__main__":
    main()
