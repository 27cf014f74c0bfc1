-- Report views: what `python -m benchmark_illusion summary` prints, over the metric tables above.
-- A view stores no rows; it is computed when read. Definitions: docs/metrics.md.

-- report_summary: one row per checkpoint x benchmark, and pooled (dataset = lang = 'all'), of
-- checkpoints with a row in mc_only and accuracy: accuracy per format (open, candidates, mc),
-- delta_pr, the MC-only rate with its interval (mc_only_rate_ci), its noise floor (floor) and
-- guess-adjusted value (guess_adj), the share of MC-only items any decode recovers (recovered) and
-- recovers the decoy (false_rec) from recovery's 'oracle' rows, and the demoted and erased counts;
-- rounded for printing. `summary` prints the pooled rows without dataset and lang, `summary
-- --by-lang` the other rows.
CREATE OR REPLACE VIEW report_summary AS
WITH acc AS (
    SELECT model, method, structure, sparsity, dataset, lang,
           max(accuracy) FILTER (WHERE format = 'open')       AS open,
           max(accuracy) FILTER (WHERE format = 'candidates') AS candidates,
           max(accuracy) FILTER (WHERE format = 'mc')         AS mc
    FROM accuracy GROUP BY ALL
),
any_decode AS (
    SELECT model, method, structure, sparsity, dataset, lang, rate AS recovered, false_recovery_rate
    FROM recovery WHERE decode = 'oracle'
)
SELECT m.model, m.method, m.structure, m.sparsity, m.bits, m.dataset, m.lang, m.n_items,
       round(a.open, 3) AS open, round(a.candidates, 3) AS candidates, round(a.mc, 3) AS mc,
       round(d.delta_pr, 3) AS delta_pr,
       printf('%.2f [%.2f, %.2f]', m.mc_only_rate, m.mc_only_ci_low, m.mc_only_ci_high) AS mc_only_rate_ci,
       round(m.noise_floor, 2) AS floor, round(m.mc_only_guess_adj, 2) AS guess_adj,
       round(o.recovered, 2) AS recovered, round(o.false_recovery_rate, 2) AS false_rec,
       m.n_demoted AS demoted, m.n_erased AS erased
FROM mc_only m
JOIN acc a USING (model, method, structure, sparsity, dataset, lang)
LEFT JOIN delta_pr d USING (model, method, structure, sparsity, dataset, lang)
LEFT JOIN any_decode o USING (model, method, structure, sparsity, dataset, lang)
ORDER BY m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang;
