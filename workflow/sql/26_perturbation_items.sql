-- perturbation_item_values: the twins' item values, averaged over seeds, keyed by the compressed
-- checkpoint they copy and by their kind (floor). Definitions: docs/metrics.md ("The floors").
--
-- A twin is the dense model changed by seeded noise (rule `perturb`): method
-- <prefix><seed>-<source method>, prefix noise (floor 'size': the source's relative size per
-- Linear), damage (floor 'damage': scaled to the source's KL from the dense model on held-out
-- text) or mask (floor 'structure': a random mask of the source's sparsity, scaled to its
-- damage); the source's structure and sparsity. Here each twin's row of a selected item becomes
-- a row of its source checkpoint (method = the source method), and the rows of one item over
-- the seeds are averaged:
--   floor    size, damage or structure
--   value    mean over the twins (seeds) of the item's value
--   n_seeds  twins with a value for the item
-- Metrics: the MC-only rate under both verdicts (mc_only, sent_mc_only), mc_only_guess_adj and
-- every drop (drop_<format>). Same columns as item_values (plus floor and n_seeds); the
-- intervals come from the bootstrap step (bootstrap.create_perturbation_intervals, before
-- 27_perturbation.sql), which resamples items per floor.
CREATE OR REPLACE VIEW perturbation_item_values AS
SELECT population, model, source_method AS method, structure, sparsity, dataset, lang, item_id,
       metric, floor, avg(value) AS value, count(*) AS n_seeds
FROM (
    SELECT *,
           regexp_extract(method, '^(noise|damage|mask)(0|[1-9][0-9]*)-(.+)$', 3) AS source_method,
           CASE regexp_extract(method, '^(noise|damage|mask)', 1)
               WHEN 'noise' THEN 'size' WHEN 'damage' THEN 'damage' ELSE 'structure' END AS floor
    FROM item_values
    WHERE population = 'selected'
      AND regexp_matches(method, '^(noise|damage|mask)(0|[1-9][0-9]*)-.+$')
      AND (metric IN ('mc_only', 'sent_mc_only', 'mc_only_guess_adj')
           OR metric LIKE 'drop\_%' ESCAPE '\')
)
GROUP BY population, model, source_method, structure, sparsity, dataset, lang, item_id, metric, floor;
