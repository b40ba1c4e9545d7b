"""The proposals for each bound and the gains they predict, as pure functions of a run's
evidence; none the data cannot take."""

from __future__ import annotations

import pytest

from hpml.advise.evidence import Evidence, Peak
from hpml.advise.rules import ABOUT, AT_MOST, notes, propose, workers
from hpml.names import COMPUTE, DEVICE, HOST, INPUT, MEMORY


def by_text(e: Evidence) -> dict:
    return {p.text: p for p in propose(e)}


def loader_run(**fields) -> Evidence:
    """A run waiting 65% of a step for a loader with no workers, on a 2-core CPU."""
    return Evidence(
        **{"bound": INPUT, "data_wait_pct": 65.0, "placement": "loader", "cpus": 2} | fields
    )


def test_the_wait_bounds_holding_the_data_and_workers_estimate_theirs() -> None:
    found = by_text(loader_run(held=True))
    assert set(found) == {"data.placement=device", "data.num_workers=1"}
    held = found["data.placement=device"]
    assert held.kind == AT_MOST and held.gain == pytest.approx(1 / 0.35)  # 65% -> 2.9x
    assert held.predicted() == "at most 2.86x"
    one = found["data.num_workers=1"]  # a batch loads in 0.65 of a step, one worker beside
    assert one.kind == ABOUT and one.gain == pytest.approx(1 / 0.65)
    many = by_text(loader_run(held=True, cpus=16))["data.num_workers=8"]  # capped as auto is
    assert many.gain == pytest.approx(1 / 0.35)  # the loading hides behind the step's work


def test_workers_already_there_are_counted_as_loading_time() -> None:
    """Two workers that still keep a step waiting take two steps a batch: four halve it."""
    [four] = propose(loader_run(cpus=5, num_workers=2, data_wait_pct=40.0))
    assert four.text == "data.num_workers=4"
    assert four.gain == pytest.approx(1 / max(0.6, 2 / 4))
    assert propose(loader_run(cpus=2, num_workers=1)) == []
    assert "data.num_workers: not proposed: 1 already" in " ".join(notes(loader_run(num_workers=1)))


@pytest.mark.parametrize(("cpus", "devices", "n"), [(2, 1, 1), (1, 1, 1), (16, 2, 7), (64, 1, 8)])
def test_the_workers_rule(cpus: int, devices: int, n: int) -> None:
    assert workers(cpus, devices) == n


def test_data_read_per_sample_is_never_proposed_a_device_placement() -> None:
    why = "ImageFolderDataModule reads its samples one at a time"
    for held in (False, None):
        e = loader_run(held=held, not_held=why if held is False else "")
        assert all("data.placement" not in p.text for p in propose(e))
    [said] = notes(loader_run(held=False, not_held=why))
    assert said == f"data.placement=device: not proposed: {why}"


def test_a_device_placement_drops_the_loader_knobs_it_refuses() -> None:
    e = loader_run(held=True, configured={"num_workers": "2", "pin_memory": "True"}, num_workers=2)
    [held] = [p for p in propose(e) if "data.placement=device" in p.overrides]
    assert held.overrides == (
        "data.placement=device",
        "data.num_workers=auto",
        "data.pin_memory=auto",
    )


def test_pinned_batches_only_on_cuda() -> None:
    assert "data.pin_memory=true" not in by_text(loader_run())
    pinned = by_text(loader_run(device="cuda", cpus=9))["data.pin_memory=true"]
    assert pinned.kind == AT_MOST and pinned.gain == pytest.approx(1 / 0.35)
    assert "data.pin_memory=true" not in by_text(loader_run(device="cuda", pin_memory=True))


def test_data_held_already_gets_no_input_proposal() -> None:
    e = loader_run(placement="device")
    assert propose(e) == []
    assert "held as tensors already" in notes(e)[0]


def test_host_bound_steps() -> None:
    e = Evidence(HOST, host_issue_pct=97.0, mfu_pct=4.0, device="cuda", batch_size=64, fusable=4)
    found = by_text(e)
    assert set(found) == {
        "data.batch_size=128",
        "compile=torch_compile compile.train=true compile.mode=reduce-overhead",
        "fuse=array",
    }
    assert found["data.batch_size=128"].gain == 2.0
    compiled = found["compile=torch_compile compile.train=true compile.mode=reduce-overhead"]
    assert (compiled.kind, compiled.gain) == (AT_MOST, pytest.approx(25.0))  # 100 / MFU
    assert found["fuse=array"].gain == 4.0 and found["fuse=array"].untried
    bare = by_text(Evidence(HOST, host_issue_pct=95.0, compile="torch_compile"))
    assert set(bare) == set()  # no batch size known, compiled already, alone in its sweep


PEAKS = {"fp32": Peak(50e12, "datasheet"), "bf16": Peak(400e12, "datasheet")}


def test_compute_bound_steps_predict_the_peak_ratio() -> None:
    e = Evidence(COMPUTE, device="cuda", peaks=PEAKS, channels_last=False, mfu_pct=40.0)
    found = by_text(e)
    assert set(found) == {"trainer=bf16", "trainer=fp16", "model.channels_last=true"}
    assert (found["trainer=bf16"].kind, found["trainer=bf16"].gain) == (ABOUT, 8.0)
    assert found["trainer=fp16"].gain is None  # no fp16 peak: no estimate
    assert found["trainer=fp16"].predicted() == "no estimate"
    assert found["model.channels_last=true"].gain == pytest.approx(2.5)
    assert "not known" not in found["trainer=bf16"].how


def test_precision_keeps_another_trainer_option_and_skips_fp16_off_cuda() -> None:
    e = Evidence(COMPUTE, trainer="cpu", peaks=PEAKS)
    assert list(by_text(e)) == ["trainer.precision=bf16-mixed"]
    assert propose(Evidence(COMPUTE, precision="bf16-mixed", channels_last=True)) == []


def test_an_unsplit_device_bound_gets_the_compute_steps_saying_so() -> None:
    [bf16] = propose(Evidence(DEVICE, peaks=PEAKS))
    assert bf16.gain == 8.0 and bf16.bound == DEVICE
    assert "callbacks=analysis" in bf16.how


def test_memory_bound_steps_say_what_they_cost() -> None:
    e = Evidence(MEMORY, batch_size=32, fwd_flops=1e9, fwd_bwd_flops=3e9)
    found = by_text(e)
    assert set(found) == {"trainer=bf16", "activations=checkpoint", "data.batch_size=16"}
    assert found["trainer=bf16"].gain == 2.0
    assert found["activations=checkpoint"].gain == pytest.approx(0.75)  # a forward again
    assert found["data.batch_size=16"].gain == 1.0
    assert propose(Evidence(MEMORY, precision="16-mixed", activations="checkpoint")) == []


def test_no_bound_no_proposal() -> None:
    assert propose(Evidence("")) == []
    assert notes(Evidence("")) == ["no proposal for a run bound by nothing (no hpml.bound.train)"]
