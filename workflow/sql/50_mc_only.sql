-- mc_only: per checkpoint x benchmark (and pooled: dataset = 'all', lang = 'all'), how many
-- selected items are MC-only (mc right, greedy open wrong: recognised, not produced), and what
-- became of the wrong open answers: demoted (a recovery decode produces them) or erased.
-- mc_only_rate is over all selected items; demoted_rate and erased_rate are over the wrong open
-- answers whose status is known (n_demoted + n_erased); n_unknown counts MC-only items that no
-- recovery decode ran on. Intervals: 95% bootstrap, from `rates`.
-- Controls beside the rate:
--   noise_floor        the dense model's own MC-only rate on the same benchmark (evaluated by the
--                      same rule as the checkpoints; its open and mc answers were right in the
--                      selection run, so anything above 0 is evaluation noise)
--   mc_only_guess_adj  MC-only rate minus (1 - open accuracy) / K: the part a model that guesses
--                      among the K options when it cannot produce the answer would not reach
--   mc_chance_adj      mc accuracy rescaled so that guessing among K options is 0 and all right is 1
--   n_demoted_decoy    demoted items whose recovery decodes also "recovered" the decoy (a fixed
--                      distractor judged as the gold): demoted by a decode that hits options anyway
CREATE OR REPLACE TABLE mc_only AS
WITH counts AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           count(*)                                          AS n_items,
           count(*) FILTER (WHERE mc_only)                   AS n_mc_only,
           count(*) FILTER (WHERE NOT mc_correct)            AS n_mc_wrong,
           count(*) FILTER (WHERE NOT open_correct)          AS n_open_wrong,
           count(*) FILTER (WHERE mc_only AND recovered)     AS n_mc_only_recovered,
           count(*) FILTER (WHERE status = 'demoted')        AS n_demoted,
           count(*) FILTER (WHERE status = 'erased')         AS n_erased,
           count(*) FILTER (WHERE status = 'unknown')        AS n_unknown,
           count(*) FILTER (WHERE status = 'demoted' AND recovered_decoy) AS n_demoted_decoy
    FROM item_outcomes
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang),
                            (model, method, structure, sparsity))
)
SELECT c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang, c.n_items,
       c.n_mc_only,
       m.value AS mc_only_rate, m.ci_low AS mc_only_ci_low, m.ci_high AS mc_only_ci_high,
       f.value AS noise_floor, f.ci_low AS noise_floor_ci_low, f.ci_high AS noise_floor_ci_high,
       g.value AS mc_only_guess_adj, g.ci_low AS guess_adj_ci_low, g.ci_high AS guess_adj_ci_high,
       ca.value AS mc_chance_adj, ca.ci_low AS mc_chance_adj_ci_low, ca.ci_high AS mc_chance_adj_ci_high,
       c.n_mc_wrong, c.n_open_wrong, c.n_mc_only_recovered,
       c.n_demoted, c.n_erased, c.n_unknown, c.n_demoted_decoy,
       dm.value AS demoted_rate, dm.ci_low AS demoted_ci_low, dm.ci_high AS demoted_ci_high,
       er.value AS erased_rate, er.ci_low AS erased_ci_low, er.ci_high AS erased_ci_high
FROM counts c
LEFT JOIN rate_of('mc_only', 'selected') m
  ON (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN rate_of('mc_only', 'selected') f
  ON f.method = 'dense'
 AND (f.model, f.dataset, f.lang) = (c.model, c.dataset, c.lang)
LEFT JOIN rate_of('mc_only_guess_adj', 'selected') g
  ON (g.model, g.method, g.structure, g.sparsity, g.dataset, g.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN rate_of('acc_mc_chance_adj', 'selected') ca
  ON (ca.model, ca.method, ca.structure, ca.sparsity, ca.dataset, ca.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN rate_of('demoted', 'selected') dm
  ON (dm.model, dm.method, dm.structure, dm.sparsity, dm.dataset, dm.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN rate_of('erased', 'selected') er
  ON (er.model, er.method, er.structure, er.sparsity, er.dataset, er.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
ORDER BY c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang;
