"""``python -m hpml.advise RUN_ID --try`` on a run bound by its input (large JPEGs read at 32 px
by ResNet18 through a loader with no workers): it proposes more workers, runs them beside the
original in one interleaved sweep into the run's store, and writes the table of the predicted
gain, the measured ratio with its interval and the verdict."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from hpml.advise.rules import workers
from hpml.analysis.stats import VERDICTS
from hpml.names import INPUT, THROUGHPUT, bound_tag
from tests.callbacks.test_bound import large_jpegs
from tests.conftest import run_module

CHEAP = [  # the measurements the bound needs, and no others
    "threads=1",  # a step's own work stays short beside the decoding, however busy the host
    "~callbacks.model_stats",
    "~callbacks.memory",
    "~callbacks.target",
    "callbacks.perf.count_flops=false",
    "callbacks.perf.measured_peak=false",
    "callbacks.perf.warmup_steps=1",
    "logger.log_system_metrics=false",
    "trainer.enable_checkpointing=false",
    "trainer.enable_progress_bar=false",
    "trainer.max_epochs=1",
    "++trainer.limit_val_batches=1",
    "test=false",
]


@pytest.mark.slow
def test_an_input_bound_run_is_advised_more_workers_and_they_are_tried(
    root: Path, composed, client
) -> None:
    from hpml.train import train

    large_jpegs(root / "imagenet", per_class=4)
    train(
        composed(
            [
                "model=resnet18",
                "data=imagenet",
                f"data.data_dir={root / 'imagenet'}",
                "data.image_size=32",
                "data.batch_size=4",
                "data.num_workers=0",
                *CHEAP,
            ]
        )
    )
    experiment = client.get_experiment_by_name("hpml").experiment_id
    [run] = client.search_runs([experiment])
    assert run.data.tags[bound_tag("train")] == INPUT
    wait = run.data.metrics["train/data_wait_pct"] / 100
    n = workers(int(run.data.tags["hpml.cpu_count"]))

    result = run_module("hpml.advise", [run.info.run_id, "--try"], root, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    said = [line for line in result.stdout.splitlines() if line.startswith("hpml: advise: ")]
    assert said and said[0].startswith(f"hpml: advise: data.num_workers={n} (input): predicted ")
    assert (
        "note: data.placement=device: not proposed: ImageFolderDataModule reads its samples "
        "one at a time" in result.stdout
    )
    [written] = [line for line in result.stdout.splitlines() if line.startswith("hpml: wrote ")]
    table = Path(written.split()[2])
    rows = {row["proposal"]: row for row in csv.DictReader(table.open())}
    assert all("data.placement" not in proposal for proposal in rows)
    row = rows[f"data.num_workers={n}"]
    assert row["prediction"] == "about"
    assert float(row["predicted_x"]) == pytest.approx(1 / max(1 - wait, wait / n))

    # the try: one sweep of both arms, two repeats each, interleaved, in the run's store
    jobs = client.search_runs([experiment], "tags.`hpml.job_num` != ''")
    jobs.sort(key=lambda job: int(job.data.tags["hpml.job_num"]))
    assert [job.info.status for job in jobs] == ["FINISHED"] * 4
    assert len({job.data.tags["mlflow.parentRunId"] for job in jobs}) == 1
    arms = [job.data.tags["hpml.choice.advise_arm"] for job in jobs]
    assert arms == ["original", row["arm"], "original", row["arm"]]
    assert [job.data.params["replicate"] for job in jobs] == ["0", "0", "1", "1"]
    assert [job.data.params["data.chosen.num_workers"] for job in jobs] == ["0", str(n)] * 2
    assert set(row["runs"].split()) == {job.info.run_id for job in jobs[1::2]}

    def median(side: list) -> float:
        return statistics.median(job.data.metrics[THROUGHPUT] for job in side)

    measured = float(row["measured_x"])
    assert measured == pytest.approx(median(jobs[1::2]) / median(jobs[::2]))
    assert float(row["ci_low_x"]) <= measured <= float(row["ci_high_x"])
    assert row["n"] == "2" and row["verdict"] in VERDICTS  # data.* feeds the input: no gate
    assert float(row["measured_over_predicted_x"]) == pytest.approx(
        measured / float(row["predicted_x"])
    )
    assert (
        "## Advice for resnet18/imagenet: predicted and tried"
        in (table.parent.parent / "report.md").read_text()
    )
    parent = jobs[0].data.tags["mlflow.parentRunId"]
    logged = [a.path for a in client.list_artifacts(parent, "report/tables")]
    assert "report/tables/advice.csv" in logged

    # a sweep's parent: each config advised, its repeats together
    result = run_module("hpml.advise", [parent], root)
    assert result.returncode == 0, result.stdout + result.stderr
    heads = [line for line in result.stdout.splitlines() if " train bound by " in line]
    assert len(heads) == 2
    assert heads[0].startswith("hpml: advise_arm=original, ")
    assert heads[1].startswith(f"hpml: advise_arm={row['arm']}, ")
    assert all(" (2 runs) (" in head for head in heads)
