"""`make mutate`: mutmut over the functions of the core modules that decide a result, then the
score, and a failure for every surviving mutant that equivalent.md (beside this file) does not
name.

    python tests/mutation/mutate.py              run mutmut on SCOPE, then check
    python tests/mutation/mutate.py --check      only check the results of the last run
    python tests/mutation/mutate.py --resume     run only the mutants of SCOPE without a result
    python tests/mutation/mutate.py --survivors  run again the mutants of SCOPE that survived
                                                 (after adding tests), then check

mutmut's settings (modules, tests, copied files) are [tool.mutmut] in pyproject.toml. A full
run of the whole six modules is about 3,200 mutants and takes hours on one core (most of them
run database builds); SCOPE keeps the functions behind the documented rules, which run in
about an hour.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT = Path(__file__).with_name("equivalent.md")

# Functions whose mutants are run (mutmut names: module.x_function, module.xǁClassǁmethod).
SCOPE = [
    # judge: containment (textnorm.py), matches (numbers, inflection, whole entities), echo
    # (question copy, question share, passage copy), length limits, hedge, repeat, F1, naming an
    # option, the sentence-tolerant verdict
    "benchmark_illusion.evaluation.text.x_first_line__mutmut_*",
    *(
        f"benchmark_illusion.textnorm.x_{f}__mutmut_*"
        for f in ("find_token_runs", "contains_tokens")
    ),
    *(
        f"benchmark_illusion.evaluation.judge.x_{f}__mutmut_*"
        for f in (
            "named_phrases",
            "_inside_gold",
            "answered_options",
            "is_repeat",
            "_f1",
            "exact_match",
            "token_f1",
            "contains",
            "_question_echo",
            "_passage_copy",
            "read_scores",
            "gold_matches",
            "whole_entity",
            "_clause_end",
            "_sentence_ends",
            "sentence_count",
            "first_sentence",
            "_sentence_flags",
            "_hedge_and_named",
            "judge",
            "sentence_verdict",
            "judgement",
        )
    ),
    # the judge's language rules: negation and alternatives, stems, numbers, function words
    *(
        f"benchmark_illusion.language.x_{f}__mutmut_*"
        for f in (
            "negated_at",
            "alternative_at",
            "stems_match",
            "_arabic_match",
            "number_variants",
            "_zh_value",
            "function_edge",
        )
    ),
    # pruning: every mask and SparseGPT, with the Hessian, its inverse factor and the float64
    # device they share with GPTQ (blockwise.py)
    "benchmark_illusion.compression.pruning.masks.*",
    "benchmark_illusion.compression.pruning.sparsegpt.*",
    *(
        f"benchmark_illusion.compression.blockwise.x_{f}__mutmut_*"
        for f in ("float64_device", "one_thread_on_cpu", "inverse_hessian_factor")
    ),
    "benchmark_illusion.compression.blockwise.xǁHessianǁ*",
    # items: kinds and overlaps (answers.py), the length window (spans.py), the distractor order
    # and its rejections (distractors.py)
    *(
        f"benchmark_illusion.data.answers.x_{f}__mutmut_*"
        for f in ("is_numeric_tokens", "is_numeric", "overlap_tokens", "overlaps")
    ),
    *(f"benchmark_illusion.data.spans.x_{f}__mutmut_*" for f in ("text_kind", "length_range")),
    "benchmark_illusion.data.distractors.x_choose_passage_distractors__mutmut_*",
    "benchmark_illusion.data.distractors.xǁ_Pickedǁconsider__mutmut_*",
    # bootstrap: the draws, their counts, the quantiles and the intervals of the replicates
    *(
        f"benchmark_illusion.metrics.bootstrap.x_{f}__mutmut_*"
        for f in (
            "row_quantiles",
            "replicate_intervals",
            "draws",
            "draw_counts",
            "benchmark_counts",
        )
    ),
    # aggregation helpers around the SQL files
    *(
        f"benchmark_illusion.metrics.aggregate.x_{f}__mutmut_*"
        for f in ("item_drop_rows", "run_sql_files", "split_report_files", "add_bits_columns")
    ),
    # the cluster's estimates: host memory, runtime and GPU memory term by term, their totals
    # and roundings, and the device and dtype each job is sized in
    *(
        f"benchmark_illusion.scheduling.cluster.x_{f}__mutmut_*"
        for f in (
            "_added",
            "_mb",
            "job_terms",
            "_resources",
            "job_resources",
            "gpu_memory_terms",
            "gpu_memory_mb",
            "job_gpu_memory_mb",
            "aggregate_terms",
            "aggregate_resources",
        )
    ),
]

# A mutant that runs into mutmut's time limit counts as killed (as mutmut's own score does).
KILLED = {"killed", "timeout"}


def listed_equivalent() -> dict[str, str]:
    """mutant name -> reason, from the lines "- `name`: reason" of equivalent.md."""
    out = {}
    for line in EQUIVALENT.read_text().splitlines():
        m = re.match(r"- `([^`]+)`:?\s*(.*)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def results() -> dict[str, int | None]:
    """mutant name -> mutmut exit code (None: not run), of every mutant in SCOPE."""
    out = {}
    for meta in sorted((ROOT / "mutants").rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatchcase(name, p) for p in SCOPE):
                out[name] = code
    return out


def module(name: str) -> str:
    return name.split(".x")[0].removeprefix("benchmark_illusion.")


def check() -> int:
    from mutmut.stats import status_by_exit_code

    got = {name: status_by_exit_code[code] for name, code in results().items()}
    if not got:
        print("no mutmut results under mutants/: run `make mutate` first")
        return 1
    equivalent = listed_equivalent()
    per_module: dict[str, Counter] = {}
    unlisted = []
    for name, status in sorted(got.items()):
        c = per_module.setdefault(module(name), Counter())
        c["total"] += 1
        c["killed" if status in KILLED else status] += 1
        if status == "timeout":
            c["timeout"] += 1
        if status in KILLED or status == "not checked":
            continue
        if name in equivalent:
            c["equivalent"] += 1
        else:
            unlisted.append((name, status))
    print(f"{'module':22s} {'killed':>7s} {'total':>6s} {'score':>7s}  rest")
    total = Counter()
    for mod, c in sorted(per_module.items()):
        total.update(c)
        rest = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k not in ("total", "killed"))
        print(f"{mod:22s} {c['killed']:7d} {c['total']:6d} {c['killed'] / c['total']:7.1%}  {rest}")
    rest = ", ".join(f"{k} {v}" for k, v in sorted(total.items()) if k not in ("total", "killed"))
    print(
        f"{'all':22s} {total['killed']:7d} {total['total']:6d} "
        f"{total['killed'] / total['total']:7.1%}  {rest}"
    )
    checked = total["total"] - total["not checked"]
    if checked:
        score = (total["killed"] + total["equivalent"]) / checked
        print(f"killed or listed as equivalent: {score:.1%} of the {checked} mutants run")
    stale = sorted(n for n in equivalent if n in got and got[n] in KILLED)
    for name in stale:
        print(f"listed as equivalent but killed (remove it from {EQUIVALENT.name}): {name}")
    for name, status in unlisted:
        print(f"{status}: {name}    (.venv-mutate/bin/mutmut show {name})")
    if unlisted:
        print(f"{len(unlisted)} mutants neither killed nor listed in {EQUIVALENT}")
    return 1 if unlisted or stale else 0


def main() -> int:
    args = sys.argv[1:]
    if "--check" not in args:
        names = SCOPE
        if "--resume" in args:
            names = [n for n, code in results().items() if code is None]
        elif "--survivors" in args:
            from mutmut.stats import status_by_exit_code

            names = [
                n
                for n, code in results().items()
                if code is not None and status_by_exit_code[code] not in KILLED
            ]
        mutmut = Path(sys.executable).with_name("mutmut")
        # one test process at a time, torch on one thread: the machine's other core stays free
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        if names:
            cmd = [str(mutmut), "run", "--max-children", "1", *names]
            run = subprocess.run(cmd, cwd=ROOT, env=env)
            if run.returncode:
                return run.returncode
    return check()


if __name__ == "__main__":
    sys.exit(main())
