"""The rules before any model is loaded: download a dataset, build its items, select the items
the dense model answers. Torch-free (polars only), so that these jobs start in a fraction of a
second; the model-bound steps are in evaluation/steps.py and compression/steps.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import polars as pl

from benchmark_illusion.data.items import build_items, validate_rows
from benchmark_illusion.data.loaders import load_raw
from benchmark_illusion.io import write_json, write_parquet

log = logging.getLogger("benchmark_illusion")


def seeded_order(ids: list[str], seed: int) -> list[str]:
    """`ids` in a seeded pseudo-random order that does not depend on which other ids exist.

    Each id gets a key sha256(seed, id); adding an item never reshuffles the others, so a
    capped subset only grows when the pool grows.
    """
    return sorted(ids, key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())


def download_dataset(cfg: dict, lang: str, out: str | Path) -> dict:
    """Load one language of a dataset (hub or local) and store it in the raw Parquet schema."""
    df = load_raw(cfg, lang)
    write_parquet(df, out)
    info = {"source": cfg["source"], "lang": lang, "rows": df.height}
    log.info("download_dataset %s", json.dumps(info))
    return info


def build_items_file(
    raw: str | Path,
    out_items: str | Path,
    out_report: str | Path,
    seed: int,
    extractive: bool,
    dataset: str,
    distractors: str = "passage",
) -> dict:
    """Validate raw rows, build items (distractors, option order, exemplar), report bad rows.

    The report (JSON) has the validation counts per reason ('validation') and the item
    counts ('items', with 'too_few_distractors'); the aggregation reads both into the
    `item_drops` table.
    """
    df = pl.read_parquet(raw)
    good, report = validate_rows(df, extractive=extractive)
    items, item_report = build_items(good, seed=seed, distractors=distractors)
    items = items.with_columns(pl.lit(dataset).alias("dataset"))
    report = {"validation": report, "items": item_report, "dataset": dataset, "seed": seed}
    for reason, n in report["validation"].items():
        if reason not in ("n_input", "n_valid", "examples") and n:
            log.warning(
                "build_items %s: %d rows dropped: %s (e.g. %s)",
                raw,
                n,
                reason,
                report["validation"].get("examples", {}).get(reason, [])[:3],
            )
    if item_report.get("too_few_distractors"):
        log.warning(
            "build_items %s: %d items dropped: too few distractors "
            "(items.distractors: %s; e.g. %s)",
            raw,
            item_report["too_few_distractors"],
            distractors,
            item_report["examples"]["too_few_distractors"][:3],
        )
    if items.height == 0:
        raise ValueError(f"{raw}: no usable items (report: {json.dumps(report, default=str)})")
    write_parquet(items, out_items)
    write_json(report, out_report)
    log.info("build_items %s: %d items from %d rows", raw, items.height, df.height)
    return report


def select_items_file(
    pool: str | Path, items_path: str | Path, out: str | Path, cap: int, seed: int
) -> dict:
    """Keep the items the dense model answers correctly in both `open` and `mc`, capped (seeded)."""
    logs = pl.read_parquet(pool)
    items = pl.read_parquet(items_path)
    per_item = (
        logs.filter(
            pl.col("format").is_in(["open", "mc"]) & pl.col("decode").is_in(["greedy", "loglik"])
        )
        .group_by("item_id")
        .agg(
            pl.col("correct").filter(pl.col("format") == "open").first().alias("open"),
            pl.col("correct").filter(pl.col("format") == "mc").first().alias("mc"),
        )
    )
    missing = {"open", "mc"} - set(logs["format"].unique().to_list())
    if missing:
        raise ValueError(
            f"{pool}: selection needs the formats {sorted(missing)} in the dense evaluation "
            f"(evaluation.formats must include open and mc)"
        )
    both = per_item.filter(pl.col("open") & pl.col("mc"))["item_id"].to_list()
    kept = seeded_order(both, seed)[:cap]
    selected = items.filter(pl.col("item_id").is_in(kept)).sort("item_id")
    write_parquet(selected, out)
    info = {
        "pool": per_item.height,
        "open_correct": int(per_item["open"].sum()),
        "mc_correct": int(per_item["mc"].sum()),
        "both": len(both),
        "kept": selected.height,
        "cap": cap,
    }
    log.info("select_items %s: %s", out, json.dumps(info))
    if selected.height == 0:
        log.warning(
            "select_items %s: no item is answered correctly by the dense model in both open and mc",
            out,
        )
    return info
