"""How compressed checkpoints are named: the parts of a checkpoint's path as the logs spell them,
and the method names of the perturbed twins (compression/perturbation.py). Imports no torch:
the Snakefile's parse reads them.
"""

from __future__ import annotations

import re

from benchmark_illusion.compression.structures import METHODS as QUANT_METHODS
from benchmark_illusion.compression.structures import parse_grid, parse_structure
from benchmark_illusion.models.variants import STRUCTURE as VARIANT

PREFIX = "noise"
# noise<seed>-<source method>; the seed is a non-negative integer without a sign or leading zeros
METHOD_RE = re.compile(rf"^{PREFIX}(0|[1-9][0-9]*)-(.+)$")


def perturbed_method(seed: int, source: str) -> str:
    """The method name of the twin of a `source` checkpoint for `seed`: noise<seed>-<source>."""
    if seed < 0:
        raise ValueError(f"a perturbation seed is a non-negative integer, got {seed}")
    return f"{PREFIX}{int(seed)}-{source}"


def parse_perturbed(method: str) -> tuple[int, str] | None:
    """(seed, source method) of a twin's method name; None for any other method."""
    m = METHOD_RE.match(method)
    return (int(m.group(1)), m.group(2)) if m else None


def describe_checkpoint(method: str, structure: str) -> tuple[str, int | None]:
    """(structure as the logs spell it, bits per weight or None) of a checkpoint path's parts:
    pruned '2of4' -> ('2:4', None); quantized 'int4-g128' -> ('int4-g128', 4); dense 'none'; a
    perturbed twin (noise0-gptq) its source's structure and no bits (its weights are dense); a
    variant made elsewhere 'variant' and no bits (they are measured: the `variants` table)."""
    twin = parse_perturbed(method)
    if twin is not None:
        return describe_checkpoint(twin[1], structure)[0], None
    if method in QUANT_METHODS:
        grid = parse_grid(structure)
        return str(grid), grid.bits
    if structure in ("none", VARIANT):  # dense; a variant made elsewhere (its bits: `variants`)
        return structure, None
    return str(parse_structure(structure)), None
