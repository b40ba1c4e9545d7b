"""The trainer's accelerator, devices, nodes and strategy against what this machine has, and
where the data's samples may live on it.

On CPU a device is a process: at most one per core. Strategies that spawn or fork inside ``fit``
are refused at any device count (their processes would not run hpml's job, even one process: its
measurements stay in it), and so are several nodes outside a cluster that starts every node's
processes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from hpml.errors import ConfigError, IncompatibleError
from hpml.hydra_job import HydraJob
from hpml.validate import options

if TYPE_CHECKING:
    from hpml.data.base import HpmlDataModule

DEVICES_HINT = "a positive integer, -1 (all), auto, or a list of device indices"
FOREIGN_LAUNCHES = ("spawn", "fork", "notebook")  # strategy names whose processes are not hpml's
CLUSTER_VARIABLES = ("SLURM_NTASKS", "WORLD_SIZE")  # set where a cluster starts every process


def available(name: str) -> int:
    """Devices this machine has for accelerator ``name`` (0 when it has none); on CPU, the
    processes it can run side by side: one per core."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    accelerator = AcceleratorRegistry[name]["accelerator"]
    if not accelerator.is_available():
        return 0
    if name == "cpu":
        return os.cpu_count() or 1
    return int(accelerator.auto_device_count())


def resolve_accelerator(value: Any) -> str:
    """The registry name Lightning would use for ``trainer.accelerator``, refusing absent ones."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    names = sorted(AcceleratorRegistry.available_accelerators())
    if not isinstance(value, str):
        return "cpu" if value is None else type(value).__name__
    wanted = value.lower()
    present = [n for n in names if available(n)]
    valid = "one of " + ", ".join(
        ["auto", *(["gpu"] if {"cuda", "mps"} & set(present) else []), *present]
    )
    if wanted == "auto":
        return next((n for n in ("cuda", "mps", "tpu") if n in present), "cpu")
    if wanted == "gpu":
        found = next((n for n in ("cuda", "mps") if n in present), None)
        if found is None:
            raise ConfigError("trainer.accelerator", value, f"{valid}: this machine has no GPU")
        return found
    if wanted not in names:
        raise ConfigError("trainer.accelerator", value, valid)
    if wanted not in present:
        raise ConfigError(
            "trainer.accelerator", value, f"{valid}: this machine has no {wanted} device"
        )
    return wanted


def requested_devices(devices: Any, count: int) -> list[int] | int:
    """How many devices ``trainer.devices`` asks for (a list: which), as Lightning reads it."""
    if isinstance(devices, str):
        text = devices.strip().lower()
        if text == "auto":
            return count
        if text.lstrip("-").isdigit():
            devices = int(text)
        else:
            try:
                return [int(part) for part in text.split(",") if part.strip()]
            except ValueError:
                raise ConfigError("trainer.devices", devices, DEVICES_HINT) from None
    if isinstance(devices, list | tuple):
        if not devices or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices
        ):
            raise ConfigError("trainer.devices", list(devices), DEVICES_HINT)
        return list(devices)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices == 0 or devices < -1:
        raise ConfigError("trainer.devices", devices, DEVICES_HINT)
    return count if devices == -1 else devices


def check_trainer(trainer: DictConfig | dict[str, Any]) -> int:
    """Accelerator present, devices that exist, nodes a cluster starts, a strategy whose
    processes run hpml's job; the number of processes (devices x nodes)."""
    trainer = OmegaConf.to_container(trainer, resolve=True)  # lists as lists
    name = resolve_accelerator(trainer.get("accelerator", "auto"))
    count = available(name) if name in ("cpu", "cuda", "mps", "tpu") else 1
    devices = trainer.get("devices", "auto")
    if name == "cpu" and str(devices).strip() == "-1":  # Lightning refuses it on CPU
        raise ConfigError("trainer.devices", devices, "a number of processes on CPU (auto: 1)")
    asked = 1 if name == "cpu" and str(devices).strip().lower() == "auto" else None
    asked = asked or requested_devices(devices, count)
    unit = "core" if name == "cpu" else "device"
    has = f"accelerator {name} has {count} {unit}{'s' if count != 1 else ''} on this machine"
    if isinstance(asked, list):
        bad = [i for i in asked if i >= count]
        if bad:
            raise ConfigError("trainer.devices", devices, f"device indices below {count}: {has}")
        asked = len(asked)
    if asked > count:
        raise ConfigError("trainer.devices", devices, f"at most {count}: {has}")
    nodes = trainer.get("num_nodes", 1)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ConfigError("trainer.num_nodes", nodes, "a positive integer")
    if nodes > 1 and not any(os.environ.get(v) for v in CLUSTER_VARIABLES):
        raise ConfigError(
            "trainer.num_nodes",
            nodes,
            "1 outside a cluster: more nodes need one that starts a process per device on "
            "each (hydra/launcher=slurm with nodes and tasks_per_node, or torchrun)",
        )
    strategy = trainer.get("strategy", "auto")
    if isinstance(strategy, str):
        from lightning.pytorch.strategies import StrategyRegistry

        known = ["auto", *StrategyRegistry.available_strategies()]
        if strategy not in known:
            raise ConfigError(
                "trainer.strategy",
                strategy,
                f"one of {', '.join(known[:6])}, ... (Lightning's strategies)",
            )
        if any(word in strategy for word in FOREIGN_LAUNCHES):
            raise ConfigError(
                "trainer.strategy",
                strategy,
                "ddp (or another strategy that starts its processes by running the command "
                "again), or auto on one device: spawned or forked processes would not run "
                "hpml's job, at any device count",
            )
    return asked * nodes


def check_placement(datamodule: HpmlDataModule | None, trainer: DictConfig) -> None:
    """Refuse a ``data.placement`` the data or the trainer's accelerator cannot take."""
    try:
        accelerator = resolve_accelerator(trainer.get("accelerator", "auto"))
    except ConfigError:
        return  # check_trainer names it
    problem = datamodule.placement_problem(accelerator) if datamodule is not None else None
    if problem is not None:
        raise problem.under("data")


def check_processes(callbacks: Sequence[object], processes: int) -> None:
    """Refuse, under DDP, a built step that is not ``safe_under_ddp``: it replaces the
    parameters DDP has already wrapped (its gradient sync would miss them)."""
    from hpml.callbacks.measure_settings import OptimizationStep

    for step in callbacks:
        if processes > 1 and isinstance(step, OptimizationStep) and not step.safe_under_ddp:
            key, value = step.knob
            raise ConfigError(
                f"{step.stage}.{key}",
                value,
                f"{step.under_ddp} with {processes} DDP processes (trainer.devices x num_nodes): "
                "it replaces parameters DDP has wrapped; run it with trainer.devices=1",
            )


def check_trainer_option(cfg: DictConfig, job: HydraJob | None) -> int:
    """:func:`check_trainer`; a refused value that the ``trainer=`` option set, not one the user
    typed, is named by that option (``trainer=fp16``), with the options this machine runs."""
    try:
        return check_trainer(cfg.trainer)
    except ConfigError as exc:
        chosen = options.choice(job, "trainer")
        typed = any(t.lstrip("+~").startswith(f"{exc.key}=") for t in options.typed(job, "trainer"))
        if chosen is None or typed:
            raise
        own = options.own_config("trainer", chosen.split("=", 1)[1], job)
        if OmegaConf.select(own, exc.key.removeprefix("trainer.")) != exc.value:
            raise  # set by an experiment or another group: the key is what to name
        runs = options.working(cfg, "trainer", check_trainer, job)
        reason = exc.expected.partition(": ")[2] or f"{exc.key} must be {exc.expected}"
        raise IncompatibleError(
            f"{chosen} sets {exc.key}={exc.value!r}, and {reason}: "
            f"use {options.alternatives('trainer', runs)}"
        ) from None
