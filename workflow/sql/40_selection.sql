-- selection: how many pool items the dense model answered correctly per format, and how many
-- were kept (correct in both open and mc, capped per language). One row per model x dataset x
-- language, also when no item was kept; n_items = n_selected. Rates over the pool
-- (open_rate, mc_rate, ...) carry no interval: the pool is the population, not a sample of it.
-- n_dropped_too_few_distractors: valid rows of the benchmark that build_items dropped because
-- they could not get 3 distractors (from `item_drops`, which has every drop reason; NULL when
-- the aggregation was given no items report for the benchmark).
CREATE OR REPLACE TABLE selection AS
WITH per_item AS (
    SELECT model, dataset, lang, item_id,
           bool_or(correct) FILTER (WHERE format = 'open')       AS open_ok,
           bool_or(correct) FILTER (WHERE format = 'mc')         AS mc_ok,
           bool_or(correct) FILTER (WHERE format = 'candidates') AS candidates_ok
    FROM pool
    WHERE sample = 0 AND decode IN ('greedy', 'loglik')
    GROUP BY ALL
),
kept AS (
    SELECT model, dataset, lang, count(*) AS n_selected FROM selected_items GROUP BY ALL
),
too_few AS (
    SELECT dataset, lang, sum(n)::BIGINT AS n_dropped FROM item_drops WHERE reason = 'too_few_distractors' GROUP BY ALL
)
SELECT p.model, 'dense' AS method, 'none' AS structure, 0.0::DOUBLE AS sparsity, p.dataset, p.lang,
       coalesce(any_value(k.n_selected), 0)            AS n_items,
       count(*)                                        AS n_pool,
       count(*) FILTER (WHERE open_ok)                 AS open_correct,
       count(*) FILTER (WHERE candidates_ok)           AS candidates_correct,
       count(*) FILTER (WHERE mc_ok)                   AS mc_correct,
       count(*) FILTER (WHERE open_ok AND mc_ok)       AS both_correct,
       coalesce(any_value(k.n_selected), 0)            AS n_selected,
       any_value(t.n_dropped)                          AS n_dropped_too_few_distractors,
       avg(open_ok::DOUBLE)                            AS open_rate,
       avg(candidates_ok::DOUBLE)                      AS candidates_rate,
       avg(mc_ok::DOUBLE)                              AS mc_rate
FROM per_item p
LEFT JOIN kept k USING (model, dataset, lang)
LEFT JOIN too_few t USING (dataset, lang)
GROUP BY ALL
ORDER BY p.model, p.dataset, p.lang;
