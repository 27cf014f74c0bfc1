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
CREATE OR REPLACE TABLE item_outcomes AS
WITH greedy AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
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
           bool_or(correct) FILTER (WHERE format = 'oneshot')                    AS oneshot
    FROM generations
    GROUP BY ALL
),
votes AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id, answer_norm,
           count(*) AS n, bool_or(correct) AS correct
    FROM generations
    WHERE decode = 'sample'
    GROUP BY ALL
),
majority AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           arg_max(correct, n * 1e6 - rank) AS sample_majority
    FROM (SELECT *, row_number() OVER (PARTITION BY model, method, structure, sparsity, dataset, lang, item_id
                                       ORDER BY answer_norm) AS rank FROM votes)
    GROUP BY ALL
),
joined AS (
    SELECT g.*, m.sample_majority,
           CASE WHEN coalesce(g.beam_any, g.sample_pass, g.oneshot) IS NULL THEN NULL
                ELSE coalesce(g.beam_any, false) OR coalesce(g.sample_pass, false) OR coalesce(g.oneshot, false)
           END AS recovered
    FROM greedy g
    LEFT JOIN majority m USING (model, method, structure, sparsity, dataset, lang, item_id)
)
SELECT p.*,
       p.mc_correct AND NOT p.open_correct AS mc_only,
       CASE WHEN p.open_correct THEN 'correct'
            WHEN p.recovered THEN 'demoted'
            WHEN p.recovered IS NULL AND p.mc_correct THEN 'unknown'
            ELSE 'erased' END AS status,
       d.gold_rank          AS dense_gold_rank,
       d.gold_logprob_answer AS dense_gold_logprob_answer,
       d.open_output        AS dense_open_output,
       d.open_correct       AS dense_open_correct,
       d.candidates_correct AS dense_candidates_correct,
       d.mc_correct         AS dense_mc_correct,
       d.mc_norm_correct    AS dense_mc_norm_correct
FROM joined p
LEFT JOIN joined d
  ON d.method = 'dense' AND d.model = p.model AND d.dataset = p.dataset AND d.lang = p.lang AND d.item_id = p.item_id
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.item_id;
