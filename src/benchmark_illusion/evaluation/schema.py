"""The evaluation log schema (documented column by column in docs/logs.md).

Kept apart from the evaluation code so that light steps can write or check logs without
importing torch.
"""

import logging
import os

import polars as pl

from benchmark_illusion.io import write_parquet

log = logging.getLogger(__name__)

LOG_SCHEMA = {
    "model": pl.Utf8,
    "method": pl.Utf8,
    "structure": pl.Utf8,
    "sparsity": pl.Float64,
    "bits": pl.Int32,
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
    "decoy_option": pl.Int32,
    "decoy_correct": pl.Boolean,
    "option_correct": pl.List(pl.Boolean),
    "correct_sentence": pl.Boolean,
    "sentences": pl.Int32,
    "sentence_too_long": pl.Boolean,
    "sentence_copy": pl.Boolean,
    "option_correct_sentence": pl.List(pl.Boolean),
    "negated": pl.Boolean,
    "uncertain": pl.Boolean,
    "longer_entity": pl.Boolean,
    "match": pl.Utf8,
    "correct_upper": pl.Boolean,
    "correct_sentence_upper": pl.Boolean,
    "gold_rank": pl.Int64,
    "gold_logprob": pl.Float64,
    "gold_token": pl.Utf8,
    "gold_token_offset": pl.Int32,
    "gold_token_partial": pl.Boolean,
    "gold_logprob_answer": pl.Float64,
    "gold_logprob_answer_per_byte": pl.Float64,
    "option_ll": pl.List(pl.Float64),
    "option_ll_per_byte": pl.List(pl.Float64),
    "option_ll_per_char": pl.List(pl.Float64),
    "pred_option": pl.Int32,
    "pred_option_norm": pl.Int32,
    "correct_norm": pl.Boolean,
    "pred_option_bytes": pl.Int32,
    "correct_bytes": pl.Boolean,
    "gold_option": pl.Int32,
    "n_prompt_tokens": pl.Int32,
    "n_output_tokens": pl.Int32,
    "max_new_tokens": pl.Int32,
    "boundary_merge": pl.Boolean,
    "seed": pl.Int64,
    "model_hash": pl.Utf8,
    "config_hash": pl.Utf8,
    "seconds": pl.Float64,
}


def write_empty_log_if_no_items(items_path: str | os.PathLike, out: str | os.PathLike) -> bool:
    """When the item table at `items_path` has no rows (a language where the dense model got no
    item right), write an empty evaluation log to `out` (this schema, no rows) and return True;
    else return False and write nothing.

    It reads the Parquet footer only, so that an `evaluate` job with nothing to evaluate ends
    before torch is imported or a model loaded (about 2 s per such job on 2 cores).
    """
    if pl.scan_parquet(items_path).select(pl.len()).collect().item() > 0:
        return False
    write_parquet(pl.DataFrame(schema=LOG_SCHEMA), out)
    log.warning("no items in %s: wrote an empty log without loading the model", items_path)
    return True
