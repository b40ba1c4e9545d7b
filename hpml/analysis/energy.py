"""Energy of a CUDA device from NVML's counter: joules over windows, read at their edges.

``nvmlDeviceGetTotalEnergyConsumption`` is the whole board's energy since the driver loaded
(Volta and later); it moves in steps, so it measures windows of :data:`MIN_WINDOW_S` or more.
``pynvml`` (package ``nvidia-ml-py``) is optional: without it no energy is measured.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

log = logging.getLogger(__name__)

MIN_WINDOW_S = 1.0  # shorter windows are a few of the counter's ~100 ms steps: not measured


class EnergyMeter:
    """Reads one board's energy counter through NVML (``nvml``: the ``pynvml`` module)."""

    def __init__(self, nvml: ModuleType | Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle

    def read_mj(self) -> int:
        """Millijoules the board has used since the driver loaded."""
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))


class EnergyWindows:
    """Joules over named windows of one meter. A window closed while others are open is left
    out of theirs: validation inside a training epoch is not the epoch's."""

    def __init__(self, meter: EnergyMeter) -> None:
        self.meter = meter
        self.starts: dict[str, int] = {}  # millijoules at each open window's start

    def open(self, name: str) -> None:
        self.starts[name] = self.meter.read_mj()

    def close(self, name: str) -> float | None:
        """Joules used in window ``name`` since it opened; None if it was not open."""
        start = self.starts.pop(name, None)
        if start is None:
            return None
        used = self.meter.read_mj() - start
        for outer in self.starts:
            self.starts[outer] += used
        return used / 1e3


@dataclass(frozen=True)
class Energy:
    """What a window used: ``joules`` over ``seconds`` in which ``samples`` were processed."""

    joules: float
    seconds: float
    samples: float

    @property
    def watts(self) -> float:
        return self.joules / self.seconds

    @property
    def measurable(self) -> bool:
        """Long enough for the counter's resolution, with samples and energy to divide."""
        return self.seconds >= MIN_WINDOW_S and self.samples > 0 and self.joules > 0


def open_meter(device: torch.device, nvml: ModuleType | Any = None) -> EnergyMeter | None:
    """A meter of ``device``'s board, or None (why in one DEBUG line) where its energy cannot be
    read. ``nvml`` stands in for the ``pynvml`` module (default: imported here)."""
    if device.type != "cuda":
        return None
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            log.debug("hpml: no energy figures: pynvml (package nvidia-ml-py) is not installed")
            return None
    try:
        nvml.nvmlInit()
        handle = _handle(nvml, device)
        if handle is None:
            log.debug("hpml: no energy figures: NVML does not tell which board %s is", device)
            return None
        meter = EnergyMeter(nvml, handle)
        meter.read_mj()  # NVMLError_NotSupported before Volta, and on some virtual GPUs
    except nvml.NVMLError as error:
        log.debug("hpml: no energy figures: NVML's energy counter of %s: %s", device, error)
        return None
    return meter


def _handle(nvml: ModuleType | Any, device: torch.device) -> Any:
    """NVML's handle of the board behind torch's ``device``, by UUID, else PCI bus id, else index
    where NVML sees one board (torch and NVML number boards differently)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:  # torch writes 8-4-4-4-12 hex, NVML prefixes it with GPU-
        text = str(uuid)
        text = text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
        return nvml.nvmlDeviceGetHandleByUUID(text.encode())
    bus = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    if None not in bus:
        bus_id = "{:08x}:{:02x}:{:02x}.0".format(*bus)  # domain:bus:device.function
        return nvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode())
    if nvml.nvmlDeviceGetCount() == 1:
        return nvml.nvmlDeviceGetHandleByIndex(0)
    return None
