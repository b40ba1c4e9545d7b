"""The arms of a try: the original and each proposal as an option of one config group
(``advise_arm``), so that one sweep of hpml's own (``+advise_arm=original,... replicate=0,1``)
runs them side by side, its sweeper interleaving their repeats.

Each arm is a ``# @package _global_`` overlay. An override on the command line wins over every
config file, so the original's overrides of a key some proposal sets leave the command line and
go into each arm that does not set it: the original's into ``original.yaml``, the rest stay on
the command line, shared by all arms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import OmegaConf

from hpml.build import CONF_DIR
from hpml.cli import group_options

GROUP, ORIGINAL = "advise_arm", "original"
# keys the try sets itself, whatever the original's command said
OWN = ("logger.tracking_uri", "logger.experiment_name", "replicate", "resume")


@dataclass(frozen=True)
class Arm:
    """An option of :data:`GROUP`: ``name`` its file, ``overrides`` what it sets."""

    name: str
    overrides: tuple[str, ...]


def arm_name(overrides: tuple[str, ...]) -> str:
    """``data.num_workers=1`` -> ``data_num_workers_1``: an option's file name."""
    return re.sub(r"[^a-z0-9]+", "_", " ".join(overrides).lower()).strip("_") or ORIGINAL


def parsed(text: str) -> Override:
    """One override, as Hydra's grammar reads it (deletions, ``~key``, included)."""
    [override] = OverridesParser.create().parse_overrides([text])
    return override


def key(text: str) -> str:
    """The key or group an override sets: ``++trainer.limit_val_batches=1`` ->
    ``trainer.limit_val_batches``."""
    return parsed(text).key_or_group


def overlay(overrides: list[str]) -> str:
    """``overrides`` as a ``# @package _global_`` config file: a group's option as an
    ``override`` in its defaults list, a key as its value (``+`` and ``++`` alike)."""
    groups, body = [], OmegaConf.create({})
    for override in map(parsed, overrides):
        name = override.key_or_group
        if group_options(name, [CONF_DIR]) is not None:
            groups.append({f"override /{name}": override.get_value_element_as_str()})
        else:
            OmegaConf.update(body, name, override.value(), force_add=True)
    text = OmegaConf.to_yaml(OmegaConf.create({"defaults": [*groups, "_self_"]}))
    if len(body):
        text += OmegaConf.to_yaml(body)
    return "# @package _global_\n" + text


def split(original: list[str], arms: list[Arm]) -> tuple[list[str], list[str]]:
    """``original``'s overrides as ``(shared, moved)``: those of a key no arm sets, for the
    command line; those of a key some arm sets, for the arms' files (a deletion, which no
    file can say, stays on the command line). The try's own keys (:data:`OWN`) are dropped."""
    touched = {key(text) for arm in arms for text in arm.overrides}
    shared, moved = [], []
    for text in original:
        override = parsed(text)
        if override.key_or_group in OWN:
            continue
        goes = override.key_or_group in touched and not override.is_delete()
        (moved if goes else shared).append(text)
    return shared, moved


def write(folder: Path, moved: list[str], arms: list[Arm]) -> Path:
    """``folder/advise_arm/<arm>.yaml`` for the original and each of ``arms``: the moved
    overrides each arm does not set, then its own; ``folder`` (a config dir) returned."""
    options = folder / GROUP
    options.mkdir(parents=True, exist_ok=True)
    for arm in [Arm(ORIGINAL, ()), *arms]:
        own = {key(text) for text in arm.overrides}
        kept = [text for text in moved if key(text) not in own]
        (options / f"{arm.name}.yaml").write_text(overlay([*kept, *arm.overrides]))
    return folder


def quoted(value: str) -> str:
    """``value`` as an override's value: quoted where Hydra's grammar would read more into it."""
    if re.fullmatch(r"[\w./:@+-]*", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sweep_args(
    shared: list[str],
    config_dir: Path,
    arms: list[Arm],
    repeats: int,
    store: tuple[str, str],
    sweep_dir: Path,
) -> list[str]:
    """The ``python -m hpml.train`` arguments of the try: one sweep of the original and every
    arm, ``repeats`` each, into ``store`` (its tracking URI and experiment)."""
    uri, experiment = store
    names = ",".join([ORIGINAL, *(arm.name for arm in arms)])
    return [
        "-m",
        *shared,
        f"logger.tracking_uri={quoted(uri)}",
        f"logger.experiment_name={quoted(experiment)}",
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.searchpath=[file://{config_dir.resolve()}]",
        f"+{GROUP}={names}",
        f"replicate={','.join(str(i) for i in range(repeats))}",
    ]
