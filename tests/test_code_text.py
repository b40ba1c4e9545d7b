"""Code under hpml/ and the configs under conf/ say what and why, not when or where it was
measured: no commit hash, no ISO date, no host of a development machine, no measured figure, in
docstrings, comments, help texts and printed lines alike. Such figures belong in docs/, with where
and when they were measured."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCANNED = ((REPO / "hpml", "*.py"), (REPO / "conf", "*.yaml"))

SAID_COMMIT = re.compile(r"\bcommits?\s+`*([0-9a-f]{7,40})\b", re.IGNORECASE)
HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
ISO_DATE = re.compile(r"\b(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])\b")
HOST = re.compile(r"\bthis VM\b|\b(2|two)[- ]core\b", re.IGNORECASE)
# a figure's usual shapes: a ratio slower, faster or of another, a share of CPU, a validation
# accuracy or loss; an output's example between double backquotes (``2.91x [2.70, 3.10] faster``)
# is not one
FIGURE = re.compile(
    r"\b\d+(\.\d+)?x (slower|faster|of)\b|\b\d+(\.\d+)? ?% CPU\b"
    r"|val/(acc|loss)\b\D{0,20}\d\.\d|\d\.\d+ val/(acc|loss)\b",
    re.IGNORECASE,
)
QUOTED = re.compile(r"``.*?(``|$)")  # to the line's end where the example goes on


def lines() -> list[tuple[str, int, str]]:
    """Every line of hpml/**/*.py and conf/**/*.yaml as (path relative to the repository, line
    number, text)."""
    found = []
    for path in sorted(p for folder, pattern in SCANNED for p in folder.rglob(pattern)):
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
    # subprocess: git says which hex strings are this repository's commits
    answer = subprocess.run(
        [git, "-C", str(REPO), "cat-file", "--batch-check"],
        input="".join(f"{name}^{{commit}}\n" for name in ordered),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return {name for name, line in zip(ordered, answer, strict=True) if "missing" not in line}


def offences(found: list[tuple[str, int, str]]) -> list[str]:
    """``file:line: why`` for each line that names a commit, a date, a host or a figure."""
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
        if FIGURE.search(QUOTED.sub("", text)):
            why.append("a figure")
        if why:
            bad.append(f"{name}:{number}: {' and '.join(why)}: {text.strip()}")
    return bad


def test_the_checks_catch_what_they_are_for() -> None:
    # subprocess: git names this checkout's commit, the one the check must catch
    full = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    # its shortest prefix of 9 or more with a letter: one of digits alone reads as a number
    head = next((full[:n] for n in range(9, len(full) + 1) if HEX.fullmatch(full[:n])), "")
    sample = [
        ("a.py", 1, "measured at commit 1a2b3c4d"),
        ("a.py", 2, "# on 2025-11-03, a quiet night"),
        ("a.py", 3, '"""Timed on this VM."""'),
        ("a.py", 4, "help='a 2-core default'"),
        ("a.py", 5, f"# since {head}" if head else "# since commit abcdef1"),
        ("a.py", 6, 'MD5 = "7c2ac02c03563afcf9b574c7e56c153a"  # not a commit'),
        ("a.py", 7, "color = '#1f77b4'; shape 2025x1024; core count"),
        ("a.yaml", 8, "# Normalize reads an OmegaConf list ~9x slower, on every image"),
        ("a.yaml", 9, "interval_s: 5.0  # ~1% CPU at 1 s"),
        ("a.yaml", 10, "# VGG11 reaches val/acc 1.000 within two epochs"),
        ("a.yaml", 11, "# in the default 2 epochs val/loss falls from 2.30 to 2.19"),
        ("a.py", 12, '"""``cpu_gemm 1.62x slower than the median``: a line it prints."""'),
        ("a.yaml", 13, "# members per array at most; 0.8: a share of the free memory"),
    ]
    found = [line.split(":")[1] for line in offences(sample)]
    assert found == ["1", "2", "3", "4", "5", "8", "9", "10", "11"]


def test_no_commit_date_host_or_figure_in_hpml_or_conf() -> None:
    bad = offences(lines())
    assert not bad, "\n".join(
        ["code or a config names a commit, date, host or figure (docs/ is the place):", *bad]
    )
