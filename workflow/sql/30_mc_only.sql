-- item_outcomes: one row per checkpoint x item: correct per format, the gold rank and the open
-- answer, next to the dense model's. Answers "which items did pruning turn from correct to
-- MC-only": WHERE mc_correct AND NOT open_correct (every selected item is right in the dense
-- model's open and mc, so such an error is caused by pruning).
CREATE OR REPLACE TABLE item_outcomes AS
WITH per_item AS (
    SELECT model, method, structure, sparsity, dataset, lang, item_id,
           bool_or(correct) FILTER (WHERE format = 'open')         AS open_correct,
           bool_or(correct) FILTER (WHERE format = 'candidates')   AS candidates_correct,
           bool_or(correct) FILTER (WHERE format = 'mc')           AS mc_correct,
           any_value(gold_rank) FILTER (WHERE format = 'open')     AS gold_rank,
           any_value(output) FILTER (WHERE format = 'open')        AS open_output
    FROM generations
    WHERE sample = 0 AND decode IN ('greedy', 'loglik')
    GROUP BY ALL
)
SELECT p.*,
       p.mc_correct AND NOT p.open_correct AS mc_only,
       d.gold_rank   AS dense_gold_rank,
       d.open_output AS dense_open_output
FROM per_item p
LEFT JOIN per_item d
  ON d.method = 'dense' AND d.model = p.model AND d.dataset = p.dataset AND d.lang = p.lang AND d.item_id = p.item_id
ORDER BY p.model, p.method, p.structure, p.sparsity, p.dataset, p.lang, p.item_id;

-- mc_only: per checkpoint x benchmark, how many selected items are MC-only (recognised, not produced).
CREATE OR REPLACE TABLE mc_only AS
SELECT model, method, structure, sparsity, dataset, lang,
       count(*)                                   AS n_items,
       count(*) FILTER (WHERE mc_only)            AS n_mc_only,
       avg(mc_only::DOUBLE)                       AS mc_only_rate,
       count(*) FILTER (WHERE NOT mc_correct)     AS n_mc_wrong,
       count(*) FILTER (WHERE NOT open_correct)   AS n_open_wrong
FROM item_outcomes
GROUP BY ALL
ORDER BY model, method, structure, sparsity, dataset, lang;
