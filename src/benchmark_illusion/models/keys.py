"""The two small objects every model-bound step takes: which checkpoint (`CheckpointKey`) and
where and how it is loaded (`Placement`). A key decides rows and weights; a placement never
does (device, threads and trust_remote_code change speed and memory only)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointKey:
    """A checkpoint as the logs and tables name it: model, method, structure, sparsity (the
    dense model: method 'dense', structure 'none', sparsity 0). A replicate's seed
    (<method>-s<seed>) stays in `method` where the step needs it in its name; the steps that
    compress take the method without it (names.parse_replicate)."""

    model: str
    method: str = "dense"
    structure: str = "none"
    sparsity: float = 0.0

    @classmethod
    def from_wildcards(cls, w, method: str | None = None) -> CheckpointKey:
        """The key of a rule's wildcards (absent: the dense model's values); `method` replaces
        the wildcard's (e.g. without its replicate seed)."""
        return cls(
            model=w.model,
            method=method if method is not None else w.get("method", "dense"),
            structure=w.get("structure", "none"),
            sparsity=float(w.get("sparsity", 0)),
        )


@dataclass(frozen=True)
class Placement:
    """Where and how a checkpoint is loaded: device ('auto', 'cpu', 'cuda', 'cuda:1', ...),
    torch threads (None: torch's default) and whether the model's own code may run (config
    `models.<name>.trust_remote_code`, never on unless the config says so)."""

    device: str = "auto"
    threads: int | None = None
    trust_remote_code: bool = False

    @classmethod
    def of_job(cls, config: dict, model: str, threads: int | None) -> Placement:
        """A rule job's placement: the config's `evaluation.device`, the model's
        trust_remote_code and the job's threads."""
        return cls(
            device=config["evaluation"]["device"],
            threads=threads,
            trust_remote_code=config["models"][model]["trust_remote_code"],
        )
