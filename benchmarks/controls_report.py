"""The controls beside the headline numbers of one results database, as markdown tables: the
dense selection, the MC-only split (verbose / demoted / erased / untested) under the strict and
the sentence-tolerant verdicts beside the no-passage accuracy, both guessing adjustments and
both floors, recovery beside false recovery against every distractor, gold rank within each
language, oracle vs greedy accuracy (dense and pruned, pooled and per language),
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
        "mc_chance_adj, n_demoted, n_erased, n_demoted_false FROM mc_only WHERE lang = 'all' "
        f"ORDER BY {CKPT}"
    ),
    "MC-only split, strict and sentence-tolerant, with every floor (all languages)": (
        "SELECT method, structure, sparsity, bits, n_items, "
        "printf('%.2f [%.2f, %.2f]', mc_only_rate, mc_only_ci_low, mc_only_ci_high) AS strict, "
        "printf('%.2f [%.2f, %.2f]', mc_only_sentence_rate, mc_only_sentence_ci_low, "
        "mc_only_sentence_ci_high) AS sentence, "
        "n_mc_only_verbose AS verbose, n_mc_only_demoted AS demoted, "
        "n_mc_only_erased AS erased, n_mc_only_untested AS untested, "
        "printf('%.2f [%.2f, %.2f]', acc_mc_nopassage, mc_nopassage_ci_low, mc_nopassage_ci_high) "
        "AS mc_no_passage, "
        "printf('%.2f [%.2f, %.2f]', mc_only_guess_adj, guess_adj_ci_low, guess_adj_ci_high) "
        "AS guess_adj_1_over_k, "
        "printf('%.2f [%.2f, %.2f]', mc_only_guess_adj_nopassage, guess_adj_nopassage_ci_low, "
        "guess_adj_nopassage_ci_high) AS guess_adj_measured, "
        "noise_floor AS numeric_floor, "
        "printf('%.2f [%.2f, %.2f]', perturbation_floor, perturbation_floor_ci_low, "
        "perturbation_floor_ci_high) AS perturbation_floor "
        "FROM mc_only WHERE lang = 'all' AND method NOT LIKE 'noise%' "
        "ORDER BY method <> 'dense', method, structure, sparsity"
    ),
    "Recovery of MC-only items beside false recovery against every distractor (all languages)": (
        "SELECT method, structure, sparsity, bits, decode, n_items, "
        "printf('%.2f [%.2f, %.2f]', rate, ci_low, ci_high) AS strict, "
        "printf('%.2f / %.2f', false_recovery_mean, false_recovery_rate) AS false_mean_max, "
        "printf('%.2f [%.2f, %.2f]', corrected_rate, corrected_ci_low, corrected_ci_high) "
        "AS corrected, n_items_sentence, "
        "printf('%.2f [%.2f, %.2f]', rate_sentence, sentence_ci_low, sentence_ci_high) "
        "AS sentence, false_recovery_rate_sentence AS false_sentence "
        "FROM recovery WHERE lang = 'all' AND decode = 'oracle' AND method NOT LIKE 'noise%' "
        "ORDER BY method, structure, sparsity"
    ),
    "Gold rank and mc margin within each language": (
        f"SELECT {CKPT}, lang, n_mc_only, mc_only_median_rank, mc_only_median_margin, "
        "n_open_correct, open_correct_median_rank, open_correct_median_margin, n_dense_failed, "
        "dense_failed_median_rank, dense_failed_median_margin FROM gold_rank_by_lang "
        f"WHERE method NOT LIKE 'noise%' ORDER BY {CKPT}, lang"
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
