"""``python -m hpml.train``: compose once, build once, validate, run, return.

A single run is one member of :func:`hpml.lifecycle.run_members`; a fused array (``fuse=array``,
whose launcher calls :func:`array_task`) is several. Heavy imports stay inside the functions, so
``--help`` and config errors answer at once.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from hpml import garbage
from hpml.build import CONF_DIR, Member, Parts, build_parts, build_tracker
from hpml.cli import check_args, hoist_flags, report_failure, trainer_overrides
from hpml.console import compare_hint, quiet_upstream
from hpml.errors import HpmlError, one_line
from hpml.hydra_job import HydraJob
from hpml.lifecycle import follow, run_members
from hpml.tracking.jobs import write_job_status
from hpml.tracking.redact import redact_text
from hpml.tracking.resume import resume_args
from hpml.validate import check, check_config

if TYPE_CHECKING:  # imports MLflow: train imports it once the config is judged
    from hpml.tracking.run import MlflowTracker


def hydra_job() -> HydraJob | None:
    """What Hydra knows of the job in progress, None outside Hydra."""
    return HydraJob.of(HydraConfig.get()) if HydraConfig.initialized() else None


def quiet(cfg: DictConfig) -> None:
    """The known upstream noise dropped for job ``cfg`` unless ``hpml.verbose``: first, before
    its store, torch or its trainer can make any."""
    quiet_upstream(verbose=bool(OmegaConf.select(cfg, "hpml.verbose", default=False)))


def patience(job: HydraJob | None) -> float:
    """How many times its preflight bound job ``job`` waits for the store to answer: a sweep's
    jobs ask a store its parent run already reached (``SWEEP_JOB_PATIENCE``)."""
    from hpml.tracking.remote import SWEEP_JOB_PATIENCE

    return SWEEP_JOB_PATIENCE if job is not None and job.sweep is not None else 1


def job_parts(cfg: DictConfig, job: HydraJob | None) -> Parts:
    """Job ``cfg``'s parts, built once and checked (the config alone first); raises what
    refuses it."""
    check_config(cfg)
    parts = build_parts(cfg)
    check(parts, cfg, job)
    return parts


def train(cfg: DictConfig) -> dict[str, float]:
    """Fit and test the configured model inside one MLflow run; return the final metrics. A
    refused sweep job is recorded as a FAILED child of the sweep; a refused single run leaves
    no run. The config alone is judged first, before Lightning and MLflow are imported."""
    quiet(cfg)
    job = hydra_job()
    in_sweep = job is not None and job.sweep is not None
    refused: HpmlError | None = None
    try:
        check_config(cfg)
    except HpmlError as exc:
        if not in_sweep:
            raise
        refused = exc
    from hpml.tracking.remote import prepare  # imports MLflow, now the config is judged

    prepare(cfg.logger, patience(job))  # a bad URI or a silent server: one line, before torch
    tracker: MlflowTracker = build_tracker(cfg)
    try:
        if refused is not None:
            raise refused
        parts = build_parts(cfg)
        check(parts, cfg, job)
    except HpmlError as exc:
        tracker.record_refused(cfg, job, exc)
        raise
    [metrics], [run] = run_members(tracker, [Member(cfg, job, parts)])
    if not in_sweep:  # a sweep says it once, at its end
        uri = redact_text(tracker.tracking_uri)
        print(f"hpml: run {run.run_id} finished in {uri}\nhpml: {compare_hint(uri, run.ui_path)}")
    return metrics


def array_task(members: list[Member]) -> list[float | None]:
    """:func:`main` for a fused array's ``members``: each member's optimised metric (NaN for
    a failed array, whose one line is recorded in every member's folder and run)."""
    cfg, job = members[0].cfg, members[0].job
    quiet(cfg)
    try:
        from hpml.tracking.remote import prepare

        prepare(cfg.logger)
        results, _ = run_members(build_tracker(cfg), members)
    except Exception as exc:
        line = report_failure(exc, job.output_dir / f"{job.name}.log")
        for member in members:  # for the sweep to count, as main records it
            write_job_status(member.job.output_dir, failed=True, error=line)
        return [math.nan] * len(members)
    for member in members:
        write_job_status(member.job.output_dir, failed=False)
    name = cfg.optimized_metric
    return [result.get(name) if name else None for result in results]


def compose_job(overrides: list[str], output_dir: Path) -> DictConfig:
    """The job config ``@hydra.main`` would hand ``main``, composed in-process, with the
    runtime fields ``train`` reads filled in and HydraConfig set."""
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
    """Hydra task: a failed job prints one line; a sweep records it and goes on. A process a
    cluster started for a rank other than zero follows rank zero's job."""
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
    """Follow the job Lightning started this process for, if it did, with the config from
    the job's folder. Ctrl-C is left to rank zero; a failure is reported in one line and the
    process still exits 0, as Lightning SIGKILLs rank zero (and its run) when a rank it started
    exits otherwise.
    """
    import signal

    from hpml.distributed import handed_job

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


def command() -> None:
    """``python -m hpml.train``: a process Lightning started for a DDP rank follows its job;
    any other checks its arguments, then runs :func:`main`; full garbage collections held back
    until the job starts, and none as the process exits (:mod:`hpml.garbage`)."""
    with garbage.command():
        if follow_handed_job():
            return
        sys.argv[1:] = trainer_overrides(hoist_flags(sys.argv[1:]))
        sys.argv[1:] = resume_args(sys.argv[1:])  # resume=<run id>: that run's overrides first
        check_args(sys.argv[1:])
        main()


if __name__ == "__main__":
    command()
