"""How long the aggregation (views + every metric table with bootstrap intervals) takes, and how
much memory it needs, from the smoke scale up to the paper's grid, on synthetic logs.

    .venv/bin/python benchmarks/aggregate_scale.py [--replicates 1000] \
        [--scales smoke,default,paper,10m]

Synthetic logs follow the real schema: per checkpoint x item an open, candidates and mc row; a
checkpoint loses a share of open answers that grows with sparsity, half of them stay right in
mc (MC-only), and those get 5 beams, 10 samples and a one-shot row, like the default recovery
settings. Each scale runs in a fresh process (peak RSS is per scale). Prints a markdown table
with the time and memory ratios against the smallest scale.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name: (models, checkpoints incl. dense, benchmarks, items per benchmark)
SCALES = {
    "smoke": (1, 7, 2, 10),
    "default": (1, 13, 3, 30),
    "paper": (
        3,
        19,
        21,
        200,
    ),  # 3 methods x (5 sparsities + 2:4) + dense; 9 TyDiQA + 12 XQuAD languages
    # the paper grid with every decode on every item (recovery scope all, as config/paper.yaml)
    # and 440 items per benchmark: 10 million log rows
    "10m": (3, 19, 21, 440),
}
SCOPE = {"10m": "all"}


def synthesize(
    out: Path, models: int, checkpoints: int, benchmarks: int, items: int, scope: str = "mc_only"
) -> tuple[list, list, list]:
    """Write synthetic logs (LOG_SCHEMA) and selections; return the file lists. Recovery rows
    (5 beams, 10 samples, one-shot) go to the MC-only items (scope mc_only) or to every item
    of every checkpoint (scope all)."""
    import numpy as np
    import polars as pl

    from benchmark_illusion.evaluation.schema import LOG_SCHEMA

    rng = np.random.default_rng(0)
    gen_files, sel_files, pool_files = [], [], []

    def rows(ids, fmt, decode, correct, repeat=1, **cols):
        n = len(ids)
        frame = {
            "item_id": np.repeat(ids, repeat),
            "format": [fmt] * (n * repeat),
            "decode": [decode] * (n * repeat),
            "sample": np.tile(np.arange(repeat), n),
            "correct": correct,
        }
        frame.update(cols)
        return pl.DataFrame(frame)

    for m in range(models):
        model = f"model{m}"
        for b in range(benchmarks):
            lang = f"l{b:02d}"
            ids = np.array([f"{lang}-{i:04d}" for i in range(items)])
            sel = out / "selected" / model / "d" / f"{lang}.parquet"
            sel.parent.mkdir(parents=True, exist_ok=True)
            pl.DataFrame(
                {
                    "item_id": ids,
                    "dataset": "d",
                    "lang": lang,
                    "options": [["a", "b", "c", "d"]] * items,
                    "gold_option": rng.integers(4, size=items),
                    "distractor_sources": [["answer", "span", "span"]] * items,
                    "distractors_in_passage": [True] * items,
                }
            ).write_parquet(sel)
            sel_files.append(str(sel))
            for c in range(checkpoints):
                method, sparsity = (
                    ("dense", 0.0)
                    if c == 0
                    else (("magnitude", "wanda", "sparsegpt")[c % 3], 0.3 + 0.1 * (c % 5))
                )
                lost = rng.random(items) < (0.0 if c == 0 else sparsity)
                mc_ok = ~lost | (rng.random(items) < 0.5)
                parts = [
                    rows(ids, "open", "greedy", ~lost, gold_rank=(1 + 20 * lost).astype(int)),
                    rows(ids, "candidates", "greedy", rng.random(items) < 0.6),
                    rows(ids, "mc", "loglik", mc_ok, correct_norm=mc_ok),
                ]
                rec = ids if scope == "all" else ids[lost & mc_ok]
                if len(rec):
                    k = len(rec)
                    parts += [
                        rows(rec, "open", "beam", rng.random(5 * k) < 0.2, repeat=5),
                        rows(
                            rec,
                            "open",
                            "sample",
                            rng.random(10 * k) < 0.2,
                            repeat=10,
                            answer_norm=[f"a{x}" for x in rng.integers(3, size=10 * k)],
                        ),
                        rows(rec, "oneshot", "greedy", rng.random(k) < 0.3),
                    ]
                df = pl.concat(parts, how="diagonal").with_columns(
                    model=pl.lit(model),
                    method=pl.lit(method),
                    structure=pl.lit("none" if c == 0 else "unstructured"),
                    sparsity=pl.lit(sparsity),
                    dataset=pl.lit("d"),
                    lang=pl.lit(lang),
                    seed=pl.lit(0),
                )
                df = df.select(
                    [
                        (pl.col(n) if n in df.columns else pl.lit(None)).cast(t).alias(n)
                        for n, t in LOG_SCHEMA.items()
                    ]
                )
                path = out / "generations" / model / f"c{c}" / f"{lang}.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                df.write_parquet(path)
                gen_files.append(str(path))
                if c == 0:
                    pool_files.append(str(path))
    return gen_files, sel_files, pool_files


def peak_rss_gib() -> float:
    """This process's peak RSS (VmHWM: ru_maxrss would start from the parent's peak at fork)."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    return kib / 2**20


def run_one(scale: str, replicates: int) -> dict:
    from benchmark_illusion.metrics.aggregate import MetricSettings
    from benchmark_illusion.metrics.steps import build_database

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        gen, sel, pool = synthesize(out, *SCALES[scale], scope=SCOPE.get(scale, "mc_only"))
        t_syn = time.perf_counter() - t0
        rss_before = peak_rss_gib()
        # the aggregation logs each SQL file's time: keep them
        files: dict[str, float] = {}

        class Keep(logging.Handler):
            def emit(self, record):
                if record.msg.startswith("ran %s"):
                    files[Path(record.args[0]).name] = round(record.args[1], 2)

        logger = logging.getLogger("benchmark_illusion")
        logger.setLevel(logging.INFO)
        logger.addHandler(Keep())
        t0 = time.perf_counter()
        build_database(
            out / "illusion.duckdb",
            generations=gen,
            selected=sel,
            pool=pool,
            sql_files=sorted(str(p) for p in (ROOT / "workflow/sql").glob("*.sql")),
            settings=MetricSettings(seed=1, bootstrap_replicates=replicates),
        )
        seconds = time.perf_counter() - t0
        size = (out / "illusion.duckdb").stat().st_size / 2**20
        import duckdb

        con = duckdb.connect(str(out / "illusion.duckdb"), read_only=True)
        n_rows = con.execute("SELECT count(*) FROM generations").fetchone()[0]
        # bootstrap_weights is a view that recomputes the draws: count them from their sizes
        n_weights = con.execute(
            "SELECT sum(n * replicates)::BIGINT FROM bootstrap_benchmarks"
        ).fetchone()[0]
        con.close()
    return dict(
        scale=scale,
        log_rows=n_rows,
        draws=n_weights,
        synth_s=t_syn,
        seconds=seconds,
        db_mib=size,
        rss_before_gib=rss_before,
        peak_rss_gib=peak_rss_gib(),
        sql_seconds=files,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--scales", default="smoke,default,paper")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.replicates)))
        return
    results = []
    for scale in args.scales.split(","):
        proc = subprocess.run(
            [sys.executable, __file__, "--one", scale, "--replicates", str(args.replicates)],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"# {scale}: done in {results[-1]['seconds']:.1f} s", file=sys.stderr)
    base = results[0]
    print(f"bootstrap replicates: {args.replicates}\n")
    print(
        "| scale | models x checkpoints x benchmarks x items | log rows | bootstrap draws "
        "| aggregate s | x base | peak RSS GiB | x base | DuckDB MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        shape = " x ".join(map(str, SCALES[r["scale"]]))
        print(
            f"| {r['scale']} | {shape} | {r['log_rows']:,} | {r['draws']:,} "
            f"| {r['seconds']:.1f} | {r['seconds'] / base['seconds']:.1f} "
            f"| {r['peak_rss_gib']:.2f} | {r['peak_rss_gib'] / base['peak_rss_gib']:.1f} "
            f"| {r['db_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
