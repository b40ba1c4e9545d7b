"""One parent MLflow run per Hydra sweep, so the UI compares a sweep's jobs in one view."""

from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig

from hpml.tracking.run import PARENT_FILE


def job_failed(job_return: JobReturn) -> bool:
    """A job that raised, or that hpml's task reported failed by returning NaN."""
    if job_return.status == JobStatus.FAILED:
        return True
    value = job_return.return_value  # safe: raises only for FAILED, handled above
    return isinstance(value, float) and math.isnan(value)


class MlflowSweepCallback(Callback):
    """Creates the parent run when a multirun starts and closes it with its children's verdict.

    Each job (possibly another process, under joblib or submitit) finds the parent's id in
    ``<sweep dir>/mlflow_parent_run.json``. The parent ends FAILED if any child failed, and the
    command then exits 1 so scripts notice.
    """

    def __init__(self) -> None:
        self.failed_jobs = 0  # seen in this process; jobs that failed before their run existed

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        self.failed_jobs += job_failed(job_return)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # The launcher sets this only when jobs start; the sweep dir and the store's path
        # interpolate `${hydra:...}` values now.
        HydraConfig.instance().set_config(config)
        tracker = instantiate(config.logger)
        client = tracker.client()
        sweep_dir = Path(str(config.hydra.sweep.dir))
        command = shlex.join(["python", "-m", "hpml.train", *sys.argv[1:]])
        run = client.create_run(
            tracker.experiment_id(),
            run_name=f"sweep {sweep_dir.name}",
            tags={"hpml.sweep_dir": str(sweep_dir), "hpml.sweep_command": command,
                  "hpml.sweep_parent": "true"},
        )
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / PARENT_FILE).write_text(json.dumps(
            {"run_id": run.info.run_id, "experiment_id": run.info.experiment_id,
             "tracking_uri": tracker.tracking_uri}))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = Path(str(config.hydra.sweep.dir)) / PARENT_FILE
        if not path.is_file():
            return
        record = json.loads(path.read_text())
        client = instantiate(config.logger).client()
        children = client.search_runs(
            [record["experiment_id"]], f"tags.mlflow.parentRunId = '{record['run_id']}'")
        failed = max(sum(run.info.status != "FINISHED" for run in children), self.failed_jobs)
        client.set_terminated(record["run_id"], "FAILED" if failed else "FINISHED")
        print(f"hpml: sweep {record['run_id']}: {len(children)} runs, {failed} failed",
              file=sys.stderr)
        if failed:
            raise SystemExit(1)
