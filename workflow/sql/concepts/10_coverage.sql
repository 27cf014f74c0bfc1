-- Benchmark coverage per SAE concept (chi_bench). Definitions: docs/concepts.md.
-- Inputs (loaded by the competency_gaps rule): concept_activations (model, dataset, lang, item_id,
-- concept, activation = a_c(x) > 0), concept_tokens (one row per item of each benchmark),
-- concept_labels (one row per latent). Variables: under_quantile, over_quantile.
-- A benchmark is a dataset x language; dataset = lang = 'all' rows are across benchmarks.

-- concept_benchmarks: the items of each benchmark (every candidate item, not only the selected).
CREATE OR REPLACE TABLE concept_benchmarks AS
SELECT model, dataset, lang, count(*) AS n_items, sum(n_tokens) AS n_tokens, sum(n_excluded) AS n_excluded
FROM concept_tokens
GROUP BY ALL
ORDER BY ALL;

-- chi_bench(c, B) = mean_x a_c(x) / mean over all concepts c' and items x of B of a_c'(x)
-- (1 = an average concept). Across benchmarks: the mean of chi_bench over the benchmarks.
-- n_active: items of B where the concept is active (a_c(x) > 0).
CREATE OR REPLACE TABLE chi_bench AS
WITH grid AS (
    SELECT b.model, b.dataset, b.lang, b.n_items, l.concept
    FROM concept_benchmarks b JOIN concept_labels l USING (model)
),
sums AS (
    SELECT model, dataset, lang, concept, sum(activation) AS total, count(*) AS n_active
    FROM concept_activations
    WHERE activation > 0
    GROUP BY ALL
),
per_benchmark AS (
    SELECT g.model, g.dataset, g.lang, g.concept, g.n_items,
           coalesce(s.n_active, 0) AS n_active,
           coalesce(s.total, 0) / g.n_items AS mean_activation
    FROM grid g LEFT JOIN sums s USING (model, dataset, lang, concept)
),
scored AS (
    SELECT *,
           CASE WHEN avg(mean_activation) OVER w > 0 THEN mean_activation / avg(mean_activation) OVER w END AS chi_bench
    FROM per_benchmark
    WINDOW w AS (PARTITION BY model, dataset, lang)
),
across AS (
    SELECT model, 'all' AS dataset, 'all' AS lang, concept, sum(n_items)::BIGINT AS n_items, sum(n_active)::BIGINT AS n_active,
           sum(mean_activation * n_items) / sum(n_items) AS mean_activation, avg(chi_bench) AS chi_bench
    FROM scored
    GROUP BY model, concept
),
rows AS (
    SELECT * FROM scored UNION ALL SELECT * FROM across
),
thresholds AS (
    SELECT model, dataset, lang,
           quantile_cont(chi_bench, getvariable('under_quantile')) AS under_threshold,
           quantile_cont(chi_bench, getvariable('over_quantile')) AS over_threshold
    FROM rows
    WHERE n_active > 0
    GROUP BY ALL
)
SELECT r.model, r.dataset, r.lang, r.concept, l.label, r.n_items, r.n_active, r.mean_activation, r.chi_bench,
       CASE WHEN r.n_active = 0 THEN 'missing'
            WHEN r.chi_bench <= t.under_threshold THEN 'under'
            WHEN r.chi_bench >= t.over_threshold THEN 'over'
            ELSE 'typical' END AS coverage,
       t.under_threshold, t.over_threshold
FROM rows r
JOIN concept_labels l USING (model, concept)
LEFT JOIN thresholds t USING (model, dataset, lang)
ORDER BY r.model, r.dataset, r.lang, r.concept;

-- coverage_gaps: the missing, under- and over-represented concepts of each benchmark (and
-- across benchmarks), lowest coverage first within each kind.
CREATE OR REPLACE TABLE coverage_gaps AS
SELECT model, dataset, lang, coverage, concept, label, chi_bench, n_active, n_items
FROM chi_bench
WHERE coverage <> 'typical'
ORDER BY model, dataset, lang, CASE coverage WHEN 'missing' THEN 0 WHEN 'under' THEN 1 ELSE 2 END, chi_bench, concept;
