"""One default per knob: the YAML's, which ``--cfg job`` shows, and never a different one in code.

The rule: a constructor parameter of hpml's that the config files set to a value keeps a default
in code only if it is that value, in every option of every group that sets it. Where options set
it differently (a choice between options: ``vgg``'s depth, a data set's batch size) or from
elsewhere in the config (``${seed}``, paths) the YAML decides each time; the code's default is
then what a plain Python caller gets, and no config can fall back to it unseen. Parameters
inherited from a library's class (Lightning's ``ModelCheckpoint``) are the library's.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import get_object, instantiate
from omegaconf import OmegaConf

from hpml.validate.knobs import _record
from hpml.validate.signatures import hints
from tests.conftest import CONF

# Overlays of values chosen for one study, not defaults.
OVERLAYS = {"experiment", "hparams_search"}


def options() -> Iterator[str]:
    """``group/option`` for each option of each group."""
    for group in sorted(d for d in CONF.rglob("*") if d.is_dir() and any(d.glob("*.yaml"))):
        name = str(group.relative_to(CONF))
        if name.split("/")[0] not in OVERLAYS | {"base", "hydra"}:
            yield from (f"{name}/{option.stem}" for option in sorted(group.glob("*.yaml")))


def composed(option: str) -> dict[str, Any]:
    """The option with its own defaults list (its bases), alone: where its values sit does not
    matter here, only the ``_target_`` above them; an option that overrides another group's
    choice (``model=lstm`` picks its data) is composed into the whole config instead, slower."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a group's file without `_self_`
            cfg = compose(option)
    except ConfigCompositionException:
        group, _, name = option.rpartition("/")
        cfg = compose("train", overrides=[f"{group}={name}"])
    tree = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(tree, dict)
    return tree


def own_defaults(target: Any) -> dict[str, tuple[str, Any]]:
    """``parameter -> (function that declares it, its default)`` for hpml's own functions: a
    class's ``__init__`` and those of its bases it passes ``**kwargs`` to, most derived first."""
    functions = (
        [c.__init__ for c in inspect.getmro(target) if "__init__" in vars(c)]
        if inspect.isclass(target)
        else [target]
    )
    found: dict[str, tuple[str, Any]] = {}
    for function in functions:
        params = inspect.signature(function).parameters
        for name, param in params.items():
            if (
                name in found
                or name == "self"
                or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL)
            ):
                continue
            if function.__module__.startswith("hpml."):
                found[name] = (f"{function.__module__}.{function.__qualname__}", param.default)
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return found


def set_values(node: Any, target: Any = None) -> Iterator[tuple[str, str, Any, Any]]:
    """``(declaring function, parameter, config value, code default)`` for every parameter a
    config node sets, under every ``_target_`` (and in a mapping that stands for a dataclass)."""
    if isinstance(node, list):
        for item in node:
            yield from set_values(item)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("_target_"), str):
        target = get_object(node["_target_"])
    declared = own_defaults(target) if target is not None else {}
    types = hints(target)[0] if target is not None else {}
    for key, value in node.items():
        if isinstance(value, dict) and "_target_" not in value and _record(types.get(key)):
            yield from set_values(value, _record(types.get(key)))
        elif isinstance(value, dict | list):
            yield from set_values(value)
        if key in declared and not (isinstance(value, dict) and "_target_" in value):
            function, default = declared[key]
            if dataclasses.is_dataclass(target) and function.endswith(".__init__"):
                function = function[: -len(".__init__")]
            yield function, str(key), value, default


def comparable(value: Any) -> Any:
    """Config and code spellings of one value: a list is a tuple, 15 is 15.0."""
    if isinstance(value, list | tuple):
        return tuple(comparable(v) for v in value)
    return value


def built_alike(function: str, name: str, value: Any) -> bool:
    """Whether ``function`` builds the same thing from its default as from the config's nodes
    (``_target_`` lists: a data set's transforms): every attribute the same, tuple or list."""
    if "_target_" not in str(value) or not function.endswith(".__init__"):
        return False
    target = get_object(function.removesuffix(".__init__"))
    spelt = [vars(target()), vars(target(**{name: instantiate(value)}))]
    flat = [{k: re.sub(r"[][()]", "", repr(v)) for k, v in attrs.items()} for attrs in spelt]
    return flat[0] == flat[1]


def interpolated(value: Any) -> bool:
    return "${" in str(value)


@pytest.fixture(scope="module")
def knobs() -> dict[tuple[str, str], dict[str, Any]]:
    """``(function, parameter) -> {option: config value}`` over every composition."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    defaults: dict[tuple[str, str], Any] = {}
    with initialize_config_dir(str(CONF), version_base=None):
        trees = {"(defaults)": OmegaConf.to_container(compose("train", return_hydra_config=True))}
        trees.update((option, composed(option)) for option in options())
    for where, tree in trees.items():
        for function, name, value, default in set_values(tree):
            found.setdefault((function, name), {})[where] = value
            defaults[(function, name)] = default
    return {key: {"options": values, "default": defaults[key]} for key, values in found.items()}


def test_the_walk_reaches_every_kind_of_target(knobs) -> None:
    functions = {function for function, _ in knobs}
    for expected in (
        "hpml.tracking.run.MlflowTracker.__init__",
        "hpml.callbacks.perf.PerformanceMonitor.__init__",
        "hpml.analysis.noise.NoiseRule",  # perf.noise, a mapping that stands for it
        "hpml.data.synthetic.SyntheticDataModule.__init__",
        "hpml.data.base.HpmlDataModule.__init__",  # a base the data modules pass **kwargs to
        "hpml.models.nets.vgg.vgg",
        "hpml.callbacks.prune.Prune.__init__",
    ):
        assert expected in functions


def test_a_code_default_is_the_value_every_config_gives_it(knobs) -> None:
    disagree = []
    for (function, name), found in sorted(knobs.items()):
        values = {repr(comparable(v)): v for v in found["options"].values()}
        default = found["default"]
        if default is inspect.Parameter.empty or len(values) > 1:
            continue  # no code default, or a choice the options make
        (value,) = values.values()
        if interpolated(value) or comparable(value) == comparable(default):
            continue
        if isinstance(value, dict) and default is None:  # a mapping over a dataclass's fields
            continue  # its fields are their own knobs, compared above
        if default is None and built_alike(function, name, value):
            continue  # None builds what the YAML lists (CIFAR-10's transforms)
        disagree.append((function, name, value, default))
    assert not disagree, "\n".join(
        f"{f}({n}=...): code says {d!r}, conf/ says {v!r}" for f, n, v, d in disagree
    )
