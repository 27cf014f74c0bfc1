"""The evaluation's own text helpers; normalisation, tokens and containment, which the item
builder shares, are in benchmark_illusion/textnorm.py."""

from __future__ import annotations


def first_line(text: str) -> str:
    """Return the first line of `text` that is not blank, stripped ('' if there is none)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""
