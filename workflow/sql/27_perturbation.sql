-- perturbation_floor: per compressed checkpoint x floor x benchmark (and pooled: dataset = lang =
-- 'all') x metric, what its twins of that floor reach on the same items. Definitions:
-- docs/metrics.md ("The floors").
--   method, structure, sparsity  the compressed checkpoint's (the twins' method is
--                                <prefix><seed>-<method>)
--   floor       'damage' (noise scaled to the checkpoint's damage: the floor the paired test
--               uses), 'size' (noise of its relative size per Linear), 'structure' (a random mask
--               of its sparsity scaled to its damage)
--   metric      mc_only, sent_mc_only (the sentence verdict), mc_only_guess_adj, drop_open, ...
--               (those of perturbation_item_values)
--   n_items     the denominator's items; n_seeds: twins averaged
--   value       the mean over items of the seed-averaged item value (the mean of the twins' rates)
--   ci_low, ci_high  a proportion (mc_only, sent_mc_only): the Wilson interval of the
--               seed-averaged count (ci_method 'wilson'); the others the percentile bootstrap of
--               the mean over the same item resamples as every rate (perturbation_intervals)
--   seed_min, seed_max  the lowest and highest single twin's rate (rates): the spread over seeds
-- The paired test of a checkpoint against its floors is the table illusion_test
-- (55_illusion.sql); mc_only shows the damage and size floors beside each rate.
CREATE OR REPLACE TABLE perturbation_floor AS
WITH point AS (
    SELECT model, method, structure, sparsity, floor,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric,
           count(*) AS n_items, avg(value) AS value, sum(value) AS total, max(n_seeds) AS n_seeds
    FROM perturbation_item_values
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, floor, dataset, lang, metric),
                            (model, method, structure, sparsity, floor, metric))
),
per_seed AS (
    SELECT model, source_method AS method, structure, sparsity, floor, dataset, lang, metric,
           min(value) AS seed_min, max(value) AS seed_max
    FROM (
        SELECT *,
               regexp_extract(method, '^(noise|damage|mask)(0|[1-9][0-9]*)-(.+)$', 3) AS source_method,
               CASE regexp_extract(method, '^(noise|damage|mask)', 1)
                   WHEN 'noise' THEN 'size' WHEN 'damage' THEN 'damage' ELSE 'structure' END AS floor
        FROM rates
        WHERE population = 'selected'
          AND regexp_matches(method, '^(noise|damage|mask)(0|[1-9][0-9]*)-.+$')
    )
    GROUP BY model, source_method, structure, sparsity, floor, dataset, lang, metric
)
SELECT p.model, p.method, p.structure, p.sparsity, p.floor, p.dataset, p.lang, p.metric,
       p.n_items, p.n_seeds, p.value,
       CASE WHEN p.metric IN ('mc_only', 'sent_mc_only')
            THEN wilson_low(p.total, p.n_items, getvariable('ci_z')) ELSE i.ci_low END AS ci_low,
       CASE WHEN p.metric IN ('mc_only', 'sent_mc_only')
            THEN wilson_high(p.total, p.n_items, getvariable('ci_z')) ELSE i.ci_high END AS ci_high,
       CASE WHEN p.metric IN ('mc_only', 'sent_mc_only') THEN 'wilson' ELSE 'bootstrap' END AS ci_method,
       coalesce(i.n_boot, 0) AS n_boot,
       s.seed_min, s.seed_max
FROM point p
LEFT JOIN perturbation_intervals i
  ON i.population = 'selected'
 AND (i.model, i.method, i.structure, i.sparsity, i.floor, i.dataset, i.lang, i.metric)
   = (p.model, p.method, p.structure, p.sparsity, p.floor, p.dataset, p.lang, p.metric)
LEFT JOIN per_seed s
  ON (s.model, s.method, s.structure, s.sparsity, s.floor, s.dataset, s.lang, s.metric)
   = (p.model, p.method, p.structure, p.sparsity, p.floor, p.dataset, p.lang, p.metric)
ORDER BY p.model, p.method, p.structure, p.sparsity, p.floor, p.dataset, p.lang, p.metric;

-- perturbation_floor_of(m, f): the rows of perturbation_floor for one metric m and floor f
-- (joined like rate_of).
CREATE OR REPLACE MACRO perturbation_floor_of(m, f) AS TABLE
SELECT * FROM perturbation_floor WHERE metric = m AND floor = f;

-- floor_source(method): the checkpoint whose floors a checkpoint is compared with: its own, or
-- for a placebo (the negative control, placebo-<source>) its source's.
CREATE OR REPLACE MACRO floor_source(method) AS
    coalesce(nullif(regexp_extract(method, '^placebo-(.+)$', 1), ''), method);
