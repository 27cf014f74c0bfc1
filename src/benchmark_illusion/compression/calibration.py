"""Calibration windows for pruning: seeded token windows from text held apart from evaluation.

Sources (config `calibration.source`):
  heldout_items  passages of items that no model evaluates: items not selected for the model,
                 minus every passage that a selected item uses (the embedded default)
  text_files     local UTF-8 text files (one document per file, or per blank-line paragraph)
  c4_hub         `allenai/c4`, English, the first train shard (the paper-scale default)

Documents are shuffled (seeded), tokenised, joined with the tokenizer's EOS token into one
stream, and cut into non-overlapping windows of `seq_len` tokens; `n_windows` of those are
drawn (seeded). A source with fewer tokens than n_windows x seq_len is an error naming both.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import torch

C4_DEFAULT = {
    "hub_id": "allenai/c4",
    "data_files": "en/c4-train.00000-of-01024.json.gz",
    "split": "train",
}


class CalibrationError(ValueError):
    """The calibration source cannot provide what the config asks for."""


def heldout_passages(item_files: list[str | Path], selected_files: list[str | Path]) -> list[str]:
    """Passages of items never evaluated after selection, excluding any passage a selected item
    uses."""
    items = pl.concat([pl.read_parquet(f).select("item_id", "context") for f in item_files])
    selected_ids = set()
    for f in selected_files:
        selected_ids |= set(pl.read_parquet(f, columns=["item_id"])["item_id"].to_list())
    used = set(items.filter(pl.col("item_id").is_in(list(selected_ids)))["context"].to_list())
    return sorted(set(items["context"].to_list()) - used)


def text_file_documents(paths: list[str | Path]) -> list[str]:
    """Documents from local text files: each blank-line-separated paragraph is one document."""
    docs = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise CalibrationError(f"calibration text file not found: {path}")
        docs += [d.strip() for d in path.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    return docs


def c4_documents(cfg: dict, max_docs: int) -> list[str]:
    """The first `max_docs` documents of the configured C4 shard (hub)."""
    import datasets

    opts = {**C4_DEFAULT, **{k: v for k, v in cfg.items() if k in C4_DEFAULT or k == "revision"}}
    try:
        ds = datasets.load_dataset(
            opts["hub_id"],
            data_files={opts["split"]: opts["data_files"]},
            split=opts["split"],
            revision=opts.get("revision"),
            streaming=True,
        )
    except Exception as e:  # noqa: BLE001 -- network and hub errors come in many types
        raise CalibrationError(
            f"calibration source c4_hub: could not load {opts['hub_id']} "
            f"({opts['data_files']}): {e}. "
            "Without hub access use calibration.source: text_files or heldout_items."
        ) from e
    # the first max_docs rows of the stream: range() is meant to run out first
    return [row["text"] for row, _ in zip(ds, range(max_docs), strict=False)]


def make_windows(
    docs: list[str],
    tokenizer,
    n_windows: int,
    seq_len: int,
    seed: int,
    *,
    draw_seed: int | None = None,
    damage_windows: int = 0,
    role: str = "calibration",
) -> torch.Tensor:
    """[n, seq_len] token ids cut from the shuffled, EOS-joined documents.

    The documents are shuffled and the windows' slots numbered with `seed` (the config's seed),
    so every draw sees the same stream. First `damage_windows` slots are drawn (seed + 2) and
    held apart: the held-out text the damage of a checkpoint is measured on (role 'damage'
    returns them). The calibration windows (role 'calibration') are n_windows of the other
    slots, drawn with draw_seed + 1 (draw_seed: a replicate's calibration seed, default
    `seed`), so no replicate calibrates on the damage text.
    """
    if not docs:
        raise CalibrationError("the calibration source has no text")
    if role not in ("calibration", "damage"):
        raise ValueError(f"role {role!r}: calibration or damage")
    order = list(docs)
    random.Random(seed).shuffle(order)
    sep = tokenizer.eos_token_id
    stream: list[int] = []
    need = (n_windows + damage_windows) * seq_len
    for doc in order:
        stream += tokenizer(doc, add_special_tokens=False)["input_ids"]
        if sep is not None:
            stream.append(sep)
    if len(stream) < need:
        raise CalibrationError(
            f"calibration needs ({n_windows} + {damage_windows} held out for the damage measure) "
            f"x {seq_len} = {need} tokens but the source has {len(stream)} ({len(docs)} "
            "documents); lower calibration.n_windows, calibration.damage_windows or "
            "calibration.seq_len, or add text"
        )
    slots = len(stream) // seq_len
    held = sorted(random.Random(seed + 2).sample(range(slots), damage_windows))
    if role == "damage":
        chosen = held
    else:
        rest = [s for s in range(slots) if s not in set(held)]
        draw = seed if draw_seed is None else draw_seed
        chosen = sorted(random.Random(draw + 1).sample(rest, n_windows))
    return torch.tensor([stream[s * seq_len : (s + 1) * seq_len] for s in chosen], dtype=torch.long)
