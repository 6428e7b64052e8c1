"""Output parity of the bundled digits model, host vs aarch64 (driven by tests/arm64/smoke.sh).

    python check_outputs.py ref   DIR     # on the host: run DIR/digits_fp32.eim and
                                          # DIR/digits_int8.eim, write DIR/ref.npz
    python check_outputs.py check DIR     # on aarch64 (qemu): run them again, compare to ref.npz

Runs every held-out sample as one batch of 450, as batches of 7 (a second plan per shape) and
at 1 and 2 threads, on the CPU backend (backend="cpu": the host may have LiteRT, which "auto"
would pick there). int8 outputs must equal the host's bit for bit; fp32 outputs must agree
within rtol 1e-5 (atol 1e-5 of the largest |logit|, so logits near zero do not fail a relative
test on rounding alone). ``EI_SMOKE_EXPECT_NATIVE=1|0`` says whether the native kernels must be
loaded (and on aarch64 report NEON) or must not be. Prints one line per check, exits 1 on any
failure.
"""
from __future__ import annotations

import os
import platform
import sys
import time

import numpy as np

MODELS = ("fp32", "int8")
THREADS = (1, 2)


def outputs(path: str, x: np.ndarray, threads: int) -> dict:
    import edge_infer
    rt = edge_infer.Runtime(path, backend="cpu", threads=threads)
    full = rt.run(x)["logits"]
    split = np.concatenate([rt.run(x[k:k + 7])["logits"] for k in range(0, 70, 7)])
    return {"full": full, "split": split, "backend": getattr(rt.backend, "name", type(rt.backend).__name__)}


def run_all(d: str) -> dict:
    from edge_infer.data import load_digits_samples
    x, y = load_digits_samples()
    res = {"y": y}
    for m in MODELS:
        for t in THREADS:
            t0 = time.perf_counter()
            o = outputs(os.path.join(d, f"digits_{m}.eim"), x, t)
            res[f"{m}_t{t}_full"] = o["full"]
            res[f"{m}_t{t}_split"] = o["split"]
            print(f"  ran {m} threads={t} backend={o['backend']} in {time.perf_counter() - t0:.1f} s",
                  flush=True)
    return res


def main() -> int:
    mode, d = sys.argv[1], sys.argv[2]
    import edge_infer
    from edge_infer.backends.cpu import native
    print(f"python {platform.python_version()} on {platform.machine()}, numpy {np.__version__}, "
          f"edge_infer {edge_infer.__version__} from {os.path.dirname(edge_infer.__file__)}")
    feats = native.features() if native.lib is not None else {}
    print(f"native kernels: {'loaded ' + str(native.library_path()) if native.lib is not None else 'off (' + native.why_not + ')'}"
          f"{' features ' + ','.join(k for k, v in feats.items() if v) if feats else ''}")
    fails = []

    def check(name: str, ok: bool, detail: str = "") -> None:
        print(f"  {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
        if not ok:
            fails.append(name)

    want = os.environ.get("EI_SMOKE_EXPECT_NATIVE")
    if want is not None:
        if want == "1":
            check("native library loaded", native.lib is not None, native.why_not)
            if platform.machine() == "aarch64":
                check("native reports NEON", bool(feats.get("neon")), str(feats))
                want_dot = os.environ.get("EI_SMOKE_EXPECT_DOTPROD")
                if want_dot is not None:
                    check(f"native dotprod == {want_dot}", bool(feats.get("dotprod")) == (want_dot == "1"),
                          str(feats))
        else:
            check("native library not loaded", native.lib is None, str(native.library_path()))

    res = run_all(d)
    y = res.pop("y")
    for m in MODELS:
        acc = float((res[f"{m}_t1_full"].argmax(1) == y).mean())
        check(f"{m} accuracy {acc:.3f} >= 0.9", acc >= 0.9)

    if mode == "ref":
        # the host's own consistency: int8 must not depend on the thread count or the batch split
        for t in THREADS:
            check(f"host int8 t{t} batch-7 == batch-450 rows", np.array_equal(
                res[f"int8_t{t}_split"], res[f"int8_t{t}_full"][:70]))
        check("host int8 t1 == t2", np.array_equal(res["int8_t1_full"], res["int8_t2_full"]))
        np.savez(os.path.join(d, "ref.npz"), **res)
        print(f"wrote {os.path.join(d, 'ref.npz')}")
    else:
        with np.load(os.path.join(d, "ref.npz")) as f:
            ref = {k: f[k] for k in f.files}
        for k, got in res.items():
            want_ = ref[k]
            if k.startswith("int8"):
                diff = int(np.count_nonzero(got != want_))
                check(f"{k} bit-exact vs host", got.shape == want_.shape and diff == 0,
                      f"{diff} of {want_.size} differ, max |d| {float(np.abs(got - want_).max()):.3g}" if diff else "")
            else:
                atol = 1e-5 * float(np.abs(want_).max())
                err = np.abs(got.astype(np.float64) - want_)
                ok = got.shape == want_.shape and bool(np.all(err <= atol + 1e-5 * np.abs(want_)))
                check(f"{k} within rtol 1e-5 of host", ok,
                      f"max |d| {float(err.max()):.2e} = {float(err.max()) / max(atol * 1e5, 1e-30):.2e} of max |logit|")
    print(f"{'FAIL: ' + ', '.join(fails) if fails else 'all checks passed'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
