"""One job across the processes of Lightning's DDP: one MLflow run, one Hydra folder.

Lightning's ``ddp`` strategy runs the command again for each extra device; run again, hpml
would compose anew and open a run per rank. So :func:`hand_off` writes the job's resolved config,
run id and checkpoint into its folder, named in ``HPML_DDP_JOB``, and those processes follow the
job (:func:`handed_job`) without Hydra or a run of their own. Ranks other than zero that a cluster
starts itself (:func:`launched_rank`) follow too.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

HANDOFF = "HPML_DDP_JOB"
HANDOFF_FILE = ".hpml/ddp_job.yaml"  # in the job's output folder
# what Lightning's subprocess launcher sets in the process that starts the others
LAUNCH_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "OMP_NUM_THREADS",
    HANDOFF,
)
FOLLOWER_EXIT_S = 60.0  # after rank zero's job: for the others to finish theirs
# after rank zero failed: for the others to stop before they are killed. One waiting in a
# collective call (where rank zero's failure leaves them) runs no Python, so no signal handler,
# until it returns: the grace only delays its kill; one at a Python point still has it to stop.
STOP_S = 1.0
# the global rank of a process a cluster started, by launcher: torchrun, then srun
RANK_VARIABLES = ("RANK", "SLURM_PROCID")


@dataclass(frozen=True)
class HandedJob:
    """What a follower needs of its job: the resolved config, the run rank zero logs into and
    the checkpoint the job resumes from."""

    cfg: DictConfig
    run_id: str
    ckpt_path: str | None
    log_file: Path  # the follower's own log, beside the job's


def launched_rank() -> int:
    """This process's global rank as a cluster launcher set it; 0 when none did."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def handed_job() -> HandedJob | None:
    """The job this process follows, when Lightning started it for a rank other than zero."""
    path = os.environ.get(HANDOFF)
    rank = os.environ.get("LOCAL_RANK", "0")
    if not path or rank == "0":
        return None
    saved = OmegaConf.load(path)
    return HandedJob(
        cfg=saved.job,
        run_id=saved.run_id,
        ckpt_path=saved.ckpt_path,
        log_file=Path(path).parent.parent / f"{saved.name}_rank{rank}.log",
    )


def processes(trainer: Any) -> int:
    """How many processes the trainer's strategy trains with (devices x nodes)."""
    return int(trainer.num_devices) * int(trainer.num_nodes)


def starts_processes(trainer: Any) -> bool:
    """Whether Lightning will start this job's other processes (not a cluster)."""
    environment = getattr(trainer.strategy, "cluster_environment", None)
    return (
        processes(trainer) > 1
        and environment is not None
        and not environment.creates_processes_externally
    )


@contextmanager
def hand_off(
    cfg: DictConfig,
    trainer: Any,
    output_dir: Path,
    name: str,
    run_id: str,
    ckpt_path: str | None,
) -> Iterator[None]:
    """Let the processes ``trainer`` will start follow this job, from a file of what
    :class:`HandedJob` holds (``cfg`` resolved); undo the launch afterwards. Torch threads are
    shared out among the processes so they do not oversubscribe the cores; the file holds
    credentials, so only its owner reads it, and it goes with the job.

    Args:
        output_dir: the job's folder, where the file goes.
        name: the job's log name, which the followers' logs take with their rank.
    """
    if not starts_processes(trainer):
        yield
        return
    import torch

    before = {key: os.environ.get(key) for key in LAUNCH_VARIABLES}
    job_threads = torch.get_num_threads()
    threads = max(1, job_threads // int(trainer.num_devices))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    path = output_dir / HANDOFF_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = {
        "job": OmegaConf.to_container(cfg, resolve=True),
        "run_id": run_id,
        "ckpt_path": ckpt_path,
        "name": name,
    }
    path.touch(mode=0o600)
    OmegaConf.save(OmegaConf.create(saved), path)
    os.environ[HANDOFF] = str(path)
    failed = True
    try:
        yield
        failed = False
    finally:
        import torch.distributed as dist

        end_followers(trainer, stop=failed)
        path.unlink(missing_ok=True)
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        torch.set_num_threads(job_threads)
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def end_followers(trainer: Any, stop: bool) -> None:
    """Wait for the processes Lightning started to finish the job, within ``FOLLOWER_EXIT_S``;
    with ``stop`` terminate them, and kill them after ``STOP_S``. They are taken from
    Lightning's watcher, which would SIGKILL this process (and its run) when one exits non-zero.
    """
    launched = getattr(getattr(trainer.strategy, "launcher", None), "procs", None)
    if not launched:
        return
    followers = list(launched)
    launched.clear()
    for follower in followers:
        if stop and follower.poll() is None:
            follower.terminate()  # one waiting in a collective call takes the kill below
    for follower in followers:
        try:
            follower.wait(timeout=STOP_S if stop else FOLLOWER_EXIT_S)
        except subprocess.TimeoutExpired:
            follower.kill()
            follower.wait()
