"""The suite's cache of Hydra's loaded configs (``tests/hydra_cache.py``) composes what Hydra
composes afresh, and sees a config file rewritten between two composes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests import hydra_cache
from tests.conftest import CONF

OVERRIDES = [
    [],
    ["model=lstm"],  # an option that picks another group's option
    ["experiment=vae_pruning"],  # an overlay with its own defaults and sweep
    ["hydra/launcher=joblib", "hydra/sweeper=hpml_optuna"],  # a package's and a plugin's
]


@pytest.fixture
def cached() -> Iterator[None]:
    """The cache on and empty, as the suite's workers run; on again after the test."""
    hydra_cache.uninstall()
    hydra_cache.install()
    yield
    hydra_cache.install()


def tree(overrides: list[str], config_dir: Path = CONF, name: str = "train") -> Any:
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = compose(name, overrides=overrides, return_hydra_config=True)
    return OmegaConf.to_container(cfg, resolve=False)


@pytest.mark.usefixtures("cached")
def test_cached_composes_are_the_fresh_ones() -> None:
    """Each set of overrides composed twice in turn (the second round from the cache, after
    composes that changed other values) and then afresh."""
    cached = [tree(overrides) for overrides in OVERRIDES + OVERRIDES]
    assert hydra_cache._results  # it was filled
    hydra_cache.uninstall()
    fresh = [tree(overrides) for overrides in OVERRIDES]
    assert cached == fresh + fresh


def job(config_dir: Path) -> Any:
    """``main.yaml`` of ``config_dir`` composed, without Hydra's own node."""
    return {k: v for k, v in tree([], config_dir, "main").items() if k != "hydra"}


@pytest.mark.usefixtures("cached")
def test_a_file_rewritten_between_composes_is_read_again(tmp_path: Path) -> None:
    (tmp_path / "group").mkdir()
    (tmp_path / "main.yaml").write_text("defaults:\n  - group: a\n  - _self_\nlr: 0.1\n")
    (tmp_path / "group" / "a.yaml").write_text("depth: 1\n")
    assert job(tmp_path) == {"group": {"depth": 1}, "lr": 0.1}
    # the same sizes, within the same second
    (tmp_path / "main.yaml").write_text("defaults:\n  - group: a\n  - _self_\nlr: 0.2\n")
    (tmp_path / "group" / "a.yaml").write_text("depth: 2\n")
    assert job(tmp_path) == {"group": {"depth": 2}, "lr": 0.2}


@pytest.mark.usefixtures("cached")
def test_a_warmed_cache_holds_every_config_a_compose_loads() -> None:
    """What the warm interpreter loads before it forks: each compose is then served whole."""
    hydra_cache.warm(CONF)
    warmed = set(hydra_cache._results)
    composed = [tree(overrides) for overrides in OVERRIDES]
    assert set(hydra_cache._results) == warmed
    hydra_cache.uninstall()
    assert composed == [tree(overrides) for overrides in OVERRIDES]


@pytest.mark.usefixtures("cached")
def test_an_interpolated_default_is_resolved_as_hydra_resolves_it(tmp_path: Path) -> None:
    """The one node that interpolates a default gets its map (Hydra's own example), from the
    choices the command line made too; the tree is the one every map built gives."""
    options_of = {"data": ("imagenet", "cifar"), "pair": ("imagenet_vgg", "cifar_vgg")}
    for group, options in options_of.items():
        (tmp_path / group).mkdir()
        for option in options:
            (tmp_path / group / f"{option}.yaml").write_text(f"name: {option}\n")
    (tmp_path / "main.yaml").write_text(
        "defaults:\n  - data: imagenet\n  - pair: ${data}_vgg\n  - _self_\n"
    )
    cases = [[], ["data=cifar"]]
    cached = [tree(overrides, tmp_path, "main") for overrides in cases]
    assert [c["pair"]["name"] for c in cached] == ["imagenet_vgg", "cifar_vgg"]
    hydra_cache.uninstall()
    assert cached == [tree(overrides, tmp_path, "main") for overrides in cases]


@pytest.mark.usefixtures("cached")
def test_kept_parse_trees_resolve_as_fresh_ones_and_a_bad_string_fails_each_time(
    composed: Any,
) -> None:
    """Jobs' configs resolved with kept trees (each interpolation read many times, from one
    tree) equal the same resolved afresh; a malformed interpolation fails at every read."""
    from omegaconf.errors import GrammarParseError

    def resolved(overrides: list[str]) -> Any:
        return OmegaConf.to_container(composed(overrides), resolve=True)

    kept = [resolved(overrides) for overrides in OVERRIDES[:3] + OVERRIDES[:3]]
    assert hydra_cache.parse.cache_info().hits > 100  # trees were read again, not reparsed
    for _ in range(2):
        with pytest.raises(GrammarParseError):
            OmegaConf.create({"a": "${oc.env:"})
    hydra_cache.uninstall()
    assert hydra_cache.parse.cache_info().currsize == 0
    fresh = [resolved(overrides) for overrides in OVERRIDES[:3]]
    assert kept == fresh + fresh
