-- recovery: how many MC-only items each recovery decode turns back into a correct answer, per
-- checkpoint x benchmark x decode (and pooled: dataset = 'all', lang = 'all').
--   beam_top, beam_any, sample_pass, sample_majority, oneshot: see item_outcomes
--   oracle: any decode that ran is correct
-- n_mc_only: MC-only items; n_items: those the decode ran on (the rate's denominator). A decode
-- that is switched off has no rows; a checkpoint without MC-only items has none either.
-- False-recovery control, against every distractor: the same decodes judged against each
-- distractor of the item as if it were the gold (same judge and rules).
--   false_recovery_rate  share of the items on which the decode produced ANY distractor (the
--                        maximum over distractors); false_recovery_mean: the mean over the
--                        K - 1 distractors of the share that produced that one
--   corrected_rate       rate - false_recovery_rate, per item (paired interval)
-- The same three, sentence-tolerant (*_sentence): over the items MC-only under the sentence
-- verdict (n_items_sentence), every decode judged by correct_sentence.
CREATE OR REPLACE TABLE recovery AS
SELECT r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang,
       replace(r.metric, 'rec_', '') AS decode,
       m.n_mc_only,
       r.n_items,
       r.total::BIGINT AS n_recovered,
       r.value AS rate, r.ci_low, r.ci_high,
       f.value AS false_recovery_rate, f.ci_low AS false_ci_low, f.ci_high AS false_ci_high,
       fm.value AS false_recovery_mean, fm.ci_low AS false_mean_ci_low, fm.ci_high AS false_mean_ci_high,
       c.value AS corrected_rate, c.ci_low AS corrected_ci_low, c.ci_high AS corrected_ci_high,
       s.n_items AS n_items_sentence,
       s.value AS rate_sentence, s.ci_low AS sentence_ci_low, s.ci_high AS sentence_ci_high,
       sf.value AS false_recovery_rate_sentence, sf.ci_low AS false_sentence_ci_low, sf.ci_high AS false_sentence_ci_high,
       sc.value AS corrected_rate_sentence, sc.ci_low AS corrected_sentence_ci_low, sc.ci_high AS corrected_sentence_ci_high
FROM rates r
LEFT JOIN rate_of('f' || r.metric, 'selected') f
  ON (f.model, f.method, f.structure, f.sparsity, f.dataset, f.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
LEFT JOIN rate_of(replace(r.metric, 'rec_', 'frecm_'), 'selected') fm
  ON (fm.model, fm.method, fm.structure, fm.sparsity, fm.dataset, fm.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
LEFT JOIN rate_of('c' || r.metric, 'selected') c
  ON (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
LEFT JOIN rate_of('sent_' || r.metric, 'selected') s
  ON (s.model, s.method, s.structure, s.sparsity, s.dataset, s.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
LEFT JOIN rate_of('sent_f' || r.metric, 'selected') sf
  ON (sf.model, sf.method, sf.structure, sf.sparsity, sf.dataset, sf.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
LEFT JOIN rate_of('sent_c' || r.metric, 'selected') sc
  ON (sc.model, sc.method, sc.structure, sc.sparsity, sc.dataset, sc.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
JOIN mc_only m
  ON (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang) = (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang)
WHERE r.metric LIKE 'rec\_%' ESCAPE '\' AND r.population = 'selected'
ORDER BY r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang,
         array_position(['beam_top', 'beam_any', 'sample_pass', 'sample_majority', 'oneshot', 'oracle'],
                        replace(r.metric, 'rec_', ''));
