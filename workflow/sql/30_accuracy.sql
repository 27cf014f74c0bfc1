-- accuracy: one row per checkpoint x benchmark x format on the selected items, plus pooled rows
-- (dataset = 'all', lang = 'all'). `correct` is containment (anti-echo) for the generation
-- formats and argmax log-likelihood (`acc`) for mc; `accuracy_norm` is mc's variant per
-- character of the option (`acc_norm`, as lm-evaluation-harness defines it) and
-- `accuracy_bytes` per UTF-8 byte (`acc_bytes`). All, and their 95% bootstrap intervals (ci_*,
-- norm_ci_*, bytes_ci_*), come from `rates` (metrics acc_<format>, acc_<format>_norm,
-- acc_mc_bytes); the judge variants and ranks are averaged here.
-- `mc_nopassage` is mc on the same prompt without the passage (the guessing control): accuracy,
-- accuracy_norm, chance and accuracy_chance_adj like mc.
-- `oneshot` is a recovery decode: its rows (and n_items) cover only the items in
-- evaluation.recovery.scope (by default the MC-only ones), not every selected item.
-- chance (mc, mc_nopassage and candidates): 1/K, the accuracy of guessing one of K options;
-- accuracy_chance_adj = (accuracy - 1/K) / (1 - 1/K), with its interval (metric acc_<format>_chance_adj).
-- accuracy_sentence (sentence_ci_*): the same rows judged by the sentence-tolerant verdict
-- (correct_sentence: one sentence stating the gold and naming no other option also counts);
-- equal to accuracy for mc and mc_nopassage, which generate nothing.
-- accuracy_upper, accuracy_sentence_upper (open only): the same with the judge's `uncertain`
-- answers (the gold offered beside an alternative that is no option) counted right; accuracy and
-- accuracy_sentence count them wrong, so each pair is a rate's lower and upper bound.
CREATE OR REPLACE TABLE accuracy AS
WITH per_format AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, format,
           count(DISTINCT (dataset, lang, item_id)) AS n_items,
           avg(exact_match::DOUBLE)               AS exact_match,
           avg(f1)                                AS f1,
           avg(contains::DOUBLE)                  AS contains,
           avg(echo::DOUBLE)                      AS echo_rate,
           -- interpolated, like every median; a byte piece's rank is no rank of text (gold_rank)
           quantile_cont(gold_rank, 0.5) FILTER (WHERE NOT coalesce(gold_token_partial, false)) AS median_gold_rank
    FROM generations
    WHERE sample = 0 AND decode IN ('greedy', 'loglik')
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, format),
                            (model, method, structure, sparsity, format))
)
SELECT a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang, a.format, a.n_items,
       r.value AS accuracy, r.ci_low, r.ci_high,
       rn.value AS accuracy_norm, rn.ci_low AS norm_ci_low, rn.ci_high AS norm_ci_high,
       rb.value AS accuracy_bytes, rb.ci_low AS bytes_ci_low, rb.ci_high AS bytes_ci_high,
       a.exact_match, a.f1, a.contains, a.echo_rate, a.median_gold_rank,
       k.chance, rc.value AS accuracy_chance_adj, rc.ci_low AS chance_adj_ci_low, rc.ci_high AS chance_adj_ci_high,
       rs.value AS accuracy_sentence, rs.ci_low AS sentence_ci_low, rs.ci_high AS sentence_ci_high,
       ru.value AS accuracy_upper, ru.ci_low AS upper_ci_low, ru.ci_high AS upper_ci_high,
       rsu.value AS accuracy_sentence_upper, rsu.ci_low AS sentence_upper_ci_low,
       rsu.ci_high AS sentence_upper_ci_high
FROM per_format a
LEFT JOIN (
    SELECT model, method, structure, sparsity, coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang,
           avg(1.0 / n_options) AS chance
    FROM item_outcomes
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang), (model, method, structure, sparsity))
) k
  ON a.format IN ('mc', 'mc_nopassage', 'candidates')
 AND (k.model, k.method, k.structure, k.sparsity, k.dataset, k.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of('acc_' || a.format || '_chance_adj', 'selected') rc
  ON (rc.model, rc.method, rc.structure, rc.sparsity, rc.dataset, rc.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of('acc_' || a.format, 'selected') r
  ON (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of('acc_' || a.format || '_bytes', 'selected') rb
  ON (rb.model, rb.method, rb.structure, rb.sparsity, rb.dataset, rb.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of('acc_' || a.format || '_norm', 'selected') rn
  ON a.format IN ('mc', 'mc_nopassage')
 AND (rn.model, rn.method, rn.structure, rn.sparsity, rn.dataset, rn.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of('sent_acc_' || a.format, 'selected') rs
  ON (rs.model, rs.method, rs.structure, rs.sparsity, rs.dataset, rs.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of('acc_' || a.format || '_upper', 'selected') ru
  ON (ru.model, ru.method, ru.structure, ru.sparsity, ru.dataset, ru.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rate_of('sent_acc_' || a.format || '_upper', 'selected') rsu
  ON (rsu.model, rsu.method, rsu.structure, rsu.sparsity, rsu.dataset, rsu.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
ORDER BY a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang, a.format;

-- support_gradient: per checkpoint x benchmark x format, the accuracy drop from the reference
-- on the same items (reference minus checkpoint, paired per item). The reference of a pruned
-- checkpoint is the dense model evaluated by the same rule; the dense row's reference is the
-- selection run, so its drop is the noise floor (the same weights evaluated twice), repeated in
-- every row as `noise_floor` (the numeric floor: 0 when the evaluation reproduces itself, as in
-- float32 on a CPU). perturbation_floor (+ _ci_low, _ci_high, perturbation_seeds): the drop of
-- the checkpoint's twins, averaged over seeds (perturbation_floor table): the damage-matched
-- twins (noise scaled to the checkpoint's KL from the dense model), else the size-matched ones
-- (perturbation_floor_kind says which); size_floor (+ _ci_low, _ci_high) the size-matched
-- twins' drop. A placebo's floors are its source's. NULL for dense, the twins themselves, and
-- without controls.perturbation.seeds. The expectation of Wen et al. (arXiv:2606.17609) is a
-- gradient: open drops most, candidates less, mc least. Formats: open, candidates, mc, mc_norm,
-- mc_bytes. reference_accuracy = accuracy + drop (paired over the same items). drop_sentence (sentence_ci_*): the same drop
-- under the sentence-tolerant verdict (NULL for mc_norm and mc_bytes).
CREATE OR REPLACE TABLE support_gradient AS
SELECT d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang,
       replace(d.metric, 'drop_', '') AS format,
       d.n_items,
       CASE WHEN d.method = 'dense' THEN 'selection_run' ELSE 'dense' END AS reference,
       acc.value + d.value AS reference_accuracy,
       acc.value   AS accuracy,
       d.value     AS drop,
       d.ci_low, d.ci_high,
       floor.value AS noise_floor, floor.ci_low AS noise_floor_ci_low, floor.ci_high AS noise_floor_ci_high,
       coalesce(pf.value, ps.value) AS perturbation_floor,
       coalesce(pf.ci_low, ps.ci_low) AS perturbation_floor_ci_low,
       coalesce(pf.ci_high, ps.ci_high) AS perturbation_floor_ci_high,
       coalesce(pf.n_seeds, ps.n_seeds) AS perturbation_seeds,
       CASE WHEN pf.value IS NOT NULL THEN 'damage' WHEN ps.value IS NOT NULL THEN 'size' END AS perturbation_floor_kind,
       ps.value AS size_floor, ps.ci_low AS size_floor_ci_low, ps.ci_high AS size_floor_ci_high,
       ds.value AS drop_sentence, ds.ci_low AS sentence_ci_low, ds.ci_high AS sentence_ci_high
FROM rates d
JOIN rate_of(replace(d.metric, 'drop_', 'acc_'), 'selected') acc
  ON (acc.model, acc.method, acc.structure, acc.sparsity, acc.dataset, acc.lang) = (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang)
LEFT JOIN rate_of(d.metric, 'selected') floor
  ON floor.method = 'dense'
 AND (floor.model, floor.dataset, floor.lang) = (d.model, d.dataset, d.lang)
LEFT JOIN rate_of('sent_' || d.metric, 'selected') ds
  ON (ds.model, ds.method, ds.structure, ds.sparsity, ds.dataset, ds.lang) = (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang)
LEFT JOIN perturbation_floor_of(d.metric, 'damage') pf
  ON (pf.model, pf.method, pf.structure, pf.sparsity, pf.dataset, pf.lang) = (d.model, floor_source(d.method), d.structure, d.sparsity, d.dataset, d.lang)
LEFT JOIN perturbation_floor_of(d.metric, 'size') ps
  ON (ps.model, ps.method, ps.structure, ps.sparsity, ps.dataset, ps.lang) = (d.model, floor_source(d.method), d.structure, d.sparsity, d.dataset, d.lang)
WHERE d.metric LIKE 'drop\_%' ESCAPE '\' AND d.population = 'selected'
ORDER BY d.model, d.method <> 'dense', d.method, d.structure, d.sparsity, d.dataset, d.lang,
         array_position(['open', 'candidates', 'mc', 'mc_norm', 'mc_bytes'], replace(d.metric, 'drop_', ''));

-- delta_pr: production vs recognition with the options shown, per checkpoint x benchmark:
-- Delta_PR = acc(candidates) - acc(open), the mean of the per-item difference (paired interval);
-- delta_pr_sentence: the same under the sentence-tolerant verdict.
CREATE OR REPLACE TABLE delta_pr AS
SELECT d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang, d.n_items,
       c.value AS acc_candidates, o.value AS acc_open,
       d.value AS delta_pr, d.ci_low, d.ci_high,
       ds.value AS delta_pr_sentence, ds.ci_low AS sentence_ci_low, ds.ci_high AS sentence_ci_high
FROM rates d
JOIN rate_of('acc_candidates', 'selected') c
  ON (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang) = (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang)
JOIN rate_of('acc_open', 'selected') o
  ON (o.model, o.method, o.structure, o.sparsity, o.dataset, o.lang) = (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang)
LEFT JOIN rate_of('sent_delta_pr', 'selected') ds
  ON (ds.model, ds.method, ds.structure, ds.sparsity, ds.dataset, ds.lang) = (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang)
WHERE d.metric = 'delta_pr' AND d.population = 'selected'
ORDER BY d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang;
