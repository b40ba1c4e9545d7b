"""The fused counterpart of :func:`hpml.train.train`: the jobs of a sweep that differ only in
values that keep shapes, trained as one array in this process (``fuse=array``).

The fused launcher (``hydra_plugins/hpml_fused_launcher``) decides which jobs fuse and hands
them here with their Hydra facts. Each member is built exactly as its serial job would be
(seeded, then its data, then its model), gets its own child run of the sweep, and returns its
own metrics; the array trains with the first member's trainer config.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from hpml.errors import HpmlError, one_line
from hpml.hydra_job import HydraJob
from hpml.names import MEMBER_PREFIX, member_prefix
from hpml.tracking.jobs import record_run, write_job_status
from hpml.train import build, tracker_of

log = logging.getLogger(__name__)


def assemble_array(
    members: Sequence[tuple[DictConfig, HydraJob]], loggers: list[Any]
) -> tuple[Any, Any, Any]:
    """The array's data, model and trainer; each member seeded and built as its own job."""
    import lightning as L
    from omegaconf import OmegaConf

    from hpml.callbacks.epoch_summary import EpochSummary
    from hpml.callbacks.fused import MemberStats, member_targets
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
    callbacks = [
        build(f"callbacks.{name}", cfg.callbacks[name], **(changes or {}))
        for name, changes in cfg.fuse.callbacks.items()
        if cfg.callbacks.get(name)
    ]
    per_member = set(cfg.fuse.member_callbacks)
    if "model_stats" in per_member and cfg.callbacks.get("model_stats"):
        callbacks.append(MemberStats())
    if "target" in per_member:
        callbacks += member_targets(cfg.callbacks.get("target"), len(members))
    trainer = build(
        "trainer",
        cfg.trainer,
        callbacks=[*callbacks, EpochSummary()],
        logger=loggers,
        enable_checkpointing=False,
        enable_progress_bar=progress_bar(cfg.trainer.get("enable_progress_bar")),
    )
    return FusedData(datamodules, shared), FusedArray(models, shared), trainer


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
    """Fit and test ``members`` as one array; each member's final metrics, in order."""
    from hpml.tracking.fused import close_member, member_loggers, open_member
    from hpml.tracking.stop import StopOnSignals
    from hpml.validate import validate
    from hpml.worker import start_job

    cfg, job = members[0]
    tracker = tracker_of(cfg)
    refused_members(tracker, members, validate)
    start_job(cfg.get("threads"))
    logging.getLogger("lightning").handlers.clear()
    run_ids = [
        open_member(tracker, member_cfg, member_job, len(members), index, str(job.output_dir))
        for index, (member_cfg, member_job) in enumerate(members)
    ]
    for (_, member_job), run_id in zip(members, run_ids, strict=True):
        record_run(member_job.output_dir, run_id)
    log.info("fused array of %d members: runs %s", len(members), ", ".join(run_ids))
    failure: BaseException | None = None
    metrics: dict[str, Any] = {}
    parts: tuple[Any, Any, Any] | None = None
    try:
        with StopOnSignals(job) as stop:
            stop.run_id = run_ids[0]
            parts = assemble_array(members, member_loggers(tracker, run_ids))
            data, model, trainer = parts
            stop.trainer = trainer
            set_device_tags(trainer, len(members))
            if cfg.fit:
                trainer.fit(model, datamodule=data)
                stop.check()
                metrics |= dict(trainer.callback_metrics)
            if cfg.test:
                trainer.test(model, datamodule=data, verbose=False)
                metrics |= dict(trainer.callback_metrics)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        for index, (_, member_job) in enumerate(members):
            if member_job.output_dir != job.output_dir:
                copy_log(job, member_job)
            error = None if failure is None else one_line(failure)
            write_job_status(member_job.output_dir, failed=failure is not None, error=error)
            close_member(run_ids[index], member_job, failure, _dataset_logger(parts, index))
    return [member_metrics(metrics, index) for index in range(len(members))]


def refused_members(
    tracker: Any, members: Sequence[tuple[DictConfig, HydraJob]], check: Any
) -> None:
    """Validate every member; if one is refused, the whole array is: each member is recorded
    as a FAILED run of the sweep (the refused with its own reason, the others with it), so
    the sweep's page lists every job, and the first refusal is raised."""
    reasons: list[HpmlError | None] = []
    for member_cfg, member_job in members:
        try:
            check(member_cfg, member_job)
            reasons.append(None)
        except HpmlError as exc:
            reasons.append(exc)
    first = next((reason for reason in reasons if reason is not None), None)
    if first is None:
        return
    index = reasons.index(first)
    for (member_cfg, member_job), reason in zip(members, reasons, strict=True):
        because = reason or HpmlError(f"member {index} of this fused array was refused: {first}")
        tracker.record_refused(member_cfg, member_job, because)
    raise first


def set_device_tags(trainer: Any, size: int) -> None:
    """The device the array trains on, in every member's run, as a serial run tags it."""
    from hpml.callbacks.logging import set_tags
    from hpml.tracking.tags import device_tags

    set_tags(trainer, {**device_tags(trainer.strategy.root_device), "hpml.processes": "1"})


def _dataset_logger(parts: tuple[Any, Any, Any] | None, index: int) -> Any:
    """What records member ``index``'s dataset in its run, once the array's data exists."""

    def log_dataset() -> None:
        if parts is None:
            return
        from hpml.tracking.dataset import log_dataset as log_input

        members = parts[0].members
        log_input(members[index if len(members) > 1 else 0])

    return log_dataset


def copy_log(leader: HydraJob, member: HydraJob) -> None:
    """The array's job log (the first member's folder) into another member's folder, so each
    run's ``logs/`` holds the log of the process that trained it."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    source = leader.output_dir / f"{leader.name}.log"
    if source.is_file():
        member.output_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, member.output_dir / f"{member.name}.log")
