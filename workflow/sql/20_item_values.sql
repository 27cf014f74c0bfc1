-- The per-item values of every rate the pipeline reports, and the units of its bootstrap.
-- Definitions: docs/metrics.md. The rates and their seeded percentile-bootstrap intervals over
-- items follow in 25_rates.sql; between the two files the aggregation draws the resamples
-- (bootstrap_weights) and computes the intervals (rate_intervals) in numpy
-- (benchmark_illusion.bootstrap, aggregate.PYTHON_STEPS).
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

-- bootstrap_benchmarks: one row per resampled benchmark (population x model x dataset x lang):
-- its n items, the number of replicates, and the 64-bit key of its draws, the first 8 bytes
-- (big-endian) of md5('seed|population|model|dataset|lang').
CREATE OR REPLACE TABLE bootstrap_benchmarks AS
SELECT DISTINCT population, model, dataset, lang, n::BIGINT AS n,
       getvariable('bootstrap_replicates')::BIGINT AS replicates,
       ('0x' || left(md5(concat_ws('|', getvariable('bootstrap_seed'), population, model, dataset, lang)), 16))::UBIGINT AS key
FROM bootstrap_units
ORDER BY ALL;

-- bootstrap_draw(key, c, n): draw j of replicate b of a benchmark is item bootstrap_draw(key,
-- b * n + j + 1, n) = splitmix64(key + c * 0x9E3779B97F4A7C15) mod n, in unsigned 64-bit
-- arithmetic (products are taken exactly in 128 bits, then mod 2^64). Integer arithmetic with a
-- key fixed by the seed: the same seed gives the same resamples on any machine, in any row
-- order, with any DuckDB version (DuckDB's hash() is neither documented as stable nor well
-- mixed in its low bits: its draws modulo an even n were exactly balanced between even and odd
-- items). The aggregation's bootstrap step (benchmark_illusion.bootstrap) reads its draws here.
CREATE OR REPLACE MACRO _bootstrap_u64(x) AS (x & 18446744073709551615::UHUGEINT)::UBIGINT;
CREATE OR REPLACE MACRO _bootstrap_mix(z, s, m) AS _bootstrap_u64(xor(z, z >> s)::UHUGEINT * m::UHUGEINT);
CREATE OR REPLACE MACRO _bootstrap_final(z) AS xor(z, z >> 31);
CREATE OR REPLACE MACRO bootstrap_draw(key, c, n) AS
    _bootstrap_final(_bootstrap_mix(_bootstrap_mix(
        _bootstrap_u64(key::UHUGEINT + c::UHUGEINT * 11400714819323198485::UHUGEINT),
        30, 13787848793156543929), 27, 10723151780598845931)) % n;

-- bootstrap_weights: w = how often the item was drawn in replicate b (0..replicates-1); items
-- never drawn have no row. A view: the draws are recomputed from bootstrap_benchmarks when read.
CREATE OR REPLACE VIEW bootstrap_weights AS
WITH draws AS (
    SELECT population, model, dataset, lang, n, key, unnest(range(replicates * n)) AS c
    FROM bootstrap_benchmarks
),
counts AS (
    SELECT population, model, dataset, lang, (c // n)::BIGINT AS b,
           bootstrap_draw(key, c + 1, n)::UBIGINT AS idx, count(*) AS w
    FROM draws
    GROUP BY ALL
)
SELECT c.population, c.model, c.dataset, c.lang, u.item_id, c.b, c.w
FROM counts c
JOIN bootstrap_units u USING (population, model, dataset, lang, idx);

-- pool_item_values: the item values of the dense model's selection pool (population 'pool'),
-- in item_values' long form: the gold rank of the items the dense model got wrong in open. A
-- table, so that item_values (a view) reads tables only and works wherever the database is
-- opened, without the log files.
CREATE OR REPLACE TABLE pool_item_values AS
SELECT 'pool' AS population, * FROM (
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
UNPIVOT (value FOR metric IN (top1_dense_failed, top5_dense_failed, top10_dense_failed));

-- item_values: one row per checkpoint x item x metric; a rate is the mean of `value` over the
-- items that have a row (NULLs are dropped by UNPIVOT: an item outside a metric's denominator,
-- or a format or decode that did not run, has no row). A view over tables (item_outcomes,
-- pool_item_values): on the paper grid it has tens of millions of rows, cheaper to recompute
-- when read than to store.
CREATE OR REPLACE VIEW item_values AS
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
           CASE WHEN open_correct THEN (gold_rank <= 10)::DOUBLE END AS top10_open_correct,
           -- mc and candidates accuracy split by whether every distractor of the item occurs in
           -- its passage (accuracy_by_distractor_source; unknown: item files written before the
           -- column existed)
           CASE WHEN distractors_in_passage THEN mc_correct::DOUBLE END                AS dsrc_mc_in_passage,
           CASE WHEN NOT distractors_in_passage THEN mc_correct::DOUBLE END            AS dsrc_mc_not_in_passage,
           CASE WHEN distractors_in_passage IS NULL THEN mc_correct::DOUBLE END        AS dsrc_mc_unknown,
           CASE WHEN distractors_in_passage THEN candidates_correct::DOUBLE END         AS dsrc_candidates_in_passage,
           CASE WHEN NOT distractors_in_passage THEN candidates_correct::DOUBLE END     AS dsrc_candidates_not_in_passage,
           CASE WHEN distractors_in_passage IS NULL THEN candidates_correct::DOUBLE END AS dsrc_candidates_unknown
    FROM item_outcomes
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
    top1_mc_only, top5_mc_only, top10_mc_only, top1_open_correct, top5_open_correct, top10_open_correct,
    dsrc_mc_in_passage, dsrc_mc_not_in_passage, dsrc_mc_unknown,
    dsrc_candidates_in_passage, dsrc_candidates_not_in_passage, dsrc_candidates_unknown))
UNION ALL BY NAME
SELECT * FROM pool_item_values;
