"""A job may share its process with jobs before it (joblib's reused workers, tests): leave it
nothing they changed. :func:`start_job` puts back what the process had before its first job,
then gives torch ``threads`` intra-op threads (null: the process's first count; a bad count is
refused with the config's other knobs, before any job starts)."""

from __future__ import annotations

import os

import mlflow
import torch

from hpml import garbage

CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
# what this process had before its first job (this module is imported by that job's start)
_FIRST = {
    "threads": torch.get_num_threads(),
    "engine": torch.backends.quantized.engine,
    "environ": {name: os.environ.get(name) for name in CACHE_VARIABLES},
}


def start_job(threads: int | None) -> int:
    """Undo what earlier jobs in this process changed; return torch's intra-op thread count.
    A command holding full garbage collections back while it started gets them back here."""
    garbage.job_started()
    while mlflow.active_run() is not None:  # a run an earlier job failed to close
        mlflow.end_run("FAILED")
    torch.backends.quantized.engine = _FIRST["engine"]
    for name, value in _FIRST["environ"].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    wanted = _FIRST["threads"] if threads is None else threads  # checked as a knob before the job
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return wanted
