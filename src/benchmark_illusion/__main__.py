"""Command line: query the results without writing Python.

  python -m benchmark_illusion sql "SELECT * FROM accuracy"      # any SQL, printed as a table
  python -m benchmark_illusion sql --csv "SELECT ..." > out.csv
  python -m benchmark_illusion tables                            # what the database holds
  python -m benchmark_illusion summary                           # one line per checkpoint, languages pooled
  python -m benchmark_illusion summary --by-lang                 # one line per checkpoint and language
  python -m benchmark_illusion concepts                          # SAE fit, best/least covered concepts,
                                                                 # the dense model's gaps, pruning damage
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_DB = "results/illusion.duckdb"

SUMMARY_SQL = """
WITH acc AS (
    SELECT model, method, structure, sparsity, dataset, lang,
           max(accuracy) FILTER (WHERE format = 'open')       AS open,
           max(accuracy) FILTER (WHERE format = 'candidates') AS candidates,
           max(accuracy) FILTER (WHERE format = 'mc')         AS mc
    FROM accuracy GROUP BY ALL
),
oracle AS (
    SELECT model, method, structure, sparsity, dataset, lang, rate AS recovered
    FROM recovery WHERE decode = 'oracle'
)
SELECT m.model, m.method, m.structure, m.sparsity, {lang_cols}m.n_items,
       round(a.open, 3) AS open, round(a.candidates, 3) AS candidates, round(a.mc, 3) AS mc,
       round(d.delta_pr, 3) AS delta_pr,
       printf('%.2f [%.2f, %.2f]', m.mc_only_rate, m.mc_only_ci_low, m.mc_only_ci_high) AS mc_only_rate_ci,
       round(o.recovered, 2) AS recovered,
       m.n_demoted AS demoted, m.n_erased AS erased
FROM mc_only m
JOIN acc a USING (model, method, structure, sparsity, dataset, lang)
LEFT JOIN delta_pr d USING (model, method, structure, sparsity, dataset, lang)
LEFT JOIN oracle o USING (model, method, structure, sparsity, dataset, lang)
WHERE {where}
ORDER BY m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang
"""


CONCEPT_SQL = {
    "SAE fit (held-out positions)": """
        SELECT model, source, hook_name, d_sae, k, round(fve, 3) AS fve, round(l0, 1) AS l0,
               round(dead_fraction, 4) AS dead_fraction, round(pca_fve_same_k, 3) AS pca_fve_same_k,
               corpus_tokens, seconds
        FROM concept_sae ORDER BY model""",
    "Best covered concepts (chi_bench across benchmarks)": """
        SELECT model, concept, label, round(chi_bench, 3) AS chi_bench, n_active, n_items FROM chi_bench
        WHERE dataset = 'all' AND n_active > 0
        QUALIFY row_number() OVER (PARTITION BY model ORDER BY chi_bench DESC, concept) <= {n}
        ORDER BY model, chi_bench DESC""",
    "Least covered active concepts (chi_bench across benchmarks)": """
        SELECT model, concept, label, round(chi_bench, 4) AS chi_bench, n_active, n_items FROM chi_bench
        WHERE dataset = 'all' AND n_active > 0
        QUALIFY row_number() OVER (PARTITION BY model ORDER BY chi_bench, concept) <= {n}
        ORDER BY model, chi_bench""",
    "The dense model's gaps (lowest chi_model in open on its pool, supported concepts)": """
        SELECT model, concept, label, round(chi_model, 3) AS chi_model, round(accuracy, 3) AS accuracy, support
        FROM chi_model WHERE population = 'pool' AND format = 'open' AND dataset = 'all' AND supported
        QUALIFY row_number() OVER (PARTITION BY model ORDER BY chi_model, concept) <= {n}
        ORDER BY model, chi_model""",
    "Most damaged concepts per method (mean open chi_model drop over its unstructured sparsities)": """
        SELECT model, method, concept, any_value(label) AS label, round(avg(drop_open), 3) AS drop_open,
               round(avg(drop_mc), 3) AS drop_mc, round(avg(demoted_rate), 3) AS demoted,
               round(avg(erased_rate), 3) AS erased, min(support) AS support
        FROM concept_damage WHERE dataset = 'all' AND supported AND structure = 'unstructured'
        GROUP BY model, method, concept
        QUALIFY row_number() OVER (PARTITION BY model, method ORDER BY avg(drop_open) DESC, min(support) DESC,
                                   concept) <= {n}
        ORDER BY model, method, drop_open DESC""",
}


def _open(db: str):
    """Connect read-only, from the project root, where the views' relative Parquet paths resolve."""
    from .aggregate import connect

    path = Path(db).resolve()
    con = connect(path)
    root = path.parent.parent if path.parent.name == "results" else path.parent
    os.chdir(root)
    return con


def _print(rel, csv: bool, max_rows: int) -> None:
    if rel is None:
        return
    if csv:
        rel.pl().write_csv(sys.stdout)
    else:
        rel.show(max_rows=max_rows, max_width=1_000_000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark_illusion", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    sub = parser.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("sql", help="run one SQL statement and print its result")
    q.add_argument("query")
    q.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    q.add_argument("--max-rows", type=int, default=200)
    sub.add_parser("tables", help="list tables and views with their row counts")
    s = sub.add_parser("summary", help="accuracy per format, Delta_PR, MC-only rate, demoted/erased per checkpoint")
    s.add_argument("--by-lang", action="store_true", help="one line per language instead of pooled")
    s.add_argument("--csv", action="store_true")
    c = sub.add_parser("concepts", help="SAE fit, top and bottom concepts, the dense model's gaps, pruning damage")
    c.add_argument("-n", type=int, default=5, help="concepts per list (default 5)")
    args = parser.parse_args(argv)

    try:
        con = _open(args.db)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import duckdb

    try:
        if args.cmd == "sql":
            _print(con.sql(args.query), args.csv, args.max_rows)
        elif args.cmd == "tables":
            rows = con.execute("SELECT table_name, table_type FROM information_schema.tables ORDER BY 1").fetchall()
            for name, kind in rows:
                try:
                    count = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
                    n = f"{count:>10d} rows"
                except duckdb.Error as e:  # a view whose Parquet files moved or were deleted
                    n = f"unreadable: {str(e).splitlines()[0][:80]}"
                print(f"{name:32s} {kind.lower():12s} {n}")
        elif args.cmd == "concepts":
            for title, sql in CONCEPT_SQL.items():
                print(title)
                _print(con.sql(sql.format(n=int(args.n))), False, 10_000)
        else:
            where = "m.lang <> 'all'" if args.by_lang else "m.lang = 'all'"
            lang_cols = "m.dataset, m.lang, " if args.by_lang else ""
            _print(con.sql(SUMMARY_SQL.format(where=where, lang_cols=lang_cols)), args.csv, 10_000)
    except duckdb.Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
