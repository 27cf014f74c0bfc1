"""The models stage's file steps: a model's files fetched from a hub (`fetch_hub_model`),
imported into the checkpoint layout (`import_model`), and a variant compressed elsewhere
imported and measured (`import_variant`). The other stages' steps are in their own `steps.py`
(docs/design.md lists where each lives). No torch at import: the hub fetch runs on a login
node, and the importers load torch when they run.
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmark_illusion.models.sources import HUB_PATTERNS, ModelSourceError, safetensors_params
from benchmark_illusion.models.variants import (
    REPORT,
    VariantError,
    claim_warnings,
    describe,
    folder_tokens,
    measure,
    source_config,
    vocabulary_difference,
)


def import_model(cfg: dict, out_dir: str | os.PathLike) -> dict:
    """Import the model of `cfg` into `out_dir` (atomically); return its provenance record."""
    import time

    from benchmark_illusion.models.checkpoints import load_source, save_imported

    t0 = time.perf_counter()
    return save_imported(load_source(cfg), out_dir, t0=t0)


def fetch_hub_model(cfg: dict) -> dict:
    """Download a `hub` model's files into the local hub cache (HF_HOME; HF_TOKEN for gated
    models) and return the record the import reads: id, revision, the commit it resolved to,
    the snapshot folder, its files and their parameter count (safetensors headers). Runs where
    the run is started (a local rule): compute nodes then read the cache and need no network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, revision = cfg["id"], cfg.get("revision")
    patterns = list(HUB_PATTERNS) + (["*.py"] if cfg.get("trust_remote_code") else [])
    try:
        folder = Path(snapshot_download(repo, revision=revision, allow_patterns=patterns))
    except GatedRepoError as e:
        raise ModelSourceError(
            f"hub model {repo} is gated: accept its license on the hub with your account and "
            f"set HF_TOKEN (or run `hf auth login`) where you start the run ({e})"
        ) from None
    except RepositoryNotFoundError:
        raise ModelSourceError(
            f"hub model {repo} not found (or private: set HF_TOKEN); check models.*.id"
        ) from None
    except RevisionNotFoundError:
        raise ModelSourceError(f"hub model {repo} has no revision {revision!r}") from None
    except LocalEntryNotFoundError as e:
        raise ModelSourceError(
            f"hub model {repo} is not in the hub cache and the hub cannot be reached "
            f"(HF_HUB_OFFLINE, or no network here): {e}"
        ) from None
    n = safetensors_params(folder)
    if not n:
        raise ModelSourceError(
            f"hub model {repo} has no safetensors weights at {revision or 'main'}: the pipeline "
            f"loads safetensors only (convert the weights, or point a `local` source at them)"
        )
    return {
        "id": repo,
        "revision": revision or "main",
        "commit": folder.name,
        "snapshot": str(folder),
        "files": sorted(p.name for p in folder.iterdir()),
        "n_parameters": n,
    }


def import_variant(
    base_cfg: dict,
    spec: dict,
    out_dir: str | Path,
    base_dir: str | Path,
    *,
    model: str,
    name: str,
    fetched: dict | None = None,
    tolerance: float = 0.01,
    log=None,
) -> dict:
    """Import variant `name` of `model` into `out_dir` (atomically) with its variant.json; fail,
    writing nothing, when its tokenizer differs from the base model's in `base_dir`."""
    import time

    from benchmark_illusion.models import checkpoints as models
    from benchmark_illusion.models.sources import gguf_precision, resolve_gguf

    t0 = time.perf_counter()
    cfg = source_config(base_cfg, spec)
    if fetched:
        cfg["fetched"] = fetched
    imported = models.load_source(cfg)
    imported.provenance.update(variant_of=model, variant=name)
    gguf = None
    if cfg["source"] in ("gguf_package", "gguf_file"):
        gguf = gguf_precision(resolve_gguf(cfg))
    report = describe(name, spec, measure(imported.model), gguf)
    report["model"] = model

    def check(folder: Path) -> None:
        base, mine = folder_tokens(base_dir), folder_tokens(folder)
        if base is None or mine is None:
            where = base_dir if base is None else "the variant's import"
            raise VariantError(
                f"models.{model}.variants.{name}: no tokenizer.json in {where} to compare the "
                "variant's tokenizer with its base's"
            )
        diff = vocabulary_difference(base, mine)
        if diff:
            raise VariantError(
                f"models.{model}.variants.{name}: its tokenizer differs from {model}'s ({diff}); "
                "a variant must use its base model's tokenizer (same tokens, same ids)"
            )

    prov = models.save_imported(imported, out_dir, {REPORT: report}, check=check, t0=t0)
    for w in claim_warnings(report, tolerance):
        if log is not None:
            log.warning("variant %s of %s: %s (the tables use the measurement)", name, model, w)
    return {"provenance": prov, "variant": report}
