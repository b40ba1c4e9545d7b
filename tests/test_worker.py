"""start_job: what an earlier job in the same process changed does not reach the next one."""

from __future__ import annotations

import os

import mlflow
import torch

from hpml.worker import _FIRST, start_job


def test_start_job_undoes_what_an_earlier_job_changed(root, monkeypatch):
    other = next(e for e in torch.backends.quantized.supported_engines if e != _FIRST["engine"])
    first_cache = _FIRST["environ"]["TORCHINDUCTOR_CACHE_DIR"]
    # what a quant job, a compile job and a crashed job leave behind
    torch.backends.quantized.engine = other
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(root / "job0" / "inductor_cache"))
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
    leftover = mlflow.start_run().info.run_id
    torch.set_num_threads(_FIRST["threads"] + 1)

    assert start_job(None) == _FIRST["threads"] == torch.get_num_threads()
    assert torch.backends.quantized.engine == _FIRST["engine"]
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == first_cache
    assert mlflow.active_run() is None
    assert mlflow.MlflowClient().get_run(leftover).info.status == "FAILED"


def test_threads_sets_torch_and_null_gives_back_the_first_count():
    """(A bad count never gets here: ``threads=0`` is refused with the knobs,
    tests/bad_inputs/test_bad_overrides.py.)"""
    try:
        assert start_job(1) == 1 == torch.get_num_threads()
    finally:
        restored = start_job(None)
    assert restored == _FIRST["threads"] == torch.get_num_threads()
