"""The engine interface: everything the evaluation asks of a model.

An engine answers three kinds of request, each on many prompts at once (token ids; the
evaluation builds the prompts, tokenises them, judges the answers and writes the rows):

  score_and_greedy  teacher-forced scores of continuations (per token: log-prob and rank of
                    the token among the vocabulary, 1 = top): the mc options, the golds (their
                    first-token rank and log-prob); and/or the greedy answer under the
                    pipeline's stop rule (`open`, `candidates`, `oneshot`)
  score_prefix      the log-prob of one continuation after a shorter prefix (an option whose
                    first characters merge with the prompt's last token)
  beams_and_samples beam search of width k and n seeded nucleus samples (the recovery decodes)

Every engine applies the same stop rule (generation.StopRule: a stop token, or a line break
after content), the same bans (per request, token ids a decode may never write: the positive
control), and the same NaN guard (engine.NonFiniteError, naming the step and the items), so
that the rows built from its answers have one schema whatever the engine.

Two implementations: `native` (native.py: the project's batched engine on transformers, one
prefill per prompt shared by scoring and decoding) and `vllm` (vllm_engine.py: vLLM's offline
LLM; docs/performance.md compares them). `evaluation.engine` in the config picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from benchmark_illusion.evaluation.engine import ContinuationScores

ENGINES = ("native", "vllm")


@dataclass
class Request:
    """One prompt and what is asked of it.

    prompt: token ids. name: the item id (errors name it). conts: continuations to score
    (token ids, each >= 1 token). budget: new tokens the greedy or recovery decode may write
    (0: no decode). ban: token ids no decode of this prompt may write (None: none).
    """

    prompt: list[int]
    name: str
    conts: list[list[int]] = field(default_factory=list)
    budget: int = 0
    ban: list[int] | None = None


def decode_requests(ids, rows, order, budget, bans) -> list[Request]:
    """One decode request per row, in `order`: its prompt ids, item id, budget and ban (bans:
    per row, or None for none)."""
    return [
        Request(ids[i], rows[i]["item_id"], budget=budget[i], ban=None if bans is None else bans[i])
        for i in order
    ]


@dataclass
class Answer:
    """What score_and_greedy returns per request: the scores of its continuations (in order),
    the greedy tokens (without the stop token; None when no decode was asked), and the wall
    seconds spent on it: its share of reading the prompt, of scoring and of decoding."""

    scores: list[ContinuationScores]
    tokens: list[int] | None
    prompt_seconds: float = 0.0
    score_seconds: float = 0.0
    decode_seconds: float = 0.0


@dataclass
class Recovered:
    """What beams_and_samples returns per request: the beams (best first) and the samples,
    each as token ids without the stop token, and the seconds per beam and per sample."""

    beams: list[list[int]] = field(default_factory=list)
    samples: list[list[int]] = field(default_factory=list)
    beam_seconds: float = 0.0
    sample_seconds: float = 0.0


@dataclass(frozen=True)
class Sampling:
    """The recovery decodes' settings (config evaluation.recovery) as an engine reads them."""

    num_beams: int = 0  # 0: no beam search
    num_samples: int = 0  # 0: no sampling
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0


class Engine(ABC):
    """What the evaluation asks of a model (the module docstring). Requests are answered in
    the order given: the caller sorts them (by budget, then prompt length) so that an engine
    that batches consecutive requests pads little.

    name: 'native' or 'vllm'. dtype: the weights' dtype as a string (errors name it).
    on_done: optional callback with a count of requests finished (progress bars).
    """

    name: str = ""
    dtype: str = "float32"

    @abstractmethod
    def score_and_greedy(
        self, requests: list[Request], fmt: str, decode_fmt: str | None = None, on_done=None
    ) -> list[Answer]:
        """Score every request's continuations and decode greedily those with a budget (when
        any has one, every request is decoded). fmt, decode_fmt: what errors call the scoring
        and the decode (default: fmt)."""

    @abstractmethod
    def score_prefix(self, prefix: list[int], cont: list[int], fmt: str, name: str) -> float:
        """Sum of log p(cont | prefix)."""

    @abstractmethod
    def beams_and_samples(
        self, requests: list[Request], how: Sampling, fmt: str, on_done=None
    ) -> list[Recovered]:
        """Beams and samples of every request (each with its budget and ban)."""

    def close(self) -> None:  # noqa: B027 (optional)
        """Release what the engine holds (processes, memory)."""


# ---------------------------------------------------------------- where vLLM is installed

VLLM_PYTHON_ENV = "BENCHMARK_ILLUSION_VLLM_PYTHON"


def project_root():
    """The project folder (this package lives in its src/)."""
    from pathlib import Path

    return Path(__file__).resolve().parents[4]


def vllm_here() -> bool:
    """Whether this interpreter can import vLLM (a `make cuda-venv` venv, or the vLLM venv)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def vllm_python() -> str | None:
    """The interpreter `evaluation.engine: vllm` runs in: this one when it has vLLM; else
    $BENCHMARK_ILLUSION_VLLM_PYTHON; else the project's .venv-vllm (make vllm-venv). None
    when none of them is there."""
    import os
    import sys
    from pathlib import Path

    if vllm_here():
        return sys.executable
    named = os.environ.get(VLLM_PYTHON_ENV)
    if named:
        return named if Path(named).is_file() else None
    venv = project_root() / ".venv-vllm"
    py = venv / "bin" / "python"
    return str(py) if py.is_file() and (venv / ".installed").is_file() else None


def missing_vllm_message(key: str = "evaluation.engine") -> str:
    """The one error a config that asks for vLLM gets when vLLM is not installed."""
    import os

    named = os.environ.get(VLLM_PYTHON_ENV)
    where = (
        f"${VLLM_PYTHON_ENV} names {named}, which is not a file"
        if named
        else f"this Python cannot import vllm and {project_root() / '.venv-vllm'} is not installed"
    )
    return (
        f"{key}: 'vllm' needs vLLM, and it is not installed ({where}). On a CPU: `make "
        f"vllm-venv` (vLLM's CPU build in .venv-vllm); on GPU nodes: `make cuda-venv` (installs "
        f"vLLM's CUDA build beside torch); or set {VLLM_PYTHON_ENV} to a Python that has vLLM "
        f"and this project. Or set {key}: native."
    )
