-- accuracy_by_distractor_source: mc and candidates accuracy on the selected items, split by
-- whether every distractor of the item occurs verbatim in its passage (items column
-- distractors_in_passage; always true with items.distractors = passage). With options from
-- other passages, "which option is written in the passage" can solve an item without knowing
-- the answer; a higher accuracy on the items where it cannot (distractors_in_passage = true)
-- would be that shortcut. One row per checkpoint x benchmark x distractors_in_passage x format
-- present, plus pooled rows (dataset = 'all', lang = 'all'). accuracy = mean of the per-item
-- correctness (mc: acc, candidates: contained answer) over the group's items, with a percentile
-- bootstrap interval from the same item resamples as `rates` (bootstrap_weights, population
-- 'selected': the resample of a benchmark restricted to the group's items; replicates that drew
-- none of them are skipped). distractors_in_passage is NULL for item files written before the
-- column existed.
CREATE OR REPLACE TABLE accuracy_by_distractor_source AS
WITH per_item AS (
    SELECT o.model, o.method, o.structure, o.sparsity, o.dataset, o.lang, o.item_id,
           s.distractors_in_passage, f.format,
           CASE f.format WHEN 'mc' THEN o.mc_correct ELSE o.candidates_correct END::DOUBLE AS value
    FROM item_outcomes o
    JOIN selected_items s USING (model, dataset, lang, item_id)
    CROSS JOIN (VALUES ('mc'), ('candidates')) AS f(format)
),
valued AS (
    SELECT * FROM per_item WHERE value IS NOT NULL
),
point AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           distractors_in_passage, format,
           count(*) AS n_items, avg(value) AS accuracy
    FROM valued
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, distractors_in_passage, format),
                            (model, method, structure, sparsity, distractors_in_passage, format))
),
per_benchmark AS (
    SELECT v.model, v.method, v.structure, v.sparsity, v.dataset, v.lang, v.distractors_in_passage, v.format, w.b,
           sum(w.w * v.value) AS s, sum(w.w) AS n
    FROM valued v
    JOIN bootstrap_weights w USING (model, dataset, lang, item_id)
    WHERE w.population = 'selected'
    GROUP BY ALL
),
replicates AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           distractors_in_passage, format, b, sum(s) / sum(n) AS value
    FROM per_benchmark
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, distractors_in_passage, format, b),
                            (model, method, structure, sparsity, distractors_in_passage, format, b))
),
intervals AS (
    SELECT model, method, structure, sparsity, dataset, lang, distractors_in_passage, format,
           quantile_cont(value, (1 - getvariable('ci_level')) / 2) AS ci_low,
           quantile_cont(value, (1 + getvariable('ci_level')) / 2) AS ci_high
    FROM replicates
    GROUP BY ALL
)
SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.distractors_in_passage, p.format,
       p.n_items, p.accuracy, i.ci_low, i.ci_high
FROM point p
LEFT JOIN intervals i
  ON (i.model, i.method, i.structure, i.sparsity, i.dataset, i.lang, i.format)
   = (p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.format)
 AND i.distractors_in_passage IS NOT DISTINCT FROM p.distractors_in_passage
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.distractors_in_passage,
         array_position(['mc', 'candidates'], p.format);
