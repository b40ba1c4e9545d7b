"""One turn of a side-by-side timing: a block of calls, timed on two clocks at once.

Wall time holds every stretch in which the calling thread was preempted; thread CPU time counts
only the time it ran, and is the work's own time only where all of the work runs on that thread
(process CPU time would count other threads' spin-waits, which grow with load). So ``auto`` uses
the thread clock only for CPU calls on one torch thread; ``thread_cpu`` times CPU calls on one
torch thread whatever the caller's count.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch

AUTO, WALL, THREAD_CPU = "auto", "wall", "thread_cpu"
CLOCKS = (AUTO, WALL, THREAD_CPU)
CALIBRATION_SHARE = 0.1  # a calibration block this share of min_run_time times one call well
WARM_CALLS = 10  # blocks of this many calls or fewer need no warm-up call (time_block)
# the thread clock missed work where the process's CPU time over the rounds exceeds the thread's
# by more than this share: other threads ran part of the calls (a compiled graph's own OpenMP
# team, inter-op threads); a background thread's sampling stays far below it
MISSED_SHARE = 0.1


def clock_for(asked: str, devices: Iterable[str]) -> str:
    """The clock a timing on ``devices`` uses, as asked (one of ``CLOCKS``, which
    :class:`~hpml.analysis.compare.Plan` checks; module docstring)."""
    if asked == WALL or any(torch.device(device).type != "cpu" for device in devices):
        return WALL
    return THREAD_CPU if asked == THREAD_CPU or torch.get_num_threads() == 1 else WALL


@contextmanager
def threads_for(clock: str) -> Iterator[None]:
    """One torch thread inside the block where ``clock`` is the thread's (its count after)."""
    threads = torch.get_num_threads()
    if clock == THREAD_CPU and threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def synchronizer(devices: Iterable[str]) -> Callable[[], None]:
    """Waits for the accelerators among ``devices``, and for CUDA wherever it is initialised
    (as ``torch.utils.benchmark.Timer`` does), so a block's wall time holds its kernels."""
    accelerators = sorted({str(d) for d in devices if torch.device(d).type != "cpu"})

    def sync() -> None:
        for device in accelerators:
            torch.accelerator.synchronize(torch.device(device))
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()

    return sync


def time_block(
    fn: Callable[[], object], number: int, sync: Callable[[], None]
) -> tuple[float, float, float]:
    """Seconds per call of ``number`` calls of ``fn``: (wall, thread CPU, process CPU), the last
    to tell whether other threads did some of the work. Untimed calls first, so the caches the
    other side filled are this side's again: 1%, at least one; none for blocks of a few long
    calls."""
    for _ in range(0 if number <= WARM_CALLS else max(1, number // 100)):
        fn()
    sync()
    wall, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(number):
        fn()
    sync()
    process, cpu = time.process_time() - process, time.thread_time() - cpu
    wall = time.perf_counter() - wall
    return wall / number, cpu / number, process / number


def calls_per_block(
    fn: Callable[[], object], min_run_time: float, clock: str, sync: Callable[[], None]
) -> int:
    """Calls that take about ``min_run_time`` on ``clock``: after one untimed call, blocks of 1,
    10, 100... calls until one lasts ``CALIBRATION_SHARE`` of it, scaled up. The thread clock's
    blocks are sized on process CPU time: no huge block where other threads do the work."""
    fn()
    number = 1
    while True:
        wall, _, process = time_block(fn, number, sync)
        seconds = (process if clock == THREAD_CPU else wall) * number
        if seconds >= CALIBRATION_SHARE * min_run_time or number >= 10**7:
            return max(1, math.ceil(number * min_run_time / max(seconds, 1e-9)))
        number *= 10
