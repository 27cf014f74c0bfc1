"""The evaluation log schema (documented column by column in docs/logs.md).

Kept apart from the evaluation code so that light steps can write or check logs without
importing torch.
"""

import polars as pl

LOG_SCHEMA = {
    "model": pl.Utf8,
    "method": pl.Utf8,
    "structure": pl.Utf8,
    "sparsity": pl.Float64,
    "dataset": pl.Utf8,
    "lang": pl.Utf8,
    "item_id": pl.Utf8,
    "format": pl.Utf8,
    "decode": pl.Utf8,
    "sample": pl.Int32,
    "prompt_id": pl.Utf8,
    "output": pl.Utf8,
    "answer_norm": pl.Utf8,
    "correct": pl.Boolean,
    "exact_match": pl.Boolean,
    "f1": pl.Float64,
    "contains": pl.Boolean,
    "echo": pl.Boolean,
    "too_long": pl.Boolean,
    "hedge": pl.Boolean,
    "repeat": pl.Boolean,
    "options_named": pl.Int32,
    "gold_rank": pl.Int64,
    "gold_logprob": pl.Float64,
    "gold_token": pl.Utf8,
    "gold_token_offset": pl.Int32,
    "gold_token_partial": pl.Boolean,
    "gold_logprob_answer": pl.Float64,
    "gold_logprob_answer_per_byte": pl.Float64,
    "option_ll": pl.List(pl.Float64),
    "option_ll_per_byte": pl.List(pl.Float64),
    "pred_option": pl.Int32,
    "pred_option_norm": pl.Int32,
    "correct_norm": pl.Boolean,
    "gold_option": pl.Int32,
    "n_prompt_tokens": pl.Int32,
    "n_output_tokens": pl.Int32,
    "boundary_merge": pl.Boolean,
    "seed": pl.Int64,
    "model_hash": pl.Utf8,
    "config_hash": pl.Utf8,
    "seconds": pl.Float64,
}
