"""The canary's plan, its cost (counted in the operations torch ran, not timed) and its figures:
each with its unit, rates consistent with the times and plausible for a CPU, the run's random
stream untouched; on a GPU also its GEMM and a host-to-device copy."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hpml.analysis.canary import MIB, describe, measure, plan
from hpml.names import CANARY_POINTS, unit_of

START, END = CANARY_POINTS

SMALL = {"gemm_n": 64, "copy_mib": 1}


class Counted(TorchDispatchMode):
    """Counts each GEMM and copy torch runs, by operand shape."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in ("mm", "copy_"):
            self.calls[(name, tuple(args[0].shape), str(args[1].device))] += 1
        return func(*args, **(kwargs or {}))


def test_a_cpu_run_plans_a_gemm_and_a_copy_and_a_gpu_run_also_its_own_two() -> None:
    cpu = plan("cpu", gemm_n=768, copy_mib=32)
    assert [(w.name, w.device, w.size, w.dtype) for w in cpu] == [
        ("cpu_gemm", "cpu", 768, "float32"),
        ("cpu_copy", "cpu", 32 * MIB, "float32"),
    ]
    assert cpu[0].work == 2 * 768**3  # FLOPs, 2 x multiply-accumulate
    assert cpu[1].work == 2 * 32 * MIB  # bytes read + written, as STREAM's copy counts
    gpu = plan("cuda", gemm_n=768, copy_mib=32, cuda_gemm_n=4096, h2d_mib=16)
    assert gpu[:2] == cpu
    assert [(w.name, w.device, w.size, w.dtype) for w in gpu[2:]] == [
        ("cuda_gemm", "cuda:0", 4096, "float16"),
        ("h2d_copy", "cuda:0", 16 * MIB, "uint8"),
    ]
    assert gpu[3].host_to_device and gpu[3].work == 16 * MIB  # bytes sent, once
    assert [w.name for w in plan("cuda:1", copy_mib=None, cuda_gemm_n=None)] == [
        "cpu_gemm",
        "h2d_copy",
    ]
    assert plan("cuda:1")[2].device == "cuda:1"
    assert describe(cpu, 3, 1) == (
        "cpu_gemm n=768 float32, cpu_copy 32 MiB; best of 3 after 1 warm-up"
    )
    assert describe(cpu, 3, 1, 0.06).endswith("best of 3 after 1 warm-up within 0.06 s")


def test_it_runs_exactly_the_planned_work_and_nothing_more() -> None:
    """Its cost is bounded by what it runs: warm-up + repeats GEMMs and copies of the planned
    sizes, and no other GEMM or copy."""
    workloads = plan("cpu", **SMALL)
    with Counted() as counted:
        reading = measure(workloads, repeats=3, warmup=2)
    copy_shape = (MIB // 4,)
    assert counted.calls == {("mm", (64, 64), "cpu"): 5, ("copy_", copy_shape, "cpu"): 5}
    assert [len(t.seconds) for t in reading.timings] == [3, 3]


def test_a_spent_budget_stops_each_workload_after_one_timed_call() -> None:
    """A loaded machine cannot make it cost much more than its budget: a workload whose share
    is spent times one call after its warm-up."""
    with Counted() as counted:
        reading = measure(plan("cpu", **SMALL), repeats=3, warmup=1, budget_s=1e-9)
    assert counted.calls == {("mm", (64, 64), "cpu"): 2, ("copy_", (MIB // 4,), "cpu"): 2}
    metrics = reading.metrics(START)
    assert metrics["canary/cpu_gemm_start_repeats_count"] == 1
    assert metrics["canary/cpu_copy_start_repeats_count"] == 1


def test_its_figures_carry_units_and_rates_that_match_its_times() -> None:
    began = time.perf_counter()
    reading = measure(plan("cpu", **SMALL), repeats=2, warmup=1)
    wall = time.perf_counter() - began
    metrics = reading.metrics(START)
    assert {name: unit_of(name) for name in metrics} == {
        "canary/threads_start_count": "count",
        "canary/cpu_gemm_start_ms": "ms",
        "canary/cpu_gemm_start_flops_per_s": "flops_per_s",
        "canary/cpu_copy_start_ms": "ms",
        "canary/cpu_copy_start_bytes_per_s": "bytes_per_s",
        "canary/cpu_gemm_start_repeats_count": "count",
        "canary/cpu_copy_start_repeats_count": "count",
    }
    assert metrics["canary/cpu_gemm_start_repeats_count"] == 2
    assert metrics["canary/threads_start_count"] == torch.get_num_threads()
    gemm, copy = reading.timings
    assert metrics["canary/cpu_gemm_start_ms"] == min(gemm.seconds) * 1e3
    flops = metrics["canary/cpu_gemm_start_flops_per_s"]
    assert flops * metrics["canary/cpu_gemm_start_ms"] / 1e3 == pytest.approx(2 * 64**3)
    copied = metrics["canary/cpu_copy_start_bytes_per_s"]
    assert copied * metrics["canary/cpu_copy_start_ms"] / 1e3 == pytest.approx(2 * MIB)
    # plausible: no CPU computes 100 TFLOP/s in fp32 or copies 10 TB/s, and the 3 calls of
    # each (warm-up and repeats), each at least as long as the best, fit in the wall time
    assert flops < 1e14 and copied < 1e13
    assert 3 * (min(gemm.seconds) + min(copy.seconds)) < wall
    assert set(reading.metrics(END)) == {n.replace("_start_", "_end_") for n in metrics}


def test_the_runs_random_stream_is_the_same_with_and_without_it() -> None:
    torch.manual_seed(7)
    without = torch.rand(4)
    torch.manual_seed(7)
    measure(plan("cpu", **SMALL), repeats=1, warmup=0)
    assert torch.equal(torch.rand(4), without)


def test_it_refuses_to_time_no_repeat() -> None:
    with pytest.raises(ValueError, match="repeats=0"):
        measure(plan("cpu", **SMALL), repeats=0)


@pytest.mark.gpu
def test_on_a_gpu_it_times_its_gemm_and_a_host_to_device_copy() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    workloads = plan(device, gemm_n=64, copy_mib=1, cuda_gemm_n=2048, h2d_mib=8)
    torch.cuda.manual_seed(7)
    without = torch.rand(4, device=device)
    torch.cuda.manual_seed(7)
    with Counted() as counted:
        reading = measure(workloads, repeats=3, warmup=1)
    assert torch.equal(torch.rand(4, device=device), without)
    assert counted.calls[("mm", (2048, 2048), str(device))] == 4
    assert counted.calls[("copy_", (8 * MIB,), str(device))] == 4
    metrics = reading.metrics(START)
    flops = metrics["canary/cuda_gemm_start_flops_per_s"]
    sent = metrics["canary/h2d_copy_start_bytes_per_s"]
    # fp16 GEMM: 1 TFLOP/s to 10 PFLOP/s; a PCIe or NVLink-C2C copy: 1 GB/s to 1 TB/s
    assert 1e12 < flops < 1e16 and 1e9 < sent < 1e12
    assert sent * metrics["canary/h2d_copy_start_ms"] / 1e3 == pytest.approx(8 * MIB)
