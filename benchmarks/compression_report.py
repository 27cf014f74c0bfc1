"""Pruning beside quantization at matched size, from one results database, as markdown tables:
per checkpoint (pooled over languages) its stored bits per weight, accuracy per format with
intervals, the MC-only rate with its interval, noise floor and guessing adjustment, the share of
MC-only items any recovery decode brings back beside the false-recovery rate, and the demoted
and erased counts; then the MC-only rate per language. The quantization tables of docs/results.md
are read from these tables.

  .venv/bin/python benchmarks/compression_report.py results/illusion.duckdb
"""

from __future__ import annotations

import sys

import duckdb
from controls_report import markdown

ORDER = "c.family <> 'dense', c.weight_bits DESC, c.family, m.method, m.structure"

TABLES = {
    "Accuracy per format (all languages pooled; 95% bootstrap intervals)": f"""
        SELECT m.method, m.structure, m.bits, m.sparsity, c.weight_bits, m.n_items,
               printf('%.2f [%.2f, %.2f]', o.accuracy, o.ci_low, o.ci_high) AS open,
               printf('%.2f [%.2f, %.2f]', k.accuracy, k.ci_low, k.ci_high) AS candidates,
               printf('%.2f [%.2f, %.2f]', q.accuracy, q.ci_low, q.ci_high) AS mc
        FROM mc_only m
        JOIN checkpoints c USING (model, method, structure, sparsity)
        JOIN accuracy o ON o.format = 'open'
             AND (o.model, o.method, o.structure, o.sparsity, o.dataset, o.lang)
               = (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang)
        LEFT JOIN accuracy k ON k.format = 'candidates'
             AND (k.model, k.method, k.structure, k.sparsity, k.dataset, k.lang)
               = (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang)
        JOIN accuracy q ON q.format = 'mc'
             AND (q.model, q.method, q.structure, q.sparsity, q.dataset, q.lang)
               = (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang)
        WHERE m.lang = 'all'
        ORDER BY {ORDER}""",
    "MC-only, recovery and false recovery, demoted vs erased (all languages pooled)": f"""
        SELECT m.method, m.structure, c.weight_bits, m.n_mc_only,
               printf('%.2f [%.2f, %.2f]', m.mc_only_rate, m.mc_only_ci_low, m.mc_only_ci_high)
                   AS mc_only_rate,
               m.noise_floor, round(m.mc_only_guess_adj, 3) AS guess_adj,
               printf('%.2f [%.2f, %.2f]', r.rate, r.ci_low, r.ci_high) AS recovered,
               round(r.false_recovery_rate, 2) AS false_rec,
               m.n_demoted, m.n_erased,
               printf('%.2f [%.2f, %.2f]', m.demoted_rate, m.demoted_ci_low, m.demoted_ci_high)
                   AS demoted_share
        FROM mc_only m
        JOIN checkpoints c USING (model, method, structure, sparsity)
        LEFT JOIN recovery r ON r.decode = 'oracle'
             AND (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
               = (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang)
        WHERE m.lang = 'all'
        ORDER BY {ORDER}""",
    "MC-only rate per language": f"""
        SELECT m.method, m.structure, m.lang, m.n_items, m.n_mc_only,
               printf('%.2f [%.2f, %.2f]', m.mc_only_rate, m.mc_only_ci_low, m.mc_only_ci_high)
                   AS mc_only_rate
        FROM mc_only m JOIN checkpoints c USING (model, method, structure, sparsity)
        WHERE m.lang <> 'all'
        ORDER BY {ORDER}, m.lang""",
}


def main() -> None:
    con = duckdb.connect(sys.argv[1], read_only=True)
    for title, sql in TABLES.items():
        print(f"#### {title}\n")
        print(markdown(con, sql))
        print()


if __name__ == "__main__":
    main()
