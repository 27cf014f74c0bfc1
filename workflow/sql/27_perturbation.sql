-- perturbation_floor: per compressed checkpoint x benchmark (and pooled: dataset = lang = 'all')
-- x metric, what its perturbed twins (the dense model with seeded noise of the checkpoint's
-- relative size per Linear, rule `perturb`) reach on the same items. Definitions:
-- docs/metrics.md ("The two floors").
--   method, structure, sparsity  the compressed checkpoint's (the twins' method is
--                                noise<seed>-<method>)
--   metric      mc_only, mc_only_guess_adj, drop_open, drop_candidates, drop_mc, drop_mc_norm, ...
--               (those of perturbation_item_values)
--   n_items     the denominator's items; n_seeds: twins averaged
--   value       the mean over items of the seed-averaged item value: the mean of the twins' rates
--               (each twin has every selected item)
--   ci_low, ci_high  the percentile bootstrap of that mean over the same item resamples as every
--               rate (perturbation_intervals, computed before this file): one interval for the
--               floor, not a mean of the twins' intervals
--   seed_min, seed_max  the lowest and highest single twin's rate (rates): the spread over seeds
-- The mc_only and support_gradient tables show value and interval beside each checkpoint's rate.
CREATE OR REPLACE TABLE perturbation_floor AS
WITH point AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric,
           count(*) AS n_items, avg(value) AS value, max(n_seeds) AS n_seeds
    FROM perturbation_item_values
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, metric),
                            (model, method, structure, sparsity, metric))
),
per_seed AS (
    SELECT model, source_method AS method, structure, sparsity, dataset, lang, metric,
           min(value) AS seed_min, max(value) AS seed_max
    FROM (
        SELECT *, regexp_extract(method, '^noise(0|[1-9][0-9]*)-(.+)$', 2) AS source_method
        FROM rates
        WHERE population = 'selected' AND regexp_matches(method, '^noise(0|[1-9][0-9]*)-.+$')
    )
    GROUP BY model, source_method, structure, sparsity, dataset, lang, metric
)
SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric, p.n_items,
       p.n_seeds, p.value, i.ci_low, i.ci_high, coalesce(i.n_boot, 0) AS n_boot,
       s.seed_min, s.seed_max
FROM point p
LEFT JOIN perturbation_intervals i
  ON i.population = 'selected'
 AND (i.model, i.method, i.structure, i.sparsity, i.dataset, i.lang, i.metric)
   = (p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric)
LEFT JOIN per_seed s
  ON (s.model, s.method, s.structure, s.sparsity, s.dataset, s.lang, s.metric)
   = (p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric)
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric;

-- perturbation_floor_of(m): the rows of perturbation_floor for one metric m (joined like rate_of).
CREATE OR REPLACE MACRO perturbation_floor_of(m) AS TABLE
SELECT * FROM perturbation_floor WHERE metric = m;
