-- recovery: how many MC-only items each recovery decode turns back into a correct answer, per
-- checkpoint x benchmark x decode (and pooled: dataset = 'all', lang = 'all').
--   beam_top, beam_any, sample_pass, sample_majority, oneshot: see item_outcomes
--   oracle: any decode that ran is correct
-- n_mc_only: MC-only items; n_items: those the decode ran on (the rate's denominator). A decode
-- that is switched off has no rows; a checkpoint without MC-only items has none either.
-- False-recovery control: false_recovery_rate is the share of the same items on which the same
-- decode "recovers" the decoy (a fixed distractor of the item judged as if it were the gold,
-- same judge and rules); corrected_rate = rate - false_recovery_rate, per item (paired interval).
CREATE OR REPLACE TABLE recovery AS
SELECT r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang,
       replace(r.metric, 'rec_', '') AS decode,
       m.n_mc_only,
       r.n_items,
       r.total::BIGINT AS n_recovered,
       r.value AS rate, r.ci_low, r.ci_high,
       f.value AS false_recovery_rate, f.ci_low AS false_ci_low, f.ci_high AS false_ci_high,
       c.value AS corrected_rate, c.ci_low AS corrected_ci_low, c.ci_high AS corrected_ci_high
FROM rates r
LEFT JOIN rate_of('f' || r.metric, 'selected') f
  ON (f.model, f.method, f.structure, f.sparsity, f.dataset, f.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
LEFT JOIN rate_of('c' || r.metric, 'selected') c
  ON (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
JOIN mc_only m
  ON (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
WHERE r.metric LIKE 'rec\_%' ESCAPE '\' AND r.population = 'selected'
ORDER BY r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang,
         array_position(['beam_top', 'beam_any', 'sample_pass', 'sample_majority', 'oneshot', 'oracle'],
                        replace(r.metric, 'rec_', ''));
