"""A job's Hydra facts, read from the ``hydra`` node, and the tags and run name made of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict

from hpml.hydra_job import HydraJob, SweepPlace
from hpml.tracking.run import sweep_record
from hpml.tracking.store import StoreError
from hpml.tracking.tags import default_run_name, hydra_tags
from tests.conftest import CONF


def hydra_node(overrides: list[str], output_dir: Path, sweep_dir: Path | None) -> DictConfig:
    """The ``hydra`` node a launched job of ``overrides`` gets (in a multirun if ``sweep_dir``)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        hydra = compose("train", overrides=overrides, return_hydra_config=True).hydra
    with open_dict(hydra):
        hydra.runtime.output_dir = str(output_dir)
        hydra.job.name = "train"
        hydra.mode = RunMode.RUN if sweep_dir is None else RunMode.MULTIRUN
        if sweep_dir is not None:
            hydra.sweep.dir = str(sweep_dir)
            hydra.job.num = 3
    return hydra


def test_a_single_run_has_no_sweep_place_and_names_its_choices(tmp_path: Path) -> None:
    job = HydraJob.of(hydra_node(["model=lstm", "seed=1"], tmp_path, None))
    assert not HydraConfig.initialized()  # read from the node, not from Hydra's global
    assert job.sweep is None
    assert job.config_dir == tmp_path / ".hydra"
    assert job.overrides == ("model=lstm", "seed=1")
    tags = hydra_tags(job)
    assert tags["hpml.command"] == "python -m hpml.train model=lstm seed=1"
    assert tags["hpml.output_dir"] == str(tmp_path)
    assert tags["hpml.choice.model"] == "lstm"
    assert not any(key.startswith("hpml.choice.hydra") for key in tags)
    assert "hpml.sweep_dir" not in tags and "hpml.job_num" not in tags
    assert default_run_name(job) == "lstm/synthetic_text"
    assert sweep_record(job) is None


def test_a_sweep_job_knows_its_place_and_its_parent_record_is_required(tmp_path: Path) -> None:
    job = HydraJob.of(hydra_node(["model=lstm", "seed=2"], tmp_path / "3", tmp_path))
    assert job.sweep == SweepPlace(str(tmp_path), 3, "model=lstm,seed=2")
    tags = hydra_tags(job)
    assert tags["hpml.sweep_dir"] == str(tmp_path)
    assert tags["hpml.job_num"] == "3"
    assert tags["hpml.sweep_command"].startswith("python -m hpml.train")
    assert default_run_name(job) == "lstm/synthetic_text [model=lstm,seed=2]"
    with pytest.raises(StoreError, match="no sweep parent run recorded"):
        sweep_record(job)


def test_no_hydra_output_subdir_means_no_hydra_files(tmp_path: Path) -> None:
    assert HydraJob.of(hydra_node(["hydra.output_subdir=null"], tmp_path, None)).config_dir is None


def test_outside_hydra_the_command_line_is_the_command() -> None:
    assert list(hydra_tags(None)) == ["hpml.command"]
    assert default_run_name(None) == "hpml"
