#!/usr/bin/env python3
"""Live camera classifier: camera -> preprocessing -> model -> top-k labels, with metrics.

On the Raspberry Pi (see README.md):

    python camera_classify.py --model ~/models/mobilenetv2.eim --labels ~/models/labels.txt \\
        --recipe ~/models/imagenet.json --source 0            # USB webcam (V4L2)
    python camera_classify.py ... --source picam               # Pi camera module (Picamera2)

Anywhere, without a camera (the bundled digits CNN, converted on the fly; needs the convert extra):

    python camera_classify.py --model digits --source synthetic:digits:200
    python camera_classify.py --model digits --source video.avi --sink out.mp4

Prints one line per frame (or writes the --sink outputs), serves Prometheus metrics with
--metrics-port, stops cleanly on Ctrl-C or SIGTERM (systemd). Uses the public edge_infer API only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import edge_infer
from edge_infer.monitor import MetricsServer, Registry, Sampler, TerminalView
from edge_infer.pipeline import CallbackSink, Classify, Pipeline, open_source

#: how the bundled digits CNN wants its 8x8 input: the middle of the frame, area-averaged
DIGITS_RECIPE = {"name": "digits", "resize": "center_crop", "interpolation": "area", "color": "gray",
                 "scale": 1 / 255}


def bundled_digits_model(workdir: str) -> str:
    """Convert the bundled digits CNN (needs the ``convert`` extra, i.e. onnx)."""
    from edge_infer.data import digits_model_path
    out = os.path.join(workdir, "digits.eim")
    edge_infer.convert(digits_model_path(), out)
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Live camera classifier (edge_infer)")
    ap.add_argument("--model", required=True, help="converted model (.eim), or 'digits' for the bundled demo CNN")
    ap.add_argument("--source", default="0", help="camera index (0), picam, video file, folder, rtsp:// URL, "
                    "or synthetic[:PATTERN[:COUNT[:FPS]]] (default 0)")
    ap.add_argument("--labels", help="labels file, one per line")
    ap.add_argument("--recipe", help="preprocessing recipe: JSON file, inline JSON, or calibration/ name")
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--min-score", type=float, default=0.0, help="print a frame only when top-1 reaches this")
    ap.add_argument("--sink", action="append", help="- (JSON lines), FILE.jsonl, FILE.mp4, window (repeatable); "
                    "default: one text line per frame")
    ap.add_argument("--width", type=int, default=640, help="camera capture width")
    ap.add_argument("--height", type=int, default=480, help="camera capture height")
    ap.add_argument("--threads", type=int, help="inference threads (default: the target profile's, else all cores)")
    ap.add_argument("--max-frames", type=int)
    ap.add_argument("--metrics-port", type=int, help="Prometheus endpoint on this port (127.0.0.1)")
    ap.add_argument("--metrics-host", default="127.0.0.1")
    ap.add_argument("--metrics-jsonl", help="append a metrics snapshot every second to this file")
    ap.add_argument("--monitor", action="store_true", help="live metrics line on stderr")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model, recipe = args.model, args.recipe
        if model == "digits":
            model, recipe = bundled_digits_model(tmp), recipe or DIGITS_RECIPE
        rt = edge_infer.Runtime(model, threads=args.threads)
        src_kw = {}
        if args.source.isdigit() or args.source.startswith(("picam", "/dev/video")):
            src_kw = {"width": args.width, "height": args.height}
        source = open_source(args.source, **src_kw)

        def show(frame, result):
            top = result["top"]
            if top and top[0]["score"] >= args.min_score:
                text = "  ".join(f"{t['label']} {t['score']:.2f}" for t in top)
                print(f"frame {frame.index:6d}  {text}  (model {frame.inference * 1e3:.1f} ms, "
                      f"capture to result {frame.latency * 1e3:.1f} ms)", flush=True)

        registry = Registry()
        pipe = Pipeline(rt, source, preprocess=recipe, postprocess=Classify(args.top_k, labels=args.labels),
                        sinks=args.sink or [CallbackSink(show)], registry=registry, max_frames=args.max_frames)
        view = TerminalView(registry) if args.monitor else None
        sampler = Sampler(registry, interval=0.1, runtime=rt, jsonl=args.metrics_jsonl, view=view).start()
        server = MetricsServer(registry, args.metrics_port, args.metrics_host).start() \
            if args.metrics_port is not None else None
        if server:
            print(f"metrics: {server.url}", file=sys.stderr)
        try:
            stats = pipe.run()          # Ctrl-C / SIGTERM: clean stop
        finally:
            sampler.stop()
            if view:
                view.stop()
            if server:
                server.close()
        print(json.dumps(stats), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
