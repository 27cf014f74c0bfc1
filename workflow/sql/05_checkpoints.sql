-- checkpoints: one row per evaluated checkpoint, what it is and how many bits a weight of its
-- compressed Linear layers takes when stored. Definitions: docs/metrics.md.
--   family        'dense', 'pruning' or 'quantization'
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
--   compression   16 / weight_bits
CREATE OR REPLACE TABLE checkpoints AS
WITH keys AS (
    SELECT DISTINCT model, method, structure, sparsity FROM generations
),
parsed AS (
    SELECT *,
           CASE WHEN method = 'dense' THEN 'dense'
                WHEN regexp_matches(structure, '^int[0-9]+-') THEN 'quantization'
                ELSE 'pruning' END AS family,
           nullif(regexp_extract(structure, '^int([0-9]+)-', 1), '')::INTEGER       AS bits,
           nullif(regexp_extract(structure, '^int[0-9]+-g([0-9]+)', 1), '')::INTEGER AS group_size,
           nullif(regexp_extract(structure, '^[0-9]+:([0-9]+)$', 1), '')::INTEGER    AS nm_m
    FROM keys
),
sized AS (
    SELECT * EXCLUDE (nm_m),
           CASE WHEN family = 'quantization' THEN structure LIKE '%-sym' END AS symmetric_grid,
           CASE family
               WHEN 'dense' THEN 16.0
               WHEN 'quantization' THEN bits + coalesce(
                   (16 + CASE WHEN structure LIKE '%-sym' THEN 0 ELSE bits END) / group_size, 0)
               ELSE CASE WHEN nm_m IS NULL THEN 16 * (1 - sparsity) + 1
                         ELSE (1 - sparsity) * (16 + log2(nm_m)) END
           END AS weight_bits
    FROM parsed
)
SELECT model, method, structure, sparsity, family, bits, group_size, symmetric_grid,
       weight_bits, round(16 / weight_bits, 4) AS compression
FROM sized
ORDER BY model, family <> 'dense', family, method, structure, sparsity;
