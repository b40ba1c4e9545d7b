"""Noise on the machine while a run is timed: who else used the CPU, and whether to trust it.

A :class:`NoiseProbe` is opened and closed around each timed window (one probe per run, any
number of windows) and sums, over its windows:

- the CPU time **other processes** took, as a percent of the machine's capacity
  (wall time x logical CPUs): system-wide busy time (``psutil.cpu_times()``: user, nice, system,
  irq, softirq; guest time is inside user on Linux) minus the CPU time of this run's own process
  trees (each of ``pids`` with every child: DataLoader workers alive at an edge are read live,
  those reaped inside the window through the parent's ``children_*`` times);
- CPU **steal**, the time a hypervisor gave this virtual machine's CPUs to other guests, as a
  percent of the same capacity, where the kernel reports it (Linux ``/proc/stat``), else None;
- the **1-minute load average** at each window's close, the largest kept. It is recorded, never
  judged: it counts runnable threads, this run's own torch threads included, so a busy run on an
  idle machine reads about its thread count.

psutil reads the kernel's tick counters (10 ms on Linux): a window of a few seconds on two CPUs
resolves about 0.2% of capacity, enough for a rule in tens of percent. Hand-written because
psutil gives the counters, not the difference between the machine and one process tree.

The rule (:func:`judge`, thresholds in :class:`NoiseRule`, set from ``callbacks.perf.noise``):
a run's timings are **noisy** when other processes took more than ``max_other_cpu_pct`` of the
machine, or steal exceeded ``max_steal_pct``, or the training step time's coefficient of
variation exceeded ``max_step_time_cv_pct`` over at least ``min_steps`` timed steps (fewer
steps say too little about spread to judge it). The reason names the figure and its limit.
Defaults, measured on this project's 2-core VM (2 torch threads), shared with other sessions:

- ``max_other_cpu_pct`` 15: the machine's own background (kernel threads, daemons: every
  process but the sessions' Python ones) took 1.1-1.4% over 10 s windows, so 15 is ten times
  it; a neighbour burning one core beside a job that wants both takes about a third of the
  machine under fair scheduling. Crowded by other sessions (load 6-11), VAE and LSTM training
  measured 67-89% and the probe said so; a 2-thread matmul loop 76-83% without and 78-88% with
  one more burner (which then got 5-10% of the machine: the rest was already taken).
- ``max_steal_pct`` 10: steal read 0.1-3.2% in every window measured.
- ``max_step_time_cv_pct`` 50: crowded runs measured 34-82%. At a CV of 50%, the 95% interval
  of the median of 60 steps is about +-16% (1.96 x 1.25 x CV / sqrt(n)): wider than the
  1.15-1.3x speed-ups hpml's optimisations give on CPU, so those could not be told apart.
  Other load shows in the CPU share first; the CV catches what the probe cannot see (a
  neighbouring VM without steal accounting, throttling, a shared GPU).
- ``min_steps`` 10: the CV of fewer steps is itself too uncertain to judge.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from hpml.errors import ConfigError
from hpml.ranges import NonNegative, Steps

OTHER_CPU, STEAL, STEP_TIME_CV = "other_cpu_pct", "steal_pct", "step_time_cv_pct"


@dataclass(frozen=True)
class NoiseRule:
    """When a run's timings are unreliable: any one limit exceeded is enough."""

    max_other_cpu_pct: NonNegative = 15.0
    max_steal_pct: NonNegative = 10.0
    max_step_time_cv_pct: NonNegative = 50.0
    min_steps: Steps = 10  # the CV of fewer timed steps is not judged

    def __post_init__(self) -> None:
        for name in ("max_other_cpu_pct", "max_steal_pct", "max_step_time_cv_pct", "min_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ConfigError(f"noise.{name}", value, "a number >= 0")


@dataclass(frozen=True)
class CpuReading:
    """The machine's and this run's CPU counters at one instant, seconds."""

    wall: float
    busy: float  # every CPU's busy time, all processes
    steal: float | None  # None where the kernel reports no steal
    own: float  # this run's process trees


@dataclass(frozen=True)
class NoiseFigures:
    """What the probe saw over its windows together."""

    wall_s: float
    cpus: int
    other_cpu_pct: float
    steal_pct: float | None
    load_avg_1m_procs: float


def busy_seconds(times: object) -> float:
    """Busy CPU seconds of a ``psutil.cpu_times()`` result: all but idle, iowait, steal and guest
    (guest time is counted inside user on Linux, steal is not this machine's work)."""
    idle = ("idle", "iowait", "steal", "guest", "guest_nice")
    return sum(getattr(times, f) for f in times._fields if f not in idle)  # type: ignore[attr-defined]


def tree_cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds of the processes ``pids`` and all their descendants, each counted once: user
    and system time, with the times of their children already reaped (``children_*``)."""
    seen: set[int] = set()
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in tree:
            if process.pid in seen:
                continue
            seen.add(process.pid)
            try:
                t = process.cpu_times()
            except psutil.NoSuchProcess:  # a worker that exited since the listing
                continue
            total += t.user + t.system + t.children_user + t.children_system
    return total


def read_cpu(pids: Iterable[int]) -> CpuReading:
    times = psutil.cpu_times()
    steal = getattr(times, "steal", None)
    return CpuReading(time.perf_counter(), busy_seconds(times), steal, tree_cpu_seconds(pids))


class NoiseProbe:
    """Sums other processes' CPU time, steal and the load average over the windows it is open.

    ``pids``: the run's own processes (default this one); under DDP on one node every rank's, so
    the other ranks do not count as noise.
    """

    def __init__(self, pids: Iterable[int] | None = None) -> None:
        self.pids = tuple(pids) if pids is not None else (os.getpid(),)
        self.cpus = psutil.cpu_count() or 1
        self.wall = self.other = 0.0
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
        # tick counters of different files: the difference can dip just below zero
        self.other += max(0.0, (end.busy - start.busy) - (end.own - start.own))
        if self.steal is not None and start.steal is not None and end.steal is not None:
            self.steal += end.steal - start.steal
        else:
            self.steal = None
        self.load = max(self.load, load_avg_1m)

    def figures(self) -> NoiseFigures | None:
        """The sums as shares of the machine, None before any window closed."""
        if not self.windows or self.wall <= 0:
            return None
        capacity = self.wall * self.cpus
        steal = None if self.steal is None else 100.0 * max(0.0, self.steal) / capacity
        return NoiseFigures(self.wall, self.cpus, 100.0 * self.other / capacity, steal, self.load)


def judge(
    figures: NoiseFigures | None,
    step_time_cv_pct: float | None,
    steps: int,
    rule: NoiseRule,
) -> str | None:
    """Why the run's timings are unreliable by ``rule``, or None when nothing exceeded a limit.

    Every limit exceeded is named, ``; ``-joined, each as figure and limit.
    """
    reasons = []
    if figures is not None and figures.other_cpu_pct > rule.max_other_cpu_pct:
        reasons.append(
            f"other processes used {figures.other_cpu_pct:.0f}% of the CPU during timed work "
            f"(limit {rule.max_other_cpu_pct:g}%)"
        )
    steal = figures.steal_pct if figures is not None else None
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
