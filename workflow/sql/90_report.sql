-- Report views: what `python -m benchmark_illusion summary` prints, over the metric tables above.
-- A view stores no rows; it is computed when read. Definitions: docs/metrics.md.

-- report_summary: one row per checkpoint x benchmark, and pooled (dataset = lang = 'all'), of
-- checkpoints with a row in mc_only and accuracy: accuracy per format (open, candidates, mc,
-- mc_nopassage: mc without the passage), delta_pr, the MC-only rate with its interval
-- (mc_only_rate_ci), its noise floor (floor: the numeric floor), the sentence MC-only rate of
-- its damage-matched twins (floor_sentence; without them the size-matched ones: floor_kind) and
-- the paired test against them (vs_floor: the checkpoint's family, replicates averaged, minus
-- the floor, with its interval; flagged: the interval above 0; illusion_test), guess-adjusted
-- values (guess_adj: guessing
-- assumed, 1/K; guess_adj_nopassage: guessing measured without the passage), the share of MC-only items any decode recovers (recovered) and
-- produces a distractor instead (false_rec: any of the K - 1, judged as the gold) from recovery's
-- 'oracle' rows, the sentence-tolerant MC-only rate (mc_only_sentence_ci: the headline) beside
-- the strict one with its lower bound (mc_only_sentence_lower: open answers the judge calls
-- uncertain counted right), the MC-only items split into verbose / demoted / erased / untested
-- counts, and how many open answers deny the gold (negated) or offer it beside an alternative
-- that is no option (uncertain);
-- rounded for printing. `summary` prints the pooled rows without dataset and lang, `summary
-- --by-lang` the other rows.
CREATE OR REPLACE VIEW report_summary AS
WITH acc AS (
    SELECT model, method, structure, sparsity, dataset, lang,
           max(accuracy) FILTER (WHERE format = 'open')       AS open,
           max(accuracy) FILTER (WHERE format = 'candidates') AS candidates,
           max(accuracy) FILTER (WHERE format = 'mc')         AS mc,
           max(accuracy) FILTER (WHERE format = 'mc_nopassage') AS mc_nopassage
    FROM accuracy GROUP BY ALL
),
any_decode AS (
    SELECT model, method, structure, sparsity, dataset, lang, rate AS recovered, false_recovery_rate
    FROM recovery WHERE decode = 'oracle'
)
SELECT m.model, m.method, m.structure, m.sparsity, m.bits, m.dataset, m.lang, m.n_items,
       round(a.open, 3) AS open, round(a.candidates, 3) AS candidates, round(a.mc, 3) AS mc,
       round(a.mc_nopassage, 3) AS mc_nopassage,
       round(d.delta_pr, 3) AS delta_pr,
       printf('%.2f [%.2f, %.2f]', m.mc_only_sentence_rate, m.mc_only_sentence_ci_low,
              m.mc_only_sentence_ci_high) AS mc_only_sentence_ci,
       round(m.mc_only_sentence_lower, 2) AS mc_only_sentence_lower,
       printf('%.2f [%.2f, %.2f]', m.mc_only_rate, m.mc_only_ci_low, m.mc_only_ci_high) AS mc_only_rate_ci,
       round(m.noise_floor, 2) AS floor,
       round(coalesce(td.floor_mc_only, ts.floor_mc_only), 2) AS floor_sentence,
       CASE WHEN td.mc_only_diff IS NOT NULL THEN
                printf('%+.2f [%+.2f, %+.2f]', td.mc_only_diff, td.diff_ci_low, td.diff_ci_high)
            WHEN ts.mc_only_diff IS NOT NULL THEN
                printf('%+.2f [%+.2f, %+.2f]', ts.mc_only_diff, ts.diff_ci_low, ts.diff_ci_high)
       END AS vs_floor,
       CASE WHEN td.mc_only_diff IS NOT NULL THEN 'damage'
            WHEN ts.mc_only_diff IS NOT NULL THEN 'size' END AS floor_kind,
       coalesce(td.flagged, ts.flagged) AS flagged,
       round(m.mc_only_guess_adj, 2) AS guess_adj,
       round(m.mc_only_guess_adj_nopassage, 2) AS guess_adj_nopassage,
       round(o.recovered, 2) AS recovered, round(o.false_recovery_rate, 2) AS false_rec,
       m.n_mc_only_verbose AS verbose, m.n_mc_only_demoted AS demoted,
       m.n_mc_only_erased AS erased, m.n_mc_only_untested AS untested,
       m.n_open_negated AS negated, m.n_open_uncertain AS uncertain
FROM mc_only m
JOIN acc a USING (model, method, structure, sparsity, dataset, lang)
LEFT JOIN delta_pr d USING (model, method, structure, sparsity, dataset, lang)
LEFT JOIN any_decode o USING (model, method, structure, sparsity, dataset, lang)
LEFT JOIN checkpoints k USING (model, method, structure, sparsity)
LEFT JOIN illusion_test td
  ON td.verdict = 'sentence' AND td.floor = 'damage'
 AND (td.model, td.method, td.structure, td.sparsity, td.dataset, td.lang)
   = (m.model, k.base_method, m.structure, m.sparsity, m.dataset, m.lang)
LEFT JOIN illusion_test ts
  ON ts.verdict = 'sentence' AND ts.floor = 'size'
 AND (ts.model, ts.method, ts.structure, ts.sparsity, ts.dataset, ts.lang)
   = (m.model, k.base_method, m.structure, m.sparsity, m.dataset, m.lang)
ORDER BY m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang;
