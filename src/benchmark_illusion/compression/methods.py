"""The compression methods the pipeline runs itself: the one list of their names, what each does
(prune or quantize) and whether it reads calibration windows.

Every reader takes them from here: the pruning and quantization code, the checkpoint names, the
workflow's wildcard patterns and calibration inputs, the config checks, the names a variant made
elsewhere may not take; the config schema's enums must agree (tests/config/test_config.py checks).
Imports nothing: the Snakefile's parse reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    kind: str  # "prune" or "quantize"
    calibrated: bool  # reads calibration windows (activations or a Hessian of its inputs)


METHODS = (
    Method("magnitude", "prune", calibrated=False),
    Method("wanda", "prune", calibrated=True),
    Method("sparsegpt", "prune", calibrated=True),
    Method("rtn", "quantize", calibrated=False),
    Method("gptq", "quantize", calibrated=True),
)
BY_NAME = {m.name: m for m in METHODS}
NAMES = tuple(BY_NAME)
PRUNE_METHODS = tuple(m.name for m in METHODS if m.kind == "prune")
QUANT_METHODS = tuple(m.name for m in METHODS if m.kind == "quantize")
CALIBRATED = tuple(m.name for m in METHODS if m.calibrated)


def needs_calibration(method: str) -> bool:
    """Whether `method` (a base name, no replicate suffix) reads calibration windows."""
    return BY_NAME[method].calibrated


def is_quantization(method: str) -> bool:
    """Whether `method` (a base name) quantizes rather than prunes."""
    return BY_NAME[method].kind == "quantize"
