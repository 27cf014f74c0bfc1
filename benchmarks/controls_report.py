"""The controls beside the headline numbers of one results database, as markdown tables: the
dense selection, oracle vs greedy accuracy (dense and pruned, pooled and per language),
recovery beside false recovery, MC-only rates with the noise floor and the guessing
adjustment, and how many concepts survive the FDR control.

  .venv/bin/python benchmarks/controls_report.py results/illusion.duckdb
"""

from __future__ import annotations

import sys

import duckdb

# a checkpoint: 2:4 and unstructured, or two bit widths, are different rows
CKPT = "method, structure, sparsity, bits"

TABLES = {
    "Selection (dense pool)": (
        "SELECT dataset, lang, n_pool, open_rate, mc_rate, candidates_rate, n_selected "
        "FROM selection WHERE method = 'dense' ORDER BY dataset, lang"
    ),
    "Oracle: greedy vs any decode (drop vs dense with paired intervals)": (
        f"SELECT {CKPT}, lang, decode, n_items, accuracy, ci_low, ci_high, "
        "drop, drop_ci_low, drop_ci_high FROM oracle WHERE decode IN ('greedy', 'oracle') "
        f"ORDER BY {CKPT}, lang, decode"
    ),
    "Recovery beside false recovery (all languages)": (
        f"SELECT {CKPT}, decode, n_mc_only, rate, ci_low, ci_high, "
        "false_recovery_rate, false_ci_low, false_ci_high, corrected_rate, corrected_ci_low, "
        f"corrected_ci_high FROM recovery WHERE lang = 'all' ORDER BY {CKPT}, decode"
    ),
    "MC-only rate, noise floor, guessing (all languages)": (
        f"SELECT {CKPT}, n_items, n_mc_only, mc_only_rate, mc_only_ci_low, "
        "mc_only_ci_high, noise_floor, mc_only_guess_adj, guess_adj_ci_low, guess_adj_ci_high, "
        "mc_chance_adj, n_demoted, n_erased, n_demoted_decoy FROM mc_only WHERE lang = 'all' "
        f"ORDER BY {CKPT}"
    ),
    "MC-only per language": (
        f"SELECT {CKPT}, lang, n_items, n_mc_only, mc_only_rate, noise_floor, "
        f"mc_only_guess_adj FROM mc_only WHERE lang <> 'all' ORDER BY {CKPT}, lang"
    ),
    "Concepts tested and surviving FDR (across benchmarks)": (
        f"SELECT {CKPT}, format, count(*) FILTER (WHERE supported) AS tested, "
        "count(*) FILTER (WHERE supported AND q_value < 0.1) AS q_below_0_1, "
        "count(*) FILTER (WHERE supported AND q_value < 0.1 AND excess > 0) AS damaged, "
        "min(q_value) AS min_q FROM concept_damage_tests WHERE lang = 'all' "
        f"GROUP BY ALL ORDER BY {CKPT}, format"
    ),
}


def markdown(con, sql: str) -> str:
    df = con.sql(sql).pl()
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    for row in df.iter_rows():
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    con = duckdb.connect(sys.argv[1], read_only=True)
    names = {
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    for title, sql in TABLES.items():
        table = sql.split(" FROM ", 1)[1].split()[0]
        if table not in names:
            print(f"\n### {title}\n\n(no `{table}` table in this database)")
            continue
        print(f"\n### {title}\n\n{markdown(con, sql)}")


if __name__ == "__main__":
    main()
