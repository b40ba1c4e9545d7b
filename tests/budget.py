"""What each test file costs: CPU seconds and wall seconds, written to ``.pytest_budget.csv``
and summed per area against the budgets of ``[tool.pytest.ini_options] cpu_budget``.

A test's CPU time is what its process and every process below it spent while it ran (setup and
teardown included): this process's own (``getrusage``), that of the children it has waited for,
and that of the descendants still alive at either end (psutil; each with the children it has
waited for, e.g. the warm interpreter's forks of :mod:`tests.warm`). Under pytest-xdist each
worker counts its own tests and hands its table to the controller, which writes the file once.
"""

from __future__ import annotations

import csv
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

CSV = ".pytest_budget.csv"
SLOW_TEST_CPU_S = 10.0  # a single test above this is listed, and its docstring says why


def _own_cpu_s() -> float:
    """CPU seconds of this process and of the children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def _live_cpu_s() -> dict[int, float]:
    """CPU seconds of each live descendant, with the children each has waited for."""
    spent = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            times = proc.cpu_times()
            spent[proc.pid] = sum(times[:4])  # user, system, children_user, children_system
        except psutil.Error:
            continue
    return spent


def _tree_cpu_s() -> tuple[float, dict[int, float]]:
    return _own_cpu_s(), _live_cpu_s()


def _spent(before: tuple[float, dict[int, float]], after: tuple[float, dict[int, float]]) -> float:
    """CPU seconds between two readings. A descendant alive at the first and gone at the second
    was waited for by one still counted (or by this process), so what it spent moved there;
    one that appeared in between started at zero."""
    (own_before, live_before), (own_after, live_after) = before, after
    live = sum(live_after.values()) - sum(
        spent for pid, spent in live_before.items() if pid in live_after
    )
    gone = sum(spent for pid, spent in live_before.items() if pid not in live_after)
    return own_after - own_before + live - gone


class Budget:
    """The table of one process: per test file, its tests, wall seconds and CPU seconds; and the
    tests over :data:`SLOW_TEST_CPU_S`."""

    def __init__(self) -> None:
        self.files: dict[str, list[float]] = {}
        self.slow: list[tuple[str, float]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[object]:
        wall, cpu = time.perf_counter(), _tree_cpu_s()
        try:
            return (yield)
        finally:
            cpu_s = _spent(cpu, _tree_cpu_s())
            row = self.files.setdefault(item.nodeid.split("::")[0], [0, 0.0, 0.0])
            row[0] += 1
            row[1] += time.perf_counter() - wall
            row[2] += cpu_s
            if cpu_s > SLOW_TEST_CPU_S:
                self.slow.append((item.nodeid, cpu_s))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(session.config, "workeroutput", None)
        if output is not None:  # an xdist worker: the controller writes the table
            output["budget"] = {"files": self.files, "slow": self.slow}

    def pytest_testnodedown(self, node, error) -> None:
        table = getattr(node, "workeroutput", {}).get("budget")
        if table is None:
            return
        for path, (tests, wall_s, cpu_s) in table["files"].items():
            row = self.files.setdefault(path, [0, 0.0, 0.0])
            row[0], row[1], row[2] = row[0] + tests, row[1] + wall_s, row[2] + cpu_s
        self.slow.extend(tuple(test) for test in table["slow"])

    def pytest_terminal_summary(self, terminalreporter, config: pytest.Config) -> None:
        if hasattr(config, "workerinput") or not self.files:
            return
        rows = sorted(self.files.items(), key=lambda row: -row[1][2])
        with open(Path(config.rootpath) / CSV, "w", newline="") as out:
            table = csv.writer(out)
            table.writerow(["file", "tests", "wall_s", "cpu_s"])
            for path, (tests, wall_s, cpu_s) in rows:
                table.writerow([path, tests, f"{wall_s:.1f}", f"{cpu_s:.1f}"])
        write = terminalreporter.write_line
        terminalreporter.section("CPU seconds per area (budget: cpu_budget in pyproject.toml)")
        budgets = dict(line.split("=", 1) for line in config.getini("cpu_budget"))
        spent: dict[str, float] = {}
        for path, (_, _, cpu_s) in rows:
            area = area_of(path, budgets)
            spent[area] = spent.get(area, 0.0) + cpu_s
        for area, cpu_s in sorted(spent.items(), key=lambda row: -row[1]):
            budget = float(budgets.get(area, "nan"))
            over = "  OVER BUDGET" if cpu_s > budget else ""
            write(f"{cpu_s:8.1f} s  of {budget:6.0f} s  {area}{over}")
        write(f"{sum(spent.values()):8.1f} s  in all; per file: {CSV}")
        for nodeid, cpu_s in sorted(self.slow, key=lambda row: -row[1]):
            write(f"{cpu_s:8.1f} s  {nodeid}  (over {SLOW_TEST_CPU_S:.0f} s: says why)")


def area_of(path: str, budgets: dict[str, str]) -> str:
    """The longest area of ``budgets`` that ``path`` (a test file, from the root) lies in."""
    parts = Path(path).parts
    for depth in range(len(parts), 0, -1):
        area = "/".join(parts[:depth])
        if area in budgets:
            return area
    return "tests"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "cpu_budget",
        "AREA=SECONDS per line: the CPU seconds a folder (or file) of tests may spend in all",
        type="linelist",
        default=["tests=0"],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Budget(), "hpml-budget")
