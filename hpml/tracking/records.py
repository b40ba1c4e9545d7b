"""What a run records besides its metrics: the config as params and files, the failure, the job's
log files, while the run is active. Per-job paths are tags (``hpml.path.<key>``), not params:
they differ in every job, and would crowd MLflow's compare view."""

from __future__ import annotations

import logging
import re
import time
import traceback
from typing import Any

import mlflow
from mlflow import MlflowClient
from omegaconf import DictConfig, OmegaConf

from hpml.config_tree import leaves
from hpml.errors import one_line
from hpml.hydra_job import HydraJob
from hpml.names import ERROR_TAG, PATH_TAG
from hpml.tracking.redact import redact_config, redact_text

MAX_PARAM_CHARS = 6000  # MLflow 3's limit on one param value
# a key's last part naming a folder: data_dir, default_root_dir, dirpath, output_subdir
FOLDER_KEY = re.compile(r"dir(path)?$")


def flatten(tree: Any) -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``: one MLflow param per config leaf
    (:func:`hpml.config_tree.leaves`), its text cut to MLflow's limit."""
    flat = {key: str(value) for key, value in leaves(tree)}
    return {
        key: text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."
        for key, text in flat.items()
    }


def split_paths(
    flat: dict[str, str], job: HydraJob | None
) -> tuple[dict[str, str], dict[str, str]]:
    """``flat`` as ``(params, tags)``: paths become ``hpml.path.<key>`` tags. A config leaf is a
    path rather than a knob if its key is under ``paths.`` or names a folder, or if its value
    lies inside one of the job's own folders (its output and sweep dirs), however the config
    reached it (``${hydra:...}`` interpolations included)."""
    folders = () if job is None else (str(job.output_dir),)
    if job is not None and job.sweep is not None:
        folders += (job.sweep.dir,)
    params, tags = {}, {}
    for key, text in flat.items():
        named = key.startswith("paths.") or FOLDER_KEY.search(key.rsplit(".", 1)[-1])
        if named or any(text == folder or text.startswith(f"{folder}/") for folder in folders):
            tags[f"{PATH_TAG}{key}"] = text
        else:
            params[key] = text
    return params, tags


def log_config(cfg: DictConfig, job: HydraJob | None, resumed: bool = False) -> None:
    """The resolved config as params (its paths as tags) and as a file, plus Hydra's own record
    of the job. A resumed run keeps its params (MLflow refuses changed values), gains new ones, and
    files each resume's config under ``config/resumed_<time>/``."""
    resolved = redact_config(
        OmegaConf.to_container(cfg, resolve=True), OmegaConf.to_container(cfg, resolve=False)
    )
    params, paths = split_paths(flatten(resolved), job)
    folder = "config"
    if resumed:
        known = MlflowClient().get_run(mlflow.active_run().info.run_id).data.params
        params = {key: value for key, value in params.items() if key not in known}
        folder = f"config/resumed_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    mlflow.log_params(params)
    mlflow.set_tags(paths)
    mlflow.log_text(OmegaConf.to_yaml(resolved), f"{folder}/config_resolved.yaml")
    if job is not None and job.config_dir is not None:
        for path in sorted(job.config_dir.glob("*.yaml")):  # overrides may carry a URI's password
            mlflow.log_text(redact_text(path.read_text()), f"{folder}/hydra/{path.name}")


def log_failure(exc: BaseException) -> None:
    mlflow.set_tag(ERROR_TAG, redact_text(one_line(exc))[:5000])
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
