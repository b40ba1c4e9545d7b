"""profile=torch end to end in-process: a real trace, tables and a summary that sums to 100%;
on CUDA, device time in its categories and tables, and NVTX ranges around the step regions."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from hpml.analysis.profile_summary import CUDA_CATEGORIES, breakdown, shares_pct, summarise_events
from hpml.train import train
from tests.conftest import QUICK, QUICK_BATCH

REGIONS = {"hpml/data", "hpml/forward", "hpml/zero_grad", "hpml/backward", "hpml/optimizer_step"}
STEP = ["hpml/forward", "hpml/zero_grad", "hpml/backward", "hpml/optimizer_step", "hpml/data"]
PROFILED_SAMPLES = 512
PROFILED = [*QUICK, f"data.train_samples={PROFILED_SAMPLES}", "profile=torch"]
PROFILED += ["profile.skip_first=2", "profile.active=2"]


def test_breakdown_gives_each_instant_to_the_highest_priority_category():
    window = (0.0, 10.0)
    seconds = breakdown(window, [("kernel", [(1, 3)]), ("cpu", [(2, 6), (9, 12)])])
    assert seconds == {"kernel": 2.0, "cpu": 4.0, "other": 4.0}  # cpu loses 2..3 to kernel
    assert sum(shares_pct(seconds).values()) == pytest.approx(100.0)


def event(name: str, start: float, end: float, device: str = "CPU", annotation: bool = False):
    """A profiler event as ``profiler.events()`` gives it, with what the summary reads."""
    return SimpleNamespace(
        name=name,
        time_range=SimpleNamespace(start=start, end=end),
        device_type=f"DeviceType.{device}",
        is_user_annotation=annotation,
    )


def test_cuda_summary_counts_device_work_not_the_device_copies_of_ranges():
    events = [
        event("ProfilerStep#3", 0, 100, annotation=True),
        event("hpml/data", 0, 20, annotation=True),
        event("cudaMemcpyAsync", 5, 15),
        event("aten::addmm", 30, 50),
        event("cudaLaunchKernel", 32, 34),
        # the device timeline: the step and region ranges again, from their first work to last
        event("ProfilerStep#3", 10, 110, "CUDA", annotation=True),
        event("hpml/data", 10, 16, "CUDA", annotation=True),
        event("hpml/forward", 40, 90, "CUDA", annotation=True),
        event("Memcpy HtoD (Pageable -> Device)", 10, 16, "CUDA"),
        event("sgemm_kernel", 40, 60, "CUDA"),
        event("Memset (Device)", 50, 52, "CUDA"),  # under a kernel: the kernel's instant
        event("relu_kernel", 80, 90, "CUDA"),
    ]
    # the window runs to the device's end of the step (110); each instant to the highest
    # priority: kernels 40-60 and 80-90, the copy 10-16, API calls 5-10 and 32-34, waiting for
    # data 0-5 and 16-20, the operator 30-32 and 34-40, nothing 20-30, 60-80 and 90-110
    seconds = {
        "kernel": 30,
        "memcpy": 6,
        "memset": 0,
        "runtime": 7,
        "data_loading": 9,
        "cpu_exec": 8,
        "other": 50,
    }
    expected = {name: 100 * value / 110 for name, value in seconds.items()}
    assert summarise_events(events, cuda=True) == pytest.approx(expected)


def test_profiled_run_stores_trace_tables_and_summary(composed, client, root):
    cfg = composed(
        [
            "model=vae",
            *QUICK,
            "data.train_samples=512",
            "profile=torch",
            "profile.skip_first=2",
            "profile.active=2",
        ]
    )
    metrics = train(cfg)
    assert metrics["train/throughput_samples_per_s"] > 0  # normal metrics still logged
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]

    shares = {k: v for k, v in run.data.metrics.items() if k.startswith("profile/")}
    assert set(shares) == {
        "profile/data_loading_pct",
        "profile/operator_compute_pct",
        "profile/framework_overhead_pct",
        "profile/other_pct",
    }
    assert sum(shares.values()) == pytest.approx(100.0, abs=0.01)
    assert shares["profile/operator_compute_pct"] > 0

    files = {a.path for a in client.list_artifacts(run.info.run_id, "profiler/window_0")}
    assert {
        f"profiler/window_0/{name}"
        for name in (
            "trace.json",
            "ops.csv",
            "top_by_self_cpu_time.txt",
            "top_by_memory.txt",
            "top_by_input_shape.txt",
            "ops_by_input_shape.csv",
            "execution_summary.txt",
        )
    } <= files
    path = client.download_artifacts(run.info.run_id, "profiler/window_0/trace.json", str(root))
    trace = json.loads(Path(path).read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert names >= REGIONS
    assert sum(1 for name in names if str(name).startswith("ProfilerStep")) >= 1
    ops = Path(
        client.download_artifacts(run.info.run_id, "profiler/window_0/ops.csv", str(root))
    ).read_text()
    assert ops.startswith("name,input_shapes,count,self_cpu_time_total_us")
    assert "aten::addmm" in ops  # the VAE's Linear layers ran and were recorded


def test_profiled_run_without_trace_keeps_tables_and_summary(composed, client):
    """profile.trace=false (the GPU check's setting): no trace artifact, the rest as before."""
    overrides = ["profile.skip_first=2", "profile.active=2", "profile.trace=false"]
    cfg = composed(["model=vae", *QUICK, "data.train_samples=512", "profile=torch", *overrides])
    train(cfg)
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    files = {a.path for a in client.list_artifacts(run.info.run_id, "profiler/window_0")}
    assert "profiler/window_0/trace.json" not in files
    assert {"profiler/window_0/ops.csv", "profiler/window_0/execution_summary.txt"} <= files
    assert run.data.metrics["profile/operator_compute_pct"] > 0


def test_lightning_simple_profiler_report_is_stored(composed, client):
    cfg = composed(["model=vae", *QUICK, "profile=simple"])
    train(cfg)
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    paths = {a.path for a in client.list_artifacts(run.info.run_id, "profiler")}
    assert "profiler/lightning_fit.txt" in paths


def _union_in(spans: list[tuple[float, float]], window: tuple[float, float]) -> float:
    """Length of the union of ``spans`` inside ``window``."""
    total, reach = 0.0, window[0]
    for start, end in sorted(spans):
        start, end = max(start, reach), min(end, window[1])
        if end > start:
            total, reach = total + end - start, end
    return total


@pytest.mark.gpu
def test_cuda_profile_has_kernel_and_copy_time_and_device_columns(composed, client, root):
    train(composed(["trainer=gpu", "model=vae", *PROFILED]))
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    shares = {k: v for k, v in run.data.metrics.items() if k.startswith("profile/")}
    assert set(shares) == {f"profile/{name}_pct" for name in (*CUDA_CATEGORIES, "other")}
    assert sum(shares.values()) == pytest.approx(100.0, abs=0.01)
    assert shares["profile/kernel_pct"] > 0
    assert shares["profile/memcpy_pct"] > 0  # every batch is copied from the host

    def artifact(name: str) -> Path:
        return Path(
            client.download_artifacts(run.info.run_id, f"profiler/window_0/{name}", str(root))
        )

    # the kernel share again, from the trace file: kernels come first, so their share is the
    # union of the kernels' spans over the steps' span (host and device copies of the steps)
    trace = json.loads(artifact("trace.json").read_text())["traceEvents"]
    spans = [e for e in trace if e.get("ph") == "X" and "dur" in e]

    def of(test) -> list[tuple[float, float]]:
        return [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in spans if test(e)]

    steps = of(lambda e: str(e.get("name", "")).startswith("ProfilerStep"))
    window = (min(s for s, _ in steps), max(e for _, e in steps))
    kernels = of(lambda e: e.get("cat") == "kernel")
    copies = of(lambda e: e.get("cat") == "gpu_memcpy")
    assert kernels and _union_in(copies, window) > 0
    kernel_pct = 100 * _union_in(kernels, window) / (window[1] - window[0])
    assert shares["profile/kernel_pct"] == pytest.approx(kernel_pct, abs=0.5)

    files = {a.path for a in client.list_artifacts(run.info.run_id, "profiler/window_0")}
    for table in ("top_by_self_device_time.txt", "top_by_device_memory.txt"):
        assert f"profiler/window_0/{table}" in files
    with artifact("ops.csv").open() as file:
        rows = list(csv.DictReader(file))
    addmm = [r for r in rows if r["name"] == "aten::addmm"]  # the VAE's Linear layers
    assert addmm and float(addmm[0]["device_time_total_us"]) > 0
    assert sum(float(r["self_device_time_total_us"]) for r in rows) > 0


@pytest.fixture
def nvtx_calls(monkeypatch) -> list[tuple[str, str | None, object, bool]]:
    """torch's NVTX push and pop calls during the test, recorded, not replaced: (kind, name,
    what NVTX answered, whether torch.profiler was recording then)."""
    calls: list[tuple[str, str | None, object, bool]] = []
    push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    profiling = torch._C._autograd._profiler_enabled

    def recorded_push(msg: str) -> object:
        calls.append(("push", msg, push(msg), profiling()))
        return calls[-1][2]

    def recorded_pop() -> object:
        calls.append(("pop", None, pop(), profiling()))
        return calls[-1][2]

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", recorded_push)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", recorded_pop)
    return calls


def assert_step_ranges(calls: list[tuple[str, str | None, object, bool]], steps: int) -> None:
    """NVTX ranges one after another, each closed before the next, every step's regions."""
    depth, deepest = 0, 0
    for kind, _, answer, _ in calls:
        assert isinstance(answer, int)  # torch's own NVTX call ran
        depth += 1 if kind == "push" else -1
        assert depth >= 0
        deepest = max(deepest, depth)
    assert depth == 0 and deepest == 1
    pushed = [name for kind, name, _, _ in calls if kind == "push"]
    assert pushed == ["hpml/data", *STEP * steps]


def test_profile_nvtx_ranges_every_step_with_no_profiler_running(composed, client, nvtx_calls):
    """``profile=nvtx``: the step regions as NVTX ranges on the CPU too, and torch.profiler
    never on, so an Nsight tool attached to the run is CUDA's only tracer."""
    samples = 256
    train(composed(["model=vae", *QUICK, f"data.train_samples={samples}", "profile=nvtx"]))
    assert_step_ranges(nvtx_calls, samples // QUICK_BATCH)
    assert not any(profiling for *_, profiling in nvtx_calls)
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    assert run.info.status == "FINISHED"
    assert not client.list_artifacts(run.info.run_id, "profiler")
    assert not any(key.startswith("profile/") for key in run.data.metrics)


@pytest.mark.gpu
def test_step_regions_push_and_pop_nvtx_ranges_on_cuda(composed, nvtx_calls):
    """The calls reach torch's NVTX functions, which still run. What ``range_push`` returns is
    the range depth only while a tool such as Nsight Systems is attached (without one, NVTX
    answers -2), so the nesting is counted from the calls."""
    train(composed(["trainer=gpu", "model=vae", *PROFILED]))
    assert_step_ranges(nvtx_calls, PROFILED_SAMPLES // QUICK_BATCH)  # one epoch
