-- mc_only: per checkpoint x benchmark (and pooled: dataset = 'all', lang = 'all'), how many
-- selected items are MC-only (mc right, greedy open wrong: recognised, not produced), and what
-- became of the wrong open answers (item_outcomes.status): verbose (the gold stated in one
-- sentence: a change of format), demoted (a recovery decode produces it), erased (decoded, never
-- produced) or untested (no decode ran). mc_only_rate is over all selected items, and so are the
-- four mc_only_<status>_rate columns, which sum to it; demoted_rate and erased_rate are over the
-- decoded wrong open answers (n_demoted + n_erased). Intervals: 95% bootstrap, from `rates`.
-- Two verdicts side by side: mc_only_rate uses the strict short-answer judge (`correct`);
-- mc_only_sentence_rate the sentence-tolerant one (`correct_sentence`), the headline for
-- "fails to answer" (docs/metrics.md).
-- Controls beside the rate:
--   noise_floor        the dense model's own MC-only rate on the same benchmark (evaluated by the
--                      same rule as the checkpoints; its open and mc answers were right in the
--                      selection run): the numeric floor, 0 in float32 on a CPU
--   perturbation_floor the MC-only rate of the checkpoint's damage-matched twins (the dense model
--                      with seeded noise scaled to the checkpoint's KL from the dense model on
--                      held-out text; without them, the size-matched ones:
--                      perturbation_floor_kind), averaged over seeds, with its Wilson interval
--                      and perturbation_seeds (table perturbation_floor): what any change of this
--                      damage does. perturbation_floor_sentence: the same under the sentence
--                      verdict. size_floor, size_floor_sentence: the size-matched twins'. A
--                      placebo's floors are its source's. NULL for dense and the twins themselves.
--                      The paired difference with its interval is in illusion_test
--   mc_only_guess_adj  MC-only rate minus (1 - open accuracy) / K: the part a model that guesses
--                      among the K options when it cannot produce the answer would not reach
--   mc_only_guess_adj_nopassage  the same with the guessing measured: MC-only rate minus the
--                      share of items open gets wrong and mc gets right without the passage
--                      (format mc_nopassage); acc_mc_nopassage beside it, n_mc_only_guessable the
--                      MC-only items also right without the passage. NULL without mc_nopassage.
--   mc_chance_adj      mc accuracy rescaled so that guessing among K options is 0 and all right is 1
--   n_demoted_false    demoted items whose recovery decodes also produced a distractor judged as
--                      the gold (sentence-tolerant): demoted by a decode that hits options anyway
CREATE OR REPLACE TABLE mc_only AS
WITH counts AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           count(*)                                          AS n_items,
           count(*) FILTER (WHERE mc_only)                   AS n_mc_only,
           count(*) FILTER (WHERE NOT mc_correct)            AS n_mc_wrong,
           count(*) FILTER (WHERE NOT open_correct)          AS n_open_wrong,
           count(*) FILTER (WHERE mc_only AND recovered)     AS n_mc_only_recovered,
           count(*) FILTER (WHERE mc_only AND mc_nopassage_correct) AS n_mc_only_guessable,
           count(*) FILTER (WHERE status = 'demoted')        AS n_demoted,
           count(*) FILTER (WHERE status = 'erased')         AS n_erased,
           count(*) FILTER (WHERE status = 'untested')       AS n_untested,
           count(*) FILTER (WHERE status = 'verbose')        AS n_verbose,
           count(*) FILTER (WHERE mc_only AND status = 'verbose')  AS n_mc_only_verbose,
           count(*) FILTER (WHERE mc_only AND status = 'demoted')  AS n_mc_only_demoted,
           count(*) FILTER (WHERE mc_only AND status = 'erased')   AS n_mc_only_erased,
           count(*) FILTER (WHERE mc_only AND status = 'untested') AS n_mc_only_untested,
           count(*) FILTER (WHERE mc_only_sentence)          AS n_mc_only_sentence,
           count(*) FILTER (WHERE open_negated)              AS n_open_negated,
           count(*) FILTER (WHERE open_uncertain)            AS n_open_uncertain,
           count(*) FILTER (WHERE status = 'demoted' AND recovered_false_sentence <> 0) AS n_demoted_false
    FROM item_outcomes
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang),
                            (model, method, structure, sparsity))
),
-- the rates this table shows, one row per checkpoint x benchmark: <metric>_value, _ci_low,
-- _ci_high of each metric of `rates` (population selected), so that one join fetches them all
r AS (
    PIVOT (SELECT model, method, structure, sparsity, dataset, lang, metric, value, ci_low, ci_high
           FROM rates WHERE population = 'selected')
    ON metric IN ('mc_only', 'sent_mc_only', 'mc_only_guess_adj', 'mc_only_guess_adj_nopassage',
                  'acc_mc_nopassage', 'acc_mc_chance_adj', 'demoted', 'erased', 'mc_only_lower',
                  'sent_mc_only_lower', 'sent_mc_only_guess_adj', 'mc_only_verbose',
                  'mc_only_demoted', 'mc_only_erased', 'mc_only_untested')
    USING first(value) AS value, first(ci_low) AS ci_low, first(ci_high) AS ci_high
)
SELECT c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang, c.n_items,
       c.n_mc_only,
       r.mc_only_value AS mc_only_rate, r.mc_only_ci_low AS mc_only_ci_low, r.mc_only_ci_high AS mc_only_ci_high,
       f.mc_only_value AS noise_floor, f.mc_only_ci_low AS noise_floor_ci_low, f.mc_only_ci_high AS noise_floor_ci_high,
       coalesce(pf.value, ps.value) AS perturbation_floor,
       coalesce(pf.ci_low, ps.ci_low) AS perturbation_floor_ci_low,
       coalesce(pf.ci_high, ps.ci_high) AS perturbation_floor_ci_high,
       coalesce(pf.n_seeds, ps.n_seeds) AS perturbation_seeds,
       CASE WHEN pf.value IS NOT NULL THEN 'damage' WHEN ps.value IS NOT NULL THEN 'size' END AS perturbation_floor_kind,
       coalesce(pfs.value, pss.value) AS perturbation_floor_sentence,
       coalesce(pfs.ci_low, pss.ci_low) AS perturbation_floor_sentence_ci_low,
       coalesce(pfs.ci_high, pss.ci_high) AS perturbation_floor_sentence_ci_high,
       ps.value AS size_floor, ps.ci_low AS size_floor_ci_low, ps.ci_high AS size_floor_ci_high,
       pss.value AS size_floor_sentence,
       r.mc_only_guess_adj_value AS mc_only_guess_adj, r.mc_only_guess_adj_ci_low AS guess_adj_ci_low, r.mc_only_guess_adj_ci_high AS guess_adj_ci_high,
       -- guessing measured (mc without the passage) instead of assumed (1/K)
       r.mc_only_guess_adj_nopassage_value AS mc_only_guess_adj_nopassage, r.mc_only_guess_adj_nopassage_ci_low AS guess_adj_nopassage_ci_low,
       r.mc_only_guess_adj_nopassage_ci_high AS guess_adj_nopassage_ci_high,
       r.acc_mc_nopassage_value AS acc_mc_nopassage, r.acc_mc_nopassage_ci_low AS mc_nopassage_ci_low, r.acc_mc_nopassage_ci_high AS mc_nopassage_ci_high,
       c.n_mc_only_guessable,
       r.acc_mc_chance_adj_value AS mc_chance_adj, r.acc_mc_chance_adj_ci_low AS mc_chance_adj_ci_low, r.acc_mc_chance_adj_ci_high AS mc_chance_adj_ci_high,
       c.n_mc_wrong, c.n_open_wrong, c.n_mc_only_recovered,
       c.n_demoted, c.n_erased, c.n_untested, c.n_verbose, c.n_demoted_false,
       r.demoted_value AS demoted_rate, r.demoted_ci_low AS demoted_ci_low, r.demoted_ci_high AS demoted_ci_high,
       r.erased_value AS erased_rate, r.erased_ci_low AS erased_ci_low, r.erased_ci_high AS erased_ci_high,
       -- the sentence-tolerant MC-only rate (mc right, open not even a sentence stating the gold)
       c.n_mc_only_sentence,
       r.sent_mc_only_value AS mc_only_sentence_rate, r.sent_mc_only_ci_low AS mc_only_sentence_ci_low, r.sent_mc_only_ci_high AS mc_only_sentence_ci_high,
       -- the judge's bounds: open answers that deny the gold (negated, wrong in both) and that
       -- offer it beside an alternative (uncertain); mc_only_rate and mc_only_sentence_rate count
       -- the uncertain ones wrong (their upper bound), the *_lower columns count them right
       c.n_open_negated, c.n_open_uncertain,
       r.mc_only_lower_value AS mc_only_lower, r.mc_only_lower_ci_low AS mc_only_lower_ci_low, r.mc_only_lower_ci_high AS mc_only_lower_ci_high,
       r.sent_mc_only_lower_value AS mc_only_sentence_lower, r.sent_mc_only_lower_ci_low AS mc_only_sentence_lower_ci_low,
       r.sent_mc_only_lower_ci_high AS mc_only_sentence_lower_ci_high,
       f.sent_mc_only_value AS noise_floor_sentence,
       r.sent_mc_only_guess_adj_value AS mc_only_sentence_guess_adj, r.sent_mc_only_guess_adj_ci_low AS sentence_guess_adj_ci_low, r.sent_mc_only_guess_adj_ci_high AS sentence_guess_adj_ci_high,
       -- the MC-only items split: verbose + demoted + erased + untested = n_mc_only (rates over
       -- every selected item, so they sum to mc_only_rate)
       c.n_mc_only_verbose, c.n_mc_only_demoted, c.n_mc_only_erased, c.n_mc_only_untested,
       r.mc_only_verbose_value AS mc_only_verbose_rate,  r.mc_only_verbose_ci_low AS verbose_ci_low,  r.mc_only_verbose_ci_high AS verbose_ci_high,
       r.mc_only_demoted_value AS mc_only_demoted_rate,  r.mc_only_demoted_ci_low AS mc_only_demoted_ci_low,  r.mc_only_demoted_ci_high AS mc_only_demoted_ci_high,
       r.mc_only_erased_value AS mc_only_erased_rate,   r.mc_only_erased_ci_low AS mc_only_erased_ci_low,   r.mc_only_erased_ci_high AS mc_only_erased_ci_high,
       r.mc_only_untested_value AS mc_only_untested_rate, r.mc_only_untested_ci_low AS untested_ci_low, r.mc_only_untested_ci_high AS untested_ci_high
FROM counts c
LEFT JOIN r
  ON (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang) = (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang)
-- the dense model's own rates on the same benchmark (the noise floors)
LEFT JOIN r f
  ON f.method = 'dense'
 AND (f.model, f.dataset, f.lang) = (c.model, c.dataset, c.lang)
LEFT JOIN perturbation_floor_of('mc_only', 'damage') pf
  ON (pf.model, pf.method, pf.structure, pf.sparsity, pf.dataset, pf.lang) = (c.model, floor_source(c.method), c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN perturbation_floor_of('mc_only', 'size') ps
  ON (ps.model, ps.method, ps.structure, ps.sparsity, ps.dataset, ps.lang) = (c.model, floor_source(c.method), c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN perturbation_floor_of('sent_mc_only', 'damage') pfs
  ON (pfs.model, pfs.method, pfs.structure, pfs.sparsity, pfs.dataset, pfs.lang) = (c.model, floor_source(c.method), c.structure, c.sparsity, c.dataset, c.lang)
LEFT JOIN perturbation_floor_of('sent_mc_only', 'size') pss
  ON (pss.model, pss.method, pss.structure, pss.sparsity, pss.dataset, pss.lang) = (c.model, floor_source(c.method), c.structure, c.sparsity, c.dataset, c.lang)
ORDER BY c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang;
