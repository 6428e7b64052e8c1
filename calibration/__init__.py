"""Calibration data (data): preprocessing recipes (recipes/*.json) and sample images (images/)."""
