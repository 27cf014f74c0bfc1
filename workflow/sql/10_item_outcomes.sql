-- item_outcomes: one row per checkpoint x item (per-item table: no n_items, no interval).
-- Correctness per format, the gold rank and the open answer next to the dense model's, and what
-- the recovery decodes made of a missed answer. Definitions: docs/metrics.md.
-- "Which items did pruning turn from correct to MC-only": WHERE mc_only AND method <> 'dense'
-- (every selected item is right in the dense model's open and mc answers).
--
-- Recovery columns are NULL where the decode did not run (by default recovery runs only on
-- MC-only items: greedy open wrong, mc right):
--   beam_top        the top beam is correct          beam_any      any of the beams is correct
--   sample_pass     any sample is correct (pass@k)   sample_majority  the most frequent normalised
--                   sampled answer is correct (ties: the alphabetically first answer)
--   oneshot         greedy after one worked example is correct
--   recovered       any recovery decode is correct (the oracle)
-- status of the open answer:
--   'correct'  greedy open is right
--   'demoted'  open wrong, and a recovery decode produces the answer (recovered)
--   'erased'   open wrong and not recovered: the decodes ran and all failed, or mc is wrong too
--              (neither produced nor recognised; with the default scope such items are not decoded)
--   'unknown'  open wrong, mc right, and no recovery decode ran (all decodes switched off)
-- oracle_correct: greedy open right or any recovery decode right; NULL where open is wrong and
--   no decode ran (scope mc_only leaves open-and-mc-wrong items undecoded).
-- False-recovery control (<decode>_decoy, recovered_decoy, open_decoy): the same decodes judged
--   against a fixed distractor of the item (decoy_option) as if it were the gold.
-- n_options: K, the number of options (chance is 1/K).
-- distractors_in_passage: whether every distractor of the item occurs in its passage (the item
--   file's column; NULL for item files written before it existed).
-- dense_* columns: the reference evaluation of the same item. For a pruned checkpoint that is
--   the dense model evaluated by the same `evaluate` rule; for the dense row itself it is the
--   selection run (the pool), so the dense row's drops and MC-only rate are the noise floor:
--   the same weights evaluated twice, batched differently.
CREATE OR REPLACE TABLE item_outcomes AS
-- one aggregation for the checkpoints' logs and for the selection run (the dense model's pool)
WITH logs AS (
    SELECT false AS selection_run, * FROM generations
    UNION ALL BY NAME
    SELECT true AS selection_run, * FROM pool WHERE method = 'dense'
),
per_item AS (
    SELECT selection_run, model, method, structure, sparsity, dataset, lang, item_id,
           bool_or(correct) FILTER (WHERE format = 'open' AND decode = 'greedy') AS open_correct,
           bool_or(correct) FILTER (WHERE format = 'candidates')                 AS candidates_correct,
           bool_or(correct) FILTER (WHERE format = 'mc')                         AS mc_correct,
           bool_or(correct_norm) FILTER (WHERE format = 'mc')                    AS mc_norm_correct,
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
           bool_or(decoy_correct) FILTER (WHERE format = 'oneshot')              AS oneshot_decoy
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
           count(*) AS n, bool_or(correct) AS correct, bool_or(decoy_correct) AS decoy
    FROM generations
    WHERE decode = 'sample'
    GROUP BY ALL
),
majority AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           arg_max(correct, n * 1e6 - rank) AS sample_majority,
           arg_max(decoy, n * 1e6 - rank)   AS sample_majority_decoy
    FROM (SELECT *, row_number() OVER (PARTITION BY model, method, structure, sparsity, dataset, lang, item_id
                                       ORDER BY answer_norm) AS rank FROM votes)
    GROUP BY ALL
),
joined AS (
    SELECT g.*, m.sample_majority, m.sample_majority_decoy,
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
    SELECT *, CASE WHEN open_correct THEN true ELSE recovered END AS oracle_correct
    FROM joined
)
SELECT p.*,
       p.mc_correct AND NOT p.open_correct AS mc_only,
       CASE WHEN p.open_correct THEN 'correct'
            WHEN p.recovered THEN 'demoted'
            WHEN p.recovered IS NULL AND p.mc_correct THEN 'unknown'
            ELSE 'erased' END AS status,
       CASE WHEN p.method = 'dense' THEN 'selection_run' ELSE 'dense' END AS reference,
       coalesce(d.gold_rank, s.gold_rank)                   AS dense_gold_rank,
       coalesce(d.gold_logprob_answer, s.gold_logprob_answer) AS dense_gold_logprob_answer,
       coalesce(d.open_output, s.open_output)               AS dense_open_output,
       coalesce(d.open_correct, s.open_correct)             AS dense_open_correct,
       coalesce(d.candidates_correct, s.candidates_correct) AS dense_candidates_correct,
       coalesce(d.mc_correct, s.mc_correct)                 AS dense_mc_correct,
       coalesce(d.mc_norm_correct, s.mc_norm_correct)       AS dense_mc_norm_correct,
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
