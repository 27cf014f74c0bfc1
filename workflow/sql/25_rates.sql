-- The rates: every metric of item_values averaged per checkpoint x benchmark and pooled, with
-- its seeded percentile-bootstrap interval over items. Definitions: docs/metrics.md.
-- Variables set by the aggregation (config `metrics`): bootstrap_seed, bootstrap_replicates,
-- ci_level (read by the bootstrap step that makes rate_intervals).
--
-- The resampling unit is the item. One resample of a benchmark (model x dataset x language) is
-- shared by every checkpoint, format and metric, so differences between checkpoints (drop vs
-- dense) and between formats (Delta_PR) are paired: each is the mean of a per-item difference.
-- Pooled rows (dataset = 'all', lang = 'all') resample each benchmark separately (stratified).

-- rates: one row per checkpoint x benchmark x metric, and per checkpoint x metric pooled over
-- benchmarks (dataset = 'all', lang = 'all'). value = mean over the items in the metric's
-- denominator (n_items); ci_low, ci_high = percentiles (1 -/+ ci_level) / 2 of the replicate
-- values; replicates that drew no item of the denominator are skipped (n_boot counts the rest).
-- The intervals come from rate_intervals, which benchmark_illusion.bootstrap computes from
-- item_values and the resamples (bootstrap_weights) before this file runs: per benchmark, the
-- replicate sums of every checkpoint x metric are one matrix product of the draw counts with
-- the item values, the work that as a SQL join grew to billions of rows on the paper grid.
CREATE OR REPLACE TABLE rates AS
WITH point AS (
    SELECT population, model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric,
           count(*) AS n_items, sum(value) AS total, avg(value) AS value
    FROM item_values
    GROUP BY GROUPING SETS ((population, model, method, structure, sparsity, dataset, lang, metric),
                            (population, model, method, structure, sparsity, metric))
)
SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric, p.population,
       p.n_items, p.total, p.value, i.ci_low, i.ci_high, coalesce(i.n_boot, 0) AS n_boot
FROM point p
LEFT JOIN rate_intervals i USING (population, model, method, structure, sparsity, dataset, lang, metric)
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric;

-- rate_of(m, pop): the rows of `rates` for one metric m in one population pop ('selected' or
-- 'pool'), every column of `rates`. The metric tables below take their values and intervals from
-- it, joined by checkpoint and benchmark. m and pop may be expressions of the row it is joined to
-- (DuckDB then joins it laterally: one metric per row), e.g.
--   LEFT JOIN rate_of('acc_' || a.format, 'selected') r
--     ON (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang) = (a.model, a.method, ...)
CREATE OR REPLACE MACRO rate_of(m, pop) AS TABLE
SELECT * FROM rates WHERE metric = m AND population = pop;
