-- Report views: what `python -m benchmark_illusion concepts` prints and the concept_damage figure
-- draws, over the concept tables above. A view stores no rows; it is computed when read.
-- Definitions: docs/concepts.md. Files from 90 on run after the damage tests
-- (benchmark_illusion.concepts.gaps.run_concept_sql), whose columns these views read, and not on
-- the stability subsamples.

-- The SAE fits are loaded by the competency_gaps rule (one row per model); a database built
-- without them gets the table empty.
CREATE TABLE IF NOT EXISTS concept_sae (
    model VARCHAR, source VARCHAR, hook_name VARCHAR, d_sae BIGINT, k BIGINT, fve DOUBLE, l0 DOUBLE,
    dead_fraction DOUBLE, pca_fve_same_k DOUBLE, heldout_positions BIGINT, norm_threshold DOUBLE,
    corpus_tokens BIGINT, seconds DOUBLE
);

-- report_concept_sae: the SAE fit on held-out positions per model, rounded for printing.
CREATE OR REPLACE VIEW report_concept_sae AS
SELECT model, source, hook_name, d_sae, k, round(fve, 3) AS fve, round(l0, 1) AS l0,
       round(dead_fraction, 4) AS dead_fraction, round(pca_fve_same_k, 3) AS pca_fve_same_k,
       corpus_tokens, seconds
FROM concept_sae
ORDER BY model;

-- report_best_covered, report_least_covered: the active concepts (n_active > 0) of each model by
-- chi_bench across benchmarks; rank 1 = the best (least) covered, ties by concept. chi_bench is
-- rounded for printing (rank orders the exact value).
CREATE OR REPLACE VIEW report_best_covered AS
SELECT model, concept, label, round(chi_bench, 3) AS chi_bench, n_active, n_items,
       row_number() OVER (PARTITION BY model ORDER BY chi_bench DESC, concept) AS rank
FROM chi_bench
WHERE dataset = 'all' AND n_active > 0
ORDER BY model, rank;

CREATE OR REPLACE VIEW report_least_covered AS
SELECT model, concept, label, round(chi_bench, 4) AS chi_bench, n_active, n_items,
       row_number() OVER (PARTITION BY model ORDER BY chi_bench, concept) AS rank
FROM chi_bench
WHERE dataset = 'all' AND n_active > 0
ORDER BY model, rank;

-- report_dense_gaps: the dense model's supported concepts by chi_model in open on its pool, across
-- benchmarks; rank 1 = the lowest chi_model (its largest gap), ties by concept.
CREATE OR REPLACE VIEW report_dense_gaps AS
SELECT model, concept, label, round(chi_model, 3) AS chi_model, round(accuracy, 3) AS accuracy, support,
       row_number() OVER (PARTITION BY model ORDER BY chi_model, concept) AS rank
FROM chi_model
WHERE population = 'pool' AND format = 'open' AND dataset = 'all' AND supported
ORDER BY model, rank;

-- report_damaged_concepts: the concepts significantly damaged in open (significant_open) at a
-- pruned checkpoint, across benchmarks, with the open drop and its interval, the drop the
-- concept's languages predict, the excess and its interval, q, the mc drop and the weighted
-- demoted and erased rates. rank: within the checkpoint, most excess first (then q, concept).
-- method_peak: this checkpoint is where the concept's excess is largest among its method's
-- checkpoints (then the smallest q, sparsity, structure): the one the concept_damage figure shows.
CREATE OR REPLACE VIEW report_damaged_concepts AS
SELECT model, method, structure, sparsity, bits, concept, label, support,
       drop_open, drop_open_ci_low, drop_open_ci_high, expected_drop_open,
       excess_open, excess_open_ci_low, excess_open_ci_high, q_open,
       drop_mc, demoted_rate, erased_rate, damage,
       row_number() OVER (PARTITION BY model, method, structure, sparsity
                          ORDER BY excess_open DESC, q_open, concept) AS rank,
       row_number() OVER (PARTITION BY model, method, concept
                          ORDER BY excess_open DESC, q_open, sparsity, structure) = 1 AS method_peak
FROM concept_damage
WHERE dataset = 'all' AND significant_open
ORDER BY model, method, structure, sparsity, rank;

-- report_concept_damage: report_damaged_concepts as `concepts` prints it (intervals as text,
-- values rounded); the same rank.
CREATE OR REPLACE VIEW report_concept_damage AS
SELECT model, method, structure, sparsity, bits, concept, label,
       printf('%.2f [%.2f, %.2f]', drop_open, drop_open_ci_low, drop_open_ci_high) AS drop_open_ci,
       round(expected_drop_open, 3) AS language_drop,
       printf('%.3f [%.3f, %.3f]', excess_open, excess_open_ci_low, excess_open_ci_high) AS excess_ci,
       printf('%.2g', q_open) AS q, round(drop_mc, 3) AS drop_mc, round(demoted_rate, 2) AS demoted,
       round(erased_rate, 2) AS erased, damage, support, rank
FROM report_damaged_concepts
ORDER BY model, method, structure, sparsity, rank;

-- report_damage_criteria: one row, what qualifies a concept as significantly damaged and how many
-- were tested: the BH level fdr_q and interval level ci_level of the tests, their permutations,
-- and tested = the most concepts tested in open across benchmarks at one checkpoint.
CREATE OR REPLACE VIEW report_damage_criteria AS
SELECT s.fdr_q, s.ci_level, s.permutations,
       (SELECT max(n) FROM (SELECT count(*) AS n FROM concept_damage_tests WHERE format = 'open' AND dataset = 'all'
                            GROUP BY model, method, structure, sparsity)) AS tested
FROM concept_damage_settings s;
