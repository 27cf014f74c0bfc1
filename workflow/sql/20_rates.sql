-- Every rate the pipeline reports, with a seeded percentile-bootstrap interval over items.
-- Definitions: docs/metrics.md. Variables set by the aggregation (config `metrics`):
--   bootstrap_seed, bootstrap_replicates, ci_level.
--
-- The resampling unit is the item. One resample of a benchmark (model x dataset x language) is
-- shared by every checkpoint, format and metric, so differences between checkpoints (drop vs
-- dense) and between formats (Delta_PR) are paired: each is the mean of a per-item difference.
-- Pooled rows (dataset = 'all', lang = 'all') resample each benchmark separately (stratified).

-- bootstrap_units: the items resampled, numbered 0..n-1 per benchmark. population 'selected'
-- (the evaluated items) or 'pool' (the dense model's selection pool).
CREATE OR REPLACE TABLE bootstrap_units AS
SELECT population, model, dataset, lang, item_id,
       (row_number() OVER (PARTITION BY population, model, dataset, lang ORDER BY item_id) - 1)::UBIGINT AS idx,
       count(*) OVER (PARTITION BY population, model, dataset, lang)::UBIGINT AS n
FROM (
    SELECT DISTINCT 'selected' AS population, model, dataset, lang, item_id FROM item_outcomes
    UNION ALL
    SELECT DISTINCT 'pool' AS population, model, dataset, lang, item_id FROM pool
);

-- bootstrap_weights: w = how often the item was drawn in replicate b (0..B-1); items never drawn
-- have no row. Draw j of replicate b is item md5('seed|population|model|dataset|lang|b|j') mod n:
-- the same seed gives the same resamples, independently of row order, thread count and DuckDB
-- version (md5 is fixed; DuckDB's hash() is neither documented as stable nor well mixed in its
-- low bits: its draws modulo an even n were exactly balanced between even and odd items).
CREATE OR REPLACE TABLE bootstrap_weights AS
WITH bench AS (
    SELECT DISTINCT population, model, dataset, lang, n FROM bootstrap_units
),
reps AS (
    SELECT bench.*, r.b FROM bench, range(getvariable('bootstrap_replicates')::BIGINT) AS r(b)
),
draws AS (
    SELECT population, model, dataset, lang, b, n, unnest(range(n::BIGINT)) AS j FROM reps
),
counts AS (
    SELECT population, model, dataset, lang, b,
           (md5_number(concat_ws('|', getvariable('bootstrap_seed'), population, model, dataset, lang, b, j)) % n)::UBIGINT AS idx,
           count(*) AS w
    FROM draws
    GROUP BY ALL
)
SELECT c.population, c.model, c.dataset, c.lang, u.item_id, c.b, c.w
FROM counts c
JOIN bootstrap_units u USING (population, model, dataset, lang, idx);

-- item_values: one row per checkpoint x item x metric; a rate is the mean of `value` over the
-- items that have a row (NULLs are dropped by UNPIVOT: an item outside a metric's denominator,
-- or a format or decode that did not run, has no row).
CREATE OR REPLACE TABLE item_values AS
WITH selected_values AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           -- accuracy per format
           open_correct::DOUBLE        AS acc_open,
           candidates_correct::DOUBLE  AS acc_candidates,
           mc_correct::DOUBLE          AS acc_mc,
           mc_norm_correct::DOUBLE     AS acc_mc_norm,
           oneshot::DOUBLE             AS acc_oneshot,
           -- chance-adjusted accuracy, (correct - 1/K) / (1 - 1/K): 0 = guessing, 1 = all right
           (mc_correct::DOUBLE - 1.0 / n_options) / (1 - 1.0 / n_options)         AS acc_mc_chance_adj,
           (candidates_correct::DOUBLE - 1.0 / n_options) / (1 - 1.0 / n_options) AS acc_candidates_chance_adj,
           -- drop vs the reference on the same item: the dense model for a pruned checkpoint; for
           -- the dense row the selection run (its drops are the noise floor)
           dense_open_correct::DOUBLE - open_correct::DOUBLE             AS drop_open,
           dense_candidates_correct::DOUBLE - candidates_correct::DOUBLE AS drop_candidates,
           dense_mc_correct::DOUBLE - mc_correct::DOUBLE                 AS drop_mc,
           dense_mc_norm_correct::DOUBLE - mc_norm_correct::DOUBLE       AS drop_mc_norm,
           -- production vs recognition
           candidates_correct::DOUBLE - open_correct::DOUBLE AS delta_pr,
           mc_only::DOUBLE                                    AS mc_only,
           -- MC-only beyond guessing: a model that cannot produce the answer still picks it in mc
           -- 1/K of the time by chance, so subtract (1 - open_correct) / K per item
           mc_only::DOUBLE - (1 - open_correct::DOUBLE) / n_options AS mc_only_guess_adj,
           -- recoverability of MC-only items, per decode and any decode (oracle)
           CASE WHEN mc_only THEN beam_top::DOUBLE END        AS rec_beam_top,
           CASE WHEN mc_only THEN beam_any::DOUBLE END        AS rec_beam_any,
           CASE WHEN mc_only THEN sample_pass::DOUBLE END     AS rec_sample_pass,
           CASE WHEN mc_only THEN sample_majority::DOUBLE END AS rec_sample_majority,
           CASE WHEN mc_only THEN oneshot::DOUBLE END         AS rec_oneshot,
           CASE WHEN mc_only THEN recovered::DOUBLE END       AS rec_oracle,
           -- false recovery: the same decodes judged against a fixed distractor (the decoy)
           CASE WHEN mc_only THEN beam_top_decoy::DOUBLE END        AS frec_beam_top,
           CASE WHEN mc_only THEN beam_any_decoy::DOUBLE END        AS frec_beam_any,
           CASE WHEN mc_only THEN sample_pass_decoy::DOUBLE END     AS frec_sample_pass,
           CASE WHEN mc_only THEN sample_majority_decoy::DOUBLE END AS frec_sample_majority,
           CASE WHEN mc_only THEN oneshot_decoy::DOUBLE END         AS frec_oneshot,
           CASE WHEN mc_only THEN recovered_decoy::DOUBLE END       AS frec_oracle,
           -- corrected recovery: recovered minus falsely recovered, per item (paired)
           CASE WHEN mc_only THEN beam_top::DOUBLE - beam_top_decoy::DOUBLE END               AS crec_beam_top,
           CASE WHEN mc_only THEN beam_any::DOUBLE - beam_any_decoy::DOUBLE END               AS crec_beam_any,
           CASE WHEN mc_only THEN sample_pass::DOUBLE - sample_pass_decoy::DOUBLE END         AS crec_sample_pass,
           CASE WHEN mc_only THEN sample_majority::DOUBLE - sample_majority_decoy::DOUBLE END AS crec_sample_majority,
           CASE WHEN mc_only THEN oneshot::DOUBLE - oneshot_decoy::DOUBLE END                 AS crec_oneshot,
           CASE WHEN mc_only THEN recovered::DOUBLE - recovered_decoy::DOUBLE END             AS crec_oracle,
           -- oracle table: each decode's accuracy over every item it ran on, greedy included, and
           -- the drop vs the dense model's same decode (pruned checkpoints; paired per item)
           open_correct::DOUBLE     AS oacc_greedy,
           beam_top::DOUBLE         AS oacc_beam_top,
           beam_any::DOUBLE         AS oacc_beam_any,
           sample_pass::DOUBLE      AS oacc_sample_pass,
           sample_majority::DOUBLE  AS oacc_sample_majority,
           oneshot::DOUBLE          AS oacc_oneshot,
           oracle_correct::DOUBLE   AS oacc_oracle,
           CASE WHEN method <> 'dense' THEN dense_open_correct::DOUBLE - open_correct::DOUBLE END       AS odrop_greedy,
           CASE WHEN method <> 'dense' THEN dense_beam_top::DOUBLE - beam_top::DOUBLE END               AS odrop_beam_top,
           CASE WHEN method <> 'dense' THEN dense_beam_any::DOUBLE - beam_any::DOUBLE END               AS odrop_beam_any,
           CASE WHEN method <> 'dense' THEN dense_sample_pass::DOUBLE - sample_pass::DOUBLE END         AS odrop_sample_pass,
           CASE WHEN method <> 'dense' THEN dense_sample_majority::DOUBLE - sample_majority::DOUBLE END AS odrop_sample_majority,
           CASE WHEN method <> 'dense' THEN dense_oneshot::DOUBLE - oneshot::DOUBLE END                 AS odrop_oneshot,
           CASE WHEN method <> 'dense' THEN dense_oracle_correct::DOUBLE - oracle_correct::DOUBLE END   AS odrop_oracle,
           -- lost open answers: demoted vs erased (status 'unknown' is in neither denominator)
           CASE WHEN status IN ('demoted', 'erased') THEN (status = 'demoted')::DOUBLE END AS demoted,
           CASE WHEN status IN ('demoted', 'erased') THEN (status = 'erased')::DOUBLE END  AS erased,
           -- gold first-token rank: share within the top 1 / 5 / 10, by item group
           CASE WHEN mc_only THEN (gold_rank <= 1)::DOUBLE END       AS top1_mc_only,
           CASE WHEN mc_only THEN (gold_rank <= 5)::DOUBLE END       AS top5_mc_only,
           CASE WHEN mc_only THEN (gold_rank <= 10)::DOUBLE END      AS top10_mc_only,
           CASE WHEN open_correct THEN (gold_rank <= 1)::DOUBLE END  AS top1_open_correct,
           CASE WHEN open_correct THEN (gold_rank <= 5)::DOUBLE END  AS top5_open_correct,
           CASE WHEN open_correct THEN (gold_rank <= 10)::DOUBLE END AS top10_open_correct
    FROM item_outcomes
),
pool_values AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           CASE WHEN NOT open_correct THEN (gold_rank <= 1)::DOUBLE END  AS top1_dense_failed,
           CASE WHEN NOT open_correct THEN (gold_rank <= 5)::DOUBLE END  AS top5_dense_failed,
           CASE WHEN NOT open_correct THEN (gold_rank <= 10)::DOUBLE END AS top10_dense_failed
    FROM (
        SELECT model, method, structure, sparsity, dataset, lang, item_id,
               bool_or(correct) FILTER (WHERE format = 'open' AND decode = 'greedy')      AS open_correct,
               any_value(gold_rank) FILTER (WHERE format = 'open' AND decode = 'greedy'
                                            AND NOT coalesce(gold_token_partial, false))                AS gold_rank
        FROM pool GROUP BY ALL
    )
)
SELECT 'selected' AS population, * FROM selected_values
UNPIVOT (value FOR metric IN (
    acc_open, acc_candidates, acc_mc, acc_mc_norm, acc_oneshot, acc_mc_chance_adj, acc_candidates_chance_adj,
    drop_open, drop_candidates, drop_mc, drop_mc_norm,
    delta_pr, mc_only, mc_only_guess_adj,
    rec_beam_top, rec_beam_any, rec_sample_pass, rec_sample_majority, rec_oneshot, rec_oracle,
    frec_beam_top, frec_beam_any, frec_sample_pass, frec_sample_majority, frec_oneshot, frec_oracle,
    crec_beam_top, crec_beam_any, crec_sample_pass, crec_sample_majority, crec_oneshot, crec_oracle,
    oacc_greedy, oacc_beam_top, oacc_beam_any, oacc_sample_pass, oacc_sample_majority, oacc_oneshot, oacc_oracle,
    odrop_greedy, odrop_beam_top, odrop_beam_any, odrop_sample_pass, odrop_sample_majority, odrop_oneshot, odrop_oracle,
    demoted, erased,
    top1_mc_only, top5_mc_only, top10_mc_only, top1_open_correct, top5_open_correct, top10_open_correct))
UNION ALL BY NAME
SELECT 'pool' AS population, * FROM pool_values
UNPIVOT (value FOR metric IN (top1_dense_failed, top5_dense_failed, top10_dense_failed));

-- rates: one row per checkpoint x benchmark x metric, and per checkpoint x metric pooled over
-- benchmarks (dataset = 'all', lang = 'all'). value = mean over the items in the metric's
-- denominator (n_items); ci_low, ci_high = percentiles (1 -/+ ci_level) / 2 of the replicate
-- values; replicates that drew no item of the denominator are skipped (n_boot counts the rest).
CREATE OR REPLACE TABLE rates AS
WITH point AS (
    SELECT population, model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric,
           count(*) AS n_items, sum(value) AS total, avg(value) AS value
    FROM item_values
    GROUP BY GROUPING SETS ((population, model, method, structure, sparsity, dataset, lang, metric),
                            (population, model, method, structure, sparsity, metric))
),
per_benchmark AS (
    SELECT v.population, v.model, v.method, v.structure, v.sparsity, v.dataset, v.lang, v.metric, w.b,
           sum(w.w * v.value) AS s, sum(w.w) AS n
    FROM item_values v
    JOIN bootstrap_weights w USING (population, model, dataset, lang, item_id)
    GROUP BY ALL
),
replicates AS (
    SELECT population, model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, metric, b,
           sum(s) / sum(n) AS value
    FROM per_benchmark
    GROUP BY GROUPING SETS ((population, model, method, structure, sparsity, dataset, lang, metric, b),
                            (population, model, method, structure, sparsity, metric, b))
),
intervals AS (
    SELECT population, model, method, structure, sparsity, dataset, lang, metric,
           count(*) AS n_boot,
           quantile_cont(value, (1 - getvariable('ci_level')) / 2) AS ci_low,
           quantile_cont(value, (1 + getvariable('ci_level')) / 2) AS ci_high
    FROM replicates
    GROUP BY ALL
)
SELECT p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric, p.population,
       p.n_items, p.total, p.value, i.ci_low, i.ci_high, coalesce(i.n_boot, 0) AS n_boot
FROM point p
LEFT JOIN intervals i USING (population, model, method, structure, sparsity, dataset, lang, metric)
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.metric;

-- rate_of(m, pop): the rows of `rates` for one metric m in one population pop ('selected' or
-- 'pool'), every column of `rates`. The metric tables below take their values and intervals from
-- it, joined by checkpoint and benchmark. m and pop may be expressions of the row it is joined to
-- (DuckDB then joins it laterally: one metric per row), e.g.
--   LEFT JOIN rate_of('acc_' || a.format, 'selected') r
--     ON (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang) = (a.model, a.method, ...)
CREATE OR REPLACE MACRO rate_of(m, pop) AS TABLE
SELECT * FROM rates WHERE metric = m AND population = pop;
