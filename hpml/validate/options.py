"""Config group options as a user types them (``data=mnist``), and what each option sets.

A refusal names what the user typed and the options that would work instead, found by building
each option's own config from the folders Hydra composed the job from (``conf/``, a user's
``--config-dir`` or ``hydra.searchpath``), so a new option is judged as soon as it exists.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from hpml.build import CONF_DIR
from hpml.hydra_job import HydraJob


def choice(job: HydraJob | None, group: str) -> str | None:
    """``group=<option>`` as the job was composed, None outside Hydra or for an empty group."""
    option = job.choices.get(group) if job is not None else None
    return f"{group}={option}" if option else None


def typed(job: HydraJob | None, prefix: str) -> list[str]:
    """The job's own overrides of keys under ``prefix`` (``data.data_dir=/x``), as typed."""
    if job is None:
        return []
    return [
        text
        for text in job.overrides
        if text.lstrip("+~").split("=", 1)[0].startswith(f"{prefix}.")
    ]


def config_dirs(job: HydraJob | None) -> Sequence[Path]:
    """The folders ``job``'s options are files in, in the order Hydra looks (``conf/`` outside
    Hydra)."""
    return (job.config_dirs if job is not None else ()) or (CONF_DIR,)


def own_config(group: str, name: str, job: HydraJob | None) -> DictConfig:
    """Option ``name`` of ``group`` (the first file Hydra would read for it, empty if none is
    a file) with the same-group options its defaults list extends (``trainer=fp16`` extends
    ``default``) and the shared ones it inherits in place (``/base/data@_here_``), merged as Hydra
    would with ``_self_`` last unless placed; entries for other groups (a model's optimizer) are
    not the option's own values."""
    paths = [d / group / f"{name}.yaml" for d in config_dirs(job)]
    node = next((OmegaConf.load(path) for path in paths if path.is_file()), OmegaConf.create())
    assert isinstance(node, DictConfig)
    with open_dict(node):
        defaults = node.pop("defaults", [])
    merged = OmegaConf.create()
    if "_self_" not in defaults:
        defaults = [*defaults, "_self_"]
    for entry in defaults:
        if entry == "_self_":
            merged = OmegaConf.merge(merged, node)
        elif isinstance(entry, str) and "/" not in entry and "@" not in entry:
            merged = OmegaConf.merge(merged, own_config(group, entry, job))
        elif isinstance(entry, str) and entry.startswith("/") and entry.endswith("@_here_"):
            shared, _, option = entry[1:].removesuffix("@_here_").rpartition("/")
            merged = OmegaConf.merge(merged, own_config(shared, option, job))  # /base/data@_here_
    assert isinstance(merged, DictConfig)
    return merged


def in_place_of(cfg: DictConfig, group: str, name: str, job: HydraJob | None) -> DictConfig:
    """Option ``name``'s config in ``cfg``'s place for ``group``, its interpolations
    (``${paths.data_dir}``, ``${seed}``) resolved against the rest of ``cfg``."""
    whole = copy.deepcopy(cfg)
    with open_dict(whole):
        whole[group] = own_config(group, name, job)
    return whole[group]


def working(
    cfg: DictConfig, group: str, check: Callable[[DictConfig], Any], job: HydraJob | None
) -> list[str]:
    """The options of ``group`` that are files in ``job``'s config folders (what a refusal can
    suggest) whose own config passes ``check`` (returns without an error)."""
    names = {path.stem for d in config_dirs(job) for path in (d / group).glob("*.yaml")}
    return [
        name
        for name in sorted(names)
        if works(lambda name=name: check(in_place_of(cfg, group, name, job)))
    ]


def alternatives(group: str, options: Iterable[str]) -> str:
    """``data=a, data=b or data=c``."""
    named = [f"{group}={name}" for name in options]
    if len(named) < 2:
        return "".join(named) or "none of this project's options"
    return f"{', '.join(named[:-1])} or {named[-1]}"


def works(action: Callable[[], Any]) -> bool:
    """Whether ``action()`` returns without an error: any failure rules an option out."""
    try:
        action()
    except Exception:
        return False
    return True
