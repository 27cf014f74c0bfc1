"""Evaluation: prompts, the batched engine, decodes, the judge, and the log schema."""
