-- Which concepts pruning damages, and whether it demotes or erases them.
-- Definitions: docs/concepts.md. Variable: min_support.

-- concept_damage: per pruned checkpoint x concept x benchmark (and across), over the selected
-- items where the concept is active, weighted by a_c(x) (the concept's saliency in the item):
--   mc_only_rate   weighted share of MC-only items (mc right, open wrong)
--   demoted_rate   weighted share whose open answer was lost and a recovery decode found it
--   erased_rate    weighted share whose open answer was lost and not recovered
--   chi_model_dense_<f>, chi_model_<f>, drop_<f> = dense - pruned, for f in open, candidates, mc
--     (population 'selected': both on the same items)
--   damage         'demoted' or 'erased' (the larger weighted rate), 'none' when both are 0
CREATE OR REPLACE TABLE concept_damage AS
WITH joined AS (
    SELECT o.model, o.method, o.structure, o.sparsity, o.dataset, o.lang, o.item_id, o.mc_only, o.status,
           a.concept, a.activation
    FROM item_outcomes o
    JOIN concept_activations a USING (model, dataset, lang, item_id)
    WHERE o.method <> 'dense' AND a.activation > 0
),
rates AS (
    SELECT model, method, structure, sparsity, coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           concept, count(*) AS support, sum(activation) AS weight,
           sum(activation * mc_only::DOUBLE) FILTER (WHERE mc_only IS NOT NULL)
             / sum(activation) FILTER (WHERE mc_only IS NOT NULL) AS mc_only_rate,
           sum(activation * (status = 'demoted')::DOUBLE) / sum(activation) AS demoted_rate,
           sum(activation * (status = 'erased')::DOUBLE) / sum(activation) AS erased_rate
    FROM joined
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, concept),
                            (model, method, structure, sparsity, concept))
),
chi AS (
    SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.concept,
           max(d.chi_model) FILTER (WHERE p.format = 'open')       AS chi_model_dense_open,
           max(p.chi_model) FILTER (WHERE p.format = 'open')       AS chi_model_open,
           max(d.chi_model) FILTER (WHERE p.format = 'candidates') AS chi_model_dense_candidates,
           max(p.chi_model) FILTER (WHERE p.format = 'candidates') AS chi_model_candidates,
           max(d.chi_model) FILTER (WHERE p.format = 'mc')         AS chi_model_dense_mc,
           max(p.chi_model) FILTER (WHERE p.format = 'mc')         AS chi_model_mc
    FROM chi_model p
    JOIN chi_model d
      ON d.population = 'selected' AND d.method = 'dense' AND d.model = p.model AND d.format = p.format
     AND d.dataset = p.dataset AND d.lang = p.lang AND d.concept = p.concept
    WHERE p.population = 'selected' AND p.method <> 'dense'
    GROUP BY ALL
)
SELECT r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang, r.concept, l.label,
       r.support, r.support >= getvariable('min_support') AS supported, r.weight,
       r.mc_only_rate, r.demoted_rate, r.erased_rate,
       CASE WHEN r.demoted_rate = 0 AND r.erased_rate = 0 THEN 'none'
            WHEN r.demoted_rate >= r.erased_rate THEN 'demoted' ELSE 'erased' END AS damage,
       c.chi_model_dense_open, c.chi_model_open, c.chi_model_dense_open - c.chi_model_open AS drop_open,
       c.chi_model_dense_candidates, c.chi_model_candidates,
       c.chi_model_dense_candidates - c.chi_model_candidates AS drop_candidates,
       c.chi_model_dense_mc, c.chi_model_mc, c.chi_model_dense_mc - c.chi_model_mc AS drop_mc
FROM rates r
LEFT JOIN chi c USING (model, method, structure, sparsity, dataset, lang, concept)
JOIN concept_labels l USING (model, concept)
ORDER BY r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang, r.concept;
