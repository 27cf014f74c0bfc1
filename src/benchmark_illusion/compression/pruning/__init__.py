"""Post-training pruning: magnitude, Wanda and SparseGPT, unstructured or N:M.

masks.py      pure mask selection (no model, no I/O)
magnitude.py  |W|
wanda.py      |W| * ||X_j||_2, per output row
sparsegpt.py  OBS reconstruction with a Cholesky-factored inverse Hessian
layerwise.py  block-by-block orchestration with forward hooks
"""

from .masks import Structure, parse_structure

__all__ = ["Structure", "parse_structure"]
