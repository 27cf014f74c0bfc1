-- oracle: the recoverability comparison of Wen et al. (The Benchmark Illusion, arXiv:2606.17609) over ALL selected items, per checkpoint x
-- benchmark x decode (and pooled: dataset = 'all', lang = 'all').
--   decode   greedy (the open answer), beam_top, beam_any, sample_pass, sample_majority, oneshot
--            (see item_outcomes), and oracle: greedy or any recovery decode correct
--   accuracy that decode's accuracy over the n_items it ran on (greedy: every selected item)
--   complete n_items = n_selected: the decode ran on every selected item. Only then is the row
--            Wen et al.'s number; it needs evaluation.recovery.scope 'all' (a narrower scope
--            decodes some items only, and `oracle` is then NULL for the undecoded wrong ones)
--   dense_accuracy, drop  the dense model's accuracy under the same decode, and the drop
--            (dense minus checkpoint, paired per item, Bonett-Price interval); NULL on the dense
--            row, whose own noise floor is in support_gradient and mc_only
-- accuracy_sentence, drop_sentence (greedy and oracle rows): the same under the
--            sentence-tolerant verdict
-- A small drop in `oracle` beside a large one in `greedy` says the answers were demoted, not
-- erased, over the whole benchmark rather than over the MC-only items alone.
CREATE OR REPLACE TABLE oracle AS
WITH n_sel AS (
    SELECT model, method, structure, sparsity, coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           count(*) AS n_selected
    FROM item_outcomes
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang), (model, method, structure, sparsity))
)
SELECT a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang,
       replace(a.metric, 'oacc_', '') AS decode,
       a.n_items, s.n_selected, a.n_items = s.n_selected AS complete,
       a.value AS accuracy, a.ci_low, a.ci_high,
       dense.value AS dense_accuracy,
       d.value AS drop, d.ci_low AS drop_ci_low, d.ci_high AS drop_ci_high,
       sa.value AS accuracy_sentence, sa.ci_low AS sentence_ci_low, sa.ci_high AS sentence_ci_high,
       sd.value AS drop_sentence, sd.ci_low AS drop_sentence_ci_low, sd.ci_high AS drop_sentence_ci_high
FROM rates a
JOIN n_sel s
  ON (s.model, s.method, s.structure, s.sparsity, s.dataset, s.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of(replace(a.metric, 'oacc_', 'odrop_'), 'selected') d
  ON (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of(a.metric, 'selected') dense
  ON dense.method = 'dense' AND a.method <> 'dense'
 AND (dense.model, dense.dataset, dense.lang) = (a.model, a.dataset, a.lang)
LEFT JOIN rate_of('sent_' || a.metric, 'selected') sa
  ON (sa.model, sa.method, sa.structure, sa.sparsity, sa.dataset, sa.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of('sent_' || replace(a.metric, 'oacc_', 'odrop_'), 'selected') sd
  ON (sd.model, sd.method, sd.structure, sd.sparsity, sd.dataset, sd.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
WHERE a.metric LIKE 'oacc\_%' ESCAPE '\' AND a.population = 'selected'
ORDER BY a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang,
         array_position(['greedy', 'beam_top', 'beam_any', 'sample_pass', 'sample_majority', 'oneshot', 'oracle'],
                        replace(a.metric, 'oacc_', ''));
