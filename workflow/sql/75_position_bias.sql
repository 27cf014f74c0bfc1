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

-- option_kind(text): the kind of an option as the distractor rules see it (data/spans.py): 'number'
-- (contains a decimal digit of any script), 'name' (its first letter or digit is an upper- or
-- title-case letter), else 'other'.
CREATE OR REPLACE MACRO option_kind(t) AS
    CASE WHEN regexp_matches(t, '\p{Nd}') THEN 'number'
         WHEN regexp_matches(t, '^[^\p{L}\p{N}]*[\p{Lu}\p{Lt}]') THEN 'name'
         ELSE 'other' END;

-- candidates_kinds: in the candidates format, the kind of the option a single-option answer
-- names, beside the kinds of the options shown, per checkpoint x benchmark (and pooled) x kind.
--   n_answers     answers naming exactly one option (pred_option set)
--   chosen_share  share of those answers naming an option of this kind
--   option_share  share of all options shown (of the same items) of this kind: what a chooser
--                 blind to kinds would pick
--   gold_share    share of the items whose gold is of this kind
-- chosen_share well above option_share says answers drift to one kind (e.g. numbers) whatever
-- the question; with options all of the gold's kind (items.distractors: passage) it cannot.
CREATE OR REPLACE TABLE candidates_kinds AS
WITH answers AS (
    SELECT g.model, g.method, g.structure, g.sparsity, g.dataset, g.lang, g.item_id,
           g.pred_option, g.gold_option, s.options
    FROM generations g
    JOIN selected_items s USING (model, dataset, lang, item_id)
    WHERE g.format = 'candidates' AND g.sample = 0
),
options AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id, pred_option, gold_option,
           unnest(range(len(options))) AS position, unnest(options) AS option
    FROM answers
),
kinds AS (
    SELECT *, option_kind(option) AS kind FROM options
),
grouped AS (
    SELECT model, method, structure, sparsity, coalesce(dataset, 'all') AS dataset,
           coalesce(lang, 'all') AS lang, kind,
           count(*) FILTER (WHERE position = pred_option) AS n_chosen,
           count(*) AS n_options,
           count(*) FILTER (WHERE position = gold_option) AS n_gold
    FROM kinds
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, kind),
                            (model, method, structure, sparsity, kind))
)
SELECT model, method, structure, sparsity, dataset, lang, kind,
       sum(n_chosen) OVER w AS n_answers,
       n_chosen / nullif(sum(n_chosen) OVER w, 0) AS chosen_share,
       n_options / sum(n_options) OVER w AS option_share,
       n_gold / nullif(sum(n_gold) OVER w, 0) AS gold_share
FROM grouped
WINDOW w AS (PARTITION BY model, method, structure, sparsity, dataset, lang)
ORDER BY model, method, structure, sparsity, dataset, lang,
         array_position(['number', 'name', 'other'], kind);
