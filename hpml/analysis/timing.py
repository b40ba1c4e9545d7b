"""Step timing that synchronises a GPU only at the edges of what it measures."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch


def synchronized_now(device: torch.device) -> float:
    """``perf_counter`` after the device has finished queued work (a no-op wait on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


@dataclass(frozen=True)
class StepStats:
    """Steady-state statistics of a run of steps (warm-up steps excluded)."""

    steps: int
    samples: int
    seconds: float
    throughput_samples_per_s: float
    step_mean_ms: float
    step_p50_ms: float
    step_p90_ms: float
    data_wait_pct: float


class StepTimer:
    """Times steps and the gaps between them (where the loop waits for the next batch).

    The window starts when the last warm-up step ends and closes at ``stats()``; both edges
    synchronise the device, nothing in between does. On CUDA each step's duration comes from
    a pair of CUDA events read after the window closes.
    """

    def __init__(self, device: torch.device, warmup_steps: int) -> None:
        self.device, self.warmup = device, warmup_steps
        self.durations: list[float] = []
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.gaps: list[float] = []
        self.samples: list[int] = []
        self._start: float | torch.cuda.Event = 0.0
        self._last_end: float | None = None
        self.window_start: float | None = None

    @property
    def count(self) -> int:
        return len(self.samples)

    def begin(self) -> None:
        now = time.perf_counter()
        if self.count == 0 and self.warmup == 0:
            now = self.window_start = synchronized_now(self.device)
        if self._last_end is not None and self.count >= self.warmup:
            self.gaps.append(now - self._last_end)
        if self.device.type == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = now

    def end(self, samples: int) -> None:
        if self.device.type == "cuda":
            stop = torch.cuda.Event(enable_timing=True)
            stop.record()
            self.events.append((self._start, stop))  # type: ignore[arg-type]
        else:
            self.durations.append(time.perf_counter() - self._start)  # type: ignore[operator]
        self.samples.append(samples)
        if self.count == self.warmup:
            self.window_start = synchronized_now(self.device)
        self._last_end = time.perf_counter()

    def stats(self) -> StepStats | None:
        """Statistics over the steps after warm-up, or None if there were none."""
        if self.window_start is None or self.count <= self.warmup:
            return None
        seconds = synchronized_now(self.device) - self.window_start
        if self.device.type == "cuda":
            self.durations = [start.elapsed_time(stop) / 1e3 for start, stop in self.events]
        steady = self.durations[self.warmup:]
        samples = sum(self.samples[self.warmup:])
        deciles = statistics.quantiles(steady, n=10, method="inclusive") if len(steady) > 1 \
            else [steady[0]] * 9
        return StepStats(
            steps=len(steady),
            samples=samples,
            seconds=seconds,
            throughput_samples_per_s=samples / seconds,
            step_mean_ms=statistics.fmean(steady) * 1e3,
            step_p50_ms=statistics.median(steady) * 1e3,
            step_p90_ms=deciles[8] * 1e3,
            data_wait_pct=100.0 * sum(self.gaps) / seconds,
        )
