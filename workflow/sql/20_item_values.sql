-- The per-item values of every rate the pipeline reports, and the units of its bootstrap.
-- Definitions: docs/metrics.md. The rates and their intervals follow in 25_rates.sql (Wilson's
-- for proportions, Bonett-Price's for paired differences, the seeded percentile bootstrap over
-- items for the rest); between the two files the aggregation draws the resamples
-- (bootstrap_weights) and computes the bootstrap intervals (rate_intervals) in numpy
-- (benchmark_illusion.metrics.bootstrap, aggregate.PYTHON_STEPS).
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
-- items). The aggregation's bootstrap step (benchmark_illusion.metrics.bootstrap) reads its draws here.
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
           mc_bytes_correct::DOUBLE    AS acc_mc_bytes,
           oneshot::DOUBLE             AS acc_oneshot,
           -- the guessing control: mc on the same prompt without the passage (format mc_nopassage)
           mc_nopassage_correct::DOUBLE      AS acc_mc_nopassage,
           mc_nopassage_norm_correct::DOUBLE AS acc_mc_nopassage_norm,
           -- chance-adjusted accuracy, (correct - 1/K) / (1 - 1/K): 0 = guessing, 1 = all right
           (mc_correct::DOUBLE - 1.0 / n_options) / (1 - 1.0 / n_options)         AS acc_mc_chance_adj,
           (candidates_correct::DOUBLE - 1.0 / n_options) / (1 - 1.0 / n_options) AS acc_candidates_chance_adj,
           (mc_nopassage_correct::DOUBLE - 1.0 / n_options) / (1 - 1.0 / n_options) AS acc_mc_nopassage_chance_adj,
           -- drop vs the reference on the same item: the dense model for a pruned checkpoint; for
           -- the dense row the selection run (its drops are the noise floor)
           dense_open_correct::DOUBLE - open_correct::DOUBLE             AS drop_open,
           dense_candidates_correct::DOUBLE - candidates_correct::DOUBLE AS drop_candidates,
           dense_mc_correct::DOUBLE - mc_correct::DOUBLE                 AS drop_mc,
           dense_mc_norm_correct::DOUBLE - mc_norm_correct::DOUBLE       AS drop_mc_norm,
           dense_mc_bytes_correct::DOUBLE - mc_bytes_correct::DOUBLE     AS drop_mc_bytes,
           -- production vs recognition
           candidates_correct::DOUBLE - open_correct::DOUBLE AS delta_pr,
           mc_only::DOUBLE                                    AS mc_only,
           -- MC-only beyond guessing: a model that cannot produce the answer still picks it in mc
           -- 1/K of the time by chance, so subtract (1 - open_correct) / K per item
           mc_only::DOUBLE - (1 - open_correct::DOUBLE) / n_options AS mc_only_guess_adj,
           -- the same with the guessing measured instead of assumed: on an open-wrong item, mc
           -- minus mc without the passage (the model's own answer-type prior, not 1/K); 0 on an
           -- open-right item. Mean: the MC-only rate minus the share of items open gets wrong
           -- and mc gets right without the passage. NULL where mc_nopassage did not run.
           mc_only::DOUBLE - (1 - open_correct::DOUBLE) * mc_nopassage_correct::DOUBLE AS mc_only_guess_adj_nopassage,
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
           -- lost open answers: demoted vs erased among the decoded ones (verbose and untested
           -- items are in neither denominator)
           CASE WHEN status IN ('demoted', 'erased') THEN (status = 'demoted')::DOUBLE END AS demoted,
           CASE WHEN status IN ('demoted', 'erased') THEN (status = 'erased')::DOUBLE END  AS erased,
           -- the MC-only rate split by status, each over every selected item (the four sum to
           -- mc_only): stated in a sentence, recovered by a decode, decoded and lost, not decoded
           (mc_only AND status = 'verbose')::DOUBLE  AS mc_only_verbose,
           (mc_only AND status = 'demoted')::DOUBLE  AS mc_only_demoted,
           (mc_only AND status = 'erased')::DOUBLE   AS mc_only_erased,
           (mc_only AND status = 'untested')::DOUBLE AS mc_only_untested,
           -- the bounds of the judge's uncertain verdict: open accuracy with uncertain answers
           -- counted right (the upper bound; acc_open is the lower), MC-only with them counted
           -- right (the lower bound; mc_only is the upper)
           coalesce(open_correct_upper, open_correct)::DOUBLE                    AS acc_open_upper,
           coalesce(open_correct_sentence_upper, open_correct_sentence)::DOUBLE  AS sent_acc_open_upper,
           mc_only_lower::DOUBLE                                                  AS mc_only_lower,
           mc_only_sentence_lower::DOUBLE                                         AS sent_mc_only_lower,
           -- sentence-tolerant accuracy, drops, Delta_PR, MC-only and oracle (sent_*)
           open_correct_sentence::DOUBLE       AS sent_acc_open,
           candidates_correct_sentence::DOUBLE AS sent_acc_candidates,
           mc_correct::DOUBLE                  AS sent_acc_mc,
           mc_nopassage_correct::DOUBLE        AS sent_acc_mc_nopassage,
           oneshot_sentence::DOUBLE            AS sent_acc_oneshot,
           dense_open_correct_sentence::DOUBLE - open_correct_sentence::DOUBLE             AS sent_drop_open,
           dense_candidates_correct_sentence::DOUBLE - candidates_correct_sentence::DOUBLE AS sent_drop_candidates,
           dense_mc_correct::DOUBLE - mc_correct::DOUBLE                                   AS sent_drop_mc,
           candidates_correct_sentence::DOUBLE - open_correct_sentence::DOUBLE AS sent_delta_pr,
           mc_only_sentence::DOUBLE                                            AS sent_mc_only,
           mc_only_sentence::DOUBLE - (1 - open_correct_sentence::DOUBLE) / n_options AS sent_mc_only_guess_adj,
           open_correct_sentence::DOUBLE   AS sent_oacc_greedy,
           oracle_correct_sentence::DOUBLE AS sent_oacc_oracle,
           CASE WHEN method <> 'dense' THEN dense_open_correct_sentence::DOUBLE - open_correct_sentence::DOUBLE END     AS sent_odrop_greedy,
           CASE WHEN method <> 'dense' THEN dense_oracle_correct_sentence::DOUBLE - oracle_correct_sentence::DOUBLE END AS sent_odrop_oracle,
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
),
-- recoverability of MC-only items, one row per item x decode (beam_top, beam_any, sample_pass,
-- sample_majority, oneshot, and oracle: any decode): hit = the decode produced the gold, false =
-- the bits of the distractors it produced as if each were the gold; *_sentence: the same under
-- the sentence-tolerant verdict
decode_columns AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id, n_options, mc_only,
           mc_only_sentence,
           COLUMNS('^(beam_top|beam_any|sample_pass|sample_majority|oneshot|recovered)(_false)?(_sentence)?$')
    FROM item_outcomes
),
decodes AS (
    FROM decode_columns UNPIVOT INCLUDE NULLS (
        (hit, false_hits, hit_sentence, false_hits_sentence) FOR decode IN (
            (beam_top, beam_top_false, beam_top_sentence, beam_top_false_sentence) AS beam_top,
            (beam_any, beam_any_false, beam_any_sentence, beam_any_false_sentence) AS beam_any,
            (sample_pass, sample_pass_false, sample_pass_sentence, sample_pass_false_sentence) AS sample_pass,
            (sample_majority, sample_majority_false, sample_majority_sentence, sample_majority_false_sentence) AS sample_majority,
            (oneshot, oneshot_false, oneshot_sentence, oneshot_false_sentence) AS oneshot,
            (recovered, recovered_false, recovered_sentence, recovered_false_sentence) AS oracle
        )
    )
),
-- per item x decode: rec (recovered), frec (false recovery: any distractor produced, the
-- maximum), frecm (the share of the K - 1 distractors produced, the mean over distractors), crec
-- (corrected: recovered minus falsely recovered), over the MC-only items; sent_*: the same over
-- the items MC-only under the sentence verdict, every decode judged by correct_sentence
recovery_values AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id, decode,
           CASE WHEN mc_only THEN hit::DOUBLE END                                  AS rec,
           CASE WHEN mc_only THEN (false_hits <> 0)::DOUBLE END                    AS frec,
           CASE WHEN mc_only THEN bit_count(false_hits) / (n_options - 1) END      AS frecm,
           CASE WHEN mc_only THEN hit::DOUBLE - (false_hits <> 0)::DOUBLE END      AS crec,
           CASE WHEN mc_only_sentence THEN hit_sentence::DOUBLE END                             AS sent_rec,
           CASE WHEN mc_only_sentence THEN (false_hits_sentence <> 0)::DOUBLE END               AS sent_frec,
           CASE WHEN mc_only_sentence THEN bit_count(false_hits_sentence) / (n_options - 1) END AS sent_frecm,
           CASE WHEN mc_only_sentence THEN hit_sentence::DOUBLE - (false_hits_sentence <> 0)::DOUBLE END AS sent_crec
    FROM decodes
)
SELECT 'selected' AS population, * FROM selected_values
UNPIVOT (value FOR metric IN (
    acc_open, acc_candidates, acc_mc, acc_mc_norm, acc_mc_bytes, acc_oneshot, acc_mc_chance_adj, acc_candidates_chance_adj,
    drop_open, drop_candidates, drop_mc, drop_mc_norm, drop_mc_bytes,
    delta_pr, mc_only, mc_only_guess_adj, mc_only_guess_adj_nopassage,
    acc_mc_nopassage, acc_mc_nopassage_norm, acc_mc_nopassage_chance_adj,
    oacc_greedy, oacc_beam_top, oacc_beam_any, oacc_sample_pass, oacc_sample_majority, oacc_oneshot, oacc_oracle,
    odrop_greedy, odrop_beam_top, odrop_beam_any, odrop_sample_pass, odrop_sample_majority, odrop_oneshot, odrop_oracle,
    demoted, erased, mc_only_verbose, mc_only_demoted, mc_only_erased, mc_only_untested,
    acc_open_upper, sent_acc_open_upper, mc_only_lower, sent_mc_only_lower,
    sent_acc_open, sent_acc_candidates, sent_acc_mc, sent_acc_mc_nopassage, sent_acc_oneshot,
    sent_drop_open, sent_drop_candidates, sent_drop_mc, sent_delta_pr, sent_mc_only, sent_mc_only_guess_adj,
    sent_oacc_greedy, sent_oacc_oracle, sent_odrop_greedy, sent_odrop_oracle,
    top1_mc_only, top5_mc_only, top10_mc_only, top1_open_correct, top5_open_correct, top10_open_correct,
    dsrc_mc_in_passage, dsrc_mc_not_in_passage, dsrc_mc_unknown,
    dsrc_candidates_in_passage, dsrc_candidates_not_in_passage, dsrc_candidates_unknown))
UNION ALL BY NAME
SELECT 'selected' AS population, model, method, structure, sparsity, dataset, lang, item_id,
       kind || '_' || decode AS metric, value
FROM recovery_values
UNPIVOT (value FOR kind IN (rec, frec, frecm, crec, sent_rec, sent_frec, sent_frecm, sent_crec))
UNION ALL BY NAME
SELECT * FROM pool_item_values;
