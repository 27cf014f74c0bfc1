-- recovery: how many MC-only items each recovery decode turns back into a correct answer, per
-- checkpoint x benchmark x decode (and pooled: dataset = 'all', lang = 'all').
--   beam_top, beam_any, sample_pass, sample_majority, oneshot: see item_outcomes
--   oracle: any decode that ran is correct
-- n_mc_only: MC-only items; n_items: those the decode ran on (the rate's denominator). A decode
-- that is switched off has no rows; a checkpoint without MC-only items has none either.
CREATE OR REPLACE TABLE recovery AS
SELECT r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang,
       replace(r.metric, 'rec_', '') AS decode,
       m.n_mc_only,
       r.n_items,
       r.total::BIGINT AS n_recovered,
       r.value AS rate, r.ci_low, r.ci_high
FROM rates r
JOIN mc_only m
  ON (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
WHERE r.metric LIKE 'rec\_%' ESCAPE '\' AND r.population = 'selected'
ORDER BY r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang,
         array_position(['beam_top', 'beam_any', 'sample_pass', 'sample_majority', 'oneshot', 'oracle'],
                        replace(r.metric, 'rec_', ''));
