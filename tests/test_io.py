"""Atomic writes: an interrupted write leaves the previous file (or nothing), never a half file."""

from __future__ import annotations

import polars as pl
import pytest

from benchmark_illusion.io import atomic_path, stable_hash, write_parquet


def test_failed_write_keeps_the_previous_file_and_leaves_no_temp(tmp_path):
    out = tmp_path / "x.parquet"
    write_parquet(pl.DataFrame({"a": [1, 2]}), out)
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_bytes(b"half a file")
            raise RuntimeError("killed")
    assert pl.read_parquet(out)["a"].to_list() == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["x.parquet"]


def test_failed_first_write_leaves_nothing(tmp_path):
    out = tmp_path / "sub" / "y.parquet"
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_bytes(b"partial")
            raise RuntimeError("killed")
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_directory_outputs_are_replaced_whole(tmp_path):
    out = tmp_path / "model"
    with atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "a").write_text("1")
    with atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["b"]


def test_stable_hash_ignores_key_order():
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})
    assert stable_hash({"a": 1}) != stable_hash({"a": 2})


def test_a_temporary_left_by_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    """SIGKILL skips the cleanup of atomic_path; the next write of the same file removes it."""
    target = tmp_path / "out.parquet"
    stale = tmp_path / ".out.parquet.abc123.parquet.tmp"
    stale.write_text("half a file")
    other = tmp_path / ".other.parquet.abc123.parquet.tmp"  # another target's temporary stays
    other.write_text("x")
    write_parquet(pl.DataFrame({"a": [1]}), target)
    assert pl.read_parquet(target)["a"].to_list() == [1]
    assert not stale.exists() and other.exists()
