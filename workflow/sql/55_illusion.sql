-- The illusion, asked directly. illusion_test is made by benchmark_illusion.metrics.illusion
-- (run just before this file): per compressed checkpoint family (a method's replicates, one
-- structure and sparsity) x floor (damage, size, structure) x verdict (strict, sentence) x
-- benchmark (and pooled: dataset = lang = 'all'):
--   n_items, n_replicates (checkpoints averaged), n_twins (twins averaged: seeds x replicates)
--   mc_only (+ _ci_low, _ci_high)        the checkpoint's MC-only rate (mc right, open wrong)
--   floor_mc_only (+ ci)                 the floor's, on the same items
--   mc_only_diff, diff_ci_low, diff_ci_high  checkpoint minus floor, paired on items
--                                        (Bonett-Price; two-level bootstrap hull with replicates)
--   n_discordant_up / _down              items MC-only in the checkpoint only / in the floor only
--   replicate_diff_min, _max             the difference of each replicate alone
--   retention, floor_retention (+ ci)    P(mc right | open wrong); n_open_wrong, floor_n_open_wrong
--   retention_diff (+ ci)                checkpoint minus floor (Newcombe's hybrid score)
--   ci_method                            'exact' (one replicate, one twin) or 'two_level'
--   flagged                              diff_ci_low > 0: more MC-only than noise of equal damage
--   control                              'positive' (forbid: its floor is the dense model,
--                                        twin 'dense'), 'negative' (a placebo: its source's
--                                        twins), NULL for a compressed checkpoint
-- Definitions and references: docs/metrics.md ("The paired test").

-- illusion: the headline rows: pooled, the sentence verdict, the damage floor (the positive
-- control's: the dense model)
CREATE OR REPLACE VIEW illusion AS
SELECT model, method, structure, sparsity, control, n_items, n_replicates, n_twins,
       mc_only, floor_mc_only, mc_only_diff, diff_ci_low, diff_ci_high,
       retention, floor_retention, retention_diff, retention_diff_ci_low, retention_diff_ci_high,
       ci_method, flagged
FROM illusion_test
WHERE verdict = 'sentence' AND dataset = 'all' AND floor = 'damage'
ORDER BY model, control NULLS FIRST, method, structure, sparsity;

-- damage: every twin's and placebo's damage on the held-out windows (perturbation.json), beside
-- its source's: kl (mean next-token KL from the dense model), nll (mean next-token NLL, nats),
-- kl_ratio = kl / source_kl (1 when matched; a size twin's says how much more damage noise of
-- equal size does), scale (the noise scale: 1 for size twins), matched (the search met its
-- tolerance; NULL for size twins)
CREATE OR REPLACE VIEW damage AS
SELECT model, method, structure, sparsity, kind AS twin_kind, control, source_method, seed,
       scale, damage_kl AS kl, damage_nll AS nll, source_damage_kl AS source_kl,
       source_damage_nll AS source_nll, dense_nll, damage_kl / nullif(source_damage_kl, 0) AS kl_ratio,
       relative_change, source_relative_change, matched
FROM perturbations
ORDER BY model, source_method, structure, sparsity, kind, seed;

-- checkpoint_damage: each compressed checkpoint's own damage (as its twins measured it)
CREATE OR REPLACE VIEW checkpoint_damage AS
SELECT model, source_method AS method, structure, sparsity,
       avg(source_damage_kl) AS kl, avg(source_damage_nll) AS nll, avg(dense_nll) AS dense_nll
FROM perturbations
WHERE control IS NULL AND source_damage_kl IS NOT NULL
GROUP BY ALL
ORDER BY ALL;
