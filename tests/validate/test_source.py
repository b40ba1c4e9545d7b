"""A target's signature read from its source agrees with the imported one wherever it is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from hpml.errors import ConfigError, Problems
from hpml.validate import check_config
from hpml.validate.knobs import declared_range
from hpml.validate.signatures import imported
from hpml.validate.source import signature

CONF = Path(__file__).resolve().parents[2] / "conf"


def targets(node: Any) -> set[str]:
    """Every ``_target_`` string under a loaded YAML file."""
    if isinstance(node, dict):
        own = {node["_target_"]} if isinstance(node.get("_target_"), str) else set()
        return own.union(*(targets(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(targets(v) for v in node))
    return set()


CONF_TARGETS = sorted(
    set().union(*(targets(OmegaConf.to_container(OmegaConf.load(p))) for p in CONF.rglob("*.yaml")))
)


@pytest.mark.parametrize("path", CONF_TARGETS)
def test_what_the_source_gives_is_what_importing_gives(path: str) -> None:
    read = signature(path)
    if read is None:
        return  # left to the imported reading: nothing judged early
    hints, names, open_ended = read
    real_hints, real_names, real_open = imported(path)
    assert names == real_names if not open_ended else names <= real_names
    assert open_ended >= real_open  # left open: no name refused
    assert {k: real_hints.get(k) for k in hints} == hints


def test_the_entry_points_knobs_are_read_from_source() -> None:
    data = signature("hpml.data.synthetic.SyntheticDataModule")
    assert data is not None and not data[2]
    assert declared_range(data[0]["batch_size"]).expected() == "an integer >= 1"
    trainer = signature("lightning.Trainer")
    assert trainer is not None and "max_steps" in trainer[1] and not trainer[2]


def test_a_config_is_refused_before_its_targets_load(composed) -> None:
    with pytest.raises(Problems) as refused:
        check_config(composed(["data.batch_size=-1", "trainer.max_epochs=x"]))
    assert [str(p) for p in refused.value.problems] == [
        "data.batch_size=-1 is invalid: expected an integer >= 1",
        "trainer.max_epochs='x' is invalid: expected an integer >= -1 (-1: no limit), "
        "or null (Lightning's default)",
    ]
    check_config(composed([]))  # the defaults pass
    with pytest.raises(ConfigError, match=r"model\.optimizer\.lr=0 "):
        check_config(composed(["model.optimizer.lr=0"]))
