"""Command line: query the results without writing Python.

  # any SQL, printed as a table (or as CSV)
  python -m benchmark_illusion sql "SELECT * FROM accuracy"
  python -m benchmark_illusion sql --csv "SELECT ..." > out.csv
  # what the database holds
  python -m benchmark_illusion tables
  # one line per checkpoint, languages pooled (--by-lang: per checkpoint and language)
  python -m benchmark_illusion summary
  python -m benchmark_illusion summary --by-lang
  python -m benchmark_illusion summary --json     # the same numbers as results/run.json
  # SAE fit, best/least covered concepts, the dense model's gaps, pruning damage
  python -m benchmark_illusion concepts
  # what a run will cost before it starts (times the model on a few items)
  python -m benchmark_illusion estimate --configfile config/paper.yaml
  # the judge's verdict on one answer, as JSON
  python -m benchmark_illusion judge --lang en --gold Paris "The capital is Paris"
  python -m benchmark_illusion judge --lang en --format candidates --gold 1427 \\
      --option 1427 --option 1500 --option 1600 --option 1700 "1500, 1427, 1600, 1700"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from benchmark_illusion.evaluation.candidates import LABEL_LETTERS, judge_candidates
from benchmark_illusion.evaluation.judge import JudgeLimits, judge
from benchmark_illusion.evaluation.text import first_line
from benchmark_illusion.textnorm import tokenize

DEFAULT_DB = "results/illusion.duckdb"

# Every report is a view of the database (workflow/sql/90_report.sql, workflow/sql/concepts/
# 90_report.sql; docs/metrics.md, docs/concepts.md): the commands only choose rows.

DAMAGE_TITLE = (
    "Significantly damaged concepts per checkpoint (open, across benchmarks: the drop, "
    "the drop its languages predict, the excess, with intervals, and the test's BH q-value)"
)
# What qualifies, and why nothing may: the settings the damage tests ran with (docs/concepts.md).
DAMAGE_CRITERIA_SQL = "SELECT fdr_q, permutations, tested FROM report_damage_criteria"

CONCEPT_SQL = {
    "SAE fit (held-out positions)": "SELECT * FROM report_concept_sae ORDER BY model",
    "Best covered concepts (chi_bench across benchmarks)": (
        "SELECT * EXCLUDE (rank) FROM report_best_covered WHERE rank <= {n} ORDER BY model, rank"
    ),
    "Least covered active concepts (chi_bench across benchmarks)": (
        "SELECT * EXCLUDE (rank) FROM report_least_covered WHERE rank <= {n} ORDER BY model, rank"
    ),
    "The dense model's gaps (lowest chi_model in open on its pool, supported concepts)": (
        "SELECT * EXCLUDE (rank) FROM report_dense_gaps WHERE rank <= {n} ORDER BY model, rank"
    ),
    DAMAGE_TITLE: "SELECT * EXCLUDE (rank) FROM report_concept_damage WHERE rank <= {n} "
    "ORDER BY model, method, structure, sparsity, rank",
}


def _open(db: str):
    """Connect read-only, from the project root, where the views' relative Parquet paths resolve.

    Says on stderr when the last build of the database failed (the file read is the one from
    before); DuckDB's errors (a writer holding the file, a stale write-ahead log, a damaged file)
    become dbfile.DatabaseError, one line."""
    # lazy, like duckdb in main: `judge` imports neither duckdb nor polars
    import duckdb

    from benchmark_illusion.metrics import dbfile

    path, notes = dbfile.for_reading(Path(db).resolve())
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as e:
        raise dbfile.DatabaseError(dbfile.explain(e, path)) from None
    root = path.parent.parent if path.parent.name == "results" else path.parent
    os.chdir(root)
    return con


def _missing_view_hint(con, cmd: str) -> str:
    """Why a report view may be missing: no concept tables, or a database built before the views."""
    has_concepts = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'chi_bench'"
    ).fetchone()[0]
    if cmd == "concepts" and not has_concepts:
        return "this database has no concept tables (concepts.enabled: false)"
    return (
        "the database predates its report views: rebuild it, e.g. `make run`, "
        "which re-runs the aggregation"
    )


def _print(rel, csv: bool, max_rows: int) -> None:
    if rel is None:
        return
    if csv:
        rel.pl().write_csv(sys.stdout)
    else:
        rel.show(max_rows=max_rows, max_width=1_000_000)


def _compare_command(con, args) -> int:
    """Print `compare`'s table; a checkpoint, metric or model the database lacks exits 2."""
    from benchmark_illusion.metrics.compare import paired_difference, parse_checkpoint

    try:
        a, b = parse_checkpoint(args.a), parse_checkpoint(args.b)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    models = [r[0] for r in con.execute("SELECT DISTINCT model FROM rates ORDER BY 1").fetchall()]
    model = args.model or (models[0] if len(models) == 1 else None)
    if model not in models:
        print(f"error: --model must be one of {', '.join(models)}", file=sys.stderr)
        return 2
    metrics = {r[0] for r in con.execute("SELECT DISTINCT metric FROM rates").fetchall()}
    if args.metric not in metrics:
        print(f"error: --metric {args.metric!r} is not a metric of `rates`", file=sys.stderr)
        return 2
    for name, c in (("A", a), ("B", b)):
        n = con.execute(
            "SELECT count(*) FROM rates WHERE model = ? AND method = ? AND structure = ? "
            "AND sparsity = ?",
            [model, c["method"], c["structure"], c["sparsity"]],
        ).fetchall()[0][0]
        if not n:
            print(
                f"error: checkpoint {name} ({args.a if name == 'A' else args.b}) is not in the "
                "database (see `summary` for method, structure and sparsity)",
                file=sys.stderr,
            )
            return 2
    import polars as pl

    level = con.execute("SELECT ci_level FROM metrics_settings").fetchall()[0][0]
    out = paired_difference(con, model, args.metric, a, b, float(level))
    if args.csv:
        out.write_csv(sys.stdout)
    else:
        print(f"{args.metric}: A = {args.a}  minus  B = {args.b}  ({model})")
        with pl.Config(tbl_rows=1000, tbl_cols=20):
            print(out)
    return 0


def _judge_command(args, parser: argparse.ArgumentParser) -> int:
    """Print the judge's verdict on args.output as one JSON object; bad arguments exit 2."""
    if args.max_length_factor <= 0:
        parser.error(
            f"argument --max-length-factor: must be positive, got {args.max_length_factor}"
        )
    if args.max_length_slack < 0:
        parser.error(
            f"argument --max-length-slack: must not be negative, got {args.max_length_slack}"
        )
    if args.sentence_slack < 0:
        parser.error(f"argument --sentence-slack: must not be negative, got {args.sentence_slack}")
    if not any(tokenize(g, args.lang) for g in args.gold):
        parser.error("argument --gold: every gold is empty after normalisation")
    common = dict(
        question=args.question,
        passage=args.passage,
        limits=JudgeLimits(args.max_length_factor, args.max_length_slack, args.sentence_slack),
    )
    result: dict = {"format": args.format, "lang": args.lang}
    if args.format == "candidates":
        options = args.option
        if len(options) < 2:
            parser.error(
                "argument --option: the candidates format needs at least 2 options, "
                f"got {len(options)}"
            )
        if args.style == "letters" and len(options) > len(LABEL_LETTERS):
            parser.error(
                f"argument --option: at most {len(LABEL_LETTERS)} options with --style letters"
            )
        gold = _gold_option(options, args.gold, args.lang)
        if gold is None:
            parser.error(
                "argument --gold: no --option equals a --gold "
                "(candidates needs the gold among the options)"
            )
        v = judge_candidates(
            args.output, options, gold, args.lang, letters=args.style == "letters", **common
        )
        result["gold_option"] = gold
    else:
        v = judge(args.output, args.gold, args.lang, options=args.option or None, **common)
    result.update(
        v.log_columns(args.lang),
        pred_option=v.pred_option,
        status=v.status,
        judged=v.judged,
        line=first_line(args.output),
    )
    print(json.dumps(result, ensure_ascii=False))
    return 0


def _gold_option(options: list[str], golds: list[str], lang: str) -> int | None:
    """Index of the first option equal to a gold: the same string, else the same judge tokens;
    None if none."""
    gold_tokens = [t for t in (tokenize(g, lang) for g in golds) if t]
    for k, o in enumerate(options):
        if o in golds:
            return k
    for k, o in enumerate(options):
        if tokenize(o, lang) in gold_tokens:
            return k
    return None


def _estimate_command(args) -> int:
    from benchmark_illusion.config.validate import ConfigError, load_config
    from benchmark_illusion.scheduling.estimate import estimate

    try:
        config = load_config(args.configfile, root=Path("."))
    except (ConfigError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(estimate(config, Path("."), n_items=args.items, cores=args.cores))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line; `parser.subcommands` maps each subcommand to its parser."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmark_illusion",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    db_help = f"results database (default {DEFAULT_DB}, relative to the working directory)"
    parser.add_argument("--db", default=DEFAULT_DB, help=db_help)
    # --db also after the subcommand (`summary --db x.duckdb`); SUPPRESS keeps the value given
    # before it when it is not repeated there
    db_after = argparse.ArgumentParser(add_help=False)
    db_after.add_argument("--db", default=argparse.SUPPRESS, help=db_help)
    sub = parser.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("sql", parents=[db_after], help="run one SQL statement and print its result")
    q.add_argument("query", help='one SQL statement, e.g. "SELECT * FROM mc_only"')
    q.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    q.add_argument(
        "--max-rows", type=int, default=200, help="rows a table shows at most (default 200)"
    )
    sub.add_parser("tables", parents=[db_after], help="list tables and views with their row counts")
    s = sub.add_parser(
        "summary",
        parents=[db_after],
        help="accuracy per format (mc without the passage too), Delta_PR, MC-only rate with its "
        "guessing adjustments (1/K, and measured without the passage), demoted/erased counts",
    )
    s.add_argument("--by-lang", action="store_true", help="one line per language instead of pooled")
    out = s.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    out.add_argument(
        "--json",
        action="store_true",
        help="print the rows as a JSON list of objects (the `checkpoints` of results/run.json)",
    )
    c = sub.add_parser(
        "concepts",
        parents=[db_after],
        help="SAE fit, top and bottom concepts, the dense model's gaps, pruning damage",
    )
    c.add_argument("-n", type=int, default=5, help="concepts per list (default 5)")
    j = sub.add_parser(
        "judge",
        help="judge one answer and print the verdict with every flag as JSON",
        description="Judge one generated answer as the evaluation does (src/benchmark_illusion/"
        "evaluation/judge.py) and print one JSON object. Exit code 0 whatever the verdict.",
    )
    j.add_argument("output", help="the generated answer (only its first non-empty line is judged)")
    j.add_argument("--lang", required=True, help="language code of the item, e.g. en, de, zh, tr")
    j.add_argument(
        "--gold", action="append", required=True, help="a gold answer (repeat for several)"
    )
    j.add_argument(
        "--option",
        action="append",
        default=[],
        help="an option of the item, in prompt order (repeat); candidates needs at least 2",
    )
    j.add_argument("--format", choices=("open", "candidates"), default="open", help="default: open")
    j.add_argument(
        "--style",
        choices=("letters", "bullets"),
        default="letters",
        help="candidates prompt style: options labelled A-H (letters) or not (bullets)",
    )
    j.add_argument("--question", default="", help="the question (for the echo rule)")
    j.add_argument("--passage", default="", help="the passage (for the passage-copy rule)")
    j.add_argument(
        "--max-length-factor", type=float, default=3.0, help="judge.max_length_factor (default 3.0)"
    )
    j.add_argument(
        "--max-length-slack", type=int, default=3, help="judge.max_length_slack (default 3)"
    )
    j.add_argument(
        "--sentence-slack",
        type=int,
        default=4,
        help="judge.sentence_slack: tokens a one-sentence answer may have beyond the question's "
        "and the gold's (correct_sentence; default 4)",
    )
    cmp = sub.add_parser(
        "compare",
        parents=[db_after],
        help="the paired difference of two checkpoints on one metric, with its interval",
        description="Checkpoint A minus checkpoint B on one metric of `rates` (e.g. mc_only, "
        "sent_mc_only, acc_open, drop_mc), per benchmark and pooled, over the items both have "
        "a value for, with a paired bootstrap interval from the same item resamples as every "
        "rate (src/benchmark_illusion/metrics/compare.py).",
    )
    cmp.add_argument("a", help="checkpoint A as method/structure/sparsity, e.g. rtn/int4-g128/0")
    cmp.add_argument("b", help="checkpoint B, e.g. gptq/int4-g128/0")
    cmp.add_argument(
        "--metric",
        default="sent_mc_only",
        help="a metric of `rates` (default: sent_mc_only, the sentence-tolerant MC-only rate)",
    )
    cmp.add_argument("--model", default=None, help="the model (default: the only one)")
    cmp.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    e = sub.add_parser(
        "estimate",
        help="time the configured model on a few items and print each rule's expected cost",
        description="Time each configured model on a few items per format and a 2-window "
        "prune per method, then print per rule the expected jobs, items, tokens, CPU time and "
        "wall time, here and on the SLURM profile (src/benchmark_illusion/scheduling/estimate.py).",
    )
    e.add_argument(
        "--configfile",
        default="config/config.yaml",
        help="the run's config, resolved like Snakemake's (default config/config.yaml)",
    )
    e.add_argument(
        "--items",
        type=int,
        default=None,
        help="items timed per format (default: one batch, evaluation.batch_size)",
    )
    e.add_argument("--cores", type=int, default=None, help="local cores (default: all)")
    parser.subcommands = dict(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd == "judge":
        return _judge_command(args, parser.subcommands["judge"])
    if args.cmd == "estimate":
        return _estimate_command(args)

    from benchmark_illusion.metrics.dbfile import DatabaseError

    try:
        con = _open(args.db)
    except DatabaseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import duckdb  # lazy: the judge command above stays light (tests/evaluation/test_judge.py)

    try:
        if args.cmd == "sql":
            _print(con.sql(args.query), args.csv, args.max_rows)
        elif args.cmd == "tables":
            rows = con.execute(
                "SELECT table_name, table_type FROM information_schema.tables ORDER BY 1"
            ).fetchall()
            for name, kind in rows:
                try:
                    count = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
                    n = f"{count:>10d} rows"
                except duckdb.Error as e:  # a view whose Parquet files moved or were deleted
                    n = f"unreadable: {str(e).splitlines()[0][:80]}"
                print(f"{name:32s} {kind.lower():12s} {n}")
        elif args.cmd == "compare":
            return _compare_command(con, args)
        elif args.cmd == "concepts":
            for title, sql in CONCEPT_SQL.items():
                print(title)
                rel = con.sql(sql.format(n=int(args.n)))
                if title != DAMAGE_TITLE:
                    _print(rel, False, 10_000)
                    continue
                fdr_q, n_perm, tested = con.execute(DAMAGE_CRITERIA_SQL).fetchall()[0]
                criteria = (
                    f"BH q < {fdr_q:g} among the supported concepts of the checkpoint "
                    "and a drop above its languages' drop"
                )
                if len(rel.pl()):
                    print(f"  ({criteria})")
                    _print(rel, False, 10_000)
                else:
                    print(
                        f"  no concept is significantly damaged ({criteria}; "
                        f"{tested or 0} concepts tested per checkpoint, "
                        f"{n_perm} permutations: the smallest p is 1/{n_perm + 1})"
                    )
        elif args.json:
            from benchmark_illusion.manifest import summary_rows

            print(json.dumps(summary_rows(con, args.by_lang), indent=2, default=str))
        else:
            from benchmark_illusion.manifest import summary_sql

            _print(con.sql(summary_sql(con, args.by_lang)), args.csv, 10_000)
    except duckdb.Error as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, duckdb.IOException) and ".parquet" in str(e):
            # a view's log file is gone or damaged
            first += " (a Parquet log of the views; rebuild it with `snakemake --forcerun <file>`)"
        print(f"error: {first}", file=sys.stderr)
        if isinstance(e, duckdb.CatalogException) and "report_" in str(e):
            print(f"  ({_missing_view_hint(con, args.cmd)})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
