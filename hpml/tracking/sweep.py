"""One parent MLflow run per Hydra sweep, named after the experiment and the keys it varies, so
the UI compares a sweep's jobs in one view; the sweep ends with one summary."""

from __future__ import annotations

import atexit
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from hpml.console import compare_hint, quiet_upstream
from hpml.errors import one_line
from hpml.names import SWEEP_COMMAND_TAG, SWEEP_DIR_TAG, SWEEP_PARENT_TAG
from hpml.tracking.jobs import PARENT_FILE, failed_jobs, this_process
from hpml.tracking.redact import redact_text


def swept_keys(config: DictConfig) -> list[str]:
    """The keys a sweep varies, as Hydra's basic sweeper reads them: the sweeper's own params
    (an experiment's), then the command line's overrides, a later value of a key winning."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    texts = [f"{key}={value}" for key, value in params.items()]
    texts += list(OmegaConf.select(config, "hydra.overrides.task") or [])
    swept: dict[str, bool] = {}
    parser = OverridesParser.create()
    for text in texts:
        try:
            override = parser.parse_override(text)
        except Exception:  # Hydra reports malformed overrides itself
            continue
        swept[override.key_or_group] = override.is_sweep_override()
    return [key for key, on in swept.items() if on]


def sweep_name(config: DictConfig, now: float | None = None) -> str:
    """``<experiment>: <key> x <key> (<month-day hour:minute:second>)``: what a sweep varies (a
    sweep of one job: its overrides), the time only to tell apart sweeps of one experiment;
    MLflow's run ids stay the identity."""
    experiment = (
        config.hydra.runtime.choices.get("experiment")
        or OmegaConf.select(config, "logger.experiment_name")
        or "sweep"
    )
    overrides = OmegaConf.select(config, "hydra.overrides.task") or []
    keys = " x ".join(swept_keys(config)) or " ".join(overrides) or "defaults"
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(now))
    return f"{experiment}: {keys[:200]} ({stamp})"


def stop_sweep(message: str) -> None:
    """End the whole command in one line: Hydra turns a callback's exception into a warning
    and carries on, which is how sweeps lost their parent and still exited 0."""
    print(f"hpml: error: {redact_text(message)}", file=sys.stderr)
    raise SystemExit(1)


class MlflowSweepCallback(Callback):
    """Creates the parent run when a multirun starts and closes it with its children's verdict.

    Each job finds the parent's id in ``<sweep dir>/mlflow_parent_run.json``. The parent ends FAILED
    if any job failed, and the command then exits 1 so scripts notice.
    """

    def __init__(self) -> None:
        self.failed_returns = 0  # jobs run in this process that raised or returned NaN
        self.ended = True  # until a multirun starts: nothing to close at exit

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """Count a job that raised, or that hpml's task reported failed by returning NaN."""
        if job_return.status == JobStatus.FAILED:
            self.failed_returns += 1
            return
        value = job_return.return_value  # safe: raises only for FAILED, handled above
        self.failed_returns += isinstance(value, float) and math.isnan(value)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hpml.tracking.remote import prepare
        from hpml.tracking.store import retry_locked

        # The launcher sets this only when jobs start; the sweep dir and the store's path
        # interpolate `${hydra:...}` values now.
        HydraConfig.instance().set_config(config)
        # the parent run may be the store's first: its creation as quiet as a job's
        quiet_upstream(verbose=bool(OmegaConf.select(config, "hpml.verbose", default=False)))
        sweep_dir = Path(str(config.hydra.sweep.dir))
        command = shlex.join(["python", "-m", "hpml.train", *sys.argv[1:]])
        try:
            prepare(config.logger)  # a bad URI or a silent server stops the sweep here, at once
            tracker = instantiate(config.logger)
            client = tracker.client()
            run = self._reopened(client, sweep_dir) or retry_locked(
                lambda: client.create_run(
                    tracker.experiment_id(),
                    run_name=sweep_name(config),
                    tags={
                        SWEEP_DIR_TAG: str(sweep_dir),
                        SWEEP_COMMAND_TAG: redact_text(command),
                        SWEEP_PARENT_TAG: "true",
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
                        "run_name": run.info.run_name,
                    }
                )
            )
        except Exception as exc:
            stop_sweep(
                f"the sweep's parent run could not be created, no job was started: {one_line(exc)}"
            )
        self.ended = False
        atexit.register(self._not_ended, config)

    @staticmethod
    def _reopened(client: Any, sweep_dir: Path) -> Any:
        """The parent run of an earlier launch into the same sweep dir that did not finish,
        running again: a sweep started again where it stopped continues its parent, and its
        stopped jobs their runs (``hpml.tracking.resume.requeued_run``); None otherwise."""
        from hpml.tracking.store import retry_locked

        path = sweep_dir / PARENT_FILE
        if not path.is_file():
            return None
        run = client.get_run(json.loads(path.read_text())["run_id"])
        if run.info.status == "FINISHED":  # a finished sweep run again is a new sweep
            return None
        retry_locked(lambda: client.update_run(run.info.run_id, status="RUNNING"))
        return run

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.ended = True
        if self._finish(config, stopped=False):
            raise SystemExit(1)

    def _not_ended(self, config: DictConfig) -> None:
        """At exit, for a sweep Hydra ended without ``on_multirun_end``, which it skips when a
        job or the launcher raised (a worker killed): the parent, if still RUNNING, ends
        FAILED, and the summary is printed all the same. Never raises: the process is ending."""
        if self.ended:
            return
        self.ended = True
        try:
            self._finish(config, stopped=True)
        except BaseException as exc:  # a summary is worth trying, never worth a traceback
            print(f"hpml: the sweep's end could not be recorded: {one_line(exc)}", file=sys.stderr)

    def _finish(self, config: DictConfig, stopped: bool) -> int:
        """Close the parent with its children's verdict and print the sweep's summary and where
        to compare its runs; the number of failed jobs. ``stopped``: Hydra ended the sweep before
        its end, and a parent another handler closed already (a stop signal: KILLED) is left."""
        from hpml.tracking.store import retry_locked

        sweep_dir = Path(str(config.hydra.sweep.dir))
        failed_dirs = failed_jobs(sweep_dir)
        try:
            record = json.loads((sweep_dir / PARENT_FILE).read_text())
            tracker = instantiate(config.logger)
            client = tracker.client()
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
            if stopped and client.get_run(record["run_id"]).info.status != "RUNNING":
                return failed
            status = "FAILED" if failed or stopped else "FINISHED"
            retry_locked(lambda: client.set_terminated(record["run_id"], status))
        except Exception as exc:
            stop_sweep(
                f"the sweep's runs could not be read back ({one_line(exc)}); "
                f"failed job folders in {sweep_dir}: {', '.join(failed_dirs) or 'none'}"
            )
        name = record.get("run_name") or "sweep"
        runs = f"{len(children)} run{'' if len(children) == 1 else 's'}"
        summary = f"hpml: sweep {name} ({record['run_id']}): {runs}, {failed} failed"
        if stopped:
            summary += ", stopped before its end (the error above)"
        if failed_dirs:
            summary += f" (job folders {', '.join(failed_dirs)} in {sweep_dir})"
        ui_path = f"#/experiments/{record['experiment_id']}/runs/{record['run_id']}"
        where = compare_hint(redact_text(record["tracking_uri"]), ui_path)
        print(f"{summary}\nhpml: {where}", file=sys.stderr)
        return failed
