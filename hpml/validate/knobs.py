"""Ranges of config values, and the pass that checks them with their types before any build.

A knob's range is declared on the parameter its config's ``_target_`` names
(:mod:`hpml.ranges`); ``RANGES`` holds only the knobs no constructor of hpml takes (top-level
keys, Lightning's Trainer and profilers, torch's optimisers and schedulers, the fuse group).
"""

from __future__ import annotations

import collections.abc as abc
import contextlib
import dataclasses
import fnmatch
import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hpml.config_tree import leaves
from hpml.errors import ConfigError
from hpml.ranges import SEED_RANGE, Range, declared_range, union_members
from hpml.validate.signatures import Reader, check_types, hints, imported


class Fraction(Range):
    """A batch count (an integer >= 0) or a fraction of the batches in [0, 1], as Lightning."""

    def expected(self) -> str:
        return "an integer >= 0 (batches) or a fraction in [0.0, 1.0]"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return value >= 0 if isinstance(value, int) else 0.0 <= value <= 1.0


FINITE = Range()  # any number with no declared range: inf and nan are never a knob's value
COUNT, STEPS = Range(ge=1, kind=int), Range(ge=0, kind=int)

# Knobs of no hpml constructor: keys are globs over the composed config; the first match decides.
RANGES: dict[str, Range] = {
    "seed": dataclasses.replace(SEED_RANGE, kind=int),
    "replicate": STEPS,
    "threads": Range(ge=1, kind=int, null="the process's own"),
    "trainer.max_epochs": Range(ge=-1, kind=int, null="Lightning's default", note="-1: no limit"),
    "trainer.min_epochs": Range(ge=0, kind=int, null="none"),
    "trainer.max_steps": Range(ge=-1, kind=int, note="-1: no limit"),
    "trainer.min_steps": Range(ge=0, kind=int, null="none"),
    "trainer.log_every_n_steps": COUNT,
    "trainer.num_sanity_val_steps": Range(ge=-1, kind=int, note="-1: all"),
    "trainer.limit_*_batches": Fraction(),
    "trainer.overfit_batches": Fraction(),
    "trainer.accumulate_grad_batches": COUNT,
    "trainer.check_val_every_n_epoch": Range(ge=1, kind=int, null="by val_check_interval"),
    "trainer.gradient_clip_val": Range(ge=0, null="no clipping"),
    "trainer.profiler.line_count_restriction": Range(gt=0),
    "fuse.max_members": Range(ge=1, kind=int, null="as many as fit the device's memory"),
    "fuse.memory_fraction": Range(gt=0, le=1),
    "model.optimizer.lr": Range(gt=0),
    "model.optimizer.momentum": Range(ge=0, lt=1),
    "model.optimizer.dampening": Range(ge=0, le=1),
    "model.optimizer.weight_decay": Range(ge=0),
    "model.optimizer.eps": Range(gt=0),
    "model.scheduler.T_max": COUNT,
    "model.scheduler.step_size": COUNT,
    "model.scheduler.gamma": Range(gt=0),
    "model.scheduler.eta_min": Range(ge=0),
    "model.net.dropout": Range(ge=0, lt=1),  # torchvision's nets; hpml's declare their own
    # Lightning's ModelCheckpoint
    "callbacks.checkpoint.save_top_k": Range(ge=-1, kind=int, note="-1: every epoch"),
}


def _record(hint: Any) -> type | None:
    """The dataclass a plain mapping stands for, where the hint offers one (``NoiseRule``)."""
    return next(
        (p for p in union_members(hint) if isinstance(p, type) and dataclasses.is_dataclass(p)),
        None,
    )


def declared_ranges(
    node: Any, path: str = "", target: Any = None, read: Reader = imported
) -> dict[str, Range]:
    """``key -> Range`` for every value under ``node`` whose parameter declares a range: the
    parameters of each ``_target_`` (as ``read`` gives them), and the fields of a dataclass a
    plain mapping stands for."""
    found: dict[str, Range] = {}
    if isinstance(node, list):
        for index, item in enumerate(node):
            found.update(declared_ranges(item, f"{path}.{index}", read=read))
        return found
    if not isinstance(node, dict):
        return found
    declared: dict[str, Any] = {}
    if isinstance(node.get("_target_"), str):
        with contextlib.suppress(Exception):  # signatures names an unimportable target itself
            declared = (read(node["_target_"]) or ({},))[0]
    elif target is not None:
        declared = hints(target)[0]
    for key, value in node.items():
        key_path = f"{path}.{key}" if path else str(key)
        hint = declared.get(key)
        declared_here = declared_range(hint) if hint is not None else None
        if declared_here is not None:
            found[key_path] = declared_here
        if isinstance(value, dict | list):
            inner = _record(hint) if isinstance(value, dict) and "_target_" not in value else None
            found.update(declared_ranges(value, key_path, inner, read))
    return found


def numbers(values: list[Any]) -> abc.Iterator[float]:
    """The floats of a list, nested lists included."""
    for value in values:
        if isinstance(value, list):
            yield from numbers(value)
        elif isinstance(value, float):
            yield value


def range_problems(
    resolved: dict[str, Any], read: Reader = imported, everywhere: bool = True
) -> list[ConfigError]:
    """Every value outside its declared range, and every ``inf``/``nan`` anywhere: no knob of
    hpml, Lightning or torch takes one (an ``lr=inf`` trained to the end on NaN losses).
    ``everywhere`` false: only the ranges the signatures ``read`` gives declare."""
    found: dict[str, ConfigError] = {}
    declared = declared_ranges(resolved, read=read)
    globs, finite = (RANGES, FINITE) if everywhere else ({}, None)
    betas = ((resolved.get("model") or {}).get("optimizer") or {}).get("betas")
    if (
        finite
        and betas is not None
        and not (
            isinstance(betas, abc.Sequence)
            and len(betas) == 2
            and all(Range(ge=0, lt=1).accepts(b) for b in betas)
        )
    ):
        found["model.optimizer.betas"] = ConfigError(
            "model.optimizer.betas",
            list(betas) if isinstance(betas, abc.Sequence) else betas,
            "two finite numbers in [0, 1), e.g. [0.9, 0.999]",
        )
    for key, value in leaves(resolved):
        wanted = declared.get(key) or next(
            (r for pattern, r in globs.items() if fnmatch.fnmatchcase(key, pattern)), None
        )
        if wanted is None and finite and isinstance(value, float) and not math.isfinite(value):
            wanted = finite
        if key in found:
            continue
        if wanted is not None and not wanted.accepts(value):
            found[key] = ConfigError(key, value, wanted.expected())
        elif finite and isinstance(value, list) and not all(map(finite.accepts, numbers(value))):
            found[key] = ConfigError(key, value, "finite numbers")
    return list(found.values())


def interpolated_key(value: Any) -> str | None:
    """``seed`` for the value ``${seed}``; None for anything else."""
    text = str(value)
    plain = text.startswith("${") and text.endswith("}") and text.count("$") == 1
    return text[2:-1] if plain else None


def problems(
    cfg: DictConfig, read: Reader = imported, everywhere: bool = True
) -> list[ConfigError]:
    """Every value outside its declared range, then the first value of each config group whose
    type its target's signature refuses (a group's later ones are judged once it is fixed);
    signatures as ``read`` gives them (by default, their modules imported). ``everywhere``
    false: only what those signatures declare (``RANGES`` and ``inf``/``nan`` judged before)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    written = dict(leaves(OmegaConf.to_container(cfg, resolve=False)))
    found = range_problems(resolved, read, everywhere)
    refused = {problem.key for problem in found}
    # data.seed: ${seed} is refused with seed=abc: the one value the user typed is named once
    found = [p for p in found if interpolated_key(written.get(p.key)) not in refused]
    for group, node in resolved.items():
        try:
            check_types(node, str(group), read)
        except ConfigError as exc:
            if exc.key not in refused:
                found.append(exc)
    return found
