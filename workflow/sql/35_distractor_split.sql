-- accuracy_by_distractor_source: mc and candidates accuracy on the selected items, split by
-- whether every distractor of the item occurs verbatim in its passage (items column
-- distractors_in_passage; always true with items.distractors = passage). With options from
-- other passages, "which option is written in the passage" can solve an item without knowing
-- the answer; a higher accuracy on the items where it cannot (distractors_in_passage = true)
-- would be that shortcut. One row per checkpoint x benchmark x distractors_in_passage x format
-- present, plus pooled rows (dataset = 'all', lang = 'all'). accuracy = mean of the per-item
-- correctness (mc: acc, candidates: contained answer) over the group's items, with its interval
-- from `rates` (they are the rates dsrc_<format>_{in_passage, not_in_passage, unknown} of
-- item_values, proportions: the Wilson interval of the group's count). distractors_in_passage
-- is NULL for item files written before the column existed.
CREATE OR REPLACE TABLE accuracy_by_distractor_source AS
SELECT r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang,
       CASE g.split WHEN 'in_passage' THEN true WHEN 'not_in_passage' THEN false END AS distractors_in_passage,
       g.format, r.n_items, r.value AS accuracy, r.ci_low, r.ci_high
FROM (SELECT f.format, s.split
      FROM (VALUES ('mc'), ('candidates')) AS f(format),
           (VALUES ('in_passage'), ('not_in_passage'), ('unknown')) AS s(split)) g
JOIN rate_of('dsrc_' || g.format || '_' || g.split, 'selected') r ON true
ORDER BY r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang, distractors_in_passage,
         array_position(['mc', 'candidates'], g.format);
