#!/usr/bin/env python3
"""Live object detector: camera -> letterbox -> detector -> boxes (NMS) -> annotated video / JSON.

On the Raspberry Pi (see README.md), with a YOLO model exported to ONNX and converted:

    python camera_detect.py --model ~/models/yolov8n.eim --kind yolov8 --labels ~/models/coco.txt \\
        --source 0 --sink ~/detections.jsonl --metrics-port 9100
    python camera_detect.py ... --kind ssd --anchors anchors.npy    # SSD-style outputs

Anywhere, without a camera or a trained detector (a tiny hand-built bright-square detector on
synthetic frames; needs the convert extra to build it):

    python camera_detect.py --demo --source synthetic:squares:200 --sink out.mp4

Uses the public edge_infer API only; Ctrl-C or SIGTERM stop cleanly.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import edge_infer
from edge_infer.monitor import MetricsServer, Registry, Sampler, TerminalView
from edge_infer.pipeline import CallbackSink, Detect, Pipeline, open_source

LETTERBOX = {"resize": "letterbox", "pad_value": 114, "color": "rgb", "scale": 1 / 255}


def demo_model(workdir: str) -> str:
    """Build and convert the hand-made detector of demo_detector.py (needs onnx)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from demo_detector import build_demo_detector
    onnx_path = build_demo_detector(os.path.join(workdir, "demo_detector.onnx"))
    out = os.path.join(workdir, "demo_detector.eim")
    edge_infer.convert(onnx_path, out)
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Live object detector (edge_infer)")
    ap.add_argument("--model", help="converted detector (.eim)")
    ap.add_argument("--demo", action="store_true", help="use the hand-built bright-square detector")
    ap.add_argument("--kind", default="yolo", choices=["yolo", "yolov5", "yolov8", "ssd"],
                    help="output format (yolo: v8 if transposed, else v5)")
    ap.add_argument("--source", default="0", help="camera index (0), picam, video file, folder, rtsp:// URL, "
                    "or synthetic[:PATTERN[:COUNT[:FPS]]]")
    ap.add_argument("--labels", help="labels file, one per line")
    ap.add_argument("--recipe", help="preprocessing recipe (default: letterbox, RGB, /255)")
    ap.add_argument("--conf", type=float, default=0.25, help="score threshold")
    ap.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold")
    ap.add_argument("--max-detections", type=int, default=100)
    ap.add_argument("--anchors", help="SSD anchors (.npy, [A, 4] as cx, cy, w, h)")
    ap.add_argument("--sink", action="append", help="- (JSON lines), FILE.jsonl, FILE.mp4, window (repeatable); "
                    "default: one text line per frame")
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--max-frames", type=int)
    ap.add_argument("--metrics-port", type=int)
    ap.add_argument("--metrics-host", default="127.0.0.1")
    ap.add_argument("--metrics-jsonl")
    ap.add_argument("--monitor", action="store_true")
    args = ap.parse_args(argv)
    if not args.model and not args.demo:
        ap.error("give --model DETECTOR.eim (or --demo)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        recipe = args.recipe or LETTERBOX
        labels, iou, conf = args.labels, args.iou, args.conf
        if args.demo:
            model = demo_model(tmp)
            recipe = args.recipe or {**LETTERBOX, "pad_value": 0}
            labels = labels or ["bright"]
            iou = min(iou, 0.3)        # its neighbouring cells overlap
            conf = max(conf, 0.5)
        else:
            model = args.model
        rt = edge_infer.Runtime(model, threads=args.threads)
        src_kw = {}
        if args.source.isdigit() or args.source.startswith(("picam", "/dev/video")):
            src_kw = {"width": args.width, "height": args.height}
        source = open_source(args.source, **src_kw)
        post = Detect(args.kind, labels=labels, conf_threshold=conf, iou_threshold=iou,
                      max_detections=args.max_detections, anchors=args.anchors)

        def show(frame, result):
            dets = result["detections"]
            text = ", ".join(f"{d['label']} {d['score']:.2f} @{[int(v) for v in d['box']]}" for d in dets[:5])
            print(f"frame {frame.index:6d}  {len(dets)} object(s)  {text}  (model {frame.inference * 1e3:.1f} ms, "
                  f"capture to result {frame.latency * 1e3:.1f} ms)", flush=True)

        registry = Registry()
        pipe = Pipeline(rt, source, preprocess=recipe, postprocess=post, sinks=args.sink or [CallbackSink(show)],
                        registry=registry, max_frames=args.max_frames)
        view = TerminalView(registry) if args.monitor else None
        sampler = Sampler(registry, interval=0.1, runtime=rt, jsonl=args.metrics_jsonl, view=view).start()
        server = MetricsServer(registry, args.metrics_port, args.metrics_host).start() \
            if args.metrics_port is not None else None
        if server:
            print(f"metrics: {server.url}", file=sys.stderr)
        try:
            stats = pipe.run()
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
