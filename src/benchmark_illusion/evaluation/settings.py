"""Evaluation settings: what decides an evaluation's rows besides the checkpoint and the items
(config `prompt`, `evaluation`, `judge`, `seed`; built from the evaluate rule's params by
EvalSettings.from_params). Defaults equal the schema's (tests/config/test_config.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmark_illusion.evaluation.prompts import PromptSettings

# mc_nopassage: the mc options scored with the passage left out of the prompt (the guessing
# control, docs/metrics.md); item selection does not use it (params.pool_evaluation)
FORMATS = ("open", "candidates", "mc", "mc_nopassage")


@dataclass(frozen=True)
class RecoverySettings:
    """Which recovery decodes run, and how (config `evaluation.recovery`; the defaults are the
    schema's: every decode on)."""

    beam: bool = True
    num_beams: int = 5
    sample: bool = True
    num_samples: int = 10
    top_p: float = 0.9
    temperature: float = 1.0
    oneshot: bool = True
    max_new_tokens: int = 16
    scope: str = "open_wrong"

    @classmethod
    def only(cls, *decodes: str, **kwargs) -> RecoverySettings:
        """Just these decodes ('beam', 'sample', 'oneshot'; none: recovery off)."""
        unknown = set(decodes) - {"beam", "sample", "oneshot"}
        if unknown:
            raise ValueError(f"unknown recovery decodes {sorted(unknown)}")
        return cls(**{d: d in decodes for d in ("beam", "sample", "oneshot")}, **kwargs)

    @property
    def any(self) -> bool:
        return self.beam or self.sample or self.oneshot


@dataclass(frozen=True)
class EvalSettings:
    """Everything that decides an evaluation's output besides the checkpoint and the items."""

    prompt: PromptSettings = field(default_factory=PromptSettings)
    formats: tuple[str, ...] = FORMATS
    batch_size: int = 8
    # rows decoded together by greedy (prefill batches stacked); like the device, where and
    # how fast it runs, not what a row holds: left out of the params (docs/design.md)
    decode_rows: int = 16
    # the most tokens (rows x longest prompt) in one prefill batch of the greedy formats and mc,
    # and in one stacked greedy decode group (rows x (widest prompt + budget)): they bound the
    # memory of long prompts; like decode_rows, not a param
    batch_tokens: int = 2048
    decode_tokens: int = 8192
    max_new_tokens: int = 32
    budget_margin: int = 4
    max_length_factor: float = 3.0
    max_length_slack: int = 3
    sentence_slack: int = 4
    seed: int = 1234
    recovery: RecoverySettings = field(default_factory=RecoverySettings.only)  # off unless asked
    # the positive control (a checkpoint's control.json, never the config): every decode is
    # forbidden each gold's first token; mc scoring is untouched
    forbid_gold_first_token: bool = False

    @classmethod
    def from_params(cls, params: dict, recovery: bool = True) -> EvalSettings:
        """From the evaluate rule's params (params.evaluation: prompt, evaluation, judge, seed);
        recovery decodes off when `recovery` is False (the pool's params carry no recovery
        settings)."""
        e, j = params["evaluation"], params["judge"]
        return cls(
            recovery=RecoverySettings(**e["recovery"]) if recovery else RecoverySettings.only(),
            prompt=PromptSettings.from_params(params["prompt"]),
            formats=tuple(e["formats"]),
            batch_size=e["batch_size"],
            max_new_tokens=e["max_new_tokens"],
            budget_margin=e["budget_margin"],
            max_length_factor=j["max_length_factor"],
            max_length_slack=j["max_length_slack"],
            sentence_slack=j["sentence_slack"],
            seed=params["seed"],
        )
