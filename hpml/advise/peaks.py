"""The compute peaks of a run's device in each precision, for the estimate of a precision's
gain: the datasheet table for a CUDA device it lists, else the measured-peak records in the
peak cache (:mod:`hpml.analysis.measured_peak`) of the run's host, device and thread count,
measured here where this is that host and a record is missing. Both peaks of a ratio come from
one source, so the ratio is the table's or the micro-benchmarks', never a mix.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from hpml.advise.evidence import Peak, device_of
from hpml.analysis.devices import DTYPES, match_device_name
from hpml.report.runs import peak_cache_dir

if TYPE_CHECKING:
    from mlflow.entities import Run


def table_peaks(name: str) -> dict[str, Peak]:
    """The datasheet's dense peaks of CUDA device ``name`` by dtype (fp32: tf32 where the
    device has it, as cuDNN's convolutions run by default); empty for a device not listed."""
    entry = match_device_name(name)
    if entry is None:
        return {}
    found = {
        "fp32": entry.tf32_flops_per_s or entry.fp32_flops_per_s,
        "bf16": entry.bf16_flops_per_s,
        "fp16": entry.fp16_flops_per_s,
    }
    source = f"datasheet: {entry.name}"
    return {dtype: Peak(value, source) for dtype, value in found.items() if value}


def cached_peaks(folder: Path, host: str, device: str, threads: int | None) -> dict[str, Peak]:
    """The measured records in ``folder`` of ``device`` on ``host`` at ``threads`` torch threads
    (any count for a GPU), by dtype; damaged records are skipped."""
    found: dict[str, Peak] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            mine = record["host"] == host and record["device"] == device
            if mine and (threads is None or record["torch_threads"] == threads):
                when = record.get("measured_at", "")
                found[record["dtype"]] = Peak(
                    float(record["flops_per_s"]), f"measured on {host} {when}".strip()
                )
        except (ValueError, KeyError, TypeError):
            continue
    return found


def measure_here(
    kind: str, threads: int | None, folder: Path, dtypes: list[str], seconds: float = 1.0
) -> None:
    """Measure the peaks in ``dtypes`` of this host's ``kind`` device at ``threads`` torch
    threads into ``folder`` (:func:`~hpml.analysis.measured_peak.measure_compute`, ``seconds``
    each)."""
    import torch

    from hpml.analysis.measured_peak import measure_compute

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        for dtype in dtypes:
            measure_compute(torch.device(kind), folder, dtype, seconds)
    finally:
        torch.set_num_threads(before)


def run_peaks(
    run: Run, folder: Path | None = None, measure: bool = True, seconds: float = 1.0
) -> dict[str, Peak]:
    """The peaks of ``run``'s device by dtype: the table's, else the cache's, measured first
    (``seconds`` each) where ``measure``, this is the run's host and a dtype is missing."""
    kind, name = device_of(run)
    if kind == "cuda" and (found := table_peaks(name)):
        return found
    folder = folder or peak_cache_dir()
    host = run.data.tags.get("hpml.host", "")
    text = run.data.tags.get("hpml.cpu_threads")
    threads = int(text) if kind == "cpu" and text and text.isdigit() else None
    found = cached_peaks(folder, host, name, threads)
    wanted = [d for d in DTYPES if d != "fp16" or kind == "cuda"]
    missing = [d for d in wanted if d not in found]
    if measure and missing and host == socket.gethostname() and _here(kind, name):
        measure_here(kind, threads, folder, missing, seconds)
        found = cached_peaks(folder, host, name, threads)
    return found


def _here(kind: str, name: str) -> bool:
    """Whether this process sees the device ``kind`` named ``name``."""
    import torch

    from hpml.analysis.devices import device_name

    if kind == "cuda" and not torch.cuda.is_available():
        return False
    return device_name(torch.device(kind)) == name
