"""What a run's record cannot say, found for the rules: whether its data can be held as tensors
(its data module, composed again, says), and the peaks a precision's estimate divides (the
datasheet's for a listed GPU, else the measured records of the run's host, device and thread
count, measured where missing)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch

from hpml.advise.peaks import cached_peaks, run_peaks, table_peaks
from hpml.advise.recorded import held
from hpml.analysis.devices import KNOWN_DEVICES, device_name


def test_a_listed_gpu_gets_the_datasheet_ratio() -> None:
    peaks = table_peaks("NVIDIA H200")
    h200 = KNOWN_DEVICES["h200"]
    assert peaks["bf16"].flops_per_s / peaks["fp32"].flops_per_s == pytest.approx(
        h200.bf16_flops_per_s / h200.tf32_flops_per_s
    )
    assert peaks["fp16"].source == peaks["bf16"].source == f"datasheet: {h200.name}"
    assert table_peaks("NVIDIA H200 NVL") == {}  # a variant with other figures is unknown


def cpu_run(client, host: str):
    """A run's record of where it trained, as hpml tags it."""
    cpu = torch.device("cpu")
    run = client.create_run(
        client.get_experiment_by_name("Default").experiment_id,
        tags={
            "hpml.device": f"cpu: {device_name(cpu)}",
            "hpml.host": host,
            "hpml.cpu_threads": str(torch.get_num_threads()),
        },
    )
    return client.get_run(run.info.run_id)


def test_a_cpu_run_is_measured_here_once_then_read_back(client, peak_cache: Path) -> None:
    """Measured into the session's cache (a dtype another test measured is read, not measured
    again), then read back as the cache holds it."""
    run = cpu_run(client, socket.gethostname())
    measured = run_peaks(run, peak_cache, seconds=0.3)
    assert set(measured) == {"fp32", "bf16"}  # fp16 is a CUDA precision
    cpu = device_name(torch.device("cpu"))
    records = {
        r["dtype"]: r["flops_per_s"]
        for r in (json.loads(p.read_text()) for p in peak_cache.glob("*.json"))
        if (r["host"], r["device"], r["torch_threads"])
        == (socket.gethostname(), cpu, torch.get_num_threads())
    }
    assert {d: p.flops_per_s for d, p in measured.items()} == records
    assert measured["bf16"].source.startswith(f"measured on {socket.gethostname()} ")
    threads = torch.get_num_threads()
    assert cached_peaks(peak_cache, socket.gethostname(), cpu, threads) == measured
    assert cached_peaks(peak_cache, socket.gethostname(), cpu, 10**3) == {}  # other threads


def test_another_hosts_run_is_never_measured_here(client, tmp_path: Path) -> None:
    folder = tmp_path / "peaks"
    assert run_peaks(cpu_run(client, "elsewhere"), folder) == {}
    assert not folder.exists()


@pytest.mark.parametrize(
    ("data", "can", "why"),
    [
        ("data=synthetic", True, ""),
        ("data=imagenet", False, "ImageFolderDataModule reads its samples one at a time"),
        ("data=cifar10", True, ""),
    ],
)
def test_the_data_says_whether_it_can_be_held(root: Path, data: str, can: bool, why: str) -> None:
    assert held([data]) == (can, why)


def test_a_config_that_does_not_compose_is_not_known(root: Path) -> None:
    can, why = held(["data=no_such_data"])
    assert can is None and why.startswith("not known: the run's config does not compose here")
