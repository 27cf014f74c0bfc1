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
-- 0/n and n/n rates get an exact interval instead (ci_method 'exact', below).
-- The intervals come from rate_intervals, which benchmark_illusion.metrics.bootstrap computes from
-- item_values and the resamples (bootstrap_weights) before this file runs: per benchmark, the
-- replicate sums of every checkpoint x metric are one matrix product of the draw counts with
-- the item values (as a SQL join, the same work is billions of rows on the paper grid).
CREATE OR REPLACE TABLE rates AS
WITH point AS (
    SELECT population, model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric,
           count(*) AS n_items, sum(value) AS total, avg(value) AS value,
           min(value) AS lo_value, max(value) AS hi_value
    FROM item_values
    GROUP BY GROUPING SETS ((population, model, method, structure, sparsity, dataset, lang, metric),
                            (population, model, method, structure, sparsity, metric))
)
SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric, p.population,
       p.n_items, p.total, p.value,
       CASE WHEN e.kind IS NULL THEN i.ci_low
            WHEN e.kind = 'zero_difference' THEN -e.bound
            WHEN e.kind = 'none' THEN 0.0
            ELSE 1 - e.bound END AS ci_low,
       CASE WHEN e.kind IS NULL THEN i.ci_high
            WHEN e.kind = 'all' THEN 1.0
            ELSE e.bound END AS ci_high,
       coalesce(i.n_boot, 0) AS n_boot,
       CASE WHEN e.kind IS NULL THEN 'bootstrap' ELSE 'exact' END AS ci_method
FROM point p
LEFT JOIN rate_intervals i USING (population, model, method, structure, sparsity, dataset, lang, metric)
-- 0/n and n/n: every resample gives the same rate, so the bootstrap interval is a point. Such a
-- rate gets the exact Clopper-Pearson interval instead: [0, 1 - (alpha/2)^(1/n)] for 0 of n,
-- [(alpha/2)^(1/n), 1] for n of n (alpha = 1 - ci_level). A paired difference that is 0 on every
-- item (no discordant item of n) gets +/- the same bound: the share of discordant items is at
-- most 1 - (alpha/2)^(1/n), and so is the difference's size. Rescaled values (the guessing and
-- chance adjustments) keep the bootstrap's.
LEFT JOIN LATERAL (
    SELECT CASE WHEN p.lo_value = 0 AND p.hi_value = 0
                     AND regexp_matches(p.metric, '(^|_)(drop|odrop|crec)_|delta_pr') THEN 'zero_difference'
                WHEN p.lo_value = 0 AND p.hi_value = 0 THEN 'none'
                WHEN p.lo_value = 1 AND p.hi_value = 1 THEN 'all' END AS kind,
           1 - pow((1 - getvariable('ci_level')) / 2, 1.0 / p.n_items) AS bound
) e ON NOT regexp_matches(p.metric, 'guess_adj|chance_adj')
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric;

-- rate_of(m, pop): the rows of `rates` for one metric m in one population pop ('selected' or
-- 'pool'), every column of `rates`. The metric tables below take their values and intervals from
-- it, joined by checkpoint and benchmark. m and pop may be expressions of the row it is joined to
-- (DuckDB then joins it laterally: one metric per row), e.g.
--   LEFT JOIN rate_of('acc_' || a.format, 'selected') r
--     ON (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang) = (a.model, a.method, ...)
CREATE OR REPLACE MACRO rate_of(m, pop) AS TABLE
SELECT * FROM rates WHERE metric = m AND population = pop;

-- metrics_settings: the aggregation's variables (config `metrics`), kept with the tables so that
-- a reader of the database (e.g. `python -m benchmark_illusion compare`) uses the same level.
CREATE OR REPLACE TABLE metrics_settings AS
SELECT getvariable('bootstrap_seed')::BIGINT AS bootstrap_seed,
       getvariable('bootstrap_replicates')::BIGINT AS bootstrap_replicates,
       getvariable('ci_level')::DOUBLE AS ci_level;
