"""Models: where a model's files are, importing and loading checkpoints, variants made elsewhere."""
