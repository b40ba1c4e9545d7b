"""PerformanceMonitor against an independent recorder timing the same hooks in the same run."""

from __future__ import annotations

import logging
import re
import statistics
import time
from functools import partial

import lightning as L
import psutil
import pytest
import torch
from torch.utils.data import Dataset

from hpml.analysis.flops import count_flops
from hpml.analysis.stats import cv_pct, iqr
from hpml.callbacks.model_stats import ModelStats
from hpml.callbacks.perf import PerformanceMonitor
from hpml.data.synthetic import SyntheticDataModule
from hpml.models.classifier import ImageClassifier
from hpml.models.nets.vgg import vgg
from hpml.tensors import batch_size
from hpml.train import train
from tests.conftest import QUICK
from tests.helpers import cpu_neighbour


class SlowImages(Dataset):
    """Rendered samples that take a while to load, so there is real data wait to measure."""

    def __init__(self, samples: Dataset) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)  # type: ignore[arg-type]

    def __getitem__(self, index: int):
        time.sleep(0.005)
        return self.samples[index]


class SlowData(SyntheticDataModule):
    """Read through a DataLoader, whose every sample waits."""

    def __init__(self, **knobs) -> None:
        super().__init__(placement="loader", **knobs)

    def setup(self, stage=None):
        super().setup(stage)
        if self.train_set is not None and not isinstance(self.train_set, SlowImages):
            self.train_set = SlowImages(self.train_set)


class Recorder(L.Callback):
    """Its own clock readings at the hooks PerformanceMonitor uses: the independent measurement."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.cpu_ends: list[float] = []  # process CPU time, all threads
        self.samples: list[int] = []
        self.epoch_start = self.val_start = self.val_end = self.last_train_end = 0.0

    def on_train_epoch_start(self, trainer, pl_module):
        self.epoch_start = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.starts.append(time.perf_counter())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.ends.append(time.perf_counter())
        self.cpu_ends.append(time.process_time())
        self.samples.append(len(batch[0]))

    def on_validation_epoch_start(self, trainer, pl_module):
        self.val_start = time.perf_counter()

    def on_validation_epoch_end(self, trainer, pl_module):
        self.val_end = time.perf_counter()


@pytest.fixture(scope="module")
def measured():
    L.seed_everything(0)
    data = SlowData(train_samples=24 * 16, val_samples=64, test_samples=64, batch_size=16)
    model = ImageClassifier(partial(vgg, depth=11), data.spec, partial(torch.optim.SGD, lr=0.01))
    recorder = Recorder()
    trainer = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[PerformanceMonitor(warmup_steps=4), recorder, ModelStats()],
    )
    trainer.fit(model, datamodule=data)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    trainer.test(model, datamodule=data, verbose=False)
    metrics |= {k: float(v) for k, v in trainer.callback_metrics.items()}
    return metrics, recorder


def test_throughput_is_the_median_of_samples_over_each_recorded_cycle(measured):
    metrics, rec = measured
    # each step after the 4 warm-up steps: its samples over the time from the previous step's
    # end to its own, so the wait for its batch counts
    rates = [
        n / (end - prev)
        for n, prev, end in zip(rec.samples[4:], rec.ends[3:-1], rec.ends[4:], strict=True)
    ]
    assert metrics["train/throughput_samples_per_s"] == pytest.approx(
        statistics.median(rates), rel=0.02
    )
    assert metrics["train/throughput_iqr_samples_per_s"] == pytest.approx(
        iqr(rates), rel=0.1, abs=0.02 * statistics.median(rates)
    )


def test_step_time_median_spread_and_tail_match_recorded_steps(measured):
    metrics, rec = measured
    steps_ms = [(end - start) * 1e3 for start, end in zip(rec.starts, rec.ends, strict=True)][4:]
    assert metrics["train/step_time_p50_ms"] == pytest.approx(
        statistics.median(steps_ms), rel=0.05, abs=0.5
    )
    assert metrics["train/step_time_iqr_ms"] == pytest.approx(iqr(steps_ms), rel=0.1, abs=0.5)
    assert metrics["train/step_time_cv_pct"] == pytest.approx(cv_pct(steps_ms), rel=0.1, abs=0.5)
    assert metrics["train/step_time_p90_ms"] >= metrics["train/step_time_p50_ms"]
    assert "train/step_time_mean_ms" not in metrics  # the median and IQR say it, robustly


def test_data_wait_share_matches_recorded_gaps(measured):
    metrics, rec = measured
    gaps = [start - end for start, end in zip(rec.starts[4:], rec.ends[3:-1], strict=True)]
    expected = 100 * sum(gaps) / (rec.ends[-1] - rec.ends[3])
    assert expected > 5  # 16 samples x 10 ms of loading per step is a visible share
    assert metrics["train/data_wait_pct"] == pytest.approx(expected, abs=2.0)


def test_utilisation_is_the_recorded_cpu_time_over_wall_time_and_threads(measured):
    metrics, rec = measured
    cpu = rec.cpu_ends[-1] - rec.cpu_ends[3]
    expected = 100 * cpu / ((rec.ends[-1] - rec.ends[3]) * torch.get_num_threads())
    assert 0 < metrics["train/utilisation_pct"] <= 100
    assert metrics["train/utilisation_pct"] == pytest.approx(min(expected, 100), abs=3.0)


def test_train_epoch_time_leaves_validation_out(measured):
    metrics, rec = measured
    train_only = rec.ends[-1] - rec.epoch_start
    assert rec.val_end - rec.val_start > 0
    assert metrics["train/epoch_time_s"] == pytest.approx(train_only, rel=0.05, abs=0.02)


def test_inference_throughput_and_memory_are_reported_with_units(measured):
    metrics, _ = measured
    for name in (
        "val/throughput_samples_per_s",
        "test/throughput_samples_per_s",
        "val/throughput_iqr_samples_per_s",
        "test/throughput_iqr_samples_per_s",
        "val/epoch_time_s",
        "test/epoch_time_s",
        "train/peak_memory_bytes",
    ):
        assert metrics[name] > 0, name
    assert metrics["train/peak_memory_bytes"] > 100 * 2**20  # a process with torch loaded


def test_batch_size_reads_nested_batches():
    x = torch.zeros(7, 3)
    assert batch_size((x, torch.zeros(7))) == 7
    assert batch_size({"input": x}) == 7
    assert batch_size([[x]]) == 7


def only_run(client):
    return client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]


def test_a_runs_noise_figures_are_recorded(composed, client):
    train(composed(["model=vae", *QUICK]))
    run = only_run(client)
    m, tags = run.data.metrics, run.data.tags
    assert 0 <= m["noise/other_cpu_pct"] <= 100  # not asserted quiet: CI may be loaded
    assert m["machine/load_avg_1m_procs"] >= 0
    assert "noise/load_avg_1m_procs" not in m  # one name for the load average
    assert ("noise/steal_pct" in m) == hasattr(psutil.cpu_times(), "steal")
    assert m["train/step_time_cv_pct"] >= 0
    # QUICK: one epoch, so the run's CV (what hpml.noisy judges) is that epoch's
    assert m["noise/step_time_cv_pct"] == pytest.approx(m["train/step_time_cv_pct"])
    assert tags["hpml.noisy"] in ("true", "false")
    assert ("hpml.noisy.reason" in tags) == (tags["hpml.noisy"] == "true")


def test_a_run_whose_net_is_in_another_dtype_counts_its_flops(composed, client):
    """The counted sample is cast as the trainer casts batches: VGG11 in bfloat16 (as in
    float64 or float16: ``*-true`` precisions) given a float32 sample failed at its first
    convolution, and the run with it."""
    quiet = ["callbacks.perf.measured_peak=false", "trainer.precision=bf16-true"]
    small = ["data.train_samples=16", "data.val_samples=16", "data.test_samples=16", "test=false"]
    train(composed([*QUICK, *small, *quiet]))
    m = only_run(client).data.metrics
    fp32 = count_flops(vgg(11, 10, layout="cifar"), torch.randn(1, 3, 32, 32), with_backward=True)
    assert m["model/fwd_flops_per_sample"] == fp32.forward.per_sample
    assert m["model/fwd_bwd_flops_per_sample"] == fp32.per_sample


@pytest.mark.usefixtures("alone")
def test_a_run_beside_a_cpu_burning_neighbour_is_tagged_noisy(composed, client, caplog):
    # a quarter of one CPU's share of the machine: one burner takes more on any host, however
    # loaded (what else runs counts as other processes too); 4096 samples time the VAE long
    # enough to be judged (noise.MIN_TICKS) on a fast machine too
    limit = 25 / psutil.cpu_count()
    overrides = [
        "model=vae",
        *QUICK,
        "data.train_samples=4096",
        f"callbacks.perf.noise.max_other_cpu_pct={limit}",
    ]
    with cpu_neighbour(), caplog.at_level(logging.WARNING, logger="hpml.callbacks.perf"):
        train(composed(overrides))
    run = only_run(client)
    assert run.data.metrics["noise/other_cpu_pct"] > limit
    reason = run.data.tags["hpml.noisy.reason"]
    assert run.data.tags["hpml.noisy"] == "true"
    assert re.search(
        rf"other processes used \d+% of the CPU during timed work \(limit {limit:g}%\)", reason
    )
    lines = [r.getMessage() for r in caplog.records if "noisy" in r.getMessage()]
    assert lines == [f"hpml: timings of this run are noisy: {reason}"]


def test_a_cpu_run_logs_no_energy_and_says_nothing_of_it(composed, client, caplog):
    with caplog.at_level(logging.DEBUG, logger="hpml"):
        train(composed(["model=vae", "trainer=cpu", *QUICK]))
    names = only_run(client).data.metrics
    assert names["train/epoch_time_s"] > 0
    assert [n for n in names if "energy" in n or n.endswith("_w")] == []
    said = [r for r in caplog.records if "energy" in r.getMessage()]
    assert said == []  # a CPU has no board counter: nothing to say


@pytest.mark.gpu
def test_a_cuda_fit_logs_its_joules_per_sample(composed, client):
    pytest.importorskip("pynvml", reason="NVML's energy counter is read through nvidia-ml-py")
    samples = 1024
    overrides = [
        "trainer=gpu",
        *QUICK,
        f"data.train_samples={samples}",
        # 32 steps each held 50 ms: a training epoch over 1.6 s, long enough for the counter
        "+callbacks.slow._target_=tests.helpers.SlowBatches",
        "+callbacks.slow.seconds=0.05",
        "+callbacks.slow.from_epoch=0",
    ]
    train(composed(overrides))
    m = only_run(client).data.metrics
    joules, seconds = m["train/energy_j"], m["train/epoch_time_s"]
    assert seconds >= 1.6
    assert m["train/energy_j_per_sample"] > 0
    assert m["train/energy_j_per_sample"] * samples == pytest.approx(joules, rel=1e-5)
    assert m["train/power_w"] * seconds == pytest.approx(joules, rel=1e-5)
    # whole board, idle included: more than 10 W, and less than any board's 1 kW
    assert 10 * seconds <= joules <= 1000 * seconds
