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

from hpml.analysis.devices import device_name
from hpml.hydra_job import HydraJob
from hpml.tracking.redact import redact_text

RUN_NAME_MAX = 250  # characters: the run's name column of MLflow's SQL stores


def device_tags(device: torch.device) -> dict[str, str]:
    """Name of the device a run computes on, for comparing runs across machines."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {
            "hpml.device": f"cuda: {props.name}",
            "hpml.device_memory_bytes": str(props.total_memory),
        }
    return {
        "hpml.device": f"{device.type}: {device_name(device)}",
        "hpml.cpu_threads": str(torch.get_num_threads()),
    }


def environment_tags() -> dict[str, str]:
    """Versions, host, its CPU (named even when a GPU computes: it feeds the data), load and code
    revision: what can make two runs of one config differ, and what a report's header names."""
    tags = {
        "hpml.host": socket.gethostname(),
        "hpml.os": platform.platform(),
        "hpml.cpu_model": device_name(torch.device("cpu")),
        "hpml.cpu_count": str(os.cpu_count()),
        "hpml.python_version": platform.python_version(),
        "hpml.torch_version": torch.__version__,
        "hpml.cuda_version": str(torch.version.cuda),
        "hpml.cuda_available": str(torch.cuda.is_available()),
        "hpml.load_avg_1m_5m_15m": " ".join(f"{x:.2f}" for x in os.getloadavg()),
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
    tags["hpml.git_commit"] = commit
    tags["hpml.git_dirty"] = str(bool(dirty))
    return tags


def hydra_tags(job: HydraJob | None) -> dict[str, str]:
    """Choices, the job's own reproducible command and its place in a sweep (outside Hydra,
    ``job`` None: the command line as given)."""
    if job is None:
        return {"hpml.command": redact_text(shlex.join(sys.argv))}
    tags = {
        "hpml.command": redact_text(shlex.join(["python", "-m", "hpml.train", *job.overrides])),
        "hpml.output_dir": str(job.output_dir),
        **{
            f"hpml.choice.{group}": str(option)
            for group, option in job.choices.items()
            if not group.startswith("hydra") and option is not None
        },
    }
    if job.sweep is not None:
        tags["hpml.sweep_dir"] = job.sweep.dir
        tags["hpml.sweep_command"] = redact_text(
            shlex.join(["python", "-m", "hpml.train", *sys.argv[1:]])
        )
        tags["hpml.job_num"] = str(job.sweep.num)
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
