"""Atomic file writes: an interrupted job never leaves a file that looks complete."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    Works for files and directories. The temporary name starts with '.' and ends with
    '.tmp' so that no glob for finished outputs can match it. A temporary of the same target
    left by a killed writer (SIGKILL skips the cleanup below) is removed first: one Snakemake
    job owns each output, so no other writer can be using it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*{glob.escape(suffix)}.tmp"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f"{suffix}.tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)
    tmp = Path(tmp)
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_parquet(df: pl.DataFrame, path: str | os.PathLike) -> None:
    """Write `df` as zstd Parquet atomically."""
    with atomic_path(path, ".parquet") as tmp:
        df.write_parquet(tmp, compression="zstd")


def write_json(obj, path: str | os.PathLike) -> None:
    """Write `obj` as indented, key-sorted JSON atomically."""
    with atomic_path(path, ".json") as tmp:
        tmp.write_text(
            json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
        )


def parquet_list(paths: Iterable[str | os.PathLike]) -> str:
    """The paths as a DuckDB list literal of strings, for read_parquet([...]) in SQL text."""
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def stable_hash(obj, n: int = 16) -> str:
    """Short hex hash of a JSON-serialisable object, independent of dict order."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:n]
