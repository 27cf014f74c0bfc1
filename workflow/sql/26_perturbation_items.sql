-- perturbation_item_values: the perturbed twins' item values, averaged over seeds, keyed by the
-- compressed checkpoint they copy the size of. Definitions: docs/metrics.md ("The two floors").
--
-- A twin is the dense model with seeded Gaussian noise of a pruned or quantized checkpoint's
-- relative size per Linear (rule `perturb`): method noise<seed>-<source method>, the source's
-- structure and sparsity. Here each twin's row of a selected item becomes a row of its source
-- checkpoint (method = the source method), and the rows of one item over the seeds are averaged:
--   value    mean over the twins (seeds) of the item's value
--   n_seeds  twins with a value for the item
-- Metrics: the MC-only rate (mc_only, mc_only_guess_adj) and every drop (drop_<format>), the
-- columns the floor is shown beside in mc_only and support_gradient. Same columns as item_values
-- (plus n_seeds), so that the bootstrap step computes its intervals on the same item resamples
-- as every rate (bootstrap.create_perturbation_intervals, before 27_perturbation.sql); with
-- several seeds the interval is that of the seed-averaged floor, paired by item.
CREATE OR REPLACE VIEW perturbation_item_values AS
SELECT population, model, source_method AS method, structure, sparsity, dataset, lang, item_id,
       metric, avg(value) AS value, count(*) AS n_seeds
FROM (
    SELECT *, regexp_extract(method, '^noise(0|[1-9][0-9]*)-(.+)$', 2) AS source_method
    FROM item_values
    WHERE population = 'selected'
      AND regexp_matches(method, '^noise(0|[1-9][0-9]*)-.+$')
      AND (metric IN ('mc_only', 'mc_only_guess_adj') OR metric LIKE 'drop\_%' ESCAPE '\')
)
GROUP BY population, model, source_method, structure, sparsity, dataset, lang, item_id, metric;
