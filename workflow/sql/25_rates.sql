-- The rates: every metric of item_values averaged per checkpoint x benchmark and pooled, with
-- its interval. Definitions: docs/metrics.md ("Rates and their intervals").
-- Variables set by the aggregation (config `metrics`): bootstrap_seed, bootstrap_replicates,
-- ci_level (read by the bootstrap step that makes rate_intervals), and ci_z, the two-sided
-- normal quantile of ci_level (1.959964 at 0.95) that the closed-form intervals use.
--
-- Which interval a rate gets (ci_method) depends on its metric's item values over the whole
-- table, so that every row of a metric gets the same kind:
--   'wilson'        a proportion: every value 0 or 1 (accuracies, mc_only, demoted, top<k>, ...).
--                   The Wilson score interval of total (the count of 1s) of n_items. A pooled
--                   row's count is pooled over the benchmarks: its rate is the mean over all
--                   their items, so the pooled proportion.
--   'bonett_price'  a paired difference of two proportions (the metric names of the paired
--                   regexp below: drop_*, odrop_*, crec_*, delta_pr and their sent_ forms) whose
--                   every value is -1, 0 or 1. The Bonett-Price adjusted Wald interval from the
--                   discordant counts: b items with value 1, c with value -1, of n_items.
--   'bootstrap'     the rest: the rescaled values (*_guess_adj, *_chance_adj, whatever their
--                   values), and values other than 0/1 (-1/0/1 for a difference), e.g. the share
--                   of distractors produced (frecm_*). The seeded percentile bootstrap over items.
--   'exact'         a bootstrap rate whose items all have the same value 0, or all 1 (not the
--                   rescaled ones): the bootstrap interval would be a point (below).
-- At the default run's 14-22 items, the 95% percentile bootstrap of a proportion covers some
-- true rates between 0.1 and 0.9 in only 86-87% of samples; Wilson's covers at least 92% there,
-- Bonett-Price's at least 93% of paired differences (docs/metrics.md, "Which interval a rate
-- gets"; benchmark_illusion.metrics.exact has the same formulas in Python, and
-- tests/metrics/test_intervals.py measures the coverage).
--
-- The bootstrap's resampling unit is the item. One resample of a benchmark (model x dataset x
-- language) is shared by every checkpoint, format and metric, so differences between
-- checkpoints (drop vs dense) and between formats (Delta_PR) are paired: each is the mean of a
-- per-item difference. Pooled rows (dataset = 'all', lang = 'all') resample each benchmark
-- separately (stratified).

-- wilson_low(k, n, z), wilson_high(k, n, z): the Wilson (1927) score interval of the
-- proportion k/n at the normal quantile z, (k + z^2/2) / (n + z^2) -/+ z / (n + z^2) *
-- sqrt(k (n - k) / n + z^2 / 4), clamped to [0, 1] (exactly 0 at k = 0, 1 at k = n); NULL
-- for n = 0. k may be fractional.
CREATE OR REPLACE MACRO wilson_low(k, n, z) AS
    CASE WHEN n > 0 AND k <= 0 THEN 0.0
         WHEN n > 0 THEN least(1.0, greatest(0.0,
             ((k + z * z / 2) - z * sqrt(greatest(k * (n - k) / n, 0.0) + z * z / 4)) / (n + z * z)))
    END::DOUBLE;
CREATE OR REPLACE MACRO wilson_high(k, n, z) AS
    CASE WHEN n > 0 AND k >= n THEN 1.0
         WHEN n > 0 THEN least(1.0, greatest(0.0,
             ((k + z * z / 2) + z * sqrt(greatest(k * (n - k) / n, 0.0) + z * z / 4)) / (n + z * z)))
    END::DOUBLE;

-- bonett_price_low(b, c, n, z), bonett_price_high(b, c, n, z): the Bonett & Price (2012)
-- adjusted Wald interval of a paired difference of proportions from n pairs, b discordant one
-- way (value 1) and c the other (value -1): with p12 = (b + 1) / (n + 2), p21 = (c + 1) / (n + 2)
-- and d = p12 - p21, d -/+ z * sqrt((p12 + p21 - d^2) / (n + 2)), clamped to [-1, 1]; NULL for
-- n = 0. Centred on the adjusted d; the rate itself stays (b - c) / n.
CREATE OR REPLACE MACRO _bonett_price_d(b, c, n) AS ((b + 1.0) - (c + 1.0)) / (n + 2.0);
CREATE OR REPLACE MACRO _bonett_price_half(b, c, n, z) AS
    z * sqrt(greatest(((b + 1.0) + (c + 1.0)) / (n + 2.0) - pow(_bonett_price_d(b, c, n), 2), 0.0)
             / (n + 2.0));
CREATE OR REPLACE MACRO bonett_price_low(b, c, n, z) AS
    CASE WHEN n > 0 THEN least(1.0, greatest(-1.0,
        _bonett_price_d(b, c, n) - _bonett_price_half(b, c, n, z))) END::DOUBLE;
CREATE OR REPLACE MACRO bonett_price_high(b, c, n, z) AS
    CASE WHEN n > 0 THEN least(1.0, greatest(-1.0,
        _bonett_price_d(b, c, n) + _bonett_price_half(b, c, n, z))) END::DOUBLE;

-- rates: one row per checkpoint x benchmark x metric, and per checkpoint x metric pooled over
-- benchmarks (dataset = 'all', lang = 'all'). value = mean over the items in the metric's
-- denominator (n_items); total = sum of the values; ci_low, ci_high by ci_method (above).
-- n_boot: the bootstrap's replicates that drew an item of the denominator (computed for every
-- rate; its interval is used only where ci_method = 'bootstrap'). The bootstrap intervals come
-- from rate_intervals, which benchmark_illusion.metrics.bootstrap computes from item_values and
-- the resamples (bootstrap_weights) before this file runs: per benchmark, the replicate sums of
-- every checkpoint x metric are one matrix product of the draw counts with the item values (as
-- a SQL join, the same work is billions of rows on the paper grid); ci_low, ci_high = the
-- percentiles (1 -/+ ci_level) / 2 of the replicate values, replicates that drew no item of
-- the denominator skipped.
CREATE OR REPLACE TABLE rates AS
WITH point AS (
    SELECT population, model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric,
           count(*) AS n_items, sum(value) AS total, avg(value) AS value,
           min(value) AS lo_value, max(value) AS hi_value,
           count(*) FILTER (WHERE value = 1) AS n_plus,
           count(*) FILTER (WHERE value = -1) AS n_minus,
           count(*) FILTER (WHERE value NOT IN (-1, 0, 1)) AS n_other
    FROM item_values
    GROUP BY GROUPING SETS ((population, model, method, structure, sparsity, dataset, lang, metric),
                            (population, model, method, structure, sparsity, metric))
),
kind AS (
    SELECT *,
           CASE WHEN regexp_matches(metric, 'guess_adj|chance_adj') THEN 'bootstrap'
                WHEN regexp_matches(metric, '(^|_)(drop|odrop|crec)_|delta_pr')
                    THEN CASE WHEN bool_and(n_other = 0) OVER (PARTITION BY metric)
                              THEN 'bonett_price' ELSE 'bootstrap' END
                WHEN bool_and(n_other = 0 AND n_minus = 0) OVER (PARTITION BY metric) THEN 'wilson'
                ELSE 'bootstrap' END AS ci_kind
    FROM point
)
SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric, p.population,
       p.n_items, p.total, p.value,
       CASE WHEN p.ci_kind = 'wilson' THEN wilson_low(p.total, p.n_items, getvariable('ci_z')::DOUBLE)
            WHEN p.ci_kind = 'bonett_price'
                THEN bonett_price_low(p.n_plus, p.n_minus, p.n_items, getvariable('ci_z')::DOUBLE)
            WHEN e.kind IS NULL THEN i.ci_low
            WHEN e.kind = 'zero_difference' THEN -e.bound
            WHEN e.kind = 'none' THEN 0.0
            ELSE 1 - e.bound END AS ci_low,
       CASE WHEN p.ci_kind = 'wilson' THEN wilson_high(p.total, p.n_items, getvariable('ci_z')::DOUBLE)
            WHEN p.ci_kind = 'bonett_price'
                THEN bonett_price_high(p.n_plus, p.n_minus, p.n_items, getvariable('ci_z')::DOUBLE)
            WHEN e.kind IS NULL THEN i.ci_high
            WHEN e.kind = 'all' THEN 1.0
            ELSE e.bound END AS ci_high,
       coalesce(i.n_boot, 0) AS n_boot,
       CASE WHEN p.ci_kind <> 'bootstrap' THEN p.ci_kind
            WHEN e.kind IS NULL THEN 'bootstrap'
            ELSE 'exact' END AS ci_method
FROM kind p
LEFT JOIN rate_intervals i USING (population, model, method, structure, sparsity, dataset, lang, metric)
-- A bootstrap rate whose items all have the value 0, or all 1: every resample gives the same
-- rate, so the bootstrap interval is a point. Such a rate gets the exact Clopper-Pearson
-- interval instead: [0, 1 - (alpha/2)^(1/n)] for 0 of n, [(alpha/2)^(1/n), 1] for n of n
-- (alpha = 1 - ci_level); for a value in [0, 1] per item (frecm_*) the mean is at most the
-- share of non-zero items, which that bound covers. A paired difference that is 0 on every item
-- (no discordant item of n) gets +/- the same bound. Rescaled values (the guessing and chance
-- adjustments) keep the bootstrap's. Proportions and -1/0/1 differences never get here: their
-- closed-form intervals are not points at 0/n and n/n.
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
