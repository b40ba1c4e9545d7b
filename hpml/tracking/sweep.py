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

from hpml.errors import one_line
from hpml.tracking.jobs import PARENT_FILE, failed_jobs, this_process
from hpml.tracking.redact import redact_text
from hpml.tracking.remote import prepare
from hpml.tracking.store import retry_locked
from hpml.validate.fusion import unfused_note


def job_failed(job_return: JobReturn) -> bool:
    """A job that raised, or that hpml's task reported failed by returning NaN."""
    if job_return.status == JobStatus.FAILED:
        return True
    value = job_return.return_value  # safe: raises only for FAILED, handled above
    return isinstance(value, float) and math.isnan(value)


def stop_sweep(message: str) -> None:
    """End the whole command in one line: Hydra turns a callback's exception into a warning
    and carries on, which is how sweeps lost their parent and still exited 0."""
    print(f"hpml: error: {redact_text(message)}", file=sys.stderr)
    raise SystemExit(1)


class MlflowSweepCallback(Callback):
    """Creates the parent run when a multirun starts and closes it with its children's verdict.

    Each job (possibly another process, under joblib or submitit) finds the parent's id in
    ``<sweep dir>/mlflow_parent_run.json``. If the parent cannot be created the sweep stops before
    any job. It ends FAILED if any job failed (by its MLflow run, its ``hpml_job.json`` record or
    its return value) and the command then exits 1 so scripts notice.
    """

    def __init__(self) -> None:
        self.failed_returns = 0  # jobs run in this process that raised or returned NaN

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        self.failed_returns += job_failed(job_return)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # The launcher sets this only when jobs start; the sweep dir and the store's path
        # interpolate `${hydra:...}` values now.
        HydraConfig.instance().set_config(config)
        launcher = config.hydra.runtime.choices.get("hydra/launcher")
        note = unfused_note(config, launcher, multirun=True)
        if note is not None:
            print(f"hpml: {note}", flush=True)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        command = shlex.join(["python", "-m", "hpml.train", *sys.argv[1:]])
        try:
            prepare(config.logger)  # a bad URI or a silent server stops the sweep here, at once
            tracker = instantiate(config.logger)
            client = tracker.client()
            run = self._reopened(client, sweep_dir) or retry_locked(
                lambda: client.create_run(
                    tracker.experiment_id(),
                    run_name=f"sweep {sweep_dir.name}",
                    tags={
                        "hpml.sweep_dir": str(sweep_dir),
                        "hpml.sweep_command": redact_text(command),
                        "hpml.sweep_parent": "true",
                    },
                )
            )
            sweep_dir.mkdir(parents=True, exist_ok=True)
            (sweep_dir / PARENT_FILE).write_text(
                json.dumps(
                    {
                        "run_id": run.info.run_id,
                        "experiment_id": run.info.experiment_id,
                        "tracking_uri": tracker.tracking_uri,
                        "process": this_process(),
                    }
                )
            )
        except Exception as exc:
            stop_sweep(
                f"the sweep's parent run could not be created, no job was started: {one_line(exc)}"
            )

    @staticmethod
    def _reopened(client: Any, sweep_dir: Path) -> Any:
        """The parent run of an earlier launch into the same sweep dir that did not finish,
        running again: a sweep started again where it stopped continues its parent, and its
        stopped jobs their runs (``hpml.tracking.resume.requeued_run``); None otherwise."""
        path = sweep_dir / PARENT_FILE
        if not path.is_file():
            return None
        run = client.get_run(json.loads(path.read_text())["run_id"])
        if run.info.status == "FINISHED":  # a finished sweep run again is a new sweep
            return None
        retry_locked(lambda: client.update_run(run.info.run_id, status="RUNNING"))
        return run

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        failed_dirs = failed_jobs(sweep_dir)
        try:
            record = json.loads((sweep_dir / PARENT_FILE).read_text())
            client = instantiate(config.logger).client()
            children = retry_locked(
                lambda: client.search_runs(
                    [record["experiment_id"]], f"tags.mlflow.parentRunId = '{record['run_id']}'"
                )
            )
            failed = max(
                sum(run.info.status != "FINISHED" for run in children),
                len(failed_dirs),
                self.failed_returns,
            )
            retry_locked(
                lambda: client.set_terminated(record["run_id"], "FAILED" if failed else "FINISHED")
            )
        except Exception as exc:
            stop_sweep(
                f"the sweep's runs could not be read back ({one_line(exc)}); "
                f"failed job folders in {sweep_dir}: {', '.join(failed_dirs) or 'none'}"
            )
        summary = f"hpml: sweep {record['run_id']}: {len(children)} runs, {failed} failed"
        if failed_dirs:
            summary += f" (job folders {', '.join(failed_dirs)} in {sweep_dir})"
        print(summary, file=sys.stderr)
        if failed:
            raise SystemExit(1)
