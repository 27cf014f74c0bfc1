"""What the end-to-end test modules share: how the smoke run went (SMOKE, filled by the
`smoke_run` fixture in conftest.py), the checkpoints and rules of the smoke config, and a copy of
the smoke run's folder for the tests that run Snakemake on it again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SMOKE: dict = {}  # how the smoke run went: slurm (bool), output, cancelled job ids, seconds

CONCEPT_RULES = {
    "sae",
    "concept_labels",
    "concept_activations",
    "competency_gaps",
    "concept_figures",
}

CHECKPOINTS = [(m, "0.3") for m in ("magnitude", "wanda", "sparsegpt")]  # unstructured
NM = [(m, "2of4", "0.5") for m in ("magnitude", "wanda", "sparsegpt")]  # 2:4 prunes 2/4 = 50%
N_PRUNED = len(CHECKPOINTS) + len(NM)
QUANTIZED = [("rtn", "int8-g128"), ("gptq", "int8-g128")]

AGGREGATION = {"aggregate": 1, "figures": 1, "competency_gaps": 1, "concept_figures": 1, "all": 1}


def link_copy(work: Path, copy: Path) -> None:
    """The smoke run's folder for a test that runs Snakemake again: results/ and resources/ as
    hard links (a job replaces an output with a new file, never writes into the old one), the
    rest (Snakemake's metadata, the logs, which are rewritten in place) as real copies, so that
    nothing the test runs changes the smoke run's own files."""

    copy.mkdir(parents=True)
    for entry in work.iterdir():
        if entry.name.endswith(".lock"):
            continue
        target = copy / entry.name
        if entry.is_dir():
            linked = entry.name in ("results", "resources")
            shutil.copytree(
                entry,
                target,
                copy_function=os.link if linked else shutil.copy2,
                ignore=shutil.ignore_patterns("*.lock*", "locks"),
            )
        else:
            shutil.copy2(entry, target)
