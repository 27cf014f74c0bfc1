"""The documentation describes the software as it is: no words of the project's own development
process in any tracked text file, a README a newcomer reads in minutes, relative links that
resolve, and a license and citation file that agree with pyproject.toml."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve()

README_MAX_LINES = 220

# Words about how the project was developed rather than what the software does. Each pattern is
# joined from parts, so that this file does not spell out what it looks for (it is also skipped).
_S = r"\s+"
PROCESS_PATTERNS = [
    r"\bissues?" + r"\s*#?\s*\d+",  # an issue number
    r"(?<![\w&#/\"'`])#" + r"\d+\b",  # a bare #14 (not a hex colour or a quoted label)
    r"\b(?:this|that|previous|last|next)" + _S + "stop" + r"\b",  # a work session
    r"\b(?:this|previous|last|next|work)" + _S + "session" + r"\b",
    r"\bseed" + _S + r"paper\b",
    r"\bcommit" + _S + r"before\b",  # "the commit before"
    r"\bthis" + _S + r"workplace\b",
    r"\bproject'?s" + _S + r"machines\b",
    r"\btiming" + _S + r"diar(?:y|ies)\b",
    r"\b(?:lent|available)" + _S + "to" + _S + r"this" + _S + r"project\b",
    r"\bsince" + _S + "the" + _S + r"previous\b",
    r"\bbefore" + _S + "and" + _S + "after" + _S + "the" + _S + r"change\b",
]
PROCESS_RE = re.compile("|".join(f"(?:{p})" for p in PROCESS_PATTERNS), re.IGNORECASE)


def _repository_files() -> list[Path]:
    """Tracked files and new files git does not ignore, as they are on disk."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    paths = sorted({ROOT / p for p in out.decode().split("\0") if p})
    return [p for p in paths if p.is_file() and p.resolve() != SELF]


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def process_word_hits(paths: list[Path]) -> list[str]:
    """'file:line: match | the line' for every development-process phrase in `paths`."""
    hits = []
    for path in paths:
        text = _text(path)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for m in PROCESS_RE.finditer(line):
                rel = path.relative_to(ROOT)
                hits.append(f"{rel}:{n}: {m.group(0)!r} | {line.strip()[:160]}")
    return hits


def test_no_development_process_words():
    hits = process_word_hits(_repository_files())
    for hit in hits:
        print(hit)
    assert not hits, (
        f"{len(hits)} phrase(s) about the project's development instead of the software "
        "(issue numbers, work sessions, timing diaries, comparisons with earlier commits); "
        "describe the software as it is:\n" + "\n".join(hits)
    )


def test_the_process_patterns_catch_what_they_are_for():
    caught = [
        "as asked in issue 14",
        "see #14 for details",
        "In this stop we measured",
        "the previous stop",
        "the " + "seed paper",
        "interleaved with the commit before",
        "two machines of this " + "workplace",
        "on the project's " + "machines",
        "no GPU has been lent to this " + "project",
    ]
    missed = [s for s in caught if not PROCESS_RE.search(s)]
    assert not missed, missed
    fine = [
        "the decode stops at a stop token",
        "pytest's session fixture",
        'labels such as "#0 c0"',
        "colour #1f77b4",
        "see [x](docs/metrics.md#rates-and-their-intervals)",
        "the tissue 3 sample",
    ]
    wrong = [s for s in fine if PROCESS_RE.search(s)]
    assert not wrong, wrong


# ----------------------------------------------------------------------------- the README


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, (
        f"README.md has {n} lines (at most {README_MAX_LINES}): move results to docs/results.md, "
        "measurements to docs/performance.md, details to the docs they belong to"
    )


# ----------------------------------------------------------------------------- links

LINK_RE = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE_RE = re.compile(r"^\s*(```|~~~)")


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks, inline code removed."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE_RE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "", line)


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if FENCE_RE.match(line):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _documents() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    docs += [ROOT / "config" / "README.md", ROOT / "benchmarks" / "README.md"]
    return [p for p in docs if p.is_file()]


def broken_links(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    bad = []
    for n, line in _prose_lines(text):
        for target in LINK_RE.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # a URL, mailto: and the like
            path_part, _, anchor = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            where = f"{doc.relative_to(ROOT)}:{n}: {target}"
            if not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and dest.is_file():
                if anchor.lower() not in heading_anchors(dest.read_text(encoding="utf-8")):
                    bad.append(f"{where}: no heading with anchor #{anchor}")
    return bad


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    bad = broken_links(doc)
    for b in bad:
        print(b)
    assert not bad, "\n".join(bad)


def test_heading_anchors_follow_github():
    text = "# A b\n## `models.<name>.variants.<variant>`\n### `item_drops` (dataset × language)\n"
    text += "## A b\n```\n# not a heading\n```\n## The evaluation's speed\n"
    assert heading_anchors(text) == {
        "a-b",
        "a-b-1",
        "modelsnamevariantsvariant",
        "item_drops-dataset--language",
        "the-evaluations-speed",
    }


# ----------------------------------------------------------------------------- license, citation


def test_license_and_citation_agree_with_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    assert cff["title"] == project["name"]
    assert str(cff["version"]) == project["version"]
    assert cff["license"] == project["license"]["text"] == "Apache-2.0"
    assert cff["authors"]
    refs = {
        i["value"]
        for r in cff["references"]
        for i in r.get("identifiers", [])
        if i["type"] == "other"
    }
    assert refs == {"arXiv:2606.17609", "arXiv:2512.20638"}
