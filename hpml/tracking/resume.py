"""``resume=<run id>`` and ``resume=last``: continue a stopped run, in the same MLflow run.

The run's own overrides apply first and the new command's after them, so ``resume=<id>
trainer.max_epochs=...`` extends it; training restarts from ``last.ckpt``. A requeued sweep job
finds its unfinished run in its folder and continues it.
"""

from __future__ import annotations

import shlex
import socket
import sys
from pathlib import Path
from typing import Any

from hpml.errors import HpmlError
from hpml.names import COMMAND_TAG, LAST_TAG, WRITER_TAG, choice_tag
from hpml.tracking.checkpoint import unreadable_checkpoint
from hpml.tracking.jobs import earlier_attempt
from hpml.tracking.redact import MASK, redact_text

RESUMABLE = ("KILLED", "FAILED", "RUNNING")  # stopped, crashed, or killed before it could say
CHECKPOINT_ARTIFACTS = "checkpoints"  # artifact folder of last.ckpt and best.ckpt
COMMAND_PREFIX = 3  # "python -m hpml.train" in the hpml.command tag
# Options that change the model's layers during fit (pruning masks or shapes, fake quantisation):
# a checkpoint's state no longer fits the model the config builds, so such runs start afresh.
CHANGES_MODEL = {"prune": lambda option: option != "none", "quant": lambda option: option == "qat"}


class ResumeError(HpmlError):
    """A ``resume=`` value that names no run this command can continue."""


def requested(args: list[str]) -> str | None:
    """The value of a ``resume=`` override in ``args``, or None (also for ``resume=null``)."""
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+") == "resume" and value not in ("", "null", "None"):
            return value
    return None


def _key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def merge_overrides(recorded: list[str], given: list[str]) -> list[str]:
    """The run's own overrides, less those ``given`` sets again, then ``given``; a given
    ``key=value`` replacing a recorded ``+key=...`` becomes ``++key=value``."""
    keys = {_key(arg) for arg in given if "=" in arg and not arg.startswith("-")}
    kept = [
        arg
        for arg in recorded
        if _key(arg) not in keys and _key(arg) != "resume" and MASK not in arg
    ]
    added = {_key(arg) for arg in recorded if arg.startswith("+")}
    given = [
        f"++{arg}" if "=" in arg and arg[0] not in "+~-" and _key(arg) in added else arg
        for arg in given
    ]
    return [*kept, *given]


def last_checkpoint(client: Any, run: Any) -> str | None:
    """Where ``run``'s last checkpoint can be read: its path on disk, else its artifact path."""
    local = run.data.tags.get(LAST_TAG)
    if local and Path(local).is_file():
        return local
    name = Path(local).name if local else "last.ckpt"
    try:
        logged = {
            Path(a.path).name for a in client.list_artifacts(run.info.run_id, CHECKPOINT_ARTIFACTS)
        }
    except Exception:  # an unreachable artifact store: as good as no checkpoint
        return None
    return f"{CHECKPOINT_ARTIFACTS}/{name}" if name in logged else None


def alive(run: Any) -> bool:
    """Whether a RUNNING run's checkpoint writer is a live process on this host (a run killed
    outright stays RUNNING; one on another host cannot be checked and counts as stopped)."""
    host, _, pid = run.data.tags.get(WRITER_TAG, "").rpartition(":")
    if run.info.status != "RUNNING" or host != socket.gethostname() or not pid.isdigit():
        return False
    import psutil  # only a resume asks; a run's start need not load it

    return psutil.pid_exists(int(pid))  # another user's live process included


def _candidates(client: Any, experiment_name: str) -> list[Any]:
    """Stopped runs of the experiment that recorded a checkpoint, most recent first."""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return []
    runs = client.search_runs(
        [experiment.experiment_id],
        "attributes.status != 'FINISHED'",
        max_results=200,
        order_by=["attributes.start_time DESC"],
    )
    return [
        r
        for r in runs
        if r.info.status in RESUMABLE
        and LAST_TAG in r.data.tags
        and not alive(r)
        and not changes_model(r)
    ]


def changes_model(run: Any) -> str:
    """``group=option`` of the run's choices that change the model during fit, or ``""``."""
    chosen = {group: run.data.tags.get(choice_tag(group), "none") for group in CHANGES_MODEL}
    return ", ".join(
        f"{group}={option}" for group, option in chosen.items() if CHANGES_MODEL[group](option)
    )


def _valid(candidates: list[Any]) -> str:
    ids = [run.info.run_id for run in candidates[:3]]
    more = ", ..." if len(candidates) > 3 else ""
    return (
        f"valid: last, or the id of a stopped run with a checkpoint ({', '.join(ids)}{more})"
        if ids
        else "no run of this experiment has a checkpoint to resume from"
    )


def find_run(client: Any, experiment_name: str, value: str) -> Any:
    """The run ``resume=value`` names, checked to be stopped and to have a last checkpoint."""
    from mlflow.exceptions import MlflowException

    candidates = _candidates(client, experiment_name)
    if value == "last":
        for run in candidates:
            if last_checkpoint(client, run) is not None:
                return run
        raise ResumeError(
            f"resume=last: no stopped ({', '.join(RESUMABLE)}) run with a checkpoint "
            f"in experiment '{experiment_name}'"
        )
    try:
        run = client.get_run(value)
    except MlflowException:
        raise ResumeError(
            f"resume={value}: no such run in {redact_text(str(client.tracking_uri))}; "
            f"{_valid(candidates)}"
        ) from None
    if run.info.lifecycle_stage == "deleted":
        raise ResumeError(f"resume={value}: the run is deleted; {_valid(candidates)}")
    if run.info.status not in RESUMABLE:
        raise ResumeError(
            f"resume={value}: the run is {run.info.status}; resume continues "
            f"{', '.join(RESUMABLE)} runs; {_valid(candidates)}"
        )
    if changes_model(run):
        raise ResumeError(
            f"resume={value}: the run trains with {changes_model(run)}, which "
            "changes the model during fit: a checkpoint cannot restore it; run it "
            "again"
        )
    if alive(run):
        raise ResumeError(
            f"resume={value}: the run is still being trained by process "
            f"{run.data.tags[WRITER_TAG]}; stop it first"
        )
    if last_checkpoint(client, run) is None:
        raise ResumeError(
            f"resume={value}: the run has no checkpoint (it stopped before its first "
            f"epoch ended, or ran with trainer.enable_checkpointing=false); "
            f"{_valid(candidates)}"
        )
    return run


def resume_args(args: list[str]) -> list[str]:
    """``args`` with the resumed run's own overrides put first and ``resume=last`` made an id;
    exits with status 2 and one line when ``resume=`` names nothing resumable."""
    value = requested(args)
    if value is None:
        return args
    try:
        if "-m" in args or "--multirun" in args:
            raise ResumeError(f"resume={value} continues one run: drop -m")
        client, experiment_name = _store_of(args)
        run = find_run(client, experiment_name, value)
    except HpmlError as exc:  # ResumeError, or a store that cannot be read
        print(f"hpml: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    given = [f"resume={run.info.run_id}" if requested([arg]) else arg for arg in args]
    command = run.data.tags.get(COMMAND_TAG, "")  # the overrides of the job that made run
    recorded = shlex.split(command)[COMMAND_PREFIX:] if command.startswith("python -m ") else []
    return merge_overrides(recorded, given)


def _store_of(args: list[str]) -> tuple[Any, str]:
    """A client of the store and the experiment name that ``args`` select (only their
    ``logger``, ``paths`` and ``hpml`` overrides count: the rest is checked once merged with
    the run's), output quieted as the job's will be."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from hpml.build import CONF_DIR, build_tracker
    from hpml.console import quiet_upstream
    from hpml.errors import config_file_problem
    from hpml.tracking.remote import prepare

    overrides = [
        a
        for a in args
        if "=" in a
        and not a.startswith("-")
        and _key(a).split(".")[0].split("/")[0] in ("logger", "paths", "hpml")
    ]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("train", overrides=overrides, return_hydra_config=True)
    except Exception as exc:  # a damaged file of conf/: one line naming it
        problem = config_file_problem(exc, [CONF_DIR])
        if problem is None:
            raise
        raise HpmlError(problem) from exc
    HydraConfig.instance().set_config(cfg)
    quiet_upstream(verbose=bool(cfg.hpml.verbose))
    try:
        tracker = build_tracker(cfg)
        prepare(tracker)
        return tracker.client(), tracker.experiment_name
    finally:
        HydraConfig.instance().cfg = None


def requeued_run(tracker: Any, job_dir: Path) -> str | None:
    """The run to continue when this job is a requeued attempt (same job folder) of one that
    stopped with a checkpoint; None for a first attempt, or one that cannot be continued (it
    then starts afresh, saying why)."""
    run_id = earlier_attempt(job_dir)
    if run_id is None:
        return None
    try:
        return find_run(tracker.client(), tracker.experiment_name, run_id).info.run_id
    except ResumeError as exc:
        print(f"hpml: job {job_dir} starts afresh: {exc}", file=sys.stderr)
        return None


def restarted_run(tracker: Any, job_dir: Path) -> str | None:
    """The run of an earlier attempt of the fused array member in ``job_dir`` that did not
    finish (its folder's record names it), if the store still has it: an array keeps no
    checkpoint, so the member starts afresh inside it, saying so; None for a first attempt."""
    run_id = earlier_attempt(job_dir)
    if run_id is None:
        return None
    try:
        run = tracker.client().get_run(run_id)
    except Exception:  # gone, or another store: a new run, as a first attempt gets
        return None
    if run.info.lifecycle_stage != "active":
        return None
    print(
        f"hpml: job {job_dir} starts afresh in its run {run_id}: a fused array keeps no checkpoint",
        flush=True,
    )
    return run.info.run_id


def resume_point(tracker: Any, value: Any, output_dir: Path) -> tuple[str | None, str | None]:
    """``(run id, local last checkpoint)`` for ``resume=value``, the checkpoint downloaded into
    ``output_dir/resumed_from`` if need be and checked to load; ``(None, None)`` without one (a
    reopened run's error tag is cleared as it starts)."""
    if value is None:
        return None, None
    client = tracker.client()
    run = find_run(client, tracker.experiment_name, str(value))
    path = last_checkpoint(client, run)
    if path is None:
        raise ResumeError(f"resume={run.info.run_id}: its last checkpoint is gone")
    if not Path(path).is_absolute():
        download_dir = output_dir / "resumed_from"
        download_dir.mkdir(parents=True, exist_ok=True)
        path = client.download_artifacts(run.info.run_id, path, str(download_dir))
    problem = unreadable_checkpoint(Path(path))
    if problem is not None:
        raise ResumeError(
            f"resume={run.info.run_id}: its last checkpoint {path} cannot be read: {problem}; "
            "it should be the last.ckpt Lightning saved for this run: put it back, or run the "
            "job again without resume="
        )
    return run.info.run_id, path
