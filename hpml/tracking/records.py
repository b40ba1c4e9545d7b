"""What a run records besides its metrics: the config as params and files, the failure, the
job's log files. Called while the run is active (``mlflow.active_run()``)."""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any

import mlflow
from mlflow import MlflowClient
from omegaconf import DictConfig, OmegaConf

from hpml.errors import one_line
from hpml.hydra_job import HydraJob
from hpml.tracking.redact import redact_config, redact_text

MAX_PARAM_CHARS = 6000  # MLflow 3's limit on one param value


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``: one MLflow param per config leaf."""
    if isinstance(tree, dict):
        flat: dict[str, str] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    text = str(tree)
    if len(text) > MAX_PARAM_CHARS:
        text = text[: MAX_PARAM_CHARS - 3] + "..."
    return {prefix.rstrip("."): text}


def log_config(cfg: DictConfig, job: HydraJob | None, resumed: bool = False) -> None:
    """The resolved config as params and as a file, plus Hydra's own record of the job (none
    with ``hydra.output_subdir=null``, which tells Hydra to keep none).

    A resumed run keeps the params it has (MLflow refuses changed values) and gains new ones;
    each resume's config goes under ``config/resumed_<time>/``.
    """
    resolved = redact_config(
        OmegaConf.to_container(cfg, resolve=True), OmegaConf.to_container(cfg, resolve=False)
    )
    params, folder = flatten(resolved), "config"
    if resumed:
        known = MlflowClient().get_run(mlflow.active_run().info.run_id).data.params
        params = {key: value for key, value in params.items() if key not in known}
        folder = f"config/resumed_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    mlflow.log_params(params)
    mlflow.log_text(OmegaConf.to_yaml(resolved), f"{folder}/config_resolved.yaml")
    if job is not None and job.config_dir is not None:
        for path in sorted(job.config_dir.glob("*.yaml")):  # overrides may carry a URI's password
            mlflow.log_text(redact_text(path.read_text()), f"{folder}/hydra/{path.name}")


def log_failure(exc: BaseException) -> None:
    mlflow.set_tag("hpml.error", redact_text(one_line(exc))[:5000])
    mlflow.log_text(redact_text("".join(traceback.format_exception(exc))), "error/traceback.txt")


def log_job_log(job: HydraJob | None) -> None:
    """Upload the job's log file (Hydra's job logging), flushed first, and those of its other
    DDP ranks (``<name>_rank<N>.log``, :mod:`hpml.distributed`)."""
    if job is None:
        return
    for handler in logging.getLogger().handlers:
        handler.flush()
    paths = [
        job.output_dir / f"{job.name}.log",
        *sorted(job.output_dir.glob(f"{job.name}_rank*.log")),
    ]
    for path in paths:
        if path.is_file():
            mlflow.log_text(redact_text(path.read_text(errors="replace")), f"logs/{path.name}")
