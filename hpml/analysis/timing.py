"""Step timing that never stalls a GPU mid-run: host clocks on CPU, CUDA events on GPU; on a
GPU, a few probe steps that start on an idle device tell how much of a step the host takes to
issue (:class:`StepTimer`'s ``probe_every``)."""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hpml.analysis.stats import cv_pct, iqr


def synchronized_now(device: torch.device) -> float:
    """``perf_counter`` after the device has finished queued work (a no-op wait on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def call_seconds(
    fn: Callable[[], object], calls: int, device: torch.device, warmup: int = 0
) -> list[float]:
    """Host-clock seconds of each of ``calls`` calls of ``fn`` after ``warmup`` untimed ones,
    ``device`` synchronised before and after each timed call, so its time holds the work it
    queued."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        start = synchronized_now(device)
        fn()
        times.append(synchronized_now(device) - start)
    return times


@dataclass(frozen=True)
class StepStats:
    """Steady-state statistics of a run of steps (warm-up steps excluded).

    Throughput is the median over steps of samples over *cycle* (previous step's end to its own:
    the wait for its batch plus the step), robust to the odd stalled step. Step times exclude
    the waits.
    """

    steps: int
    samples: int
    seconds: float  # the window: every cycle after warm-up, end to end
    throughput_samples_per_s: float  # median over steps of samples / cycle
    throughput_iqr_samples_per_s: float
    step_p50_ms: float
    step_p90_ms: float  # the tail IQR does not see: stalls, collections, checkpoint writes
    step_iqr_ms: float
    step_cv_pct: float  # standard deviation over mean of step times
    data_wait_pct: float
    step_cpu_p50_ms: float  # process CPU time (all threads) per step: steadier on a busy host
    utilisation_pct: float  # busy share of the window: see StepTimer.utilisation_pct


class _Mark:
    """A point in time: a host clock reading, or a CUDA event the GPU stamps when it gets there."""

    def __init__(self, device: torch.device) -> None:
        self.event = None
        if device.type == "cuda":
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record()
        self.host = time.perf_counter()
        self.cpu = time.process_time()  # this process, all threads

    def seconds_until(self, later: _Mark) -> float:
        if self.event is not None and later.event is not None:
            # elapsed_time raises unless both events have completed: wait for the later one
            later.event.synchronize()
            return self.event.elapsed_time(later.event) / 1e3
        return later.host - self.host


SYNC_WARNING = "called a synchronizing CUDA operation"  # what torch's sync debug mode warns


class SyncCount:
    """The synchronising CUDA operations (``.item()``, a pageable copy, ``nonzero``) torch runs
    between :meth:`start` and :meth:`stop`, counted from its sync debug mode's warnings."""

    def __init__(self) -> None:
        self._catcher: warnings.catch_warnings | None = None
        self._seen: list[warnings.WarningMessage] = []

    def start(self) -> None:
        self._catcher = warnings.catch_warnings(record=True)
        self._seen = self._catcher.__enter__() or []
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def stop(self) -> int:
        torch.cuda.set_sync_debug_mode("default")
        if self._catcher is not None:
            self._catcher.__exit__(None, None, None)
            self._catcher = None
        return sum(SYNC_WARNING in str(w.message) for w in self._seen)


@dataclass(frozen=True)
class Probe:
    """A step that began on an idle device: the host's time to issue it (its clock from the
    step's start to its end), the device's span of it (its events), and the synchronising
    operations inside it, which make the host wait for the device and the share meaningless."""

    issue_s: float
    start: _Mark
    stop: _Mark
    syncs: int

    def issue_pct(self) -> float | None:
        """The host's issue time over the device's span, percent, at most 100: near 100 the
        device waited for the host all step; None for a step that synchronised."""
        if self.syncs:
            return None
        span = self.start.seconds_until(self.stop)
        return min(100.0, 100.0 * self.issue_s / span) if span > 0 else None


class StepTimer:
    """Times steps and the gaps between them, where the loop waits for the next batch.

    The window runs from the end of the last warm-up step (or the first step's start) to the end
    of the last step. On CUDA the marks are events read only in ``stats()``; every
    ``probe_every``-th timed step (0: none) starts once the device has drained its queue, so
    its host time is the time to issue it (:class:`Probe`): one synchronisation per probe.
    """

    def __init__(self, device: torch.device, warmup_steps: int, probe_every: int = 0) -> None:
        self.device, self.warmup = device, warmup_steps
        self.probe_every = probe_every if device.type == "cuda" else 0
        self.probes: list[Probe] = []
        self._sync_count: SyncCount | None = None
        self.threads = torch.get_num_threads()  # intra-op threads the window could keep busy
        self.steps: list[tuple[_Mark, _Mark]] = []
        self.gaps: list[float] = []
        self.samples: list[int] = []
        self.cpu: list[float] = []
        self._cpu_start = 0.0
        self._start: _Mark | None = None
        self.window_start: _Mark | None = None

    @property
    def count(self) -> int:
        return len(self.samples)

    def begin(self) -> None:
        timed = self.count - self.warmup
        if self.probe_every and timed >= 0 and timed % self.probe_every == 0:
            torch.cuda.synchronize(self.device)  # the probe's step starts on an idle device
            self._sync_count = SyncCount()
            self._sync_count.start()
        self._cpu_start = time.process_time()
        self._start = _Mark(self.device)
        if self.count >= self.warmup and self.steps:
            self.gaps.append(self._start.host - self.steps[-1][1].host)
        if self.count == 0 and self.warmup == 0:
            self.window_start = self._start

    def end(self, samples: int) -> None:
        stop = _Mark(self.device)
        if self._sync_count is not None:
            syncs, self._sync_count = self._sync_count.stop(), None
            assert self._start is not None  # begun
            self.probes.append(Probe(stop.host - self._start.host, self._start, stop, syncs))
        self.cpu.append(time.process_time() - self._cpu_start)
        self.steps.append((self._start, stop))  # type: ignore[arg-type]
        self.samples.append(samples)
        if self.count == self.warmup:
            self.window_start = stop

    def stats(self) -> StepStats | None:
        """Statistics over the steps after warm-up, or None if there were none."""
        if self.window_start is None or self.count <= self.warmup:
            return None
        seconds = self.window_start.seconds_until(self.steps[-1][1])
        steady = self.step_seconds()
        rates = [
            n / cycle
            for n, cycle in zip(self.samples[self.warmup :], self.cycle_seconds(), strict=True)
        ]
        return StepStats(
            steps=len(steady),
            samples=sum(self.samples[self.warmup :]),
            seconds=seconds,
            throughput_samples_per_s=statistics.median(rates),
            throughput_iqr_samples_per_s=iqr(rates),
            step_p50_ms=statistics.median(steady) * 1e3,
            step_p90_ms=float(np.percentile(steady, 90)) * 1e3,
            step_iqr_ms=iqr(steady) * 1e3,
            step_cv_pct=cv_pct(steady),
            data_wait_pct=100.0 * sum(self.gaps) / seconds,
            step_cpu_p50_ms=statistics.median(self.cpu[self.warmup :]) * 1e3,
            utilisation_pct=self.utilisation_pct(steady, seconds),
        )

    def host_issue_pct(self) -> float | None:
        """The median over probes of the host's issue time over the device's span of a step,
        percent (:meth:`Probe.issue_pct`); None without a probe that did not synchronise."""
        shares = [share for probe in self.probes if (share := probe.issue_pct()) is not None]
        return statistics.median(shares) if shares else None

    def step_seconds(self) -> list[float]:
        """Each step after warm-up, start to end, seconds (on CUDA: read from its events)."""
        return [start.seconds_until(stop) for start, stop in self.steps[self.warmup :]]

    def cycle_seconds(self) -> list[float]:
        """Each step after warm-up from the previous step's end (the first without warm-up: its
        start) to its own: the cycles add up to the window."""
        marks = self.steps
        return [
            (marks[i - 1][1] if i else marks[i][0]).seconds_until(marks[i][1])
            for i in range(self.warmup, len(marks))
        ]

    def utilisation_pct(self, steady: list[float], seconds: float) -> float:
        """Busy time over the window's wall time, percent, at most 100. CPU: process CPU time over
        wall time x torch's threads. CUDA: the steps' spans on the GPU timeline, bubbles included.
        """
        if self.device.type == "cuda":
            busy = sum(steady) / seconds
        else:
            assert self.window_start is not None
            cpu = self.steps[-1][1].cpu - self.window_start.cpu
            busy = cpu / (seconds * self.threads)
        return min(100.0, 100.0 * busy)
