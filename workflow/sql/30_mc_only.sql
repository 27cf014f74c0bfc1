-- item_outcomes: one row per checkpoint x item. Correctness per format, the gold rank and the
-- open answer next to the dense model's, and what the recovery decodes made of a missed answer.
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
-- status: 'correct' (open right); 'demoted' (MC-only and recovered); 'erased' (open wrong, and
-- wrong in mc too or never recovered).
CREATE OR REPLACE TABLE item_outcomes AS
WITH greedy AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           bool_or(correct) FILTER (WHERE format = 'open' AND decode = 'greedy') AS open_correct,
           bool_or(correct) FILTER (WHERE format = 'candidates')                 AS candidates_correct,
           bool_or(correct) FILTER (WHERE format = 'mc')                         AS mc_correct,
           any_value(gold_rank) FILTER (WHERE format = 'open' AND decode = 'greedy') AS gold_rank,
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
            WHEN p.mc_correct AND coalesce(p.recovered, false) THEN 'demoted'
            ELSE 'erased' END AS status,
       d.gold_rank   AS dense_gold_rank,
       d.open_output AS dense_open_output
FROM joined p
LEFT JOIN joined d
  ON d.method = 'dense' AND d.model = p.model AND d.dataset = p.dataset AND d.lang = p.lang AND d.item_id = p.item_id
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.item_id;

-- mc_only: per checkpoint x benchmark, how many selected items are MC-only (recognised, not
-- produced), and how many wrong open answers are demoted (recoverable) or erased.
CREATE OR REPLACE TABLE mc_only AS
SELECT model, method, structure, sparsity, dataset, lang,
       count(*)                                          AS n_items,
       count(*) FILTER (WHERE mc_only)                   AS n_mc_only,
       avg(mc_only::DOUBLE)                              AS mc_only_rate,
       count(*) FILTER (WHERE NOT mc_correct)            AS n_mc_wrong,
       count(*) FILTER (WHERE NOT open_correct)          AS n_open_wrong,
       count(*) FILTER (WHERE mc_only AND recovered)     AS n_mc_only_recovered,
       count(*) FILTER (WHERE status = 'demoted')        AS n_demoted,
       count(*) FILTER (WHERE status = 'erased')         AS n_erased
FROM item_outcomes
GROUP BY ALL
ORDER BY model, method, structure, sparsity, dataset, lang;
