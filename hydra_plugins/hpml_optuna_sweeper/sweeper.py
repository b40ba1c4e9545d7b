"""An Optuna study as a Hydra sweeper: each batch of trials asked of the study, launched as jobs,
and told their values; a failed job is a failed trial, and the study goes on.

The study lives in ``storage`` (an SQLite file beside MLflow's by default), so running the same
search again continues it until it holds ``n_trials`` finished trials.
"""

from __future__ import annotations

import json
import logging
import sys
from functools import cached_property
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.hpml_optuna_sweeper.study import (
    check_compatible,
    distribution,
    job_value,
    param_importances,
)

log = logging.getLogger(__name__)
RESULTS_FILE = "optimization_results.yaml"


class OptunaSweeper(Sweeper):
    def __init__(
        self,
        n_trials: int,
        n_jobs: int,
        direction: str | None,
        study_name: str | None,
        storage: str | None,
        sampler: DictConfig,
        pruner: DictConfig | None,
        params: DictConfig | None,
    ) -> None:
        self.n_trials, self.n_jobs = n_trials, max(1, n_jobs)
        self.direction, self.study_name, self.storage = direction, study_name, storage
        self.sampler, self.pruner = sampler, pruner
        self.params = OmegaConf.to_container(params) if params else {}
        self.config: DictConfig | None = None
        self.launcher: Any = None
        self.hydra_context: HydraContext | None = None
        self.job_idx = 0

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        search = config.hydra.runtime.choices.get("hparams_search")
        self.study_name = self.study_name or search or "hpml_search"
        self.metric = config.get("optimized_metric")
        if self.direction is None:
            name = str(self.metric or "").rsplit("/", 1)[-1]
            self.direction = "maximize" if name.endswith("acc") else "minimize"

    def space(self, arguments: list[str]) -> tuple[dict[str, Any], list[str]]:
        """Distributions by override key, and the overrides every trial gets as they are: the
        config's ``params`` first, then the command line's (which win for the same key)."""
        assert self.hydra_context is not None
        lines = [f"{key}={value}" for key, value in self.params.items()] + list(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        by_key = {o.key_or_group: o for o in parser.parse_overrides(lines)}
        space = {
            o.get_key_element(): distribution(o) for o in by_key.values() if o.is_sweep_override()
        }
        fixed = [o.input_line for o in by_key.values() if not o.is_sweep_override()]
        return space, fixed

    def study(self) -> Any:
        import hydra.utils
        import optuna

        sampler = OmegaConf.to_container(self.sampler, resolve=True)
        study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            direction=self.direction,
            pruner=hydra.utils.instantiate(self.pruner)
            if self.pruner
            else optuna.pruners.NopPruner(),
            load_if_exists=True,
        )
        if sampler.get("seed") is not None:  # a resumed search must not draw its first again
            sampler["seed"] += len(study.trials)
        study.sampler = hydra.utils.instantiate(sampler)
        return study

    def sweep(self, arguments: list[str]) -> Any:
        import optuna
        from optuna.trial import TrialState

        from hpml.callbacks.optuna_pruning import PRUNED_ATTR
        from hpml.errors import one_line

        assert self.config is not None
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        try:
            space, fixed = self.space(arguments)
            study = self.study()
            check_compatible(study, space)
        except Exception as exc:
            why = str(exc) if isinstance(exc, ValueError) else one_line(exc)
            self.refuse(f"search {self.study_name}: {why}")
        finished = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
        returns = []
        while (left := self.n_trials - len(study.get_trials(states=finished))) > 0:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, left))]
            batch = [
                [
                    *fixed,
                    *(f"{key}={value}" for key, value in trial.params.items()),
                    *self.pruning_override(trial),
                ]
                for trial in trials
            ]
            results = self.launcher.launch(batch, initial_job_idx=self.job_idx)
            self.job_idx += len(results)
            runs = self.child_runs()
            # what the jobs wrote on their trials (a Trial object keeps what it was asked with)
            running = {t.number: t for t in study.get_trials(states=(TrialState.RUNNING,))}
            for trial, result in zip(trials, results, strict=True):
                value, error = job_value(result)
                job_dir = result.hydra_cfg.hydra.runtime.output_dir if result.hydra_cfg else None
                run_id = runs.get(str(job_dir))
                trial.set_user_attr("job_dir", str(job_dir))
                if run_id:
                    trial.set_user_attr("mlflow_run_id", run_id)
                if value is None:
                    trial.set_user_attr("error", error)
                    log.warning(f"trial {trial.number} failed: {error}")
                    state = TrialState.FAIL
                elif PRUNED_ATTR in running[trial.number].user_attrs:  # its callback stopped it
                    state = TrialState.PRUNED
                else:
                    state = TrialState.COMPLETE
                study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)
                if run_id:
                    self.tag(run_id, {"trial": str(trial.number), "state": state.name})
            returns.append(results)
        self.report(study, sweep_dir, optuna)
        return returns

    def pruning_override(self, trial: Any) -> list[str]:
        """The overrides that point the job's pruning callback at ``trial``, if it has one."""
        assert self.config is not None
        node = "callbacks.optuna_pruning"
        if self.storage is None or OmegaConf.select(self.config, node) is None:
            return []  # an in-memory study (storage: null) is out of the jobs' reach
        return [f"{node}.study_name='{self.study_name}'", f"{node}.trial={trial.number}"]

    def refuse(self, message: str) -> None:
        """End the search before any trial in one line, its parent run FAILED."""
        from hpml.tracking.sweep import stop_sweep

        try:
            client, record = self.tracking or (None, None)
            if client is not None:
                client.set_terminated(record["run_id"], "FAILED")
        finally:
            stop_sweep(" ".join(message.split()))

    @cached_property
    def tracking(self) -> tuple[Any, dict] | None:
        """The MLflow client and the sweep's parent record, None without a parent run; read
        once (the sweep callback writes the record before the sweeper starts)."""
        from hydra.utils import instantiate

        from hpml.tracking.jobs import PARENT_FILE

        assert self.config is not None
        path = Path(self.config.hydra.sweep.dir) / PARENT_FILE
        if not path.is_file():
            return None
        return instantiate(self.config.logger).client(), json.loads(path.read_text())

    def child_runs(self) -> dict[str, str]:
        """Run ids of the sweep's children so far, by job folder."""
        from hpml.names import OUTPUT_DIR_TAG
        from hpml.tracking.store import retry_locked

        try:
            client, record = self.tracking or (None, None)
            if client is None:
                return {}
            children = retry_locked(
                lambda: client.search_runs(
                    [record["experiment_id"]], f"tags.mlflow.parentRunId = '{record['run_id']}'"
                )
            )
        except Exception as exc:  # tags are a convenience: the search goes on without them
            log.warning(f"the sweep's runs could not be read: {exc}")
            return {}
        return {r.data.tags.get(OUTPUT_DIR_TAG): r.info.run_id for r in children}

    def tag(self, run_id: str | None, tags: dict[str, str]) -> None:
        """Tag a run (the parent when ``run_id`` is None) with ``hpml.optuna.<name>`` tags."""
        from hpml.names import step_tag
        from hpml.tracking.store import retry_locked

        try:
            client, record = self.tracking or (None, None)
            if client is None:
                return
            from mlflow.entities import RunTag

            run_id = run_id or record["run_id"]
            tags = {"study": str(self.study_name), **tags}
            batch = [RunTag(step_tag("optuna", name), value) for name, value in tags.items()]
            retry_locked(lambda: client.log_batch(run_id, tags=batch))
        except Exception as exc:
            log.warning(f"run {run_id} could not be tagged: {exc}")

    def report(self, study: Any, sweep_dir: Path, optuna: Any) -> None:
        """The best trial: one line on stderr, ``optimization_results.yaml`` in the sweep dir
        and tags on the parent run."""
        from hpml.tracking.redact import redact_text

        states = {}
        for trial in study.trials:
            states[trial.state.name] = states.get(trial.state.name, 0) + 1
        results: dict[str, Any] = {
            "study_name": self.study_name,
            "storage": redact_text(str(self.storage)),
            "direction": self.direction,
            "optimized_metric": self.metric,
            "trials": states,
        }
        complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        if complete:
            best = study.best_trial
            overrides = [f"{key}={value}" for key, value in best.params.items()]
            results |= {"best_value": best.value, "best_trial": best.number}
            results["best_params"] = dict(best.params)
            line = f"best {self.metric}={best.value} (trial {best.number}): {' '.join(overrides)}"
            tags = {"best_value": repr(best.value), "best_trial": str(best.number)}
            importances = param_importances(study, optuna)
            if importances:
                results["param_importances"] = importances
                tags |= {f"importance.{key}": repr(value) for key, value in importances.items()}
            self.tag(None, tags)
        else:
            line = f"no trial completed ({', '.join(f'{n} {s}' for s, n in states.items())})"
        OmegaConf.save(OmegaConf.create(results), sweep_dir / RESULTS_FILE)
        print(f"hpml: search {self.study_name}: {line}", file=sys.stderr)
