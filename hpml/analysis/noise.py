"""Noise on the machine while a run is timed: who else used the CPU, and whether to trust it.

A :class:`NoiseProbe` sums, over timed windows, the CPU time other processes took and CPU steal,
as shares of wall time x logical CPUs, and keeps the largest 1-minute load average (recorded,
never judged: it counts this run's own threads). :func:`judge` applies :class:`NoiseRule`
(defaults: docs/metrics.md#noise).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from hpml.errors import ConfigError
from hpml.ranges import NonNegative, Percent, Steps, refuse_out_of_range

MIN_TICKS = 50  # of the CPU counters (USER_HZ, 100 a second on Linux) x CPUs, to judge shares


@dataclass(frozen=True)
class NoiseRule:
    """When a run's timings are unreliable: any one limit exceeded is enough."""

    max_other_cpu_pct: Percent = 15.0  # of wall time x CPUs
    max_steal_pct: Percent = 10.0
    max_step_time_cv_pct: NonNegative = 50.0
    min_steps: Steps = 10  # the CV of fewer timed steps is not judged

    def __post_init__(self) -> None:
        refuse_out_of_range(
            self, lambda name, value, expected: ConfigError(f"noise.{name}", value, expected)
        )


@dataclass(frozen=True)
class CpuReading:
    """The machine's and this run's CPU counters at one instant, seconds."""

    wall: float
    busy: float  # every CPU's busy time, all processes
    steal: float | None  # None where the kernel reports no steal
    own: float  # this run's process trees


@dataclass(frozen=True)
class NoiseShares:
    """What the probe saw over its windows together."""

    wall_s: float
    cpus: int
    other_cpu_pct: float
    steal_pct: float | None
    load_avg_1m_procs: float


def busy_seconds(times: object) -> float:
    """Busy CPU seconds of a ``psutil.cpu_times()`` result: all but idle, iowait, steal and guest
    (counted inside user on Linux)."""
    idle = ("idle", "iowait", "steal", "guest", "guest_nice")
    return sum(getattr(times, f) for f in times._fields if f not in idle)  # type: ignore[attr-defined]


def tree_cpu_seconds(pids: Iterable[int]) -> float:
    """User and system CPU seconds of the processes ``pids`` and all their descendants (reaped
    children included), each counted once."""
    processes: dict[int, psutil.Process] = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            processes.update((p.pid, p) for p in [root, *root.children(recursive=True)])
    total = 0.0
    for process in processes.values():
        with contextlib.suppress(psutil.NoSuchProcess):  # a worker that exited since the listing
            t = process.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def read_cpu(pids: Iterable[int]) -> CpuReading:
    times = psutil.cpu_times()
    steal = getattr(times, "steal", None)
    return CpuReading(time.perf_counter(), busy_seconds(times), steal, tree_cpu_seconds(pids))


class NoiseProbe:
    """Sums other processes' CPU time, steal and the load average over the windows it is open.
    ``pids``: the run's own processes (default this one; under DDP every rank's on the node)."""

    def __init__(self, pids: Iterable[int] | None = None) -> None:
        self.pids = tuple(pids) if pids is not None else (os.getpid(),)
        self.cpus = psutil.cpu_count() or 1
        self.wall = self.busy = self.own = 0.0  # summed over windows
        self.steal: float | None = 0.0
        self.load = 0.0
        self.windows = 0
        self._open: CpuReading | None = None

    @property
    def is_open(self) -> bool:
        return self._open is not None

    def open(self) -> None:
        if self._open is None:
            self._open = read_cpu(self.pids)

    def close(self) -> None:
        """End the window that is open (if any) and add it to the sums."""
        if self._open is None:
            return
        start, end = self._open, read_cpu(self.pids)
        self._open = None
        self.add(start, end, os.getloadavg()[0])

    def add(self, start: CpuReading, end: CpuReading, load_avg_1m: float) -> None:
        """One window between two readings: the arithmetic of :meth:`close`."""
        self.windows += 1
        self.wall += end.wall - start.wall
        self.busy += end.busy - start.busy
        self.own += end.own - start.own
        if self.steal is not None and start.steal is not None and end.steal is not None:
            self.steal += end.steal - start.steal
        else:
            self.steal = None
        self.load = max(self.load, load_avg_1m)

    def shares(self) -> NoiseShares | None:
        """The sums as shares of the machine, None before any window closed."""
        if not self.windows or self.wall <= 0:
            return None
        capacity = self.wall * self.cpus
        steal = None if self.steal is None else 100.0 * max(0.0, self.steal) / capacity
        # busy and own are tick counters of different files, each read to a tick: other is
        # taken from their sums, where the readings' errors cancel, not summed window by
        # window, where a window a few ticks long could read more than the machine can do
        other = min(max(0.0, self.busy - self.own), capacity)
        return NoiseShares(self.wall, self.cpus, 100.0 * other / capacity, steal, self.load)


def judge(
    shares: NoiseShares | None, step_time_cv_pct: float | None, steps: int, rule: NoiseRule
) -> str | None:
    """Why the run's timings are unreliable by ``rule`` (every limit exceeded, ``; ``-joined), or
    None. CPU shares are judged only over timed windows of :data:`MIN_TICKS` ticks of the
    machine or more: below, a tick either way reads as a share of tens of percent."""
    reasons = []
    if shares is not None and shares.wall_s * shares.cpus * os.sysconf("SC_CLK_TCK") < MIN_TICKS:
        shares = None
    if shares is not None and shares.other_cpu_pct > rule.max_other_cpu_pct:
        reasons.append(
            f"other processes used {shares.other_cpu_pct:.0f}% of the CPU during timed work "
            f"(limit {rule.max_other_cpu_pct:g}%)"
        )
    steal = shares.steal_pct if shares is not None else None
    if steal is not None and steal > rule.max_steal_pct:
        reasons.append(
            f"the hypervisor stole {steal:.0f}% of the CPU during timed work "
            f"(limit {rule.max_steal_pct:g}%)"
        )
    if (
        step_time_cv_pct is not None
        and steps >= rule.min_steps
        and step_time_cv_pct > rule.max_step_time_cv_pct
    ):
        reasons.append(
            f"training step time varied by {step_time_cv_pct:.0f}% (CV over {steps} steps, "
            f"limit {rule.max_step_time_cv_pct:g}%)"
        )
    return "; ".join(reasons) or None
