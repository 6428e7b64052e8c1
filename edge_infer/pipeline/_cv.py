"""Lazy OpenCV import: the runtime needs only numpy; camera, video and window I/O need
the ``vision`` extra (``pip install "edge-infer[vision]"``)."""
from __future__ import annotations

_cv2 = None
_tried = False


def optional_cv2():
    """The ``cv2`` module, or None when OpenCV is not installed."""
    global _cv2, _tried
    if not _tried:
        _tried = True
        try:
            import cv2  # noqa: F401
            _cv2 = cv2
        except ImportError:
            _cv2 = None
    return _cv2


def require_cv2(feature: str):
    """The ``cv2`` module; a clear ImportError naming ``feature`` when it is missing."""
    cv2 = optional_cv2()
    if cv2 is None:
        raise ImportError(f"{feature} needs OpenCV, which is not installed: "
                          f"pip install \"edge-infer[vision]\" (or opencv-python-headless)")
    return cv2
