"""Calibration windows: held apart from evaluated passages, seeded, and sized or refused."""

from __future__ import annotations

import polars as pl
import pytest

from benchmark_illusion.compression.calibration import (
    CalibrationError,
    heldout_passages,
    make_windows,
    text_file_documents,
)


def test_heldout_passages_exclude_every_passage_a_selected_item_uses(tmp_path):
    items = pl.DataFrame({"item_id": ["a1", "a2", "b1", "c1"], "context": ["A", "A", "B", "C"]})
    items.write_parquet(tmp_path / "items.parquet")
    pl.DataFrame({"item_id": ["a2"]}).write_parquet(tmp_path / "sel.parquet")
    # a1 is not selected, but its passage A is (through a2): it must not be calibration text.
    assert heldout_passages([tmp_path / "items.parquet"], [tmp_path / "sel.parquet"]) == ["B", "C"]


def test_windows_are_seeded_and_sized(bundled_tokenizer):
    docs = [
        f"Document number {i} talks about the river {i * 7} and its bridges." for i in range(60)
    ]
    a = make_windows(docs, bundled_tokenizer, 5, 16, seed=3)
    b = make_windows(docs, bundled_tokenizer, 5, 16, seed=3)
    c = make_windows(docs, bundled_tokenizer, 5, 16, seed=4)
    assert tuple(a.shape) == (5, 16) and a.equal(b) and not a.equal(c)
    # Windows do not overlap: no window repeats another.
    assert len({tuple(r) for r in a.tolist()}) == 5


def test_the_damage_text_is_no_calibration_window_of_any_replicate(bundled_tokenizer):
    docs = [
        f"Document number {i} talks about the river {i * 7} and its bridges." for i in range(60)
    ]
    kw = dict(seed=3, damage_windows=4)
    held = make_windows(docs, bundled_tokenizer, 5, 16, role="damage", **kw)
    assert tuple(held.shape) == (4, 16)
    held_rows = {tuple(r) for r in held.tolist()}
    draws = [make_windows(docs, bundled_tokenizer, 5, 16, draw_seed=s, **kw) for s in (3, 8, 9)]
    for d in draws:
        assert not held_rows & {tuple(r) for r in d.tolist()}
    # replicates draw other windows of the same stream; the same seed draws the same ones
    assert not draws[1].equal(draws[2])
    assert draws[0].equal(make_windows(docs, bundled_tokenizer, 5, 16, draw_seed=3, **kw))
    # the damage text does not depend on the replicate's seed
    assert held.equal(
        make_windows(docs, bundled_tokenizer, 5, 16, role="damage", draw_seed=9, **kw)
    )


def test_too_little_text_is_refused_with_both_numbers(bundled_tokenizer):
    with pytest.raises(
        CalibrationError,
        match=r"needs \(10 \+ 2 held out for the damage measure\) x 64 = 768 tokens but the "
        r"source has \d+",
    ):
        make_windows(["a short text"], bundled_tokenizer, 10, 64, seed=0, damage_windows=2)
    with pytest.raises(CalibrationError, match="no text"):
        make_windows([], bundled_tokenizer, 1, 8, seed=0)


def test_text_files_split_on_blank_lines(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("first doc\nline two\n\n\nsecond doc\n")
    assert text_file_documents([f]) == ["first doc\nline two", "second doc"]
    with pytest.raises(CalibrationError, match="not found"):
        text_file_documents([tmp_path / "missing.txt"])


def test_c4_hub_loader_reads_a_local_folder_laid_out_like_the_hub(tmp_path, monkeypatch):
    """The real c4_hub code path (datasets.load_dataset with the shard's data_files, streamed),
    pointed at a local folder with the hub repository's layout instead of allenai/c4."""
    import gzip
    import json

    from benchmark_illusion.compression.calibration import C4_DEFAULT, c4_documents

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    shard = tmp_path / "c4" / C4_DEFAULT["data_files"]
    shard.parent.mkdir(parents=True)
    with gzip.open(shard, "wt") as f:
        for i in range(5):
            f.write(
                json.dumps({"text": f"web page {i}", "timestamp": "2019", "url": f"u{i}"}) + "\n"
            )
    docs = c4_documents({"hub_id": str(tmp_path / "c4")}, max_docs=3)
    assert docs == ["web page 0", "web page 1", "web page 2"]


def test_c4_hub_without_network_names_the_alternatives(tmp_path):
    from benchmark_illusion.compression.calibration import c4_documents

    with pytest.raises(CalibrationError, match="text_files or heldout_items"):
        c4_documents({"hub_id": str(tmp_path / "no-such-dataset")}, max_docs=3)
