-- gold_rank: the rank (1 = top) of the gold answer's first token at the answer position of the
-- open prompt, per checkpoint x benchmark (and pooled) x item group:
--   mc_only       selected items this checkpoint gets right in mc and wrong in open
--   open_correct  selected items this checkpoint gets right in open
--   dense_failed  the dense model's pool items it got wrong in open (method = 'dense' rows only):
--                 what the rank of an answer the model never produced looks like
-- The ranked token is the gold's first token with visible text (leading whitespace-only tokens are
-- teacher-forced). Items whose ranked token is a byte piece (gold_token_partial: part of a
-- character, as for most CJK, Indic, Thai and Greek golds under a byte-level BPE) have no rank
-- here: they are counted in n_partial and left out of n_items, the quantiles and the top-k shares.
-- median, q25, q75 of the rank (interpolated medians: 3.5 can appear); top1/top5/top10 = share of
-- items whose gold rank is <= 1/5/10, with their Wilson intervals from `rates` (metrics
-- top<k>_<item_group>; population 'pool' for dense_failed, 'selected' for the others).
-- median_logprob_answer: the median teacher-forced log-prob of the whole gold, every item (no split).
CREATE OR REPLACE TABLE gold_rank AS
WITH grouped AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id, gold_rank, gold_token_partial,
           gold_logprob_answer, 'mc_only' AS item_group, 'selected' AS population
    FROM item_outcomes WHERE mc_only
    UNION ALL
    SELECT model, method, structure, sparsity, dataset, lang, item_id, gold_rank, gold_token_partial,
           gold_logprob_answer, 'open_correct', 'selected'
    FROM item_outcomes WHERE open_correct
    UNION ALL
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           any_value(gold_rank) FILTER (WHERE format = 'open' AND decode = 'greedy' AND NOT coalesce(gold_token_partial, false)),
           any_value(gold_token_partial) FILTER (WHERE format = 'open' AND decode = 'greedy'),
           any_value(gold_logprob_answer) FILTER (WHERE format = 'open' AND decode = 'greedy'),
           'dense_failed', 'pool'
    FROM pool
    GROUP BY ALL
    HAVING NOT bool_or(correct) FILTER (WHERE format = 'open' AND decode = 'greedy')
),
summary AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, item_group, population,
           count(gold_rank) AS n_items,
           count(*) FILTER (WHERE gold_token_partial) AS n_partial,
           quantile_cont(gold_rank, 0.5)  AS median,
           quantile_cont(gold_rank, 0.25) AS q25,
           quantile_cont(gold_rank, 0.75) AS q75,
           quantile_cont(gold_logprob_answer, 0.5) AS median_logprob_answer
    FROM grouped
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, item_group, population),
                            (model, method, structure, sparsity, item_group, population))
)
SELECT s.model, s.method, s.structure, s.sparsity, s.dataset, s.lang, s.item_group, s.n_items, s.n_partial,
       s.median, s.q25, s.q75, s.median_logprob_answer,
       t1.value AS top1, t1.ci_low AS top1_ci_low, t1.ci_high AS top1_ci_high,
       t5.value AS top5, t5.ci_low AS top5_ci_low, t5.ci_high AS top5_ci_high,
       t10.value AS top10, t10.ci_low AS top10_ci_low, t10.ci_high AS top10_ci_high
FROM summary s
LEFT JOIN rate_of('top1_' || s.item_group, s.population) t1
  ON (t1.model, t1.method, t1.structure, t1.sparsity, t1.dataset, t1.lang) = (s.model, s.method, s.structure, s.sparsity, s.dataset, s.lang)
LEFT JOIN rate_of('top5_' || s.item_group, s.population) t5
  ON (t5.model, t5.method, t5.structure, t5.sparsity, t5.dataset, t5.lang) = (s.model, s.method, s.structure, s.sparsity, s.dataset, s.lang)
LEFT JOIN rate_of('top10_' || s.item_group, s.population) t10
  ON (t10.model, t10.method, t10.structure, t10.sparsity, t10.dataset, t10.lang) = (s.model, s.method, s.structure, s.sparsity, s.dataset, s.lang)
ORDER BY s.model, s.method, s.structure, s.sparsity, s.dataset, s.lang,
         array_position(['mc_only', 'open_correct', 'dense_failed'], s.item_group);

-- gold_rank_cdf: for the items each pruned checkpoint makes MC-only, the empirical CDF of the
-- gold first-token rank under the pruned checkpoint (series 'pruned') and under the dense model
-- on the same items (series 'dense'), per benchmark and pooled. cdf = share of the n_items
-- items whose rank is <= gold_rank; one row per distinct rank.
CREATE OR REPLACE TABLE gold_rank_cdf AS
WITH ranks AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id, 'pruned' AS series, gold_rank
    FROM item_outcomes WHERE mc_only AND method <> 'dense'
    UNION ALL
    SELECT model, method, structure, sparsity, dataset, lang, item_id, 'dense', dense_gold_rank
    FROM item_outcomes WHERE mc_only AND method <> 'dense'
),
counted AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, series, gold_rank,
           count(*) AS n
    FROM ranks
    WHERE gold_rank IS NOT NULL
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, series, gold_rank),
                            (model, method, structure, sparsity, series, gold_rank))
)
SELECT model, method, structure, sparsity, dataset, lang, series,
       sum(n) OVER w_all AS n_items,
       gold_rank,
       sum(n) OVER w_cum / sum(n) OVER w_all AS cdf
FROM counted
WINDOW w_all AS (PARTITION BY model, method, structure, sparsity, dataset, lang, series),
       w_cum AS (PARTITION BY model, method, structure, sparsity, dataset, lang, series ORDER BY gold_rank
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
ORDER BY model, method, structure, sparsity, dataset, lang, series, gold_rank;

-- gold_rank_by_lang: the item groups of gold_rank compared within each language, per checkpoint x
-- benchmark: the median gold rank and the median mc margin (gold minus best distractor, mc
-- log-likelihood) of its MC-only and open-correct items beside the dense model's dense_failed
-- pool items of the same language. The pooled row (dataset = lang = 'all') takes each median
-- over the pooled items of every benchmark, as gold_rank's pooled rows do. Pooled over
-- languages, the dense_failed items are mostly of the languages the model answers worst, so the
-- pooled row compares languages as well as item groups: read the per-language rows for the
-- comparison of the groups.
CREATE OR REPLACE TABLE gold_rank_by_lang AS
WITH sel AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           count(*) FILTER (WHERE mc_only) AS n_mc_only,
           quantile_cont(gold_rank, 0.5) FILTER (WHERE mc_only)      AS mc_only_median_rank,
           quantile_cont(mc_margin, 0.5) FILTER (WHERE mc_only)      AS mc_only_median_margin,
           count(*) FILTER (WHERE open_correct) AS n_open_correct,
           quantile_cont(gold_rank, 0.5) FILTER (WHERE open_correct) AS open_correct_median_rank,
           quantile_cont(mc_margin, 0.5) FILTER (WHERE open_correct) AS open_correct_median_margin
    FROM item_outcomes
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang),
                            (model, method, structure, sparsity))
),
failed AS (
    SELECT model, coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           count(*) AS n_dense_failed,
           quantile_cont(gold_rank, 0.5) AS dense_failed_median_rank,
           quantile_cont(margin, 0.5)    AS dense_failed_median_margin
    FROM (
        SELECT model, dataset, lang, item_id,
               any_value(gold_rank) FILTER (WHERE format = 'open' AND decode = 'greedy'
                                            AND NOT coalesce(gold_token_partial, false)) AS gold_rank,
               any_value(mc_margin(option_ll, gold_option)) FILTER (WHERE format = 'mc') AS margin
        FROM pool WHERE method = 'dense'
        GROUP BY ALL
        HAVING NOT bool_or(correct) FILTER (WHERE format = 'open' AND decode = 'greedy')
    )
    GROUP BY GROUPING SETS ((model, dataset, lang), (model))
)
SELECT s.*, f.n_dense_failed, f.dense_failed_median_rank, f.dense_failed_median_margin
FROM sel s LEFT JOIN failed f USING (model, dataset, lang)
ORDER BY ALL;
