"""Compression: pruning, quantization, calibration text, and the perturbation floor."""
