"""StepTimer's arithmetic on a controlled clock: exact windows, percentiles and data-wait share."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from hpml.analysis import timing


class Clock:
    """A clock that only moves when told, standing in for ``time.perf_counter``."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_window_excludes_warmup_and_splits_step_time_from_data_wait(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    timer = timing.StepTimer(torch.device("cpu"), warmup_steps=2)
    steps = [9.0, 7.0, 1.0, 2.0, 3.0, 4.0]  # seconds per step; the first two are warm-up
    waits = [5.0, 5.0, 0.5, 0.5, 1.0, 1.0]  # seconds fetching data before each step
    for step, wait in zip(steps, waits, strict=True):
        clock.now += wait
        timer.begin()
        clock.now += step
        timer.end(samples=10)
    stats = timer.stats()
    window = sum(steps[2:]) + sum(waits[2:])
    assert stats.steps == 4 and stats.samples == 40
    assert stats.seconds == pytest.approx(window)
    # per step: 10 samples over wait + step (1.5, 2.5, 4 and 5 s): 6.67, 4, 2.5, 2 samples/s
    assert timer.cycle_seconds() == pytest.approx([1.5, 2.5, 4.0, 5.0])
    assert stats.throughput_samples_per_s == pytest.approx((4.0 + 2.5) / 2)
    # inclusive quartiles of 2, 2.5, 4, 6.67: 2.375 and 4.667
    assert stats.throughput_iqr_samples_per_s == pytest.approx(10 / 1.5 * 0.25 + 4 * 0.75 - 2.375)
    assert stats.step_p50_ms == pytest.approx(2500.0)
    assert stats.step_p90_ms == pytest.approx(3700.0)  # inclusive deciles of 1, 2, 3, 4 s
    assert stats.step_iqr_ms == pytest.approx(3250.0 - 1750.0)
    assert stats.step_cv_pct == pytest.approx(100 * statistics.stdev([1, 2, 3, 4]) / 2.5)
    assert stats.data_wait_pct == pytest.approx(100 * 3.0 / window)
    assert stats.step_cpu_p50_ms >= 0.0  # the fake clock moves wall time only


def test_without_warmup_the_first_cycle_is_its_step_alone(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    timer = timing.StepTimer(torch.device("cpu"), warmup_steps=0)
    for wait, step in ((3.0, 1.0), (1.0, 1.0), (0.0, 2.0)):
        clock.now += wait
        timer.begin()
        clock.now += step
        timer.end(samples=4)
    stats = timer.stats()
    assert timer.cycle_seconds() == pytest.approx([1.0, 2.0, 2.0])
    assert sum(timer.cycle_seconds()) == pytest.approx(stats.seconds)
    assert stats.throughput_samples_per_s == pytest.approx(2.0)


def test_no_statistics_without_steps_after_warmup():
    timer = timing.StepTimer(torch.device("cpu"), warmup_steps=3)
    for _ in range(3):
        timer.begin()
        timer.end(samples=1)
    assert timer.stats() is None


def test_cpu_utilisation_is_process_cpu_time_over_wall_time_and_threads(monkeypatch):
    wall, cpu = Clock(), Clock()
    monkeypatch.setattr(timing.time, "perf_counter", wall)
    monkeypatch.setattr(timing.time, "process_time", cpu)
    timer = timing.StepTimer(torch.device("cpu"), warmup_steps=1)
    timer.threads = 2
    for busy in (5.0, 3.0, 1.0, 20.0):  # each step: 2 s of wall time, ``busy`` s of CPU time
        wall.now += 0.5  # waiting for data: wall time, no CPU time
        timer.begin()
        wall.now, cpu.now = wall.now + 2.0, cpu.now + busy
        timer.end(samples=1)
        if timer.count == 3:
            stats = timer.stats()
    assert stats.seconds == pytest.approx(5.0)  # two steps and the wait between them
    assert stats.utilisation_pct == pytest.approx(100 * 4.0 / (5.0 * 2))
    # 24 s of CPU in 7.5 s of wall time: more than two threads give, capped
    assert timer.stats().utilisation_pct == 100.0


def test_cuda_marks_wait_for_the_gpu_before_reading_their_events(monkeypatch):
    """torch's CUDA events refuse ``elapsed_time`` until both have completed; a busy GPU
    completes them only once the host waits for one recorded at or after them."""
    stream = []  # the events in the order they were recorded, on one stream

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            self.done = False

        def record(self) -> None:
            self.at = time.perf_counter()
            stream.append(self)

        def synchronize(self) -> None:
            for event in stream[: stream.index(self) + 1]:
                event.done = True

        def elapsed_time(self, end: Event) -> float:
            if not (self.done and end.done):
                raise RuntimeError("Both events must be completed before calculating elapsed time.")
            return 1e3 * (end.at - self.at)

    monkeypatch.setattr(timing.torch.cuda, "Event", Event)
    timer = timing.StepTimer(torch.device("cuda"), warmup_steps=1)
    for _ in range(3):
        timer.begin()
        timer.end(samples=2)
    assert len(timer.step_seconds()) == 2  # read with no synchronise from the caller
    stats = timer.stats()
    assert stats.steps == 2 and stats.samples == 4 and stats.seconds > 0


@pytest.mark.gpu
def test_cuda_utilisation_is_the_steps_share_of_the_window():
    device = torch.device("cuda")
    a = torch.randn(2048, 2048, device=device)
    timer = timing.StepTimer(device, warmup_steps=1)
    for _ in range(4):
        timer.begin()
        a @ a
        timer.end(samples=1)
        torch.cuda.synchronize(device)
        time.sleep(0.05)  # the GPU idles between steps: less than 100
    stats = timer.stats()
    assert 0 < stats.utilisation_pct < 100


@pytest.mark.gpu
def test_cuda_steps_are_timed_on_the_gpu_not_by_the_host_clock():
    """``torch.cuda._sleep`` queues a kernel that spins for a number of GPU cycles: the host
    returns at once, so only CUDA events see how long each step kept the GPU busy."""
    device = torch.device("cuda")
    cycles = 20_000_000  # about 10 ms at the clocks of current data-centre GPUs
    torch.cuda._sleep(cycles)  # warm-up: context, module load
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize(device)
    alone = time.perf_counter() - start  # one sleep, host clock around a synchronised call

    timer = timing.StepTimer(device, warmup_steps=1)
    host = []
    for _ in range(4):
        begun = time.perf_counter()
        timer.begin()
        torch.cuda._sleep(cycles)
        timer.end(samples=1)
        host.append(time.perf_counter() - begun)
    steps = timer.step_seconds()
    stats = timer.stats()
    assert len(steps) == 3
    for seconds in steps:
        assert seconds == pytest.approx(alone, rel=0.25)
    assert max(host[1:]) < 0.25 * min(steps)  # the host only queued the work
    assert stats.step_p50_ms == pytest.approx(1e3 * statistics.median(steps))
    # back to back on the GPU: the window is the three steps
    assert stats.seconds == pytest.approx(sum(steps), rel=0.05)


@pytest.mark.gpu
def test_cuda_probes_tell_a_host_bound_step_from_a_device_bound_one():
    """A step of one long kernel keeps the device busy after the host has issued it (a small
    share); a step the host paces (it sleeps between tiny kernels) keeps the device waiting (a
    share near 100); a step with ``.item()`` synchronises, so its probe is left out."""
    device = torch.device("cuda")
    x = torch.ones(8, device=device)
    torch.cuda._sleep(1000)
    shares = {}
    for name in ("device", "host", "synchronised"):
        timer = timing.StepTimer(device, warmup_steps=1, probe_every=2)
        for _ in range(7):
            timer.begin()
            if name == "device":
                torch.cuda._sleep(50_000_000)  # tens of milliseconds on the device
            else:
                for _ in range(20):
                    x.add_(1)
                    time.sleep(0.001)  # the host takes 20 ms to issue 20 microsecond kernels
                if name == "synchronised":
                    x.sum().item()
            timer.end(samples=1)
        assert len(timer.probes) == 3  # timed steps 0, 2 and 4 of 6
        shares[name] = timer.host_issue_pct()
    assert shares["device"] < 20 and shares["host"] > 90
    assert shares["synchronised"] is None


def test_a_cpu_timer_probes_nothing():
    """On a CPU the host is the device: no step is probed, and there is no host share."""
    timer = timing.StepTimer(torch.device("cpu"), warmup_steps=0, probe_every=1)
    for _ in range(3):
        timer.begin()
        timer.end(samples=1)
    assert timer.probes == [] and timer.host_issue_pct() is None
