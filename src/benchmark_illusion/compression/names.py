"""How compressed checkpoints are named: the parts of a checkpoint's path as the logs spell them,
the method names of the perturbed twins (compression/perturbation.py), of the replicates of a
calibrated method, and of the pipeline's positive and negative controls. Imports no torch: the
Snakefile's parse reads them.

Twins (the floors, docs/metrics.md "The floors"): <kind><seed>-<source method>, kind
  noise   size-matched: Gaussian noise of the source's relative Frobenius change per Linear
  damage  damage-matched: the same noise direction, scaled so that the twin's mean next-token KL
          divergence from the dense model on held-out text equals the source's
  mask    structure-matched: a random mask of the source's sparsity per Linear, its weights
          scaled down (not zeroed) until the damage equals the source's
Replicates: <method>-s<seed> is `method` calibrated on the windows of calibration seed <seed>
(pruning.seeds, quantization.seeds); the first seed of the list keeps the plain name.
Controls: `forbid` (positive: the dense weights, every decode forbidden each gold's first
token) and placebo-<source method> (negative: noise at the source's damage, evaluated as if it
were a compressed checkpoint; its floors are its source's twins).
"""

from __future__ import annotations

import re

from benchmark_illusion.compression.methods import NAMES, QUANT_METHODS
from benchmark_illusion.compression.structures import parse_grid, parse_structure
from benchmark_illusion.models.variants import STRUCTURE as VARIANT

PREFIX = "noise"
# the twin kinds, by the floor they give (docs/metrics.md): config controls.perturbation.match
TWIN_KINDS = {"size": "noise", "damage": "damage", "structure": "mask"}
KIND_OF_PREFIX = {v: k for k, v in TWIN_KINDS.items()}
# <prefix><seed>-<source method>; the seed is a non-negative integer without sign or leading zeros
METHOD_RE = re.compile(rf"^({'|'.join(TWIN_KINDS.values())})(0|[1-9][0-9]*)-(.+)$")
FORBID = "forbid"
PLACEBO = "placebo"
PLACEBO_RE = re.compile(rf"^{PLACEBO}-(.+)$")
# the seed of a placebo's noise: apart from the twins' seeds (controls.perturbation.seeds)
PLACEBO_SEED = 1_000_003
REPLICATE_RE = re.compile(r"^(.+)-s(0|[1-9][0-9]*)$")


def perturbed_method(seed: int, source: str, kind: str = "size") -> str:
    """The method name of the `kind` twin of a `source` checkpoint for `seed`:
    noise<seed>-<source> (size), damage<seed>-<source>, mask<seed>-<source>."""
    if seed < 0:
        raise ValueError(f"a perturbation seed is a non-negative integer, got {seed}")
    if kind not in TWIN_KINDS:
        raise ValueError(f"twin kind {kind!r}: one of {sorted(TWIN_KINDS)}")
    return f"{TWIN_KINDS[kind]}{int(seed)}-{source}"


def parse_twin(method: str) -> tuple[str, int, str] | None:
    """(kind, seed, source method) of a twin's method name; None for any other method."""
    m = METHOD_RE.match(method)
    return (KIND_OF_PREFIX[m.group(1)], int(m.group(2)), m.group(3)) if m else None


def parse_perturbed(method: str) -> tuple[int, str] | None:
    """(seed, source method) of a twin's method name, any kind; None for any other method."""
    t = parse_twin(method)
    return (t[1], t[2]) if t else None


def placebo_method(source: str) -> str:
    return f"{PLACEBO}-{source}"


def parse_placebo(method: str) -> str | None:
    """The source method of a placebo (negative control); None for any other method."""
    m = PLACEBO_RE.match(method)
    return m.group(1) if m else None


def replicate_method(method: str, seed: int, seeds: list[int]) -> str:
    """The name of `method`'s replicate for calibration seed `seed` of `seeds`: the first seed
    keeps the plain name, the others get -s<seed>."""
    return method if seed == seeds[0] else f"{method}-s{int(seed)}"


def parse_replicate(method: str, known: tuple[str, ...] = ()) -> tuple[str, int | None]:
    """(base method, seed) of a replicate's name; (method, None) for a first replicate or any
    other name. With `known`, only names whose base is one of them count as replicates."""
    m = REPLICATE_RE.match(method)
    if m and (not known or m.group(1) in known):
        return m.group(1), int(m.group(2))
    return method, None


def is_control(method: str) -> bool:
    """A twin, a placebo or the positive control: a checkpoint the figures show as a floor or a
    control of another, not as a method of its own."""
    return (
        method == FORBID or parse_perturbed(method) is not None or parse_placebo(method) is not None
    )


def describe_checkpoint(method: str, structure: str) -> tuple[str, int | None]:
    """(structure as the logs spell it, bits per weight or None) of a checkpoint path's parts:
    pruned '2of4' -> ('2:4', None); quantized 'int4-g128' -> ('int4-g128', 4); dense 'none'; a
    perturbed twin (noise0-gptq) or a placebo its source's structure and no bits (its weights
    are dense); a variant made elsewhere 'variant' and no bits (they are measured: the
    `variants` table)."""
    twin = parse_perturbed(method)
    if twin is not None:
        return describe_checkpoint(twin[1], structure)[0], None
    placebo = parse_placebo(method)
    if placebo is not None:
        return describe_checkpoint(placebo, structure)[0], None
    base, _ = parse_replicate(method, NAMES)
    if base in QUANT_METHODS:
        grid = parse_grid(structure)
        return str(grid), grid.bits
    if structure in ("none", VARIANT):  # dense; a variant made elsewhere (its bits: `variants`)
        return structure, None
    return str(parse_structure(structure)), None
