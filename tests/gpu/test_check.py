"""The GPU check on a machine without CUDA: its refusal, budgets, summary and packing."""

from __future__ import annotations

import itertools
import signal
import sys
import tarfile
import time

import pytest
import torch

from hpml.bench.harness import Ratio, Settings, run_case, write_json
from hpml.gpu import check
from hpml.gpu.bench_rows import bench_row, overhead_rows
from hpml.gpu.parts import CALLS, Part, parts
from hpml.gpu.rows import (
    Row,
    Store,
    comparisons,
    default_rows,
    nvtx_rows,
    nvtx_torch_rows,
    pytest_rows,
    ran,
)
from hpml.gpu.study_rows import counted_rows, study2_rows


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_check_without_cuda_refuses_in_one_line_before_installing(tmp_path, capsys):
    out, work, kit = tmp_path / "out", tmp_path / "work", tmp_path / "kit"
    status = check.main(["--out", str(out), "--work", str(work), "--kit", str(kit)])
    lines = capsys.readouterr().out.splitlines()
    assert status != 0
    assert len(lines) == 1 and lines[0].startswith("hpml:") and "CUDA" in lines[0]
    assert not out.exists() and not work.exists()  # nothing installed, nothing written


def test_a_part_is_cut_at_its_budget_and_its_next_command_not_started(tmp_path):
    sleep = (sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)")
    echo = (sys.executable, "-c", "print('second')")
    part = Part("slow", 1.5, (sleep, echo), lambda store: [])
    started = time.monotonic()
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a shell's background job
    try:
        output = check.run_part(part, {}, {}, time.monotonic() + 60, tmp_path, min_s=1.0)
    finally:
        signal.signal(signal.SIGINT, before)
    assert time.monotonic() - started < 15  # interrupted, not waited for
    assert "KeyboardInterrupt" in output  # SIGINT reached it: not killed after the grace
    assert "started" in output and "cut at its budget" in output
    assert "second" not in output.replace("print('second')", "")
    assert "[not run: the part's budget was spent]" in output
    assert "started" in (tmp_path / "slow.log").read_text()


def test_comparisons_read_ratio_interval_and_verdict_as_hpml_logs_them():
    metrics = {
        "prune/speedup_b1_x": 2.0,
        "prune/speedup_b1_ci_low_x": 1.5,
        "prune/speedup_b1_ci_high_x": 2.5,
        "prune/speedup_b1_rounds_count": 9,
        "compile/speedup_b64_x": 1.02,
        "compile/speedup_b64_ci_low_x": 0.97,
        "compile/speedup_b64_ci_high_x": 1.08,
        "compile/speedup_b64_rounds_count": 9,
        "quant/speedup_b1_x": 0.5,
        "quant/speedup_b1_ci_low_x": 0.4,
        "quant/speedup_b1_ci_high_x": 0.6,
        "quant/speedup_b1_rounds_count": 9,
    }
    found = comparisons(metrics, {"hpml.compare.quant.devices": "cuda:0 vs cpu"})
    assert found == [
        "compile/speedup_b64 1.02x [0.97, 1.08] (n=9, within noise)",
        "prune/speedup_b1 2.00x [1.50, 2.50] (n=9, faster)",
        "quant/speedup_b1 0.50x [0.40, 0.60] (n=9, slower, cuda:0 vs cpu)",
    ]


def test_summary_and_packs_are_written_for_what_ran(tmp_path):
    done = {"default": [Row("default run, 32-true", "yes", "1,000.0 samples/s")]}
    check.write_summary(tmp_path, {"device": "NVIDIA H100", "torch": "2.11.0"}, done)
    text = (tmp_path / "summary.md").read_text()
    assert "| default run, 32-true | yes | 1,000.0 samples/s |" in text
    assert "NVIDIA H100" in text.splitlines()[0]
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "report.html").write_text("<html></html>")
    (reports / "big.csv").write_bytes(b"0" * (4 * 2**20 + 1))  # over the way back's share
    (reports / "model.pt").write_bytes(b"0")
    check.pack(tmp_path, "reports.tar.gz", [reports], check.REPORT_SUFFIXES)
    with tarfile.open(tmp_path / "reports.tar.gz") as tar:
        assert tar.getnames() == ["reports/report.html"]


def test_parts_run_hpml_commands_in_priority_order_with_budgets_under_the_check():
    """The network measured first (data placement, hpml against a bare loop, the benches sized
    for the device), then the counters and the diagnoses; each call's parts fit its budget."""
    found = parts()
    names = [p.name for p in found]
    assert names[:4] == ["default", "overhead", "speed", "prune"]
    for command in (c for part in found for c in part.commands if "hpml.train" in c):
        overrides = command[command.index("hpml.train") + 1 :]
        assert "-m" not in overrides[1:]  # Hydra 1.3 refuses overrides after -m
    assert all(p.budget_s > 0 for p in found)
    budgets = {p.name: p.budget_s for p in found}
    first, second = CALLS["first"], CALLS["second"]
    assert first[1] <= 540 and second[1] <= 240  # a lease's two calls
    assert set(first[0]) | set(second[0]) <= set(names)
    assert sum(budgets[n] for n in first[0]) <= first[1] + 10  # the last part may be cut
    assert second[0][-1] == "nvtx_torch"  # the diagnosis after every path of hpml's


def test_store_of_keeps_trained_runs_not_sweep_parents(client):
    experiment = client.create_experiment("gpu_default")
    parent = client.create_run(experiment).info.run_id
    children = [
        client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
        for _ in range(2)
    ]
    single = client.create_run(experiment).info.run_id
    store = Store(check.read_store(client.tracking_uri), ".")
    assert {r.info.run_id for r in store.of("gpu_default")} == {*children, single}
    assert store.of("gpu_study2") == []


def test_pytest_row_reads_the_quiet_summary_and_refuses_a_skip():
    quiet = "................\n16 passed, 32 warnings in 50.02s\n\n[exit 0]"
    framed = "===== 14 passed, 2 skipped in 3.10s =====\n"
    assert pytest_rows(Store({}, ".", {"pytest": quiet}))[0] == Row(
        "pytest -m gpu", "yes", "16 passed, 32 warnings in 50.02s"
    )
    assert pytest_rows(Store({}, ".", {"pytest": framed}))[0].ran == "failed"


def test_bench_row_reads_the_bench_results_of_this_check_with_goal_and_interval(tmp_path):
    variants = {"fused": lambda: {"samples_per_s": 3.0}, "serial": lambda: {"samples_per_s": 2.0}}
    ratio = Ratio("VAE N=8 samples/s", "samples_per_s", "samples/s", "fused", "serial", goal=2.4)
    write_json(run_case("fuse", variants, [ratio], Settings(rounds=3)), tmp_path)
    store = Store({}, ".", {}, str(tmp_path), since=time.time() - 60)
    row = bench_row(store, "fuse", "fused vs serial", lambda metric: "N=8" in metric)
    assert row.ran == "yes"
    assert row.measured.startswith("VAE N=8 samples/s: 1.50x [1.50, 1.50] (n=3, ")
    assert row.measured.endswith("goal 2.4: not met)")
    later = Store({}, ".", {}, str(tmp_path), since=time.time() + 60)  # an earlier check's file
    assert bench_row(later, "fuse", "fused vs serial", bool).ran == "no"


def test_study2_without_a_profiled_run_says_it_failed():
    """No run logged kernel shares: the summary names the failure beside the report's row."""
    rows = study2_rows(Store({}, ".", {"study2": ""}))
    assert rows == [
        Row("study 2 execution summary", "failed", "no profiled run logged"),
        Row("study 2 report (time-share plot)", "no", "0 runs, 0 failed"),
    ]


def test_runs_left_running_by_a_cut_process_end_killed_and_read_as_cut(client):
    """Nsight Compute stops its target itself when the part is cut, so the run cannot end its
    own MLflow run: the check ends it, and only it."""
    experiment = client.create_experiment("gpu_nvtx")
    left = client.create_run(experiment).info.run_id
    done = client.create_run(experiment).info.run_id
    client.set_terminated(done, "FINISHED")
    assert check.close_left_running(client.tracking_uri) == [left]
    assert client.get_run(left).info.status == "KILLED"
    assert client.get_run(left).data.tags["hpml.gpu_check"] == "left RUNNING by its cut process"
    assert client.get_run(done).info.status == "FINISHED"
    store = Store(check.read_store(client.tracking_uri), ".")
    assert sorted(ran(run) for run in store.of("gpu_nvtx")) == ["cut", "yes"]
    assert check.close_left_running(client.tracking_uri) == []


NCU_OUT = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "sm80_xmma_fprop_implicit_gemm_f32f32" - 0: 0%....50%....100% - 1 pass
  sm80_xmma_fprop_implicit_gemm_f32f32 (32, 2, 1)x(128, 1, 1), Context 1, Stream 7
    NVTX Push/Pop Stack for Thread 4242:
      <0,hpml/forward>
"""


def test_nvtx_row_names_the_ranges_kernel_and_how_the_run_ended(client):
    experiment = client.create_experiment("gpu_nvtx")
    run = client.create_run(experiment).info.run_id

    def row() -> Row:
        store = Store(check.read_store(client.tracking_uri), ".", {"nvtx": NCU_OUT})
        return nvtx_rows(store)[0]

    assert row().ran == "partly" and row().measured.endswith("the run RUNNING")
    client.set_terminated(run, "FINISHED")
    assert row() == Row(
        "NVTX ranges (Nsight Compute, profile=nvtx)",
        "yes",
        "hpml/forward around sm80_xmma_fprop_implicit_gemm_f32f32; the run FINISHED",
    )
    assert nvtx_rows(Store({}, ".", {"nvtx": "==PROF== Connected"}))[0].ran == "no"


def test_profile_torch_under_nsight_row_says_how_the_run_ended_and_what_cupti_said(client):
    assert nvtx_torch_rows(Store({}, ".", {}))[0].ran == "no"
    run = client.create_run(client.create_experiment("gpu_nvtx_torch")).info.run_id
    client.set_terminated(run, "KILLED")
    said = "ERROR: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED\n[cut at its budget of 30 s]"
    store = Store(check.read_store(client.tracking_uri), ".", {"nvtx_torch": said})
    measured = nvtx_torch_rows(store)[0].measured
    cupti = "ERROR: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
    assert measured == f"the run KILLED; CUPTI said: {cupti}"


def test_every_hpml_run_of_the_check_is_a_config_hpml_accepts(composed):
    """A misspelt option would only show on the GPU's few minutes: each run's overrides (every
    value of a sweep's lists) are composed and judged here, as ``train`` judges them first."""
    from hpml.train import check_config

    runs = ("hpml.train", "hpml.profile.ncu")  # the ncu command trains the overrides after --
    commands = [c for part in parts() for c in part.commands if set(runs) & set(c)]
    judged = 0
    for command in commands:
        start = command.index("--" if "hpml.profile.ncu" in command else "hpml.train") + 1
        overrides = [o for o in command[start:] if o != "-m"]
        values = [(o.partition("=")[0], o.partition("=")[2].split(",")) for o in overrides]
        for job in itertools.product(*([f"{key}={v}" for v in vs] for key, vs in values)):
            check_config(composed(list(job)))
            judged += 1
    assert judged >= len(commands) + 2 + 7  # precisions and learning rates one by one


def test_default_row_names_mfu_with_the_peaks_it_is_against(client):
    """MFU beside the peaks it is against (the measured one's dtype named), and the run's data
    wait per stage with what bounded it, each as the run logged it."""
    run = client.create_run(client.create_experiment("gpu_default")).info.run_id
    client.log_param(run, "trainer.precision", "bf16-mixed")
    client.log_param(run, "data.chosen.placement", "device")
    for name, value in {
        "train/throughput_samples_per_s": 3500.0,
        "train/mfu_table_pct": 0.6,
        "train/mfu_measured_pct": 1.1,
        "mfu/peak_table_flops_per_s": 989.4e12,
        "mfu/peak_measured_flops_per_s": 770e12,
        "train/data_wait_pct": 1.25,
        "val/data_wait_pct": 3.5,
        "train/host_issue_pct": 97.0,
    }.items():
        client.log_metric(run, name, value)
    client.set_tag(run, "hpml.mfu.peak_measured_dtype", "bf16")
    client.set_tag(run, "hpml.bound.train", "host")
    client.set_tag(run, "hpml.bound.train.why", "the host takes 97% of ...")
    client.set_terminated(run, "FINISHED")
    row, *others = default_rows(Store(check.read_store(client.tracking_uri), "."))
    assert row.ran == "yes"
    assert (
        "MFU 0.6% of datasheet (989.4 TFLOP/s), 1.1% of measured peak (770.0 TFLOP/s, taken in "
        "bf16)" in row.measured
    )
    [bound] = [r for r in others if r.path == "data and bound, bf16-mixed"]
    assert bound.measured == (
        "data.chosen.placement=device; data wait train 1.2%, val 3.5%, test n/a; host issue 97%; "
        "train bound by host (the host takes 97% of ...)"
    )


def test_overhead_rows_give_each_ratio_and_hpmls_cost_a_step(tmp_path):
    variants = {"hpml": lambda: {"rate": 95.0}, "loop": lambda: {"rate": 100.0}}
    ratio = Ratio("VGG16 224px b64 bf16", "rate", "samples/s", "hpml", "loop", goal=0.95)
    result = run_case("overhead", variants, [ratio], Settings(rounds=2))
    result.notes["overhead_us_per_step"] = {"VGG11-CIFAR b64 bf16": 1234.4}
    write_json(result, tmp_path)
    ratios, cost = overhead_rows(Store({}, ".", {}, str(tmp_path), since=time.time() - 60))
    assert ratios.measured.startswith("VGG16 224px b64 bf16: 0.95x [0.95, 0.95] (n=2, ")
    assert ratios.measured.endswith("goal 0.95: met)")
    assert cost == Row(
        "hpml's own work per step (bench overhead)", "yes", "VGG11-CIFAR b64 bf16: 1,234 us a step"
    )


def test_counted_rows_put_the_counted_point_beside_the_analytic_one(client):
    run = client.create_run(client.create_experiment("gpu_counted")).info.run_id
    client.set_tag(run, "hpml.choice.model", "vgg11")
    client.set_tag(run, "hpml.ncu.cache_control", "all")
    client.set_tag(run, "hpml.ncu.clock_control", "base")
    for name, value in {
        "ncu/fwd_intensity_flop_per_byte": 13.4,
        "ncu/fwd_flops": 2.0e12,
        "ncu/fwd_kernel_time_s": 0.5,
        "ncu/fwd_dram_bytes": 1.5e11,
        "roofline/intensity_flop_per_byte": 92.1,
    }.items():
        client.log_metric(run, name, value)
    client.set_terminated(run, "FINISHED")
    store = Store(check.read_store(client.tracking_uri), ".", {"counted": "wrote roofline.png"})
    row, plot = counted_rows(store)
    assert row == Row(
        "counted roofline, vgg11",
        "yes",
        "counted 13.4 FLOP/B at 4.0 TFLOP/s (its kernels' time), analytic 92.1 FLOP/B; DRAM "
        "150,000,000,000 bytes; cache all, clock base",
    )
    assert plot.ran == "yes"
