"""The canary: a fixed reference workload timed on the machine a run runs on, so that a run
can tell afterwards whether its machine ran slow.

Every run times the same small pieces of work: an fp32 GEMM and a memory copy on the CPU, and
on a GPU also an fp16 GEMM and a copy from pinned host memory to the device. Each is the best
of a few repeats after a warm-up one (other load only ever slows a repeat down), within a time
budget, at torch's current thread count. Its operands come from generators of its own, inside
``torch.random.fork_rng``: the run draws the same random numbers with it as without it.
Usable from plain PyTorch: :func:`plan`, then :func:`measure`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from hpml.names import BYTES_PER_S, COUNT, FLOPS_PER_S, MS, canary, canary_threads

GEMM, COPY = "gemm", "copy"
MIB = 1 << 20
SEED = 0  # the operands' seed: the same numbers every run


@dataclass(frozen=True)
class Workload:
    """One piece of reference work: ``name`` (``cpu_gemm``, ``cpu_copy``, ``cuda_gemm``,
    ``h2d_copy``), a ``kind`` (GEMM or copy), the device it runs on (a host-to-device copy: the
    device it copies to), its size (a GEMM's ``n``: n x n by n x n; a copy's tensor bytes) and
    dtype."""

    name: str
    kind: str
    device: str
    size: int
    dtype: str

    @property
    def host_to_device(self) -> bool:
        return self.kind == COPY and self.device != "cpu"

    @property
    def work(self) -> float:
        """FLOPs of a GEMM (2 n^3, 2 x multiply-accumulate); bytes a copy moves: read + written
        for a copy within memory (STREAM's "copy"), the bytes sent for a host-to-device copy."""
        if self.kind == GEMM:
            return 2.0 * self.size**3
        return float(self.size if self.host_to_device else 2 * self.size)

    @property
    def rate_unit(self) -> str:
        return FLOPS_PER_S if self.kind == GEMM else BYTES_PER_S

    def describe(self) -> str:
        """``cpu_gemm n=512 float32``, ``cpu_copy 16 MiB``: what a run's plan tag lists."""
        if self.kind == GEMM:
            return f"{self.name} n={self.size} {self.dtype}"
        return f"{self.name} {self.size / MIB:g} MiB"


def plan(
    device: torch.device | str,
    gemm_n: int | None = 512,
    copy_mib: float | None = 16,
    cuda_gemm_n: int | None = 4096,
    h2d_mib: float | None = 16,
) -> list[Workload]:
    """The workloads a run on ``device`` times: on any device the CPU's GEMM and copy, on a CUDA
    device also its GEMM and a host-to-device copy; a size of None leaves that one out."""
    device = torch.device(device)
    found = []
    if gemm_n:
        found.append(Workload("cpu_gemm", GEMM, "cpu", gemm_n, "float32"))
    if copy_mib:
        found.append(Workload("cpu_copy", COPY, "cpu", round(copy_mib * MIB), "float32"))
    if device.type == "cuda":
        where = str(device if device.index is not None else torch.device("cuda", 0))
        if cuda_gemm_n:
            found.append(Workload("cuda_gemm", GEMM, where, cuda_gemm_n, "float16"))
        if h2d_mib:
            found.append(Workload("h2d_copy", COPY, where, round(h2d_mib * MIB), "uint8"))
    return found


@dataclass(frozen=True)
class Timing:
    """A workload's timed repeats (seconds, warm-up left out) and the best of them."""

    workload: Workload
    seconds: tuple[float, ...]

    @property
    def best_s(self) -> float:
        return min(self.seconds)

    @property
    def rate(self) -> float:
        """The workload's FLOP/s or bytes/s at its best repeat."""
        return self.workload.work / self.best_s


@dataclass(frozen=True)
class Reading:
    """One timing of every planned workload, at ``threads`` torch threads."""

    timings: tuple[Timing, ...]
    threads: int

    def metrics(self, when: str) -> dict[str, float]:
        """``canary/<workload>_<when>_ms`` (the best repeat), its rate
        (``_flops_per_s``, ``_bytes_per_s``), the repeats it is the best of
        (``canary/<workload>_<when>_repeats_count``) and ``canary/threads_<when>_count``."""
        found = {canary_threads(when): float(self.threads)}
        for t in self.timings:
            found[canary(t.workload.name, when, MS)] = t.best_s * 1e3
            found[canary(t.workload.name, when, t.workload.rate_unit)] = t.rate
            found[canary(t.workload.name, f"{when}_repeats", COUNT)] = float(len(t.seconds))
        return found


def describe(
    workloads: Sequence[Workload], repeats: int, warmup: int, budget_s: float | None = None
) -> str:
    """``cpu_gemm n=512 float32, cpu_copy 16 MiB; best of 3 after 1 warm-up within 0.06 s``:
    the plan, as its tag names it; runs with equal plans time the same work alike."""
    listed = ", ".join(w.describe() for w in workloads)
    within = f" within {budget_s:g} s" if budget_s is not None else ""
    return f"{listed}; best of {repeats} after {warmup} warm-up{within}"


def _operation(workload: Workload) -> Callable[[], object]:
    """The workload as a call on operands made once (from a generator of its own): timing
    it times the work alone, not allocation."""
    device = torch.device(workload.device)
    if workload.kind == GEMM:
        generator = torch.Generator(device=device).manual_seed(SEED)
        kind = getattr(torch, workload.dtype)
        n = workload.size
        a = torch.rand(n, n, device=device, dtype=kind, generator=generator)
        b = torch.rand(n, n, device=device, dtype=kind, generator=generator)
        out = torch.empty(n, n, device=device, dtype=kind)
        return lambda: torch.mm(a, b, out=out)
    if workload.host_to_device:
        source = torch.ones(workload.size, dtype=torch.uint8, pin_memory=True)
        target = torch.empty(workload.size, dtype=torch.uint8, device=device)
        return lambda: target.copy_(source, non_blocking=True)
    source = torch.ones(workload.size // 4, dtype=torch.float32)
    target = torch.empty_like(source)
    return lambda: target.copy_(source)


def _seconds(operation: Callable[[], object], device: torch.device) -> float:
    """One call's seconds: the host clock on the CPU, CUDA events around it on a GPU (the
    device's time, not the host's to issue it)."""
    if device.type != "cuda":
        start = time.perf_counter()
        operation()
        return time.perf_counter() - start
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    operation()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3


@contextlib.contextmanager
def _quiet(workloads: Sequence[Workload]) -> Iterator[None]:
    """No autograd, no autocast the run is in, and every RNG the canary could touch restored."""
    cuda = sorted({w.device for w in workloads if w.device != "cpu"})
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[torch.device(d) for d in cuda]))
        stack.enter_context(torch.no_grad())
        for kind in ("cpu", *(["cuda"] if cuda else [])):
            stack.enter_context(torch.autocast(kind, enabled=False))
        yield


def measure(
    workloads: Sequence[Workload], repeats: int = 3, warmup: int = 1, budget_s: float | None = None
) -> Reading:
    """Time each workload ``warmup`` times untimed, then up to ``repeats`` times; each
    workload's operands are freed before the next one's are made.

    Args:
        budget_s: the seconds all workloads may take together, an equal share each: a workload
            whose share is spent (making its operands and its warm-up count) stops repeating
            after its first timed call, so a loaded machine cannot make the canary cost much
            more (one call per workload at most); None: every repeat.
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: the canary needs at least one timed repeat")
    share = None if budget_s is None else budget_s / max(len(workloads), 1)
    timings = []
    with _quiet(workloads):
        for workload in workloads:
            device = torch.device(workload.device)
            on = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
            began = time.perf_counter()
            with on:
                operation = _operation(workload)
                for _ in range(warmup):
                    _seconds(operation, device)
                seconds = [_seconds(operation, device)]
                while len(seconds) < repeats and (
                    share is None or time.perf_counter() - began < share
                ):
                    seconds.append(_seconds(operation, device))
            del operation
            timings.append(Timing(workload, tuple(seconds)))
    return Reading(tuple(timings), torch.get_num_threads())
