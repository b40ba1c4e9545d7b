"""What a sweep and its runs record, in-process: the parent's name, its summary when Hydra skips
the end-of-sweep callback, and per-job paths as tags rather than params."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from hpml.cli import CONF_DIR
from hpml.hydra_job import HydraJob, SweepPlace
from hpml.tracking.records import PATH_TAG, flatten, split_paths
from hpml.tracking.sweep import MlflowSweepCallback, sweep_name, swept_keys


def sweep_config(overrides: list[str], task: list[str], sweep_dir: Path) -> DictConfig:
    """The config Hydra hands the sweep callbacks: composed with ``overrides``, ``task`` as the
    command line's overrides (sweeps included, which compose itself refuses)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.overrides.task = task
        cfg.hydra.sweep.dir = str(sweep_dir)
        cfg.hydra.runtime.cwd = str(sweep_dir.parent)
    return cfg


@pytest.fixture
def hydra_config_cleared():
    yield
    HydraConfig.instance().cfg = None


def test_a_sweep_is_named_after_its_experiment_and_swept_keys(root, tmp_path: Path) -> None:
    study = sweep_config(
        ["experiment=vae_pruning"],
        ["experiment=vae_pruning", "replicate=0,1,2", "trainer.max_epochs=1"],
        tmp_path / "sweep",
    )
    assert swept_keys(study) == ["prune", "prune.amount", "replicate"]
    noon = time.mktime((2025, 5, 14, 12, 0, 7, 0, 0, -1))
    assert (
        sweep_name(study, noon) == "vae_pruning: prune x prune.amount x replicate (05-14 12:00:07)"
    )
    # a value given on the command line replaces the experiment's sweep of that key
    fixed = sweep_config(
        ["experiment=vae_pruning"], ["experiment=vae_pruning", "prune.amount=0.5"], tmp_path / "s"
    )
    assert swept_keys(fixed) == ["prune"]
    # no experiment: the MLflow experiment's name; range() and choice() sweeps count
    plain = sweep_config(
        ["model=lstm"], ["model=lstm", "data.batch_size=16,32", "seed=range(3)"], tmp_path / "p"
    )
    assert sweep_name(plain, noon) == "hpml: data.batch_size x seed (05-14 12:00:07)"
    # one job: named after its overrides
    one = sweep_config(["model=lstm"], ["model=lstm", "prune=l2_structured"], tmp_path / "o")
    assert sweep_name(one, noon) == "hpml: model=lstm prune=l2_structured (05-14 12:00:07)"


def test_a_sweep_hydra_ends_early_still_closes_its_parent_and_says_where_to_look(
    root, client, tmp_path: Path, capsys: pytest.CaptureFixture[str], hydra_config_cleared
) -> None:
    """Hydra skips ``on_multirun_end`` when a job or the launcher raised: at exit the parent
    still ends (FAILED, not RUNNING) and the summary names the sweep and its page."""
    config = sweep_config(["model=vae"], ["model=vae", "seed=1,2"], tmp_path / "sweep")
    callback = MlflowSweepCallback()
    callback.on_multirun_start(config)
    callback._not_ended(config)  # what atexit runs
    parent = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    assert parent.info.status == "FAILED"
    assert parent.info.run_name.startswith("hpml: seed (")
    summary, where = capsys.readouterr().err.strip().splitlines()
    assert summary == (
        f"hpml: sweep {parent.info.run_name} ({parent.info.run_id}): 0 runs, 0 failed, "
        "stopped before its end (the error above)"
    )
    assert "make ui" in where and where.endswith(f"/runs/{parent.info.run_id}")
    callback._not_ended(config)  # once only
    assert capsys.readouterr().err == ""


def test_a_sweep_that_ended_leaves_nothing_for_exit(
    root, client, tmp_path: Path, capsys: pytest.CaptureFixture[str], hydra_config_cleared
) -> None:
    config = sweep_config(["model=vae"], ["model=vae", "seed=1,2"], tmp_path / "sweep")
    callback = MlflowSweepCallback()
    callback.on_multirun_start(config)
    callback.on_multirun_end(config)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].endswith(": 0 runs, 0 failed"), lines
    callback._not_ended(config)
    assert capsys.readouterr().err == ""
    parent = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    assert parent.info.status == "FINISHED"


def test_per_job_paths_are_tags_and_every_knob_a_param(composed, root: Path) -> None:
    cfg = composed(["model=lstm", "callbacks=default"])
    output_dir = root / "outputs" / "job"
    sweep_dir = root / "multirun" / "s"
    job = HydraJob(
        output_dir=output_dir,
        config_dir=None,
        name="train",
        overrides=(),
        choices={},
        sweep=SweepPlace(str(sweep_dir), 0, ""),
    )
    flat = flatten(OmegaConf.to_container(cfg, resolve=True))
    flat["profile.trace_file"] = f"{sweep_dir}/0/trace.json"  # a path by its value alone
    params, tags = split_paths(flat, job)
    assert set(params) | {k.removeprefix(PATH_TAG) for k in tags} == set(flat)
    assert tags[f"{PATH_TAG}paths.output_dir"] == str(output_dir)
    for key in (
        "paths.root_dir",
        "trainer.default_root_dir",
        "callbacks.checkpoint.dirpath",
        "data.data_dir",
        "profile.trace_file",
    ):
        assert f"{PATH_TAG}{key}" in tags, key
        assert key not in params, key
    # knobs stay params, "dir" inside a word included
    for key in ("model.net.bidirectional", "data.batch_size", "logger.tracking_uri"):
        assert key in params, key
    assert not any(str(output_dir) in value for value in params.values())


def test_a_sweep_jobs_run_name_fits_the_sql_stores_column():
    """PostgreSQL refuses a run name over MLflow's 250 characters (SQLite keeps it whole): a
    job of many overrides is named within that, its whole command being a tag."""
    from hpml.tracking.tags import RUN_NAME_MAX, default_run_name, fitted_run_name

    overrides = tuple(f"data.option_{i}={i}" for i in range(30))
    place = SweepPlace(dir="multirun/x", num=1, override_dirname=",".join(overrides))
    choices = {"model": "vae", "data": "synthetic_mnist"}
    name = default_run_name(HydraJob(Path("out"), None, "train", overrides, choices, place))
    assert len(name) == RUN_NAME_MAX and name.startswith("vae/synthetic_mnist [data.option_0=0,")
    assert name.endswith("...")
    assert fitted_run_name("short") == "short"
