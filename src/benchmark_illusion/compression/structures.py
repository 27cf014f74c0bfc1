"""How a compressed checkpoint's structure is spelled, without torch: the N:M sparsity structure
of a pruned checkpoint ('unstructured', '2:4', path form '2of4') and the grid of a quantized one
('int4-g128', 'int8-pc-sym').

Kept apart from the pruning and quantization code (which import torch) so that parsing the
Snakefile and checking a config stay light: every Snakemake process, each SLURM job's two
included, parses them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NM = re.compile(r"^([1-9][0-9]*):([1-9][0-9]*)$")


@dataclass(frozen=True)
class Structure:
    """A sparsity structure: unstructured (n = m = 0) or N:M."""

    n: int = 0
    m: int = 0

    @property
    def is_nm(self) -> bool:
        return self.m > 0

    @property
    def sparsity(self) -> float | None:
        """The sparsity an N:M pattern implies; None when unstructured."""
        return self.n / self.m if self.is_nm else None

    def __str__(self) -> str:
        return f"{self.n}:{self.m}" if self.is_nm else "unstructured"

    @property
    def path(self) -> str:
        """Spelling used in file paths (no colon): 'unstructured', '2of4'."""
        return f"{self.n}of{self.m}" if self.is_nm else "unstructured"


def parse_structure(text: str) -> Structure:
    """'unstructured', 'N:M' or the path form 'NofM' -> Structure; ValueError otherwise."""
    if text in ("unstructured", "none", "dense"):
        return Structure()
    m = _NM.match(text.replace("of", ":"))
    if not m or not 0 < int(m.group(1)) < int(m.group(2)):
        raise ValueError(
            f"structure {text!r} is neither 'unstructured' nor N:M with 0 < N < M (e.g. '2:4')"
        )
    return Structure(int(m.group(1)), int(m.group(2)))


BITS = (2, 3, 4, 8)
# How a grid is spelled in checkpoint paths and in the logs' `structure` column:
# int<bits>-g<group_size> or int<bits>-pc (per channel), with -sym when symmetric.
STRUCTURE_PATTERN = r"int[0-9]+-(?:g[0-9]+|pc)(?:-sym)?"


@dataclass(frozen=True)
class Grid:
    """bits per weight; group_size input columns per grid (-1: one grid per output row);
    symmetric or asymmetric."""

    bits: int = 4
    group_size: int = 128
    symmetric: bool = False

    def __post_init__(self):
        if self.bits not in BITS:
            raise ValueError(f"bits must be one of {BITS}, got {self.bits}")
        if self.group_size != -1 and self.group_size < 1:
            raise ValueError(f"group_size must be -1 (per channel) or >= 1, got {self.group_size}")

    @property
    def maxq(self) -> int:
        return 2**self.bits - 1

    def width(self, cols: int) -> int:
        """Columns per group of a weight with `cols` input columns."""
        return cols if self.group_size == -1 else min(self.group_size, cols)

    def __str__(self) -> str:
        group = "pc" if self.group_size == -1 else f"g{self.group_size}"
        return f"int{self.bits}-{group}" + ("-sym" if self.symmetric else "")


def parse_grid(name: str) -> Grid:
    """The Grid a structure name spells: 'int4-g128' (4 bits, groups of 128 columns,
    asymmetric), 'int8-pc-sym' (8 bits, one symmetric grid per output row); str(grid) inverts it."""
    m = re.fullmatch(r"int([0-9]+)-(?:g([0-9]+)|(pc))(-sym)?", name)
    if not m:
        raise ValueError(
            f"not a quantization structure: {name!r} (expected int<bits>-g<group_size> or "
            "int<bits>-pc, optionally with -sym, e.g. int4-g128)"
        )
    return Grid(bits=int(m[1]), group_size=-1 if m[3] else int(m[2]), symmetric=m[4] is not None)
