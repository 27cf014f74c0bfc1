-- checkpoints: one row per evaluated checkpoint, what it is and how many bits a weight of its
-- compressed Linear layers takes when stored. Definitions: docs/metrics.md.
--   family        'dense', 'pruning', 'quantization', 'variant' (made elsewhere: models.*.variants)
--                 or 'perturbation'
--   bits          bits per weight of a quantized checkpoint (its grid: structure int<bits>-...);
--                 NULL when not quantized. Every metric table gets this column after `sparsity`.
--   group_size    input columns per grid (NULL: per channel, or not quantized)
--   symmetric_grid  the grid has its zero point in the middle (NULL: not quantized)
--   weight_bits   a storage model for comparing pruning with quantization at matched size, 16-bit
--                 weights as the reference:
--                   dense 16; quantized bits + (16 [an fp16 scale] + bits [the zero point, when
--                   asymmetric]) / group_size (per channel: bits);
--                   unstructured pruning 16 (1 - s) + 1 (a bit mask); N:M pruning (1 - s) (16 +
--                   log2 M) (an index into the group of M per kept weight).
--                   The dense row uses the source's own precision where it is known: a GGUF
--                   source's bits per weight (model_sources; the bundled SmolLM2 is Q4_1, 5.0
--                   bits per weight), else 16.
--   compression   16 / weight_bits
--   relative_size the checkpoint's size as a share of the dense model's as the pipeline stores
--                 it (16-bit weights, the storage model's reference): weight_bits / 16, and 1 for
--                 the dense model and the controls whatever their source's precision. Sizes are
--                 comparable on this column only: a GGUF source's dense weight_bits (5.0 for
--                 Q4_1) is the source file's, below every checkpoint made from its 16-bit import
--   source_weight_type, source_bits_per_weight  how the model's source stores its decoder
--                 weights (model_sources; NULL for safetensors sources)
--   family 'perturbation': a perturbed twin (method noise<seed>-<source method>, the source's
--                 structure and sparsity; rule `perturb`): dense weights plus noise, so no bits,
--                 group size or grid, and 16 bits per weight
--   family 'variant': a compressed variant made elsewhere (method = its name, structure
--                 'variant'; the `variants` table): bits, group_size and weight_bits as measured
--                 on its weights or read from its GGUF file, never as claimed in the config;
--                 variant_method the config's free text, measured_sparsity the share of zeros
--   family 'control': the positive control `forbid` (the dense weights, gold first tokens
--                 forbidden in every decode) and the negative control placebo-<source> (noise at
--                 the source's damage, evaluated as if compressed); control 'positive' / 'negative'
--   seed, source_method  a twin's seed and the method of the checkpoint it copies (a placebo's
--                 source too; NULL otherwise)
--   twin_kind     a twin's floor: 'size' (noise<seed>-), 'damage' (damage<seed>-), 'structure'
--                 (mask<seed>-); NULL otherwise
--   base_method, calibration_seed  a replicate <method>-s<seed>: its method and seed (the first
--                 replicate of a method keeps the plain name: its seed is NULL here)
--   relative_change  sqrt(sum ||W' - W||_F^2 / sum ||W||_F^2) over the Linears the compression
--                 changed, W the dense weights: a twin's measured change, and for a compressed
--                 checkpoint with twins its own (the one its twins matched, from their
--                 perturbation.json); NULL for dense and for checkpoints without twins
CREATE OR REPLACE TABLE checkpoints AS
WITH keys AS (
    SELECT DISTINCT model, method, structure, sparsity,
           nullif(regexp_extract(method, '^(noise|damage|mask)(0|[1-9][0-9]*)-(.+)$', 2), '')::BIGINT AS seed,
           coalesce(nullif(regexp_extract(method, '^(noise|damage|mask)(0|[1-9][0-9]*)-(.+)$', 3), ''),
                    nullif(regexp_extract(method, '^placebo-(.+)$', 1), '')) AS source_method,
           CASE regexp_extract(method, '^(noise|damage|mask)(0|[1-9][0-9]*)-', 1)
               WHEN 'noise' THEN 'size' WHEN 'damage' THEN 'damage' WHEN 'mask' THEN 'structure'
           END AS twin_kind,
           CASE WHEN method = 'forbid' THEN 'positive'
                WHEN regexp_matches(method, '^placebo-') THEN 'negative' END AS control,
           -- a replicate <method>-s<seed> of a calibrated method: its base method and seed
           CASE WHEN regexp_matches(method, '^(magnitude|wanda|sparsegpt|rtn|gptq)-s(0|[1-9][0-9]*)$')
                THEN regexp_extract(method, '^(.+)-s(0|[1-9][0-9]*)$', 1) ELSE method END AS base_method,
           CASE WHEN regexp_matches(method, '^(magnitude|wanda|sparsegpt|rtn|gptq)-s(0|[1-9][0-9]*)$')
                THEN regexp_extract(method, '-s(0|[1-9][0-9]*)$', 1)::BIGINT END AS calibration_seed
    FROM generations
),
parsed AS (
    SELECT k.*,
           CASE WHEN method = 'dense' THEN 'dense'
                WHEN control IS NOT NULL THEN 'control'
                WHEN source_method IS NOT NULL THEN 'perturbation'
                WHEN structure = 'variant' THEN 'variant'
                WHEN regexp_matches(structure, '^int[0-9]+-') THEN 'quantization'
                ELSE 'pruning' END AS family,
           CASE WHEN source_method IS NULL THEN coalesce(v.bits,
               nullif(regexp_extract(structure, '^int([0-9]+)-', 1), '')::INTEGER) END      AS bits,
           CASE WHEN source_method IS NULL THEN coalesce(v.group_size,
               nullif(regexp_extract(structure, '^int[0-9]+-g([0-9]+)', 1), '')::INTEGER) END AS group_size,
           nullif(regexp_extract(structure, '^[0-9]+:([0-9]+)$', 1), '')::INTEGER    AS nm_m,
           v.weight_bits AS variant_weight_bits, v.variant_method, v.measured_sparsity
    FROM keys k
    LEFT JOIN variants v USING (model, method, structure, sparsity)
),
sized AS (
    SELECT p.* EXCLUDE (nm_m, variant_weight_bits),
           CASE WHEN family = 'quantization' THEN structure LIKE '%-sym' END AS symmetric_grid,
           CASE family
               WHEN 'dense' THEN coalesce(ms.bits_per_weight, 16.0)
               WHEN 'perturbation' THEN 16.0
               WHEN 'control' THEN coalesce(ms.bits_per_weight, 16.0)
               WHEN 'variant' THEN variant_weight_bits
               WHEN 'quantization' THEN bits + coalesce(
                   (16 + CASE WHEN structure LIKE '%-sym' THEN 0 ELSE bits END) / group_size, 0)
               ELSE CASE WHEN nm_m IS NULL THEN 16 * (1 - sparsity) + 1
                         ELSE (1 - sparsity) * (16 + log2(nm_m)) END
           END AS weight_bits
    FROM parsed p
    LEFT JOIN model_sources ms USING (model)
)
SELECT s.model, s.method, s.structure, s.sparsity, s.family, s.bits, s.group_size,
       s.symmetric_grid, s.weight_bits, round(16 / s.weight_bits, 4) AS compression,
       CASE WHEN s.family IN ('dense', 'control') THEN 1.0 ELSE s.weight_bits / 16 END
           AS relative_size,
       s.seed, s.source_method, s.twin_kind, s.control, s.base_method, s.calibration_seed,
       coalesce(t.relative_change, src.relative_change) AS relative_change,
       ms.weight_type AS source_weight_type, ms.bits_per_weight AS source_bits_per_weight,
       s.variant_method, s.measured_sparsity
FROM sized s
LEFT JOIN model_sources ms USING (model)
LEFT JOIN perturbations t USING (model, method, structure, sparsity)
LEFT JOIN (
    SELECT model, source_method AS method, structure, sparsity,
           avg(source_relative_change) AS relative_change
    FROM perturbations GROUP BY ALL
) src USING (model, method, structure, sparsity)
ORDER BY s.model, s.family <> 'dense', s.family, s.method, s.structure, s.sparsity;
