"""``python -m hpml.train``: one lifecycle for a job of N >= 1 members.

Hydra composes the config once; :func:`checked` builds the parts once and validates them
(:mod:`hpml.validate`); :func:`run_members` opens one run per member under the sweep's parent,
completes the parts, fits, tests and closes the runs. A single run is one member; a fused array
(``fuse=array``, :mod:`hpml.fused`, whose launcher calls :func:`array_task`) is several, wrapped
into one module. Everything heavy is imported inside the functions, so ``--help`` and config
errors answer at once.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from hpml.build import CONF_DIR, Member, Parts, build, build_callbacks
from hpml.cli import check_args, hoist_flags, report_failure
from hpml.console import compare_hint, progress_bar, quiet_upstream
from hpml.errors import HpmlError
from hpml.hydra_job import HydraJob
from hpml.tracking.jobs import record_run, write_job_status
from hpml.tracking.redact import redact_text
from hpml.tracking.resume import resume_args
from hpml.validate import validate

log = logging.getLogger(__name__)


def hydra_job() -> HydraJob | None:
    """What Hydra knows of the job in progress, None outside Hydra. The one read of Hydra's
    global ``HydraConfig`` besides ``main``'s: tracking and validation get its values passed."""
    return HydraJob.of(HydraConfig.get()) if HydraConfig.initialized() else None


def tracker_of(cfg: DictConfig, job: HydraJob | None = None) -> Any:
    """The ``logger`` group's tracker, once output is quieted (a sweep's later jobs say less)
    and the store answers (a bad URI or a silent server: one line, before torch loads)."""
    from hpml.tracking.remote import SWEEP_JOB_PATIENCE, prepare

    in_sweep = job is not None and job.sweep is not None
    quiet_upstream(
        verbose=bool(OmegaConf.select(cfg, "hpml.verbose", default=False)),
        repeated=in_sweep and job.sweep.num > 0,
    )
    prepare(cfg.logger, patience=SWEEP_JOB_PATIENCE if in_sweep else 1)
    return build("logger", cfg.logger)


def checked(tracker: Any, cfg: DictConfig, job: HydraJob | None) -> Parts:
    """The job's parts, built once and validated (:mod:`hpml.validate`). A refused job of a
    sweep is recorded as a FAILED child of the sweep so its page lists every job; a refused
    single run leaves no run."""
    try:
        return validate(cfg, job)
    except HpmlError as exc:
        tracker.record_refused(cfg, job, exc)
        raise


def assemble(members: Sequence[Member], loggers: list[Any]) -> Parts:
    """The job's parts, completed: each member seeded, its data prepared and its model built,
    as its serial job would be, then (several members: a fused array wrapped around theirs,
    :mod:`hpml.fused`) the trainer, logging to ``loggers``."""
    import lightning as L

    from hpml.callbacks.epoch_summary import EpochSummary

    for member in members:
        L.seed_everything(member.cfg.seed, workers=True, verbose=False)
        member.parts.datamodule.prepare_data()
        member.parts.model = build("model", member.cfg.model, data=member.parts.datamodule.spec)
    cfg, whole = members[0].cfg, members[0].parts
    extra: dict[str, Any] = {}
    if len(members) > 1:
        from hpml.fused.members import wrapped

        whole = wrapped([m.cfg for m in members], [m.parts for m in members])
        extra = {"enable_checkpointing": False}  # an array keeps no checkpoint
    whole.trainer = build(
        "trainer",
        cfg.trainer,
        callbacks=[*whole.callbacks, EpochSummary()],
        logger=loggers if len(loggers) > 1 else loggers[0],
        enable_progress_bar=progress_bar(cfg.trainer.get("enable_progress_bar")),
        **extra,
    )
    return whole


def fit_and_test(
    cfg: DictConfig,
    parts: Parts,
    ckpt_path: str | None,
    check: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """``cfg.fit`` then ``cfg.test`` with what :func:`assemble` made; the metrics they left.

    ``check`` runs between the two (a stop signal taken after fit's last check ends it there).
    """
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


def train(cfg: DictConfig) -> dict[str, float]:
    """Fit and test the configured model inside one MLflow run; return the final metrics."""
    job = hydra_job()
    tracker = tracker_of(cfg, job)
    parts = checked(tracker, cfg, job)
    if job is None or job.sweep is None:
        from hpml.fused.plan import unfused_note

        note = unfused_note(cfg, None, multirun=False)
        if note is not None:
            print(f"hpml: {note}")
    [metrics], [run] = run_members(tracker, [Member(cfg, job, parts)])
    if job is None or job.sweep is None:  # a sweep says it once, at its end
        uri = redact_text(tracker.tracking_uri)
        print(f"hpml: run {run.run_id} finished in {uri}\nhpml: {compare_hint(uri, run.ui_path)}")
    return metrics


def array_task(members: list[Member]) -> list[float | None]:
    """What :func:`main` is for one job, for a fused array's checked ``members`` (the fused
    launcher's, :mod:`hpml.fused.launch`): a failure is one line, recorded in every member's
    folder and run; each member's optimised metric (NaN for a failed array)."""
    cfg, job = members[0].cfg, members[0].job
    try:
        results, _ = run_members(tracker_of(cfg), members)
    except Exception as exc:
        line = report_failure(exc, job.output_dir / f"{job.name}.log")
        for member in members:  # for the sweep to count, as main records it
            write_job_status(member.job.output_dir, failed=True, error=line)
        return [math.nan] * len(members)
    for member in members:
        write_job_status(member.job.output_dir, failed=False)
    name = cfg.optimized_metric
    return [result.get(name) if name else None for result in results]


def run_members(
    tracker: Any, members: Sequence[Member]
) -> tuple[list[dict[str, float]], list[Any]]:
    """Train checked ``members`` as one job, one run each under the sweep's parent: one member
    is a single job, several a fused array (:mod:`hpml.fused`) trained with the first one's
    trainer config. Each member's final metrics and its run, in order.

    Each run ends as the job ended: FINISHED, FAILED with the error, or KILLED by Ctrl-C or
    SIGTERM; an array member whose loss stopped being finite returns NaN as its optimised
    metric (its serial job would have logged NaN), tagged with the step.
    """
    from hpml.distributed import hand_off, processes, starts_processes
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
    built: list[Parts] = []

    def record(run: Any, trained: bool) -> None:  # as each run ends
        if not built:
            return
        parts, tags = built[0], {}
        datamodule, model = parts.datamodule, parts.model
        if array:
            datamodule, model, tags = fused.member_parts(parts, run.member)
        run.log_dataset(datamodule)
        if trained:
            for key, value in tags.items():
                run.set_tag(key, value)
            run.log_model(model.net, datamodule)

    with (
        StopOnSignals(job) as stop,
        tracker.runs([(m.cfg, m.job) for m in members], resume, tags, record) as runs,
    ):
        stop.run_id, stop.resumed_from = ", ".join(run.run_id for run in runs), ckpt_path
        for member, run in zip(members, runs, strict=True):
            record_run(member.job.output_dir if array else output_dir, run.run_id)
        if array:
            log.info("fused array of %d members: runs %s", len(members), stop.run_id)
        try:
            loggers = [run.lightning_logger() for run in runs]
            built.append(assemble(members, loggers))
            parts = built[0]
            stop.trainer = trainer = parts.trainer
            if ckpt_path is not None and processes(trainer) > 1 and not starts_processes(trainer):
                raise HpmlError(
                    f"resume: this job's {processes(trainer)} processes were started by the "
                    "cluster (srun, torchrun), and only rank zero would resume from the "
                    "checkpoint; resume it with trainer.num_nodes=1 and the processes "
                    "Lightning starts"
                )
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


def start_points(tracker: Any, members: Sequence[Member]) -> tuple[list[str | None], str | None]:
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
    logger = build("logger", cfg.logger).attached_logger(run_id)
    parts = Parts(build("data", cfg.data), build_callbacks(cfg))  # checked by rank zero
    fit_and_test(cfg, assemble([Member(cfg, None, parts)], [logger]), ckpt_path)


def compose_job(overrides: list[str], output_dir: Path) -> DictConfig:
    """The job config ``@hydra.main`` would hand ``main``, composed in-process (tests, benches).

    ``compose`` leaves the runtime fields a launched job gets unset; ``train`` reads the output
    dir, job name and mode from them, so they are filled in, and HydraConfig is set for the
    ``${hydra:...}`` interpolations.
    """
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    output_dir.mkdir(parents=True, exist_ok=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(output_dir)
        cfg.hydra.job.name = "train"
        cfg.hydra.mode = RunMode.RUN
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Hydra task: a failed job prints one line; a sweep records it and goes on to the next job.

    A process a cluster started for a rank other than zero (``srun``, ``torchrun``) follows rank
    zero's job (:mod:`hpml.distributed`), which opens the run and records how the job ended.
    """
    from hpml.distributed import launched_rank

    if launched_rank() != 0:
        follow(cfg, run_id=None, ckpt_path=None)
        return None
    job = HydraJob.of(HydraConfig.get())
    try:
        metrics = train(cfg)
    except Exception as exc:
        line = report_failure(exc, job.output_dir / f"{job.name}.log")
        write_job_status(job.output_dir, failed=True, error=line)
        if job.sweep is not None:
            return math.nan
        raise SystemExit(1) from None
    write_job_status(job.output_dir, failed=False)
    return metrics.get(cfg.optimized_metric) if cfg.optimized_metric else None


def follow_handed_job() -> bool:
    """Follow the job Lightning started this process for, if it did (:mod:`hpml.distributed`):
    its config comes from the job's folder, not from the command line it repeats.

    Ctrl-C reaches every process of the terminal: rank zero stops the job, then this one. A
    failure here is logged and reported in one line, and the process still exits 0: Lightning
    SIGKILLs rank zero when a rank it started exits otherwise, losing the job's run, while
    rank zero, which records the run, fails on its own at its next collective call.
    """
    import signal

    from hpml.distributed import handed_job
    from hpml.errors import one_line

    handed = handed_job()
    if handed is None:
        return False
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        filename=handed.log_file,
        level=logging.INFO,
        format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s",
    )
    try:
        follow(handed.cfg, handed.run_id, handed.ckpt_path)
    except Exception as exc:
        logging.getLogger(__name__).exception("this rank failed")
        print(f"hpml: error: {one_line(exc)} (traceback: {handed.log_file})", file=sys.stderr)
    return True


if __name__ == "__main__" and not follow_handed_job():
    sys.argv[1:] = hoist_flags(sys.argv[1:])
    sys.argv[1:] = resume_args(sys.argv[1:])  # resume=<run id>: that run's overrides first
    check_args(sys.argv[1:])
    main()
