"""One lifecycle for a job of N >= 1 members, once their parts are built and checked.

:func:`run_members` completes the parts, opens one run per member, fits, tests and closes the
runs; :func:`follow` is the same steps for a DDP rank other than zero, which opens no run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from hpml.build import Assembled, Member, build_model, build_parts, build_tracker, build_trainer
from hpml.console import quiet_upstream
from hpml.errors import HpmlError
from hpml.tracking.jobs import record_run

if TYPE_CHECKING:  # imports MLflow and Lightning: the functions import them when called
    import lightning as L

    from hpml.tracking.logger import Select
    from hpml.tracking.run import MlflowTracker
    from hpml.tracking.tracked import TrackedRun

log = logging.getLogger(__name__)


def fit_and_test(
    cfg: DictConfig,
    parts: Assembled,
    ckpt_path: str | None,
    check: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """``cfg.fit`` then ``cfg.test`` with what :meth:`Job.assemble` made, ``check`` between them;
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


class Job:
    """How a job of one member trains, step by step in :func:`run_members`; a fused array's
    job differs in these steps alone (:class:`hpml.fused.members.Array`)."""

    def __init__(self, members: Sequence[Member], tracker: MlflowTracker) -> None:
        (self.member,), self.tracker = members, tracker

    def folder(self, member: Member) -> Path:
        """Where ``member``'s run is recorded, for a later attempt of its job to find."""
        return Path(member.cfg.paths.output_dir)

    def assemble(self) -> Assembled:
        """The job's parts, completed before its run opens: its model built for its data (seeded,
        the data prepared), then the trainer, with no logger until the run gives it its own."""
        cfg, parts = self.member.cfg, self.member.parts
        model = build_model(cfg, parts.datamodule)
        return Assembled(parts.datamodule, model, build_trainer(cfg, parts.callbacks, array=False))

    def start_points(self) -> tuple[list[str | None], str | None]:
        """The run to reopen (None: a fresh one) and the checkpoint to resume from:
        ``resume=<run id>``, or a requeued sweep job's earlier run."""
        from hpml.tracking.resume import requeued_run, resume_point

        job, resume = self.member.job, self.member.cfg.get("resume")
        folder = self.folder(self.member)
        if resume is None and job is not None and job.sweep is not None:
            resume = requeued_run(self.tracker, folder)
        resumed, ckpt_path = resume_point(self.tracker, resume, folder)
        return [resumed], ckpt_path

    def tags(self, index: int) -> dict[str, str]:
        """Member ``index``'s run tags beyond the environment's and Hydra's."""
        return {}

    def outcome(self, parts: Assembled, index: int) -> tuple[Any, Any, dict[str, str]]:
        """Member ``index``'s data module and model in ``parts``; its run's tags once trained."""
        return parts.datamodule, parts.model, {}

    def select(self, index: int) -> Select | None:
        """The metrics member ``index``'s run keeps, named as it logs them (None: all)."""
        return None

    def training(self, run_ids: str) -> contextlib.AbstractContextManager[None]:
        """Around the fit and test of the runs ``run_ids``."""
        return contextlib.nullcontext()

    def results(self, metrics: dict[str, float], parts: Assembled) -> list[dict[str, float]]:
        """Each member's final metrics, from those fit and test left."""
        return [metrics]


def run_members(
    tracker: MlflowTracker, members: Sequence[Member]
) -> tuple[list[dict[str, float]], list[TrackedRun]]:
    """Train checked ``members`` as one job, one run each under the sweep's parent: one member
    is a single job (:class:`Job`), several a fused array. The parts are completed first: what
    stops them (a download, a resume the cluster's processes cannot make) is recorded as a
    FAILED run per member; a SIGTERM or Ctrl-C from then on ends the job as one during training
    does. Each member's final metrics and its run, in order; an array member whose loss stopped
    being finite returns NaN, tagged with the step."""
    from hpml.distributed import hand_off, processes
    from hpml.fused.members import Array
    from hpml.tracking.resume import restarted_run
    from hpml.tracking.stop import StopOnSignals
    from hpml.worker import start_job

    restarted = partial(restarted_run, tracker)
    shape = Job(members, tracker) if len(members) == 1 else Array(members, restarted)
    cfg, job = members[0].cfg, members[0].job
    start_job(cfg.get("threads"))
    # `import lightning` adds its own console handler; Hydra's job logging already prints and
    # files every record, so without this each Lightning message shows twice.
    logging.getLogger("lightning").handlers.clear()
    folders = [shape.folder(member) for member in members]
    resume, ckpt_path = shape.start_points()
    tags = [shape.tags(index) for index in range(len(members))]

    def record(run: TrackedRun, trained: bool) -> None:  # as each run ends
        datamodule, model, outcome = shape.outcome(parts, run.member or 0)  # one job's: None
        run.log_dataset(datamodule)
        if trained:
            for key, value in outcome.items():
                run.set_tag(key, value)
            run.log_model(model.net, datamodule)

    with contextlib.ExitStack() as stack:
        stop = stack.enter_context(StopOnSignals(job))  # from the data's download on
        try:
            parts = shape.assemble()
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
        for folder, run in zip(folders, runs, strict=True):
            record_run(folder, run.run_id)
            run.set_device(trainer.strategy.root_device, processes(trainer))
        trainer.loggers = [run.lightning_logger(shape.select(i)) for i, run in enumerate(runs)]
        name, output_dir = job.name if job is not None else "train", Path(cfg.paths.output_dir)
        with (
            shape.training(stop.run_id),
            hand_off(cfg, trainer, output_dir, name, runs[0].run_id, ckpt_path),
        ):
            metrics = fit_and_test(cfg, parts, ckpt_path, stop.check)
    return shape.results(metrics, parts), runs


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
    tracker = build_tracker(cfg)
    assembled = Job([Member(cfg, None, parts)], tracker).assemble()
    assembled.trainer.loggers = [tracker.attached_logger(run_id)]
    fit_and_test(cfg, assembled, ckpt_path)
