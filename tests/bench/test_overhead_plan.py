"""The ``overhead`` case's plan (what it times on which device, with which goal), its configs as
hpml judges them, the bare loop on the batches hpml holds, and hpml's cost a step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hpml.bench import overhead
from hpml.bench.harness import Settings, run_case

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_a_cpu_times_the_default_model_and_a_gpu_what_it_is_for():
    [cpu] = overhead.configurations(CPU)
    assert (cpu.batch, cpu.precision, cpu.goal, cpu.trainer) == (128, "32-true", 0.98, "cpu")
    assert [r.key for r in overhead.ratios(cpu, CPU)] == [
        overhead.THROUGHPUT,
        overhead.CPU_THROUGHPUT,
    ]
    large_bf16, large_fp32, small = overhead.configurations(CUDA)
    assert "model=vgg16_imagenet" in large_bf16.overrides and large_bf16.batch == 64
    assert (large_bf16.precision, large_fp32.precision) == ("bf16-mixed", "32-true")
    assert large_bf16.goal == large_fp32.goal == 0.95 and small.goal is None
    assert small.batch == 64 and "model=vgg11" in small.overrides
    [wall] = overhead.ratios(small, CUDA)  # on a GPU the wall clock alone
    assert wall.key == overhead.THROUGHPUT


@pytest.mark.parametrize("device", [CPU, CUDA], ids=["cpu", "cuda"])
def test_every_configuration_is_a_job_hpml_accepts(device, composed, root: Path):
    from hpml.train import check_config

    settings = Settings(rounds=1, steps=2, warmup=1)
    for config in overhead.configurations(device):
        jobs = overhead.overrides(settings, root, config)
        assert "data.placement=device" in jobs and f"trainer={config.trainer}" in jobs
        check_config(composed([o for o in jobs if not o.startswith("+callbacks.bench_cpu")]))


def test_the_bare_loop_trains_the_batches_hpml_holds(root: Path):
    """B on the CPU config, two timed steps: its throughput and CPU throughput measured."""
    settings = Settings(rounds=1, steps=2, warmup=1)
    cfg = overhead.compose_config(settings, root)
    measured = overhead.run_hand_loop(cfg, settings)
    assert measured[overhead.THROUGHPUT] > 0 and measured[overhead.CPU_THROUGHPUT] > 0


def test_hpmls_cost_a_step_is_the_sides_seconds_per_batch_apart():
    config = overhead.configurations(CPU)[0]
    a, b = f"{config.label} {overhead.HPML}", f"{config.label} {overhead.HAND}"
    pairs = (100.0, 128.0)  # samples/s of A and B

    def side(which: int):
        return lambda: {overhead.THROUGHPUT: pairs[which]}

    result = run_case("overhead", {a: side(0), b: side(1)}, [], Settings(rounds=1))
    # 128 samples at 100/s against 128/s: 1.28 s against 1 s, 280,000 us a step
    assert overhead.cost_per_step_us(result, config) == pytest.approx(280_000)
