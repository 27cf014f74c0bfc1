"""Post-training pruning: magnitude, Wanda and SparseGPT, unstructured or N:M.

masks.py      pure mask selection (no model, no I/O)
magnitude.py  |W|
wanda.py      |W| * ||X_j||_2, per output row
sparsegpt.py  OBS reconstruction with a Cholesky-factored inverse Hessian
layerwise.py  PruneSettings, prune_model (the block walk is compression/blockwise.py)
"""

from .masks import Structure, parse_structure

__all__ = ["Structure", "parse_structure"]
