-- accuracy: one row per checkpoint x benchmark x format on the selected items, plus pooled rows
-- (dataset = 'all', lang = 'all'). `correct` is containment (anti-echo) for the generation
-- formats and argmax log-likelihood (`acc`) for mc; `accuracy_norm` is mc's per-byte variant
-- (`acc_norm`). Both, and their 95% bootstrap intervals (ci_*, norm_ci_*), come from `rates`
-- (metrics acc_<format>, acc_mc_norm); the judge variants and ranks are averaged here.
-- `oneshot` is a recovery decode: its rows (and n_items) cover only the items in
-- evaluation.recovery.scope (by default the MC-only ones), not every selected item.
CREATE OR REPLACE TABLE accuracy AS
WITH per_format AS (
    SELECT model, method, structure, sparsity,
           coalesce(dataset, 'all') AS dataset, coalesce(lang, 'all') AS lang, format,
           count(DISTINCT (dataset, lang, item_id)) AS n_items,
           avg(exact_match::DOUBLE)               AS exact_match,
           avg(f1)                                AS f1,
           avg(contains::DOUBLE)                  AS contains,
           avg(echo::DOUBLE)                      AS echo_rate,
           median(gold_rank)                      AS median_gold_rank
    FROM generations
    WHERE sample = 0 AND decode IN ('greedy', 'loglik')
    GROUP BY GROUPING SETS ((model, method, structure, sparsity, dataset, lang, format),
                            (model, method, structure, sparsity, format))
)
SELECT a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang, a.format, a.n_items,
       r.value AS accuracy, r.ci_low, r.ci_high,
       rn.value AS accuracy_norm, rn.ci_low AS norm_ci_low, rn.ci_high AS norm_ci_high,
       a.exact_match, a.f1, a.contains, a.echo_rate, a.median_gold_rank
FROM per_format a
LEFT JOIN rates r
  ON r.metric = 'acc_' || a.format AND r.population = 'selected'
 AND (r.model, r.method, r.structure, r.sparsity, r.dataset, r.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
LEFT JOIN rates rn
  ON a.format = 'mc' AND rn.metric = 'acc_mc_norm' AND rn.population = 'selected'
 AND (rn.model, rn.method, rn.structure, rn.sparsity, rn.dataset, rn.lang) = (a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang)
ORDER BY a.model, a.method, a.structure, a.sparsity, a.dataset, a.lang, a.format;

-- support_gradient: per pruned checkpoint x benchmark x format, the accuracy drop from the dense
-- model on the same items (dense minus pruned, paired per item). The paper's expectation is a
-- gradient: open drops most, candidates less, mc least. Formats: open, candidates, mc, mc_norm.
CREATE OR REPLACE TABLE support_gradient AS
SELECT d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang,
       replace(d.metric, 'drop_', '') AS format,
       d.n_items,
       dense.value AS dense_accuracy,
       acc.value   AS accuracy,
       d.value     AS drop,
       d.ci_low, d.ci_high
FROM rates d
JOIN rates acc
  ON acc.metric = replace(d.metric, 'drop_', 'acc_') AND acc.population = 'selected'
 AND (acc.model, acc.method, acc.structure, acc.sparsity, acc.dataset, acc.lang) = (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang)
JOIN rates dense
  ON dense.metric = acc.metric AND dense.method = 'dense' AND dense.population = 'selected'
 AND (dense.model, dense.dataset, dense.lang) = (d.model, d.dataset, d.lang)
WHERE d.metric LIKE 'drop\_%' ESCAPE '\' AND d.population = 'selected'
ORDER BY d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang,
         array_position(['open', 'candidates', 'mc', 'mc_norm'], replace(d.metric, 'drop_', ''));

-- delta_pr: production vs recognition with the options shown, per checkpoint x benchmark:
-- Delta_PR = acc(candidates) - acc(open), the mean of the per-item difference (paired interval).
CREATE OR REPLACE TABLE delta_pr AS
SELECT d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang, d.n_items,
       c.value AS acc_candidates, o.value AS acc_open,
       d.value AS delta_pr, d.ci_low, d.ci_high
FROM rates d
JOIN rates c
  ON c.metric = 'acc_candidates' AND c.population = 'selected'
 AND (c.model, c.method, c.structure, c.sparsity, c.dataset, c.lang) = (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang)
JOIN rates o
  ON o.metric = 'acc_open' AND o.population = 'selected'
 AND (o.model, o.method, o.structure, o.sparsity, o.dataset, o.lang) = (d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang)
WHERE d.metric = 'delta_pr' AND d.population = 'selected'
ORDER BY d.model, d.method, d.structure, d.sparsity, d.dataset, d.lang;
