"""Tags that make a run reproducible and comparable: code version, machine, sweep position."""

from __future__ import annotations

import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import torch

from hpml import names
from hpml.analysis.devices import device_name
from hpml.hydra_job import HydraJob
from hpml.tracking.redact import redact_text

RUN_NAME_MAX = 250  # characters: the run's name column of MLflow's SQL stores


def device_tags(device: torch.device) -> dict[str, str]:
    """Name of the device a run computes on, for comparing runs across machines."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {
            names.DEVICE_TAG: f"cuda: {props.name}",
            names.DEVICE_MEMORY_TAG: str(props.total_memory),
        }
    return {
        names.DEVICE_TAG: f"{device.type}: {device_name(device)}",
        names.CPU_THREADS_TAG: str(torch.get_num_threads()),
    }


def environment_tags() -> dict[str, str]:
    """Versions, host, its CPU (named even when a GPU computes: it feeds the data), load and code
    revision: what can make two runs of one config differ, and what a report's header names."""
    tags = {
        names.HOST_TAG: socket.gethostname(),
        names.OS_TAG: platform.platform(),
        names.CPU_MODEL_TAG: device_name(torch.device("cpu")),
        names.CPU_COUNT_TAG: str(os.cpu_count()),
        names.PYTHON_TAG: platform.python_version(),
        names.TORCH_TAG: torch.__version__,
        names.CUDA_TAG: str(torch.version.cuda),
        names.CUDA_AVAILABLE_TAG: str(torch.cuda.is_available()),
        names.LOAD_TAG: " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    # the commit checked out where hpml lies, and whether it has uncommitted changes
    here = Path(__file__).resolve().parent
    queries = (["rev-parse", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])
    try:
        commit, dirty = (
            subprocess.run(
                ["git", *args], cwd=here, capture_output=True, text=True, check=True
            ).stdout.strip()
            for args in queries
        )
    except (OSError, subprocess.CalledProcessError):
        return tags
    tags["mlflow.source.git.commit"] = commit
    tags[names.COMMIT_TAG] = commit
    tags[names.DIRTY_TAG] = str(bool(dirty))
    return tags


def hydra_tags(job: HydraJob | None) -> dict[str, str]:
    """Choices, the job's own reproducible command and its place in a sweep (outside Hydra,
    ``job`` None: the command line as given)."""
    if job is None:
        return {names.COMMAND_TAG: redact_text(shlex.join(sys.argv))}
    tags = {
        names.COMMAND_TAG: redact_text(shlex.join(["python", "-m", "hpml.train", *job.overrides])),
        names.OUTPUT_DIR_TAG: str(job.output_dir),
        **{
            names.choice_tag(group): str(option)
            for group, option in job.choices.items()
            if not group.startswith("hydra") and option is not None
        },
    }
    if job.sweep is not None:
        tags[names.SWEEP_DIR_TAG] = job.sweep.dir
        tags[names.SWEEP_COMMAND_TAG] = redact_text(
            shlex.join(["python", "-m", "hpml.train", *sys.argv[1:]])
        )
        tags[names.JOB_NUM_TAG] = str(job.sweep.num)
    return tags


def default_run_name(job: HydraJob | None) -> str:
    """``model/data`` plus the job's overrides in a sweep, so sibling runs read apart in the UI
    (cut to fit, :func:`fitted_run_name`)."""
    if job is None:
        return "hpml"
    name = f"{job.choices.get('model')}/{job.choices.get('data')}"
    if job.sweep is not None and job.sweep.override_dirname:
        name += f" [{redact_text(job.sweep.override_dirname)}]"
    return fitted_run_name(name)


def fitted_run_name(name: str) -> str:
    """``name`` cut to what MLflow's SQL stores keep (``...`` marks the cut): PostgreSQL and
    MySQL refuse a longer one, where SQLite keeps it whole. The job's whole command is a tag."""
    if len(name) <= RUN_NAME_MAX:
        return name
    return name[: RUN_NAME_MAX - 3] + "..."
