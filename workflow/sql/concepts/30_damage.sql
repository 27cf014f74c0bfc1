-- Which concepts pruning damages, beyond what their items' languages explain, and whether it
-- demotes or erases them. Definitions: docs/concepts.md. Variable: min_support.
-- The intervals, p-values and q-values of the drops are added to concept_damage afterwards by
-- benchmark_illusion.concepts.damage.damage_tests (resampling is numpy there, from the tables below).

-- concept_item_drops: the per-item drop behind chi_model's drop, per pruned checkpoint x format x
-- selected item: item_drop = s_dense(x) - s_pruned(x) in {-1, 0, 1}, from the item_outcomes pair
-- (the dense model's answer to the same item next to the checkpoint's). Items where either side
-- has no answer in the format have no row.
CREATE OR REPLACE TABLE concept_item_drops AS
SELECT model, method, structure, sparsity, format, dataset, lang, item_id, item_drop
FROM (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           dense_open_correct::DOUBLE - open_correct::DOUBLE             AS "open",
           dense_candidates_correct::DOUBLE - candidates_correct::DOUBLE AS "candidates",
           dense_mc_correct::DOUBLE - mc_correct::DOUBLE                 AS "mc",
           dense_open_correct_sentence::DOUBLE - open_correct_sentence::DOUBLE             AS "open_sentence",
           dense_candidates_correct_sentence::DOUBLE - candidates_correct_sentence::DOUBLE AS "candidates_sentence"
    FROM item_outcomes
    WHERE method <> 'dense'
)
UNPIVOT (item_drop FOR format IN ("open", "candidates", "mc", "open_sentence", "candidates_sentence"))
ORDER BY ALL;

-- concept_lang_drops: each benchmark's (dataset x language) overall drop on the selected items,
-- per pruned checkpoint x format: the unweighted mean of item_drop. It is what a concept's drop
-- would be if pruning hit items by language only.
CREATE OR REPLACE TABLE concept_lang_drops AS
SELECT model, method, structure, sparsity, format, dataset, lang, count(*) AS n_items, avg(item_drop) AS lang_drop
FROM concept_item_drops
GROUP BY ALL
ORDER BY ALL;

-- concept_damage: per pruned checkpoint x concept x benchmark (and across), over the selected
-- items where the concept is active, weighted by a_c(x) (the concept's saliency in the item):
--   mc_only_rate   weighted share of MC-only items (mc right, open wrong)
--   mc_only_sentence_rate  the same under the sentence-tolerant verdict (open not even a
--                  sentence stating the gold)
--   verbose_rate   weighted share whose open answer states the gold in a sentence only
--   demoted_rate   weighted share whose open answer was lost and a recovery decode found it
--   erased_rate    weighted share whose open answer was lost, decoded, and not recovered
--   untested_rate  weighted share whose open answer was lost and never decoded
--   (these three pool the items of all benchmarks in the 'all' rows)
--   chi_model_dense_<f>, chi_model_<f>, drop_<f> = dense - pruned, for f in open, candidates, mc,
--     open_sentence, candidates_sentence
--     (population 'selected': both on the same items; 'all' rows: chi_model's mean over the
--     benchmarks where the concept is active)
--   expected_drop_<f>  the drop the concept's languages predict: its benchmark's lang_drop; in the
--                  'all' rows the mean of lang_drop over the benchmarks that drop_<f> averages
--   excess_<f>     drop_<f> - expected_drop_<f>: the language-adjusted excess damage
--   damage         'demoted' or 'erased' (the larger weighted rate), 'mixed' when they are equal
--                  (to 1e-9), 'none' when both are 0
CREATE OR REPLACE TABLE concept_damage AS
WITH joined AS (
    SELECT o.model, o.method, o.structure, o.sparsity, o.dataset, o.lang, o.item_id, o.mc_only,
           o.mc_only_sentence, o.status,
           a.concept, a.activation
    FROM item_outcomes o
    JOIN concept_activations a USING (model, dataset, lang, item_id)
    WHERE o.method <> 'dense' AND a.activation > 0
),
concept_rates AS (
    -- the weighted MC-only, demoted and erased rates (named apart from the metric table `rates`)
    SELECT model, method, structure, sparsity, coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           concept, count(*) AS support, sum(activation) AS weight,
           sum(activation * mc_only::DOUBLE) FILTER (WHERE mc_only IS NOT NULL)
             / sum(activation) FILTER (WHERE mc_only IS NOT NULL) AS mc_only_rate,
           sum(activation * mc_only_sentence::DOUBLE) FILTER (WHERE mc_only_sentence IS NOT NULL)
             / sum(activation) FILTER (WHERE mc_only_sentence IS NOT NULL) AS mc_only_sentence_rate,
           sum(activation * (status = 'verbose')::DOUBLE) / sum(activation) AS verbose_rate,
           sum(activation * (status = 'demoted')::DOUBLE) / sum(activation) AS demoted_rate,
           sum(activation * (status = 'erased')::DOUBLE) / sum(activation) AS erased_rate,
           sum(activation * (status = 'untested')::DOUBLE) / sum(activation) AS untested_rate
    FROM joined
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, concept),
                            (model, method, structure, sparsity, concept))
),
pairs AS (
    -- the checkpoint's chi_model next to the dense model's, per format, benchmark and concept
    SELECT p.model, p.method, p.structure, p.sparsity, p.format, p.dataset, p.lang, p.concept,
           d.chi_model AS chi_dense, p.chi_model AS chi_pruned
    FROM chi_model p
    JOIN chi_model d
      ON d.population = 'selected' AND d.method = 'dense' AND d.model = p.model AND d.format = p.format
     AND d.dataset = p.dataset AND d.lang = p.lang AND d.concept = p.concept
    WHERE p.population = 'selected' AND p.method <> 'dense'
),
expected_benchmark AS (
    SELECT p.model, p.method, p.structure, p.sparsity, p.format, p.dataset, p.lang, p.concept, l.lang_drop AS expected
    FROM pairs p
    JOIN concept_lang_drops l USING (model, method, structure, sparsity, format, dataset, lang)
    WHERE p.dataset <> 'all'
),
expected AS (
    SELECT * FROM expected_benchmark
    UNION ALL
    SELECT model, method, structure, sparsity, format, 'all', 'all', concept, avg(expected)
    FROM expected_benchmark
    GROUP BY model, method, structure, sparsity, format, concept
),
chi AS (
    SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.concept,
           max(p.chi_dense)  FILTER (WHERE p.format = 'open')       AS chi_model_dense_open,
           max(p.chi_pruned) FILTER (WHERE p.format = 'open')       AS chi_model_open,
           max(e.expected)   FILTER (WHERE p.format = 'open')       AS expected_drop_open,
           max(p.chi_dense)  FILTER (WHERE p.format = 'candidates') AS chi_model_dense_candidates,
           max(p.chi_pruned) FILTER (WHERE p.format = 'candidates') AS chi_model_candidates,
           max(e.expected)   FILTER (WHERE p.format = 'candidates') AS expected_drop_candidates,
           max(p.chi_dense)  FILTER (WHERE p.format = 'mc')         AS chi_model_dense_mc,
           max(p.chi_pruned) FILTER (WHERE p.format = 'mc')         AS chi_model_mc,
           max(e.expected)   FILTER (WHERE p.format = 'mc')         AS expected_drop_mc,
           max(p.chi_dense)  FILTER (WHERE p.format = 'open_sentence')       AS chi_model_dense_open_sentence,
           max(p.chi_pruned) FILTER (WHERE p.format = 'open_sentence')       AS chi_model_open_sentence,
           max(e.expected)   FILTER (WHERE p.format = 'open_sentence')       AS expected_drop_open_sentence,
           max(p.chi_dense)  FILTER (WHERE p.format = 'candidates_sentence') AS chi_model_dense_candidates_sentence,
           max(p.chi_pruned) FILTER (WHERE p.format = 'candidates_sentence') AS chi_model_candidates_sentence,
           max(e.expected)   FILTER (WHERE p.format = 'candidates_sentence') AS expected_drop_candidates_sentence
    FROM pairs p
    LEFT JOIN expected e USING (model, method, structure, sparsity, format, dataset, lang, concept)
    GROUP BY ALL
),
drops AS (
    SELECT *,
           chi_model_dense_open - chi_model_open             AS drop_open,
           chi_model_dense_candidates - chi_model_candidates AS drop_candidates,
           chi_model_dense_mc - chi_model_mc                 AS drop_mc,
           chi_model_dense_open_sentence - chi_model_open_sentence             AS drop_open_sentence,
           chi_model_dense_candidates_sentence - chi_model_candidates_sentence AS drop_candidates_sentence
    FROM chi
)
SELECT r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang, r.concept, l.label,
       r.support, r.support >= getvariable('min_support') AS supported, r.weight,
       r.mc_only_rate, r.mc_only_sentence_rate, r.verbose_rate, r.demoted_rate, r.erased_rate,
       r.untested_rate,
       CASE WHEN r.demoted_rate = 0 AND r.erased_rate = 0 THEN 'none'
            WHEN abs(r.demoted_rate - r.erased_rate) <= 1e-9 THEN 'mixed'
            WHEN r.demoted_rate > r.erased_rate THEN 'demoted'
            ELSE 'erased' END AS damage,
       c.chi_model_dense_open, c.chi_model_open, c.drop_open,
       c.chi_model_dense_candidates, c.chi_model_candidates, c.drop_candidates,
       c.chi_model_dense_mc, c.chi_model_mc, c.drop_mc,
       c.expected_drop_open, c.drop_open - c.expected_drop_open AS excess_open,
       c.expected_drop_candidates, c.drop_candidates - c.expected_drop_candidates AS excess_candidates,
       c.expected_drop_mc, c.drop_mc - c.expected_drop_mc AS excess_mc,
       c.chi_model_dense_open_sentence, c.chi_model_open_sentence, c.drop_open_sentence,
       c.expected_drop_open_sentence, c.drop_open_sentence - c.expected_drop_open_sentence AS excess_open_sentence,
       c.chi_model_dense_candidates_sentence, c.chi_model_candidates_sentence, c.drop_candidates_sentence,
       c.expected_drop_candidates_sentence,
       c.drop_candidates_sentence - c.expected_drop_candidates_sentence AS excess_candidates_sentence
FROM concept_rates r
LEFT JOIN drops c USING (model, method, structure, sparsity, dataset, lang, concept)
JOIN concept_labels l USING (model, concept)
ORDER BY r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang, r.concept;
