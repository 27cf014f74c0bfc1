"""The paired test of one results database as markdown tables: per checkpoint its damage and
its twins' (KL from the dense model and NLL on the held-out windows), then per checkpoint
family, floor and verdict the MC-only rates, the conditional retention P(mc right | open wrong)
and the paired difference with its interval, controls included.

  .venv/bin/python benchmarks/illusion_report.py results/illusion.duckdb [--by-lang]
"""

from __future__ import annotations

import argparse

import duckdb


def markdown(rel) -> str:
    cols = rel.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rel.fetchall():
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append(f"{v:.3f}")
            else:
                cells.append("" if v is None else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


DAMAGE = """
SELECT source_method AS checkpoint, structure, sparsity, method AS twin, twin_kind AS kind,
       round(source_kl, 4) AS checkpoint_kl, round(kl, 4) AS twin_kl,
       round(kl_ratio, 3) AS kl_ratio, round(source_nll, 4) AS checkpoint_nll,
       round(nll, 4) AS twin_nll, round(dense_nll, 4) AS dense_nll, round(scale, 4) AS scale,
       matched
FROM damage ORDER BY source_method, structure, sparsity, kind, method
"""

TEST = """
SELECT method, structure, sparsity, floor, control, verdict, {lang} n_items,
       n_replicates AS reps, n_twins AS twins,
       printf('%.2f', mc_only) AS mc_only, printf('%.2f', floor_mc_only) AS floor_mc_only,
       printf('%+.2f [%+.2f, %+.2f]', mc_only_diff, diff_ci_low, diff_ci_high) AS paired_diff,
       printf('%.2f (%.1f)', retention, n_open_wrong) AS retention,
       printf('%.2f (%.1f)', floor_retention, floor_n_open_wrong) AS floor_retention,
       printf('%+.2f [%+.2f, %+.2f]', retention_diff, retention_diff_ci_low,
              retention_diff_ci_high) AS retention_diff,
       printf('[%+.2f, %+.2f]', replicate_diff_min, replicate_diff_max) AS replicate_range,
       ci_method, flagged
FROM illusion_test {where}
ORDER BY control NULLS FIRST, method, structure, sparsity, floor, verdict DESC, dataset, lang
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--by-lang", action="store_true", help="per language rows too")
    args = ap.parse_args()
    con = duckdb.connect(args.db, read_only=True)
    print("## Damage on the held-out windows\n")
    print(markdown(con.sql(DAMAGE)))
    print("\n## The paired test (pooled over languages)\n")
    print(markdown(con.sql(TEST.format(lang="", where="WHERE dataset = 'all'"))))
    if args.by_lang:
        print("\n## The paired test per language\n")
        print(markdown(con.sql(TEST.format(lang="lang,", where="WHERE dataset <> 'all'"))))


if __name__ == "__main__":
    main()
