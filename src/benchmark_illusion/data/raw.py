"""The raw QA schema every dataset loader returns, the source names, DatasetError, and the
local file a dataset config points at."""

from __future__ import annotations

import os

import polars as pl

RAW_SCHEMA = pl.Schema(
    {
        "id": pl.Utf8,
        "lang": pl.Utf8,
        "title": pl.Utf8,
        "context": pl.Utf8,
        "question": pl.Utf8,
        "answers": pl.List(pl.Utf8),
        "answer_starts": pl.List(pl.Int64),
    }
)

# Answer offset used when a local source gives no character offset for an answer.
MISSING_START = -1

HUB_SOURCES = ("xquad_hub", "tydiqa_hub")
LOCAL_SOURCES = ("squad_json", "jsonl", "parquet")
SOURCES = HUB_SOURCES + LOCAL_SOURCES

# Keys every flat (jsonl / parquet) row must carry; title, answer_starts and lang are optional.
FLAT_REQUIRED = ("id", "context", "question", "answers")


class DatasetError(ValueError):
    """A dataset source could not be read as QA data; the message names the source and the
    problem."""


def raw_path_for(cfg: dict, lang: str) -> str | None:
    """The local file `load_raw(cfg, lang)` reads, or None for hub sources.

    The path is the config's `path` with '{lang}' replaced and '~' expanded; the file
    need not exist yet (Snakemake uses this as a rule input, so edits retrigger).
    """
    source = source_name(cfg)
    if source in HUB_SOURCES:
        return None
    template = cfg.get("path")
    if not isinstance(template, (str, os.PathLike)) or not str(template):
        raise DatasetError(
            f"dataset config with source {source!r} needs a 'path' (got {template!r})"
        )
    # str.replace rather than str.format: other braces in a path must stay literal.
    return os.path.expanduser(str(template).replace("{lang}", lang))


def source_name(cfg: dict) -> str:
    """The config's source name, checked against SOURCES."""
    source = cfg.get("source")
    if source not in SOURCES:
        raise DatasetError(
            f"unknown dataset source {source!r}; expected one of {', '.join(SOURCES)}"
        )
    return source
