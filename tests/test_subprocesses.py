"""The processes the tests start, counted: each call site that starts one says why on the line
above (``# subprocess: <why>``), and there are at most :data:`MOST` of them. Everything else runs
in-process or in a fork of the warm interpreter (:mod:`tests.warm`); docs/testing.md says why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MOST = 20
STARTS = re.compile(r"\bsubprocess\.(run|Popen|call|check_call|check_output)\(|\bos\.fork\(")
REASON = re.compile(r"^\s*# subprocess: \S")


def sites() -> list[tuple[str, int, str | None]]:
    """Every call that starts a process in tests/**/*.py: (file, line, the reason above it)."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__):
            continue
        lines = path.read_text().splitlines()
        for number, text in enumerate(lines, start=1):
            if STARTS.search(text.split("#", 1)[0]):
                above = lines[number - 2] if number > 1 else ""
                reason = above.strip() if REASON.match(above) else None
                found.append((str(path.relative_to(TESTS.parent)), number, reason))
    return found


def test_every_process_a_test_starts_says_why_and_they_are_few() -> None:
    found = sites()
    assert [f"{name}:{number}" for name, number, reason in found if reason is None] == []
    assert len(found) <= MOST, [f"{name}:{number}" for name, number, _ in found]


def test_a_site_without_its_reason_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan sees a bare call and one whose reason is not on the line above."""
    folder = tmp_path / "tests"
    folder.mkdir()
    (folder / "test_x.py").write_text(
        "import os, subprocess\n"
        "# subprocess: a reason\n"
        "subprocess.run(['true'])\n"
        "subprocess.Popen(['true'])  # a comment on the line is not the reason\n"
        "# subprocess: far from its call\n"
        "\n"
        "pid = os.fork()\n"
    )
    monkeypatch.setitem(globals(), "TESTS", folder)
    assert [(n, r) for _, n, r in sites()] == [
        (3, "# subprocess: a reason"),
        (4, None),
        (7, None),
    ]
