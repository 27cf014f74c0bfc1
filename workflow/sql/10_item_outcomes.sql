-- item_outcomes: one row per checkpoint x item (per-item table: no n_items, no interval).
-- Correctness per format, the gold rank and the open answer next to the dense model's, and what
-- the recovery decodes made of a missed answer. Definitions: docs/metrics.md.
-- "Which items did pruning turn from correct to MC-only": WHERE mc_only AND method <> 'dense'
-- (every selected item is right in the dense model's open and mc answers).
--
-- Recovery columns are NULL where the decode did not run (evaluation.recovery.scope; by default
-- every item whose greedy open answer is wrong):
--   beam_top        the top beam is correct          beam_any      any of the beams is correct
--   sample_pass     any sample is correct (pass@k)   sample_majority  the most frequent normalised
--                   sampled answer is correct (ties: the alphabetically first answer)
--   oneshot         greedy after one worked example is correct
--   recovered       any recovery decode is correct (the oracle)
-- Each verdict also comes sentence-tolerant (<column>_sentence: the judge's correct_sentence,
-- which also accepts one sentence that states the gold and names no other option);
-- mc_only_sentence = mc right and the open answer not even sentence-correct.
-- status of the open answer (the MC-only items split into verbose, demoted, erased, untested):
--   'correct'   greedy open is right (strict judge)
--   'verbose'   greedy open is wrong only for the short-answer format: it states the gold in one
--               sentence (open_correct_sentence); a change of format, not a lost answer
--   'demoted'   open wrong, and a recovery decode produces the answer (recovered_sentence)
--   'erased'    open wrong, the recovery decodes ran, and none produced the answer
--   'untested'  open wrong and no recovery decode ran on the item: never counted as erased
-- oracle_correct: greedy open right or any recovery decode right; NULL where open is wrong and
--   no decode ran.
-- False-recovery control, against every distractor: <decode>_false (and _false_sentence) is a
--   bitmask of the distractors the decode produced, each judged as if it were the gold (same
--   judge and rules, hedges included; bit i = option i, the gold's bit always 0). The fixed
--   decoy's columns (<decode>_decoy, recovered_decoy, open_decoy: the option after the gold)
--   are one of those distractors.
-- open_negated / open_uncertain: the greedy open answer names the gold but denies it ("It is not
--   Paris") / offers it beside an alternative that is no option ("Paris or Lyon"); both are
--   wrong. open_correct_upper (open_correct_sentence_upper) counts an uncertain answer as right:
--   every rate has its lower and upper bound (uncertain counted wrong, counted right);
--   mc_only_lower and mc_only_sentence_lower are MC-only with uncertain open answers counted right.
-- mc_margin: the gold option's summed log-likelihood minus the best distractor's (mc, acc): a
--   continuous measure beside the mc pick (> 0: picked) and the gold rank; dense_mc_margin the
--   reference's.
-- n_options: K, the number of options (chance is 1/K).
-- mc_nopassage_correct (mc_nopassage_norm_correct): the mc pick (per-byte pick) is right on the
--   same prompt without the passage (format mc_nopassage; NULL where it did not run; the
--   selection run never has it). guessable: right in mc and right without the passage too.
-- distractors_in_passage: whether every distractor of the item occurs in its passage (the item
--   file's column; NULL for item files written before it existed).
-- dense_* columns: the reference evaluation of the same item. For a pruned checkpoint that is
--   the dense model evaluated by the same `evaluate` rule; for the dense row itself it is the
--   selection run (the pool), so the dense row's drops and MC-only rate are the noise floor:
--   the same weights evaluated twice, batched differently.
CREATE OR REPLACE MACRO false_hits(hits, gold) AS
    list_sum(list_transform(range(len(hits)), lambda i:
        CASE WHEN hits[i + 1] AND i <> gold THEN (1::BIGINT << i) ELSE 0::BIGINT END));

-- mc_margin(ll, gold): the gold option's log-likelihood minus the best other option's (> 0: the
-- gold wins the mc pick; its size says by how much)
CREATE OR REPLACE MACRO mc_margin(ll, gold) AS
    ll[gold + 1] - list_max(list_filter(list_transform(range(len(ll)), lambda i:
        CASE WHEN i <> gold THEN ll[i + 1] END), lambda x: x IS NOT NULL));

CREATE OR REPLACE TABLE item_outcomes AS
-- one aggregation for the checkpoints' logs and for the selection run (the dense model's pool)
WITH all_logs AS (
    SELECT false AS selection_run, * FROM generations
    UNION ALL BY NAME
    SELECT true AS selection_run, * FROM pool WHERE method = 'dense'
),
-- false recovery against every distractor: a bit per option whose text the row produces as if
-- it were the gold (option_correct), the gold's own bit cleared; OR-ed over a decode's rows
logs AS (
    SELECT *,
           false_hits(option_correct, gold_option)          AS false_mask,
           false_hits(option_correct_sentence, gold_option) AS false_mask_sentence,
           CASE WHEN format = 'mc' THEN mc_margin(option_ll, gold_option) END AS margin
    FROM all_logs
),
per_item AS (
    SELECT selection_run, model, method, structure, sparsity, dataset, lang, item_id,
           bool_or(correct) FILTER (WHERE format = 'open' AND decode = 'greedy') AS open_correct,
           bool_or(correct) FILTER (WHERE format = 'candidates')                 AS candidates_correct,
           bool_or(correct) FILTER (WHERE format = 'mc')                         AS mc_correct,
           bool_or(correct_norm) FILTER (WHERE format = 'mc')                    AS mc_norm_correct,
           bool_or(correct_bytes) FILTER (WHERE format = 'mc')                   AS mc_bytes_correct,
           any_value(margin) FILTER (WHERE format = 'mc')                        AS mc_margin,
           -- the guessing control: the same options scored without the passage
           bool_or(correct) FILTER (WHERE format = 'mc_nopassage')               AS mc_nopassage_correct,
           bool_or(correct_norm) FILTER (WHERE format = 'mc_nopassage')          AS mc_nopassage_norm_correct,
           -- the rank of a byte piece (gold_token_partial) is not a rank of text: NULL here
           any_value(gold_rank) FILTER (WHERE format = 'open' AND decode = 'greedy'
                                        AND NOT coalesce(gold_token_partial, false))                AS gold_rank,
           any_value(gold_token_partial) FILTER (WHERE format = 'open' AND decode = 'greedy') AS gold_token_partial,
           any_value(gold_logprob_answer) FILTER (WHERE format = 'open' AND decode = 'greedy') AS gold_logprob_answer,
           any_value(output) FILTER (WHERE format = 'open' AND decode = 'greedy')    AS open_output,
           bool_or(correct) FILTER (WHERE decode = 'beam' AND sample = 0)        AS beam_top,
           bool_or(correct) FILTER (WHERE decode = 'beam')                       AS beam_any,
           bool_or(correct) FILTER (WHERE decode = 'sample')                     AS sample_pass,
           bool_or(correct) FILTER (WHERE format = 'oneshot')                    AS oneshot,
           any_value(len(option_ll)) FILTER (WHERE format = 'mc')                AS n_options,
           bool_or(decoy_correct) FILTER (WHERE format = 'open' AND decode = 'greedy') AS open_decoy,
           bool_or(decoy_correct) FILTER (WHERE decode = 'beam' AND sample = 0)  AS beam_top_decoy,
           bool_or(decoy_correct) FILTER (WHERE decode = 'beam')                 AS beam_any_decoy,
           bool_or(decoy_correct) FILTER (WHERE decode = 'sample')               AS sample_pass_decoy,
           bool_or(decoy_correct) FILTER (WHERE format = 'oneshot')              AS oneshot_decoy,
           -- the sentence-tolerant verdict (correct_sentence) of the same rows
           bool_or(correct_sentence) FILTER (WHERE format = 'open' AND decode = 'greedy') AS open_correct_sentence,
           -- the judge's reading of the open answer: the gold denied (negated) or offered beside
           -- an alternative that is no option (uncertain); *_upper counts uncertain as right
           bool_or(negated) FILTER (WHERE format = 'open' AND decode = 'greedy')          AS open_negated,
           bool_or(uncertain) FILTER (WHERE format = 'open' AND decode = 'greedy')        AS open_uncertain,
           bool_or(correct_upper) FILTER (WHERE format = 'open' AND decode = 'greedy')    AS open_correct_upper,
           bool_or(correct_sentence_upper) FILTER (WHERE format = 'open' AND decode = 'greedy') AS open_correct_sentence_upper,
           bool_or(correct_sentence) FILTER (WHERE format = 'candidates')               AS candidates_correct_sentence,
           bool_or(correct_sentence) FILTER (WHERE decode = 'beam' AND sample = 0)      AS beam_top_sentence,
           bool_or(correct_sentence) FILTER (WHERE decode = 'beam')                     AS beam_any_sentence,
           bool_or(correct_sentence) FILTER (WHERE decode = 'sample')                   AS sample_pass_sentence,
           bool_or(correct_sentence) FILTER (WHERE format = 'oneshot')                  AS oneshot_sentence,
           -- distractors each decode produced (bit i: option i), strict and sentence-tolerant
           bit_or(false_mask) FILTER (WHERE format = 'open' AND decode = 'greedy')  AS open_false,
           bit_or(false_mask) FILTER (WHERE decode = 'beam' AND sample = 0)         AS beam_top_false,
           bit_or(false_mask) FILTER (WHERE decode = 'beam')                        AS beam_any_false,
           bit_or(false_mask) FILTER (WHERE decode = 'sample')                      AS sample_pass_false,
           bit_or(false_mask) FILTER (WHERE format = 'oneshot')                     AS oneshot_false,
           bit_or(false_mask_sentence) FILTER (WHERE decode = 'beam' AND sample = 0) AS beam_top_false_sentence,
           bit_or(false_mask_sentence) FILTER (WHERE decode = 'beam')               AS beam_any_false_sentence,
           bit_or(false_mask_sentence) FILTER (WHERE decode = 'sample')             AS sample_pass_false_sentence,
           bit_or(false_mask_sentence) FILTER (WHERE format = 'oneshot')            AS oneshot_false_sentence
    FROM logs
    GROUP BY ALL
),
greedy AS (
    SELECT * EXCLUDE (selection_run) FROM per_item WHERE NOT selection_run
),
-- the selection run: the dense model on its pool, where the selected items were found right
selection_run AS (
    SELECT * EXCLUDE (selection_run) FROM per_item WHERE selection_run
),
votes AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id, answer_norm,
           count(*) AS n, bool_or(correct) AS correct, bool_or(decoy_correct) AS decoy,
           bool_or(correct_sentence) AS correct_sentence,
           bit_or(false_hits(option_correct, gold_option)) AS false_mask,
           bit_or(false_hits(option_correct_sentence, gold_option)) AS false_mask_sentence
    FROM generations
    WHERE decode = 'sample'
    GROUP BY ALL
),
majority AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           arg_max(correct, n * 1e6 - rank) AS sample_majority,
           arg_max(decoy, n * 1e6 - rank)   AS sample_majority_decoy,
           arg_max(correct_sentence, n * 1e6 - rank)    AS sample_majority_sentence,
           arg_max(false_mask, n * 1e6 - rank)          AS sample_majority_false,
           arg_max(false_mask_sentence, n * 1e6 - rank) AS sample_majority_false_sentence
    FROM (SELECT *, row_number() OVER (PARTITION BY model, method, structure, sparsity, dataset, lang, item_id
                                       ORDER BY answer_norm) AS rank FROM votes)
    GROUP BY ALL
),
joined AS (
    SELECT g.*, m.sample_majority, m.sample_majority_decoy, m.sample_majority_sentence,
           m.sample_majority_false, m.sample_majority_false_sentence,
           CASE WHEN coalesce(g.beam_any, g.sample_pass, g.oneshot) IS NULL THEN NULL
                ELSE coalesce(g.beam_any_sentence, false) OR coalesce(g.sample_pass_sentence, false)
                     OR coalesce(g.oneshot_sentence, false)
           END AS recovered_sentence,
           CASE WHEN coalesce(g.beam_any, g.sample_pass, g.oneshot) IS NULL THEN NULL
                ELSE coalesce(g.beam_any_false, 0) | coalesce(g.sample_pass_false, 0) | coalesce(g.oneshot_false, 0)
           END AS recovered_false,
           CASE WHEN coalesce(g.beam_any, g.sample_pass, g.oneshot) IS NULL THEN NULL
                ELSE coalesce(g.beam_any_false_sentence, 0) | coalesce(g.sample_pass_false_sentence, 0)
                     | coalesce(g.oneshot_false_sentence, 0)
           END AS recovered_false_sentence,
           CASE WHEN coalesce(g.beam_any, g.sample_pass, g.oneshot) IS NULL THEN NULL
                ELSE coalesce(g.beam_any, false) OR coalesce(g.sample_pass, false) OR coalesce(g.oneshot, false)
           END AS recovered,
           CASE WHEN coalesce(g.beam_any_decoy, g.sample_pass_decoy, g.oneshot_decoy) IS NULL THEN NULL
                ELSE coalesce(g.beam_any_decoy, false) OR coalesce(g.sample_pass_decoy, false)
                     OR coalesce(g.oneshot_decoy, false)
           END AS recovered_decoy
    FROM greedy g
    LEFT JOIN majority m USING (model, method, structure, sparsity, dataset, lang, item_id)
),
outcomes AS (
    SELECT *, CASE WHEN open_correct THEN true ELSE recovered END AS oracle_correct,
           CASE WHEN open_correct_sentence THEN true ELSE recovered_sentence END AS oracle_correct_sentence
    FROM joined
)
SELECT p.*,
       p.mc_correct AND NOT p.open_correct AS mc_only,
       CASE WHEN p.mc_nopassage_correct IS NOT NULL
            THEN p.mc_correct AND p.mc_nopassage_correct END AS guessable,
       p.mc_correct AND NOT p.open_correct_sentence AS mc_only_sentence,
       -- the lower bounds of MC-only: an uncertain open answer counted as right
       p.mc_correct AND NOT coalesce(p.open_correct_upper, p.open_correct) AS mc_only_lower,
       p.mc_correct AND NOT coalesce(p.open_correct_sentence_upper, p.open_correct_sentence) AS mc_only_sentence_lower,
       CASE WHEN p.open_correct THEN 'correct'
            WHEN p.open_correct_sentence THEN 'verbose'
            WHEN p.recovered_sentence THEN 'demoted'
            WHEN p.recovered_sentence IS NULL THEN 'untested'
            ELSE 'erased' END AS status,
       CASE WHEN p.method = 'dense' THEN 'selection_run' ELSE 'dense' END AS reference,
       coalesce(d.gold_rank, s.gold_rank)                   AS dense_gold_rank,
       coalesce(d.mc_margin, s.mc_margin)                   AS dense_mc_margin,
       coalesce(d.gold_logprob_answer, s.gold_logprob_answer) AS dense_gold_logprob_answer,
       coalesce(d.open_output, s.open_output)               AS dense_open_output,
       coalesce(d.open_correct, s.open_correct)             AS dense_open_correct,
       coalesce(d.candidates_correct, s.candidates_correct) AS dense_candidates_correct,
       coalesce(d.mc_correct, s.mc_correct)                 AS dense_mc_correct,
       coalesce(d.mc_norm_correct, s.mc_norm_correct)       AS dense_mc_norm_correct,
       coalesce(d.mc_bytes_correct, s.mc_bytes_correct)     AS dense_mc_bytes_correct,
       coalesce(d.open_correct_sentence, s.open_correct_sentence)             AS dense_open_correct_sentence,
       coalesce(d.candidates_correct_sentence, s.candidates_correct_sentence) AS dense_candidates_correct_sentence,
       d.oracle_correct_sentence AS dense_oracle_correct_sentence,
       d.beam_top           AS dense_beam_top,
       d.beam_any           AS dense_beam_any,
       d.sample_pass        AS dense_sample_pass,
       d.sample_majority    AS dense_sample_majority,
       d.oneshot            AS dense_oneshot,
       d.oracle_correct     AS dense_oracle_correct,
       si.distractors_in_passage
FROM outcomes p
LEFT JOIN outcomes d
  ON p.method <> 'dense' AND d.method = 'dense'
 AND d.model = p.model AND d.dataset = p.dataset AND d.lang = p.lang AND d.item_id = p.item_id
LEFT JOIN selection_run s
  ON p.method = 'dense' AND s.model = p.model AND s.dataset = p.dataset AND s.lang = p.lang AND s.item_id = p.item_id
LEFT JOIN selected_items si
  ON si.model = p.model AND si.dataset = p.dataset AND si.lang = p.lang AND si.item_id = p.item_id
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.item_id;
