"""The energy meter: its arithmetic on a test double of NVML, the machines without a counter, and
(with a GPU) the board's real counter over a second of matrix products."""

from __future__ import annotations

import logging
import sys
import time

import pytest
import torch

from hpml.analysis.energy import MIN_WINDOW_S, Energy, EnergyMeter, EnergyWindows, open_meter


class FakeNvml:
    """A test double of the third-party ``pynvml`` module (nvidia-ml-py): the board's counter
    reads the millijoules the test gives it, in turn."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    def __init__(self, readings_mj: list[int] | None = None, supported: bool = True) -> None:
        self.readings, self.supported = list(readings_mj or [0]), supported
        self.uuids: list[bytes] = []

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: bytes) -> str:
        self.uuids.append(uuid)
        return "board"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        assert handle == "board"
        if not self.supported:
            raise self.NVMLError_NotSupported("Not Supported")
        return self.readings.pop(0)


class Untouchable:
    """Fails any use: a machine without CUDA never reaches NVML."""

    def __getattr__(self, name: str):
        raise AssertionError(f"NVML's {name} was used")


def test_a_window_is_the_counter_difference_in_joules():
    meter = EnergyMeter(FakeNvml([5_000_000, 5_250_500]), "board")
    windows = EnergyWindows(meter)
    windows.open("test")
    assert windows.close("test") == pytest.approx(250.5)  # millijoules to joules
    assert windows.close("test") is None  # closed: no second reading


def test_a_window_closed_inside_another_is_left_out_of_it():
    # train opens at 1,000 J, validation runs from 1,010 to 1,014 J, train closes at 1,030 J
    meter = EnergyMeter(FakeNvml([1_000_000, 1_010_000, 1_014_000, 1_030_000]), "board")
    windows = EnergyWindows(meter)
    windows.open("train")
    windows.open("val")
    assert windows.close("val") == pytest.approx(4.0)
    assert windows.close("train") == pytest.approx(26.0)  # 30 J less validation's 4


def test_watts_and_what_is_too_short_to_measure():
    energy = Energy(joules=120.0, seconds=2.0, samples=60)
    assert energy.watts == pytest.approx(60.0)
    assert energy.measurable
    assert not Energy(40.0, MIN_WINDOW_S / 2, 10).measurable  # a few of the counter's steps
    assert not Energy(0.0, 2.0, 10).measurable  # the counter did not move
    assert not Energy(40.0, 2.0, 0).measurable  # no samples to divide by


def test_a_cpu_device_has_no_meter_and_never_asks_nvml(caplog):
    with caplog.at_level(logging.DEBUG, logger="hpml"):
        assert open_meter(torch.device("cpu"), nvml=Untouchable()) is None
    assert caplog.records == []  # nothing to say: a CPU has no board counter


def test_without_nvidia_ml_py_there_is_no_meter_and_one_debug_line(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what an install without it imports
    with caplog.at_level(logging.DEBUG, logger="hpml"):
        assert open_meter(torch.device("cuda", 0)) is None
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "hpml: no energy figures: pynvml (package nvidia-ml-py) is not installed")
    ]


@pytest.mark.gpu
def test_a_board_without_the_counter_has_no_meter(caplog):
    nvml = FakeNvml(supported=False)
    with caplog.at_level(logging.DEBUG, logger="hpml"):
        assert open_meter(torch.device("cuda", 0), nvml=nvml) is None
    assert nvml.uuids[0].startswith(b"GPU-")  # NVML's spelling of torch's UUID
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "Not Supported" in caplog.records[0].getMessage()


@pytest.mark.gpu
def test_the_meter_reads_the_board_torch_computes_on():
    pynvml = pytest.importorskip("pynvml", reason="NVML is read through nvidia-ml-py")
    device = torch.device("cuda", torch.cuda.current_device())
    meter = open_meter(device)
    assert meter is not None
    uuid = pynvml.nvmlDeviceGetUUID(meter.handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    torch_uuid = str(torch.cuda.get_device_properties(device).uuid)
    assert uuid.removeprefix("GPU-") == torch_uuid.removeprefix("GPU-")


@pytest.mark.gpu
def test_the_counter_rises_over_a_second_of_matrix_products():
    pytest.importorskip("pynvml", reason="NVML is read through nvidia-ml-py")
    device = torch.device("cuda", torch.cuda.current_device())
    meter = open_meter(device)
    assert meter is not None
    a = torch.randn(4096, 4096, device=device)
    product = torch.empty_like(a)
    torch.cuda.synchronize(device)
    readings = [meter.read_mj()]
    start = time.perf_counter()
    while time.perf_counter() - start < 1.0:
        for _ in range(20):
            torch.mm(a, a, out=product)
        torch.cuda.synchronize(device)
        readings.append(meter.read_mj())
    seconds = time.perf_counter() - start
    assert readings[0] > 0  # millijoules since the driver loaded
    assert readings == sorted(readings) and readings[-1] > readings[0]
    joules = (readings[-1] - readings[0]) / 1e3
    # whole board, idle included: more than 10 W, and less than any board's 1 kW
    assert 10 * seconds <= joules <= 1000 * seconds
