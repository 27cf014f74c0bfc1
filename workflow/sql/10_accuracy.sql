-- accuracy: one row per checkpoint x dataset x language x format, on the selected items.
-- `correct` is containment (anti-echo) for the generation formats and argmax log-likelihood
-- (`acc`) for mc; `accuracy_norm` is mc's per-byte normalised variant (`acc_norm`).
-- `oneshot` is a recovery decode: its rows (and n_items) cover only the items in
-- evaluation.recovery.scope (by default the MC-only ones), not every selected item.
CREATE OR REPLACE TABLE accuracy AS
SELECT
    model, method, structure, sparsity, dataset, lang, format,
    count(DISTINCT item_id)                AS n_items,
    avg(correct::DOUBLE)                   AS accuracy,
    avg(correct_norm::DOUBLE)              AS accuracy_norm,
    avg(exact_match::DOUBLE)               AS exact_match,
    avg(f1)                                AS f1,
    avg(contains::DOUBLE)                  AS contains,
    avg(echo::DOUBLE)                      AS echo_rate,
    median(gold_rank)                      AS median_gold_rank
FROM generations
WHERE sample = 0 AND decode IN ('greedy', 'loglik')
GROUP BY ALL
ORDER BY model, method, structure, sparsity, dataset, lang, format;
