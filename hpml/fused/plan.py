"""Which jobs of a sweep can train as one fused array (``fuse=array``), and if not, why.

Jobs fuse when their configs differ only in keys that keep every tensor's shape (the patterns
of ``fuse.fusable``) and each callback's class says it can run in an array (its ``in_array``).
Anything else runs one job at a time, after one line saying which key, setting or callback kept
them apart: a sweep is never refused for asking to fuse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from hpml.build import callback_nodes
from hpml.callbacks.in_array import InArray
from hpml.config_tree import leaves

FUSED_LAUNCHER = "hpml_fused"  # hydra/launcher option of hydra_plugins/hpml_fused_launcher


@dataclass(frozen=True)
class Plan:
    """The job indices of each fused array, those that run one by one, and why they do."""

    arrays: list[list[int]] = field(default_factory=list)
    serial: list[int] = field(default_factory=list)
    reason: str | None = None


def differing_keys(configs: Sequence[DictConfig]) -> list[str]:
    """The config keys whose value is not the same in every job (Hydra's own node aside),
    interpolations as written (``${seed}``)."""
    flats = []
    for cfg in configs:
        tree = OmegaConf.to_container(cfg, resolve=False)
        tree.pop("hydra", None)
        flats.append({key: repr(value) for key, value in leaves(tree)})
    keys = sorted(set().union(*flats))
    return [key for key in keys if len({flat.get(key, "<unset>") for flat in flats}) > 1]


def processes(trainer: DictConfig) -> int:
    """The processes ``trainer`` would train in (devices x nodes; 1 for a config validation
    refuses: that job fails alone, with its own line)."""
    from hpml.errors import HpmlError
    from hpml.validate.machine import check_trainer

    keys = ("accelerator", "devices", "num_nodes", "strategy")  # not its folders' ${hydra:}
    try:
        return check_trainer(OmegaConf.create({k: trainer[k] for k in keys if k in trainer}))
    except HpmlError:
        return 1


def unfusable_callback(cfg: DictConfig) -> str | None:
    """A callback job ``cfg`` sets that keeps its sweep from fusing, as ``<label> is set, and
    <why>``, read off its class without building it."""
    from hydra.utils import get_object

    from hpml.callbacks.base import declared, qualified, undeclared

    groups = cfg.get("callback_groups") or ()
    for label, node in callback_nodes(cfg):
        if label in groups:
            label += f"={OmegaConf.select(cfg, f'hydra.runtime.choices.{label}') or 'set'}"
        path = str(OmegaConf.select(node, "_target_", throw_on_resolution_failure=False))
        try:
            target = get_object(path)
        except Exception:  # its job fails alone, with its own line, when it builds it
            return f"{label} is set, and its _target_ {path} cannot be imported"
        how = declared(target)
        if how is None:
            return f"{label} is set, and {undeclared(target)}"
        if how is InArray.SERIAL:
            return (
                f"{label} is set, and {qualified(target)} runs only in a job of its own (its "
                f"in_array: {how})"
            )
    return None


def unfusable_setting(cfg: DictConfig) -> str | None:
    """What every job shares that an array cannot train with, as ``<key> is set, and <why>``:
    a callback (:func:`unfusable_callback`), a trainer setting or ``resume``; None when there is
    none."""
    callback = unfusable_callback(cfg)
    if callback is not None:
        return callback
    trainer = cfg.trainer
    strategy = trainer.get("strategy", "auto")
    if strategy not in ("auto", "single_device"):
        setting = f"trainer.strategy={strategy}"
    elif processes(trainer) > 1:
        setting = f"trainer.devices={trainer.get('devices')} (x trainer.num_nodes)"
    elif trainer.get("accumulate_grad_batches", 1) != 1:
        setting = f"trainer.accumulate_grad_batches={trainer.accumulate_grad_batches}"
    elif trainer.get("gradient_clip_val") is not None:
        setting = f"trainer.gradient_clip_val={trainer.gradient_clip_val}"
    elif str(trainer.get("precision")).startswith("16"):  # one GradScaler, N optimiser steps
        setting = f"trainer.precision={trainer.precision}"
    elif cfg.get("resume") is not None:
        setting = f"resume={cfg.resume}"
    else:
        return None
    return (
        f"{setting} is set, and an array trains on one device, without fp16 loss scaling, "
        "gradient accumulation or clipping, and starts afresh"
    )


def plan(
    configs: Sequence[DictConfig],
    on_cpu: bool,
    capacity: Callable[[], int | None] | None = None,
    admit: Callable[[int], bool] | None = None,
) -> Plan:
    """How to run ``configs`` (every job of one launch).

    Args:
        admit: whether job ``index`` may join an array (a refused job runs alone).
        capacity: members per array at most (None: no limit); called only once jobs are to
            fuse, so a sweep that runs one by one never builds a model to measure it.
    """
    everyone = list(range(len(configs)))
    fuse = configs[0].get("fuse") or {}
    if fuse.get("mode") != "array":
        return Plan(serial=everyone)
    count = len(configs)
    one_by_one = f"running the {count} jobs one by one"
    if count < 2:
        return Plan(serial=everyone, reason="fuse=array: a single job has nothing to fuse with")
    setting = unfusable_setting(configs[0])
    if setting is not None:
        return Plan(serial=everyone, reason=f"fuse=array: not fusing: {setting}; {one_by_one}")
    patterns = list(fuse.get("fusable", []))
    changing = [
        key for key in differing_keys(configs) if not any(fnmatchcase(key, p) for p in patterns)
    ]
    if changing:
        return Plan(
            serial=everyone,
            reason=f"fuse=array: not fusing: {changing[0]} differs between the jobs and may "
            f"change shapes (the keys that fuse: {', '.join(patterns)}); {one_by_one}",
        )
    if on_cpu and not fuse.get("force", False):
        return Plan(
            serial=everyone,
            reason=f"fuse=array: on CPU a fused array trains slower than its jobs one by one "
            f"(docs/fused-arrays.md); {one_by_one}; fuse.force=true fuses anyway",
        )
    admitted = [index for index in everyone if admit is None or admit(index)]
    refused = [index for index in everyone if index not in admitted]  # fail alone, own line
    if len(admitted) < 2:
        return Plan(serial=everyone)
    cap = capacity() if capacity is not None else None
    count = len(admitted)
    size = max(1, min(cap or count, fuse.get("max_members") or count))
    arrays = [admitted[start : start + size] for start in range(0, count, size)]
    serial = refused + [group[0] for group in arrays if len(group) == 1]
    return Plan(arrays=[group for group in arrays if len(group) > 1], serial=sorted(serial))


def unfused_note(cfg: DictConfig, launcher: str | None, multirun: bool) -> str | None:
    """Why ``fuse=array`` cannot act on this job, when it cannot: a single run, or a sweep
    under another launcher."""
    if (cfg.get("fuse") or {}).get("mode") != "array":
        return None
    if not multirun:
        return "fuse=array: a single run trains alone; fuse a sweep's jobs with -m"
    if launcher != FUSED_LAUNCHER:
        return (
            f"fuse=array: hydra/launcher={launcher} runs this sweep's jobs one by one; leave "
            f"hydra/launcher out (fuse=array selects {FUSED_LAUNCHER}) to fuse them"
        )
    return None


class UnfusedNote(Callback):
    """Says, as a run or a sweep starts, why ``fuse=array`` cannot act on it
    (:func:`unfused_note`)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._say(unfused_note(config, None, multirun=False))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._say(unfused_note(config, config.hydra.runtime.choices.get("hydra/launcher"), True))

    @staticmethod
    def _say(note: str | None) -> None:
        if note is not None:
            print(f"hpml: {note}", flush=True)
