"""The YOLO-style shapes detector fixture: see README.md here; ``scenes`` draws its scenes."""
