"""The fused counterpart of :func:`hpml.train.train`: the jobs of a sweep that differ only in
values that keep shapes, trained as one array in this process (``fuse=array``).

The fused launcher (``hydra_plugins/hpml_fused_launcher``) decides which jobs fuse and hands
them here with their Hydra facts. Each member is built exactly as its serial job would be
(seeded, then its data, then its model), gets its own child run of the sweep, and returns its
own metrics; the array trains with the first member's trainer config.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from hpml.build import build
from hpml.hydra_job import HydraJob
from hpml.names import DIVERGED_TAG, MEMBER_PREFIX, member_prefix
from hpml.train import tracker_of

log = logging.getLogger(__name__)


def assemble_array(
    members: Sequence[tuple[DictConfig, HydraJob]], loggers: list[Any]
) -> tuple[Any, Any, Any]:
    """The array's data, model and trainer; each member seeded and built as its own job."""
    import lightning as L
    from omegaconf import OmegaConf

    from hpml.callbacks.epoch_summary import EpochSummary
    from hpml.console import progress_bar
    from hpml.data.fused import FusedData
    from hpml.models.fused import FusedArray

    datamodules, models = [], []
    for cfg, _ in members:
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        datamodule = build("data", cfg.data)
        datamodule.prepare_data()
        datamodules.append(datamodule)
        models.append(build("model", cfg.model, data=datamodule.spec))
    data = [OmegaConf.to_container(cfg.data, resolve=True) for cfg, _ in members]
    shared = all(config == data[0] for config in data)
    cfg = members[0][0]
    callbacks = array_callbacks(cfg, len(members))
    trainer = build(
        "trainer",
        cfg.trainer,
        callbacks=[*callbacks, EpochSummary()],
        logger=loggers,
        enable_checkpointing=False,
        enable_progress_bar=progress_bar(cfg.trainer.get("enable_progress_bar")),
    )
    return FusedData(datamodules, shared), FusedArray(models, shared), trainer


def array_callbacks(cfg: DictConfig, size: int) -> list[Any]:
    """The callbacks job ``cfg`` sets, on an array of ``size`` members, as each one's class says
    (its ``in_array``, :mod:`hpml.callbacks.in_array`): built from its config with the class's
    ``array_knobs`` over it, then once (ONCE) or as its ``for_members(size)`` (PER_MEMBER);
    NOT_IN_ARRAYS ones left out. The planner runs a job with any other one serially."""
    from hpml.callbacks.in_array import InArray, array_knobs
    from hpml.errors import IncompatibleError
    from hpml.validate.fusion import callback_entries

    callbacks: list[Any] = []
    for entry in callback_entries(cfg):
        if entry.how is InArray.NOT_IN_ARRAYS:
            continue
        if entry.how not in (InArray.ONCE, InArray.PER_MEMBER):
            raise IncompatibleError(
                f"{entry.label}: {entry.path} cannot run in a fused array (in_array: {entry.how})"
            )
        callback = build(entry.group, entry.node, **array_knobs(entry.target))
        callbacks += callback.for_members(size) if entry.how is InArray.PER_MEMBER else [callback]
    return callbacks


def member_model(cfg: DictConfig) -> tuple[Any, int]:
    """Job ``cfg``'s model as its job builds it, and its batch size, before any job runs: the
    memory guard's probe. The data module gives its planned spec, so no data file is read (an
    IMDB vocabulary at its cap: the probe errs large)."""
    datamodule = build("data", cfg.data)
    return build("model", cfg.model, data=datamodule.planned_spec()), datamodule.batch_size


def member_metrics(metrics: dict[str, Any], index: int) -> dict[str, float]:
    """Member ``index``'s metrics under their serial names, with the array's own ones."""
    prefix = member_prefix(index)
    own = {name[len(prefix) :]: float(v) for name, v in metrics.items() if name.startswith(prefix)}
    shared = {
        name: float(value) for name, value in metrics.items() if not name.startswith(MEMBER_PREFIX)
    }
    return shared | own


def train_array(members: Sequence[tuple[DictConfig, HydraJob]]) -> list[dict[str, float]]:
    """Fit and test ``members`` as one array; each member's final metrics, in order.

    The members were validated by the caller (the fused launcher runs a refused job alone).
    Each member's run ends as a serial job's would: FINISHED, FAILED with the error, or
    KILLED by Ctrl-C or SIGTERM; a member whose loss stopped being finite returns NaN as its
    optimised metric (its serial job would have logged NaN), tagged with the step.
    """
    from hpml.tracking.fused import MemberRuns, member_loggers
    from hpml.tracking.interrupts import interrupted
    from hpml.tracking.run import _best_effort
    from hpml.tracking.stop import StopOnSignals
    from hpml.worker import start_job

    cfg, job = members[0]
    tracker = tracker_of(cfg)
    start_job(cfg.get("threads"))
    logging.getLogger("lightning").handlers.clear()
    runs = MemberRuns(tracker, list(members))
    metrics: dict[str, Any] = {}
    parts: tuple[Any, Any, Any] | None = None
    with StopOnSignals(job) as stop:
        try:
            runs.open()
            stop.run_id = ", ".join(runs.ids)
            log.info("fused array of %d members: runs %s", len(members), stop.run_id)
            parts = assemble_array(members, member_loggers(tracker, runs.ids))
            data, model, trainer = parts
            stop.trainer = trainer
            set_device_tags(trainer)
            if cfg.fit:
                trainer.fit(model, datamodule=data)
                stop.check()
                metrics |= dict(trainer.callback_metrics)
            if cfg.test:
                trainer.test(model, datamodule=data, verbose=False)
                metrics |= dict(trainer.callback_metrics)
        except BaseException as exc:
            _best_effort(copy_logs, members)
            status = "KILLED" if interrupted(exc) or stop.received else "FAILED"
            runs.close(status, exc, recorder(tracker, parts, trained=False))
            raise
        _best_effort(copy_logs, members)
        runs.close("FINISHED", None, recorder(tracker, parts, trained=True))
    results = [member_metrics(metrics, index) for index in range(len(members))]
    for index in parts[1].diverged if cfg.optimized_metric else ():
        results[index][cfg.optimized_metric] = math.nan  # its serial job's metric: NaN
    return results


def set_device_tags(trainer: Any) -> None:
    """The device the array trains on, in every member's run, as a serial run tags it."""
    from hpml.callbacks.logging import set_tags
    from hpml.tracking.tags import device_tags

    set_tags(trainer, {**device_tags(trainer.strategy.root_device), "hpml.processes": "1"})


def recorder(tracker: Any, parts: tuple[Any, Any, Any] | None, trained: bool) -> Any:
    """What records member ``index``'s dataset in its run while it is being closed, and once
    ``trained`` (as a serial run: after a fit that ended well) whether its loss diverged and,
    with ``logger.log_model``, its trained net; each best effort, as a serial run's."""
    import mlflow

    from hpml.tracking.run import _best_effort

    def record(index: int) -> None:
        if parts is None:
            return
        from hpml.tracking import model as logged_model
        from hpml.tracking.dataset import log_dataset

        datamodules = parts[0].members
        datamodule = datamodules[index if len(datamodules) > 1 else 0]
        _best_effort(log_dataset, datamodule)
        if not trained:
            return
        if index in parts[1].diverged:
            _best_effort(mlflow.set_tag, DIVERGED_TAG, str(parts[1].diverged[index]))
        if tracker.log_model:
            net, example = parts[1].members[index].net, logged_model.example_input(datamodule)
            try:
                logged_model.log_model(net, example)
            except Exception as exc:  # as TrackedRun.log_model: the run stays FINISHED
                log.warning("could not log member %d's model to MLflow: %s", index, exc)
                _best_effort(mlflow.set_tag, logged_model.ERROR_TAG, str(exc)[:5000])

    return record


def copy_logs(members: Sequence[tuple[DictConfig, HydraJob]]) -> None:
    """The array's job log into every other member's folder (:func:`copy_log`)."""
    leader = members[0][1]
    for _, member_job in members[1:]:
        if member_job.output_dir != leader.output_dir:
            copy_log(leader, member_job)


def copy_log(leader: HydraJob, member: HydraJob) -> None:
    """The array's job log (the first member's folder) into another member's folder, so each
    run's ``logs/`` holds the log of the process that trained it."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    source = leader.output_dir / f"{leader.name}.log"
    if source.is_file():
        member.output_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, member.output_dir / f"{member.name}.log")
