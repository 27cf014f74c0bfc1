"""The judge's validation set (tests/judge_cases.jsonl) and its scores.

Each case is an item (question, passage, gold answers, the four options) and a prediction, with
the verdict a careful reader gives (`expected`: correct, wrong, negated or uncertain), its
category and why. The judge's status of a prediction (`status`): 'correct' when the
sentence-tolerant verdict accepts it, else 'negated' or 'uncertain' when the judge says so, else
'wrong'. Scores (`scores`):

- accepting: precision and recall of "the judge accepts the answer" against "a reader accepts
  it" (expected == 'correct'), per language and in all;
- per category: n, how many the judge accepts, and agreement (the judge's status equals the
  reader's; for the right_* categories that is the recall of accepting, for the others the
  share rejected for the right reason, where a reason exists: negated and uncertain are
  statuses of their own, every other wrong answer must only be rejected);
- the strict verdict on the short right answers (`short` and expected 'correct'): recall.

Used by tests/evaluation/test_judge_cases.py (thresholds) and benchmarks/judge_table.py (the
table in docs/design.md). Works with older versions of the judge too (no negated/uncertain:
'wrong').
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

CASES = Path(__file__).with_name("judge_cases.jsonl")
STATUSES = ("correct", "wrong", "negated", "uncertain")
RIGHT = ("right_short", "right_sentence", "right_inflected", "right_number_word")


def load_cases(path: Path = CASES) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def judged(case: dict):
    from benchmark_illusion.evaluation.judge import judge

    return judge(
        case["prediction"],
        case["golds"],
        case["lang"],
        question=case["question"],
        passage=case["passage"],
        options=case["options"],
    )


def status(j) -> str:
    if j.correct_sentence:
        return "correct"
    if getattr(j, "negated", False):
        return "negated"
    if getattr(j, "uncertain", False):
        return "uncertain"
    return "wrong"


def _pr(rows: list[tuple[bool, bool]]) -> tuple[float | None, float | None]:
    tp = sum(1 for want, got in rows if want and got)
    fp = sum(1 for want, got in rows if not want and got)
    fn = sum(1 for want, got in rows if want and not got)
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    return precision, recall


def scores(cases: list[dict]) -> dict:
    """{'by_lang': {lang: row}, 'by_category': {category: row}, 'all': row, 'strict_recall',
    'disagreements': [case ids with the judge's status]}."""
    by_lang: dict[str, list] = defaultdict(list)
    by_cat: dict[str, list] = defaultdict(list)
    strict: list[bool] = []
    every, disagreements = [], []
    for case in cases:
        j = judged(case)
        got = status(j)
        want = case["expected"]
        row = (want, got)
        by_lang[case["lang"]].append(row)
        by_cat[case["category"]].append(row)
        every.append(row)
        if case.get("short") and want == "correct":
            strict.append(bool(j.correct))
        if got != want:
            disagreements.append((case["id"], want, got, case["prediction"]))

    def summary(rows):
        p, r = _pr([(w == "correct", g == "correct") for w, g in rows])
        return {
            "n": len(rows),
            "accepted": sum(g == "correct" for _, g in rows),
            "agreement": sum(w == g for w, g in rows) / len(rows),
            "precision": p,
            "recall": r,
        }

    return {
        "by_lang": {k: summary(v) for k, v in sorted(by_lang.items())},
        "by_category": {k: summary(v) for k, v in sorted(by_cat.items())},
        "all": summary(every),
        "strict_recall": sum(strict) / len(strict) if strict else None,
        "disagreements": disagreements,
    }


def markdown(s: dict) -> str:
    def f(x):
        return "" if x is None else f"{x:.2f}"

    out = [
        "| category | n | accepted | agreement | precision | recall |",
        "|---|---|---|---|---|---|",
    ]
    for k, r in s["by_category"].items():
        out.append(
            f"| {k} | {r['n']} | {r['accepted']} | {f(r['agreement'])} | {f(r['precision'])} "
            f"| {f(r['recall'])} |"
        )
    a = s["all"]
    out.append(
        f"| all | {a['n']} | {a['accepted']} | {f(a['agreement'])} | {f(a['precision'])} "
        f"| {f(a['recall'])} |"
    )
    out += ["", "| language | n | agreement | precision | recall |", "|---|---|---|---|---|"]
    for k, r in s["by_lang"].items():
        out.append(
            f"| {k} | {r['n']} | {f(r['agreement'])} | {f(r['precision'])} | {f(r['recall'])} |"
        )
    out.append(f"\nstrict verdict, recall on the short right answers: {f(s['strict_recall'])}")
    return "\n".join(out)
