"""The start-up case times a child in CPU time as well as on the wall clock, and checks its exit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hpml.bench.harness import Settings
from hpml.bench.startup import CPU, RATIOS, WALL, commands, timed


def test_the_childs_cpu_time_is_counted_and_a_wrong_exit_fails(tmp_path: Path) -> None:
    busy = timed([sys.executable, "-c", "sum(range(2 * 10**7))"], 0, tmp_path)
    idle = timed([sys.executable, "-c", "pass"], 0, tmp_path)
    assert busy[CPU] > idle[CPU] + 0.1  # the loop is about 0.3 CPU-s
    assert set(busy) == {WALL, CPU}
    failing = "import sys; print('boom', file=sys.stderr); sys.exit(3)"
    with pytest.raises(RuntimeError, match="exited 3, not 0: boom"):
        timed([sys.executable, "-c", failing], 0, tmp_path)


def test_every_ratio_compares_variants_the_case_runs(tmp_path: Path) -> None:
    names = set(commands(Settings(), tmp_path))
    assert {r.numerator for r in RATIOS} | {r.denominator for r in RATIOS} <= names
