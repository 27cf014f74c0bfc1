"""The judge's scores on its validation sets, as the Markdown tables of docs/design.md.

    .venv/bin/python benchmarks/judge_table.py                      # this checkout's judge
    .venv/bin/python benchmarks/judge_table.py --src OTHER/src      # another version's judge
    .venv/bin/python benchmarks/judge_table.py --cases tests/judge_cases_heldout.jsonl

Scoring: tests/judge_validation.py (precision and recall of accepting an answer, agreement of
the judge's status with the reader's, per category and language). With `--src` the cases are
judged by the package under that folder (in a subprocess), so that two versions are scored on
the same cases by the same rule; a version without the negated and uncertain statuses reads
them as 'wrong'.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", help="score the judge of the package under this folder")
    ap.add_argument("--cases", default=str(ROOT / "tests" / "judge_cases.jsonl"))
    ap.add_argument("--disagreements", action="store_true", help="list them after the tables")
    args = ap.parse_args()
    if args.src and os.environ.get("_JUDGE_TABLE_CHILD") != "1":
        env = {**os.environ, "PYTHONPATH": args.src, "_JUDGE_TABLE_CHILD": "1"}
        cmd = [sys.executable, __file__, "--cases", args.cases]
        if args.disagreements:
            cmd.append("--disagreements")
        raise SystemExit(subprocess.run(cmd, env=env).returncode)
    sys.path.insert(0, str(ROOT / "tests"))
    if os.environ.get("_JUDGE_TABLE_CHILD") != "1":
        sys.path.insert(0, str(ROOT / "src"))
    from judge_validation import load_cases, markdown, scores

    s = scores(load_cases(Path(args.cases)))
    print(markdown(s))
    if args.disagreements:
        print()
        for case_id, want, got, pred in s["disagreements"]:
            print(f"- {case_id}: reader {want}, judge {got}: {pred!r}")


if __name__ == "__main__":
    main()
