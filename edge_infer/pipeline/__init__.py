"""Camera / video pipelines: sources -> preprocess -> inference -> postprocess -> sinks,
one thread per stage joined by bounded queues (depth 3).

>>> from edge_infer.pipeline import Pipeline                         # doctest: +SKIP
>>> stats = Pipeline("model.eim", source=0, postprocess="classify:3",
...                  sinks=["-"]).run()                              # Ctrl-C stops cleanly

OpenCV (the ``vision`` extra) is needed only for cameras, video files, streams, image files,
annotation and windows; it is imported when first used.
"""
from .pipeline import STAGES, FrameItem, Pipeline, run_stream
from .postprocess import (Classify, Detect, Raw, Segment, batched_nms, box_iou, decode_ssd, decode_yolo,
                          load_labels, make_postprocess, nms, result_to_json)
from .preprocess import Preprocessor, RecipeError, load_recipe, preprocess, recipe_for_input, to_frame_coords
from .sinks import (CallbackSink, CollectSink, JsonLinesSink, NullSink, Sink, VideoFileSink, WindowSink,
                    annotate, open_sink)
from .sources import (ImageFolderSource, Picamera2Source, Source, SourceError, SyntheticSource, VideoSource,
                      open_source)

__all__ = ["Pipeline", "FrameItem", "STAGES", "run_stream",
           "Source", "VideoSource", "Picamera2Source", "ImageFolderSource", "SyntheticSource", "SourceError", "open_source",
           "Preprocessor", "RecipeError", "load_recipe", "preprocess", "recipe_for_input", "to_frame_coords",
           "Classify", "Detect", "Segment", "Raw", "make_postprocess", "load_labels", "nms", "batched_nms",
           "box_iou", "decode_yolo", "decode_ssd", "result_to_json",
           "Sink", "JsonLinesSink", "VideoFileSink", "WindowSink", "CollectSink", "CallbackSink", "NullSink",
           "open_sink", "annotate"]
