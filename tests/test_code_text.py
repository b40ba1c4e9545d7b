"""Code under hpml/ says what and why, not when or where it was measured: no commit hash, no ISO
date, no host of a development machine, in docstrings, comments, help texts and printed lines
alike. Such figures belong in docs/, with where and when they were measured."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HPML = REPO / "hpml"

SAID_COMMIT = re.compile(r"\bcommits?\s+`*([0-9a-f]{7,40})\b", re.IGNORECASE)
HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
ISO_DATE = re.compile(r"\b(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])\b")
HOST = re.compile(r"\bthis VM\b|\b(2|two)[- ]core\b", re.IGNORECASE)


def lines() -> list[tuple[str, int, str]]:
    """Every line of hpml/**/*.py as (path relative to the repository, line number, text)."""
    found = []
    for path in sorted(HPML.rglob("*.py")):
        name = str(path.relative_to(REPO))
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            found.append((name, number, text))
    return found


def real_commits(candidates: set[str]) -> set[str]:
    """The candidates that name a commit of this repository (none without git or a clone)."""
    git = shutil.which("git")
    if not candidates or git is None or not (REPO / ".git").exists():
        return set()
    ordered = sorted(candidates)
    answer = subprocess.run(
        [git, "-C", str(REPO), "cat-file", "--batch-check"],
        input="".join(f"{name}^{{commit}}\n" for name in ordered),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return {name for name, line in zip(ordered, answer, strict=True) if "missing" not in line}


def offences(found: list[tuple[str, int, str]]) -> list[str]:
    """``file:line: why`` for each line that names a commit, a date or a host."""
    hexes = {match for _, _, text in found for match in HEX.findall(text)}
    commits = real_commits(hexes)
    bad = []
    for name, number, text in found:
        why = []
        if SAID_COMMIT.search(text) or any(h in commits for h in HEX.findall(text)):
            why.append("a commit")
        if ISO_DATE.search(text):
            why.append("a date")
        if HOST.search(text):
            why.append("a host")
        if why:
            bad.append(f"{name}:{number}: {' and '.join(why)}: {text.strip()}")
    return bad


def test_the_checks_catch_what_they_are_for() -> None:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    sample = [
        ("a.py", 1, "measured at commit 1a2b3c4d"),
        ("a.py", 2, "# on 2025-11-03, a quiet night"),
        ("a.py", 3, '"""Timed on this VM."""'),
        ("a.py", 4, "help='a 2-core default'"),
        ("a.py", 5, f"# since {head}" if head else "# since commit abcdef1"),
        ("a.py", 6, 'MD5 = "7c2ac02c03563afcf9b574c7e56c153a"  # not a commit'),
        ("a.py", 7, "color = '#1f77b4'; shape 2025x1024; core count"),
    ]
    assert [line.split(":")[1] for line in offences(sample)] == ["1", "2", "3", "4", "5"]


def test_no_commit_date_or_host_in_hpml() -> None:
    bad = offences(lines())
    assert not bad, "\n".join(["code names a commit, date or host (docs/ is the place):", *bad])
