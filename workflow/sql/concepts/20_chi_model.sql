-- How well a checkpoint does where a concept is active (chi_model), and its gaps.
-- Definitions: docs/concepts.md. Variables: min_support, under_quantile.

-- concept_scores: s(x) per population x checkpoint x item x format (true = correct). Formats
-- open, candidates, mc (the strict judge) and open_sentence, candidates_sentence (the same
-- answers under the sentence-tolerant verdict, correct_sentence).
--   population 'selected': the evaluated items, every checkpoint (from item_outcomes)
--   population 'pool':     the dense model's selection pool (from the pool logs)
CREATE OR REPLACE TABLE concept_scores AS
SELECT 'selected' AS population, model, method, structure, sparsity, dataset, lang, item_id, format, correct
FROM item_outcomes
UNPIVOT (correct FOR format IN (open_correct AS 'open', candidates_correct AS 'candidates', mc_correct AS 'mc',
                                open_correct_sentence AS 'open_sentence',
                                candidates_correct_sentence AS 'candidates_sentence'))
UNION ALL
SELECT 'pool' AS population, model, method, structure, sparsity, dataset, lang, item_id, format, bool_or(correct) AS correct
FROM pool
WHERE ((format = 'open' AND decode = 'greedy') OR format IN ('candidates', 'mc')) AND correct IS NOT NULL
GROUP BY ALL
UNION ALL
SELECT 'pool' AS population, model, method, structure, sparsity, dataset, lang, item_id,
       format || '_sentence' AS format, bool_or(correct_sentence) AS correct
FROM pool
WHERE ((format = 'open' AND decode = 'greedy') OR format = 'candidates') AND correct_sentence IS NOT NULL
GROUP BY ALL;

-- chi_model(c, B) = sum_x a_c(x) s(x) / sum_x a_c(x) over the items x of B that the checkpoint
-- was evaluated on in that format. support: those items where the concept is active;
-- supported: support >= min_support. accuracy: the checkpoint's plain accuracy on the same items
-- (chi_model below it means the checkpoint does worse where the concept fires).
-- dataset = lang = 'all': the mean of chi_model(c, B) over the benchmarks where the concept is
-- active (n_benchmarks), as chi_bench averages over benchmarks: each benchmark counts once
-- whatever its size. accuracy is then the mean accuracy of the same benchmarks; support, weight
-- and n_items are summed over them.
CREATE OR REPLACE TABLE chi_model AS
WITH joined AS (
    SELECT s.*, a.concept, a.activation
    FROM concept_scores s
    JOIN concept_activations a USING (model, dataset, lang, item_id)
    WHERE a.activation > 0 AND s.correct IS NOT NULL
),
agg AS (
    SELECT population, model, method, structure, sparsity, format, dataset, lang, concept,
           count(*) AS support, sum(activation) AS weight,
           sum(activation * correct::DOUBLE) / sum(activation) AS chi_model
    FROM joined
    GROUP BY ALL
),
acc AS (
    SELECT population, model, method, structure, sparsity, format, dataset, lang,
           count(*) AS n_items, avg(correct::DOUBLE) AS accuracy
    FROM concept_scores
    WHERE correct IS NOT NULL
    GROUP BY ALL
),
per_benchmark AS (
    SELECT a.*, c.n_items, c.accuracy, 1 AS n_benchmarks
    FROM agg a
    JOIN acc c USING (population, model, method, structure, sparsity, format, dataset, lang)
),
across AS (
    SELECT population, model, method, structure, sparsity, format, 'all' AS dataset, 'all' AS lang, concept,
           sum(support)::BIGINT AS support, sum(weight) AS weight, avg(chi_model) AS chi_model,
           sum(n_items)::BIGINT AS n_items, avg(accuracy) AS accuracy, count(*) AS n_benchmarks
    FROM per_benchmark
    GROUP BY population, model, method, structure, sparsity, format, concept
),
rows AS (
    SELECT * FROM per_benchmark UNION ALL BY NAME SELECT * FROM across
)
SELECT r.population, r.model, r.method, r.structure, r.sparsity, r.format, r.dataset, r.lang, r.concept, l.label,
       r.support, r.n_items, r.weight, r.chi_model, r.accuracy,
       r.support >= getvariable('min_support') AS supported, r.n_benchmarks
FROM rows r
JOIN concept_labels l USING (model, concept)
ORDER BY ALL;

-- model_gaps: per population x checkpoint x format x benchmark (and across), the supported
-- concepts with the lowest chi_model: the bottom under_quantile share of them (at least one),
-- ties broken by concept id. gap_rank 1 = the weakest. Not for the dense model on the selected
-- items: they were selected because it answered them (open and mc), so its chi_model there is
-- (close to) 1 for every concept and a ranking of it would rank ties and re-evaluation noise.
CREATE OR REPLACE TABLE model_gaps AS
WITH ranked AS (
    SELECT *,
           row_number() OVER w AS gap_rank,
           count(*) OVER (PARTITION BY population, model, method, structure, sparsity, format, dataset, lang) AS n_supported
    FROM chi_model
    WHERE supported AND NOT (population = 'selected' AND method = 'dense')
    WINDOW w AS (PARTITION BY population, model, method, structure, sparsity, format, dataset, lang
                 ORDER BY chi_model, concept)
)
SELECT population, model, method, structure, sparsity, format, dataset, lang, gap_rank, concept, label,
       chi_model, accuracy, support, n_supported
FROM ranked
WHERE gap_rank <= greatest(1, ceil(getvariable('under_quantile') * n_supported))
ORDER BY population, model, method, structure, sparsity, format, dataset, lang, gap_rank;
