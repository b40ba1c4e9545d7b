"""Sweeps on Hydra's joblib launcher: parallel worker processes, nothing leaked between jobs,
every job a child of the sweep's parent, on the local store and on a ``make server``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from mlflow import MlflowClient
from omegaconf import OmegaConf

from tests.conftest import QUICK, run_cli
from tests.servers import MakeServer

pytestmark = pytest.mark.slow
# a worker's first run would measure its compute peak at that worker's thread count (seconds
# of micro-benchmarks a job): these tests are about the workers, not MFU
LAUNCHED = [*QUICK, "callbacks.perf.measured_peak=false"]
JOBLIB = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "model=vae", *LAUNCHED]


def sweep_runs(client: MlflowClient) -> tuple[object, list]:
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    parents = [r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"]
    assert len(parents) == 1, [r.data.tags for r in runs]
    children = [r for r in runs if r is not parents[0]]
    return parents[0], children


@pytest.fixture
def make_server(tmp_path: Path, store_template: Path) -> Iterator[MakeServer]:
    folder = tmp_path / "server"
    folder.mkdir()
    server = MakeServer(folder, store_template)
    try:
        server.start(timeout_s=120)
        yield server
    finally:
        server.stop()


def test_joblib_sweep_into_a_make_server_runs_one_parent_and_leaks_no_threads(make_server, root):
    # jobs 0 and 1 (threads=N) start the two workers; jobs 2 and 3 (threads=null) reuse them
    explicit = (os.cpu_count() or 1) + 1  # more than any default: an inherited value shows
    sweep = [*JOBLIB, f"threads={explicit},null", "seed=1,2"]
    result = run_cli(sweep, root, env={"MLFLOW_TRACKING_URI": make_server.uri})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sweep" in result.stderr and "4 runs, 0 failed" in result.stderr
    client = MlflowClient(make_server.uri)
    parent, children = sweep_runs(client)
    assert len(children) == 4
    assert {r.info.status for r in children} == {"FINISHED"}
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    jobs = {(r.data.params["threads"], r.data.params["seed"]) for r in children}
    assert jobs == {(str(explicit), "1"), (str(explicit), "2"), ("None", "1"), ("None", "2")}
    pids = {r.data.tags["hpml.checkpoint.writer"].rsplit(":", 1)[-1] for r in children}
    assert 1 < len(pids) <= 2, pids  # two worker processes, each ran two jobs
    for run in children:
        threads = int(run.data.tags["hpml.cpu_threads"])
        if run.data.params["threads"] == "None":
            assert threads <= (os.cpu_count() or 1), "a reused worker kept the last job's threads"
        else:
            assert threads == explicit
        # artifacts go through the server into its own folder
        assert [a.path for a in client.list_artifacts(run.info.run_id, "model")] == [
            "model/architecture.txt"
        ]
    assert len(list((make_server.folder / "artifacts").rglob("architecture.txt"))) == 4
    assert MlflowClient(f"sqlite:///{root}/mlflow.db").get_experiment_by_name("hpml") is None


def test_submitit_local_runs_two_jobs_into_one_parent(root):
    args = ["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10", "model=vae"]
    result = run_cli([*args, *LAUNCHED, "seed=1,2"], root)
    assert result.returncode == 0, result.stderr[-3000:]
    parent, children = sweep_runs(MlflowClient(f"sqlite:///{root}/mlflow.db"))
    assert sorted(r.data.params["seed"] for r in children) == ["1", "2"]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    assert {r.info.status for r in children} == {"FINISHED"}
    # each job ran in a process of its own, as submitit starts them
    pids = {r.data.tags["hpml.checkpoint.writer"].rsplit(":", 1)[-1] for r in children}
    assert len(pids) == 2


def sbatch_script(launcher, folder: Path) -> str:
    """The sbatch file hydra-submitit-launcher would submit for the ``hydra.launcher`` node
    ``launcher``, mapped the way its
    ``launch`` maps the config onto submitit's executor (base keys as-is, others slurm_)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    params = OmegaConf.to_container(launcher, resolve=True)
    params.pop("_target_")
    params.pop("submitit_folder")
    executor = submitit.AutoExecutor(
        cluster="slurm", folder=folder, slurm_max_num_timeout=params.pop("max_num_timeout")
    )
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    return executor._executor._make_submission_file_text("python -m hpml.train", "uid")


def test_slurm_config_renders_sbatch_directives_from_the_config(composed, tmp_path, monkeypatch):
    # submitit only checks that srun exists on a cluster; this one fails if it is ever run
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cfg = composed(
        [
            "hydra/launcher=slurm",
            "hydra.launcher.partition=gpu",
            "hydra.launcher.account=proj42",
            "hydra.launcher.qos=high",
            "hydra.launcher.gpus_per_node=2",
            "hydra.launcher.tasks_per_node=2",
            "hydra.launcher.cpus_per_task=6",
            "hydra.launcher.mem_gb=64",
            "hydra.launcher.timeout_min=90",
            "hydra.launcher.array_parallelism=4",
            "hydra.launcher.setup=[module load cuda/12.4]",
        ]
    )
    whole = OmegaConf.create(OmegaConf.to_container(cfg) | {"hydra": HydraConfig.get()})
    launcher = whole.hydra.launcher  # its ${hydra.sweep.dir} and ${paths...} resolve in whole
    script = sbatch_script(launcher, tmp_path / "submitit")
    directives = {line.split()[1] for line in script.splitlines() if line.startswith("#SBATCH")}
    assert {
        "--partition=gpu",
        "--account=proj42",
        "--qos=high",
        "--gpus-per-node=2",
        "--ntasks-per-node=2",
        "--cpus-per-task=6",
        "--mem=64GB",
        "--time=90",
        "--nodes=1",
        "--signal=USR2@120",
    } <= directives, script
    assert "module load cuda/12.4" in script
    assert launcher.max_num_timeout == 3  # requeued after a time limit, 3 times
