-- mc_only: per checkpoint x benchmark (and pooled: dataset = 'all', lang = 'all'), how many
-- selected items are MC-only (mc right, greedy open wrong: recognised, not produced), and what
-- became of the wrong open answers: demoted (a recovery decode produces them) or erased.
-- mc_only_rate is over all selected items; demoted_rate and erased_rate are over the wrong open
-- answers whose status is known (n_demoted + n_erased); n_unknown counts MC-only items that no
-- recovery decode ran on. Intervals: 95% bootstrap, from `rates`.
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
           count(*) FILTER (WHERE status = 'unknown')        AS n_unknown
    FROM item_outcomes
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang),
                            (model, method, structure, sparsity))
)
SELECT c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang, c.n_items,
       c.n_mc_only,
       m.value AS mc_only_rate, m.ci_low AS mc_only_ci_low, m.ci_high AS mc_only_ci_high,
       c.n_mc_wrong, c.n_open_wrong, c.n_mc_only_recovered,
       c.n_demoted, c.n_erased, c.n_unknown,
       dm.value AS demoted_rate, dm.ci_low AS demoted_ci_low, dm.ci_high AS demoted_ci_high,
       er.value AS erased_rate, er.ci_low AS erased_ci_low, er.ci_high AS erased_ci_high
FROM counts c
LEFT JOIN rates m
  ON m.metric = 'mc_only' AND m.population = 'selected'
 AND (m.model, m.method, m.structure, m.sparsity, m.dataset, m.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN rates dm
  ON dm.metric = 'demoted' AND dm.population = 'selected'
 AND (dm.model, dm.method, dm.structure, dm.sparsity, dm.dataset, dm.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN rates er
  ON er.metric = 'erased' AND er.population = 'selected'
 AND (er.model, er.method, er.structure, er.sparsity, er.dataset, er.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
ORDER BY c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang;
