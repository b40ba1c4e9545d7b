"""One parent MLflow run per Hydra sweep, so the UI compares a sweep's jobs in one view."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig

from hpml.tracking.run import PARENT_FILE


class MlflowSweepCallback(Callback):
    """Creates the parent run when a multirun starts and closes it with its children's verdict.

    Each job (possibly another process, under joblib or submitit) finds the parent's id in
    ``<sweep dir>/mlflow_parent_run.json``. The parent ends FAILED if any child failed, and the
    command then exits 1 so scripts notice.
    """

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
        failed = [run for run in children if run.info.status != "FINISHED"]
        client.set_terminated(record["run_id"], "FAILED" if failed else "FINISHED")
        print(f"hpml: sweep {record['run_id']}: {len(children)} runs, {len(failed)} failed",
              file=sys.stderr)
        if failed:
            raise SystemExit(1)
