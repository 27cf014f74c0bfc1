-- position_bias: how often each option position is chosen, per checkpoint x benchmark (and pooled
-- over benchmarks: dataset = 'all', lang = 'all') x format, on the selected items.
--   candidates  the position of the one option the answer names (pred_option); answers that name
--               no option or several are position -1 ('none'), never a letter
--   mc          the position of the highest-scoring option (acc)
-- Option order is a seeded shuffle per item, so a model without a position preference chooses
-- each position about 1/K of the time (`uniform`), and the gold sits at each about as often
-- (`gold_share`: the gold's own position distribution on the same items, the fair reference for
-- a model that is always right). share = n_chosen / n_items.
CREATE OR REPLACE TABLE position_bias AS
WITH per_item AS (
    SELECT g.model, g.method, g.structure, g.sparsity, g.dataset, g.lang, g.item_id, g.format,
           coalesce(g.pred_option, -1) AS chosen, g.gold_option AS gold, len(s.options) AS k
    FROM generations g
    JOIN selected_items s USING (model, dataset, lang, item_id)
    WHERE g.format IN ('candidates', 'mc') AND g.sample = 0
),
positions AS (
    SELECT DISTINCT model, method, structure, sparsity, dataset, lang, format, k, unnest(range(-1, k)) AS position
    FROM per_item
),
counted AS (
    SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.format, p.position, p.k,
           count(i.item_id) FILTER (WHERE i.chosen = p.position) AS n_chosen,
           count(i.item_id) FILTER (WHERE i.gold = p.position)   AS n_gold
    FROM positions p
    JOIN per_item i USING (model, method, structure, sparsity, dataset, lang, format, k)
    GROUP BY ALL
),
totals AS (
    SELECT model, method, structure, sparsity, dataset, lang, format, k, count(*) AS n_items
    FROM per_item GROUP BY ALL
),
grouped AS (
    SELECT c.model, c.method, c.structure, c.sparsity,
           coalesce(c.dataset, 'all') AS dataset, coalesce(c.lang, 'all') AS lang, c.format, c.k, c.position,
           sum(t.n_items) AS n_items, sum(c.n_chosen) AS n_chosen, sum(c.n_gold) AS n_gold
    FROM counted c
    JOIN totals t USING (model, method, structure, sparsity, dataset, lang, format, k)
    GROUP BY GROUPING SETS ((c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang, c.format, c.k, c.position),
                            (c.model, c.method, c.structure, c.sparsity, c.format, c.k, c.position))
)
SELECT model, method, structure, sparsity, dataset, lang, format, k AS n_options,
       CASE WHEN position < 0 THEN 'none' ELSE chr(65 + position::INTEGER) END AS position,
       n_items, n_chosen, n_chosen / n_items AS share,
       n_gold / n_items AS gold_share,
       CASE WHEN position < 0 THEN 0.0 ELSE 1.0 / k END AS uniform
FROM grouped
WHERE position >= 0 OR format = 'candidates'
ORDER BY model, method, structure, sparsity, dataset, lang, format, n_options, position;
