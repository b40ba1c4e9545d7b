"""One lifecycle for a job of N >= 1 members, once their parts are built and checked.

:func:`run_members` completes the parts, opens one run per member, fits, tests and closes the
runs; :func:`follow` is the same steps for a DDP rank other than zero, which opens no run.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from hpml.build import Assembled, Member, build_model, build_parts, build_tracker, build_trainer
from hpml.console import quiet_upstream
from hpml.errors import HpmlError
from hpml.tracking.jobs import record_run

if TYPE_CHECKING:  # imports MLflow and Lightning: the functions import them when called
    import lightning as L

    from hpml.tracking.run import MlflowTracker
    from hpml.tracking.tracked import TrackedRun

log = logging.getLogger(__name__)


def assemble(members: Sequence[Member]) -> Assembled:
    """The job's parts, completed before its runs open: each member's model built as its serial
    job's (seeded, its data prepared), then (several members: a fused array wrapped around
    theirs, :mod:`hpml.fused`) the trainer, with no logger until the runs give it theirs."""
    models = [build_model(m.cfg, m.parts.datamodule) for m in members]
    parts = members[0].parts
    datamodule, model, callbacks = parts.datamodule, models[0], parts.callbacks
    if len(members) > 1:
        from hpml.fused.members import wrapped

        datamodule, model, callbacks = wrapped(members, models)
    trainer = build_trainer(members[0].cfg, callbacks, array=len(members) > 1)
    return Assembled(datamodule, model, trainer)


def fit_and_test(
    cfg: DictConfig,
    parts: Assembled,
    ckpt_path: str | None,
    check: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """``cfg.fit`` then ``cfg.test`` with what :func:`assemble` made, ``check`` between them;
    the metrics they left."""
    trainer, model, datamodule = parts.trainer, parts.model, parts.datamodule
    metrics: dict[str, float] = {}
    if cfg.fit:
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=False)
        check()
        metrics |= {name: float(value) for name, value in trainer.callback_metrics.items()}
    if cfg.test:  # test starts callback_metrics afresh: keep what fit left
        trainer.test(model, datamodule=datamodule, verbose=False)
        metrics |= {name: float(value) for name, value in trainer.callback_metrics.items()}
    return metrics


def run_members(
    tracker: MlflowTracker, members: Sequence[Member]
) -> tuple[list[dict[str, float]], list[TrackedRun]]:
    """Train checked ``members`` as one job, one run each under the sweep's parent: one member
    is a single job, several a fused array. The parts are completed first: what stops them
    (a download, a resume the cluster's processes cannot make) is recorded as a FAILED run per
    member; a SIGTERM or Ctrl-C from then on ends the job as one during training does.
    Each member's final metrics and its run, in order; an array member whose loss stopped being
    finite returns NaN, tagged with the step."""
    from hpml.distributed import hand_off, processes
    from hpml.fused import members as fused
    from hpml.tracking.stop import StopOnSignals
    from hpml.worker import start_job

    cfg, job = members[0].cfg, members[0].job
    array = len(members) > 1
    start_job(cfg.get("threads"))
    # `import lightning` adds its own console handler; Hydra's job logging already prints and
    # files every record, so without this each Lightning message shows twice.
    logging.getLogger("lightning").handlers.clear()
    output_dir = Path(cfg.paths.output_dir)
    resume, ckpt_path = start_points(tracker, members)
    tags = [fused.member_tags(i, len(members), job) if array else {} for i in range(len(members))]

    def record(run: TrackedRun, trained: bool) -> None:  # as each run ends
        datamodule, model, outcome = parts.datamodule, parts.model, {}
        if array:
            datamodule, model, outcome = fused.member_parts(parts, run.member)
        run.log_dataset(datamodule)
        if trained:
            for key, value in outcome.items():
                run.set_tag(key, value)
            run.log_model(model.net, datamodule)

    with contextlib.ExitStack() as stack:
        stop = stack.enter_context(StopOnSignals(job))  # from the data's download on
        try:
            parts = assemble(members)
            check_resume(parts.trainer, ckpt_path)
        except Exception as exc:
            for member in members:
                tracker.record_failed(member.cfg, member.job, exc)
            raise
        stop.trainer = trainer = parts.trainer
        runs = stack.enter_context(
            tracker.runs([(m.cfg, m.job) for m in members], resume, tags, record)
        )
        stop.run_id, stop.resumed_from = ", ".join(run.run_id for run in runs), ckpt_path
        for member, run in zip(members, runs, strict=True):
            record_run(member.job.output_dir if array else output_dir, run.run_id)
        if array:
            log.info("fused array of %d members: runs %s", len(members), stop.run_id)
        trainer.loggers = [
            run.lightning_logger(partial(fused.member_metrics, index=run.member) if array else None)
            for run in runs
        ]
        try:
            name = job.name if job is not None else "train"
            with hand_off(cfg, trainer, output_dir, name, runs[0].run_id, ckpt_path):
                for run in runs:
                    run.set_device(trainer.strategy.root_device, processes(trainer))
                metrics = fit_and_test(cfg, parts, ckpt_path, stop.check)
        finally:
            if array:
                fused.copy_logs([member.job for member in members])
    if not array:
        return [metrics], runs
    results = [fused.member_metrics(metrics, index) for index in range(len(members))]
    for index in parts.model.diverged if cfg.optimized_metric else ():
        results[index][cfg.optimized_metric] = math.nan  # its serial job's metric: NaN
    return results, runs


def check_resume(trainer: L.Trainer, ckpt_path: str | None) -> None:
    """Refuse to resume a job whose processes the cluster started: only rank zero would read
    the checkpoint."""
    from hpml.distributed import processes, starts_processes

    if ckpt_path is not None and processes(trainer) > 1 and not starts_processes(trainer):
        raise HpmlError(
            f"resume: this job's {processes(trainer)} processes were started by the "
            "cluster (srun, torchrun), and only rank zero would resume from the "
            "checkpoint; resume it with trainer.num_nodes=1 and the processes "
            "Lightning starts"
        )


def start_points(
    tracker: MlflowTracker, members: Sequence[Member]
) -> tuple[list[str | None], str | None]:
    """Each member's run to reopen (None: a fresh one), and the checkpoint a single job
    resumes from: ``resume=<run id>``, or a requeued sweep job's earlier run. An array's
    members reopen their earlier attempt's runs and start afresh (an array keeps no checkpoint)."""
    from hpml.tracking.resume import requeued_run, restarted_run, resume_point

    if len(members) > 1:
        return [restarted_run(tracker, m.job.output_dir) for m in members], None
    cfg, job = members[0].cfg, members[0].job
    output_dir = Path(cfg.paths.output_dir)
    resume = cfg.get("resume")
    if resume is None and job is not None and job.sweep is not None:
        resume = requeued_run(tracker, output_dir)
    resumed, ckpt_path = resume_point(tracker, resume, output_dir)
    return [resumed], ckpt_path


def follow(cfg: DictConfig, run_id: str | None, ckpt_path: str | None) -> None:
    """Train ``cfg`` as a DDP rank other than zero (:mod:`hpml.distributed`): the same steps as
    rank zero, logged by rank zero into run ``run_id``; this process opens no run. Its torch
    threads are those it started with: its share of the job's, or its cluster task's CPUs."""
    from hpml.worker import start_job

    quiet_upstream(verbose=bool(OmegaConf.select(cfg, "hpml.verbose", default=False)))
    start_job(None)
    for name in ("lightning", "lightning.fabric", "lightning.pytorch"):  # to this rank's log
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    parts = build_parts(cfg)  # checked by rank zero
    for refused in parts.refused.values():
        raise refused
    assembled = assemble([Member(cfg, None, parts)])
    assembled.trainer.loggers = [build_tracker(cfg).attached_logger(run_id)]
    fit_and_test(cfg, assembled, ckpt_path)
