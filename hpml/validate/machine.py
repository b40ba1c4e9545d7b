"""The trainer's accelerator and devices against what this machine has.

hpml runs a job as one process that owns one MLflow run. Lightning meets ``devices > 1`` by
starting a DDP process per device, each of which re-runs the command and opens a run of its own
(and on CPU, any count is accepted: the processes start, crash, and leave a run RUNNING), so more
than one device, or node, is refused here with what the machine has.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from hpml.errors import ConfigError

DEVICES_HINT = "a positive integer, -1 (all), auto, or a list of device indices"


def available(name: str) -> int:
    """Devices this machine has for accelerator ``name`` (0 when it has none)."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    accelerator = AcceleratorRegistry[name]["accelerator"]
    if not accelerator.is_available():
        return 0
    return 1 if name == "cpu" else int(accelerator.auto_device_count())


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


def check_trainer(trainer: DictConfig | dict[str, Any]) -> None:
    """Accelerator present, one device that exists, one node, a strategy Lightning knows."""
    trainer = OmegaConf.to_container(trainer, resolve=True)  # lists as lists
    name = resolve_accelerator(trainer.get("accelerator", "auto"))
    count = available(name) if name in ("cpu", "cuda", "mps", "tpu") else 1
    devices = trainer.get("devices", "auto")
    asked = requested_devices(devices, count)
    has = f"accelerator {name} has {count} device{'s' if count != 1 else ''} on this machine"
    if isinstance(asked, list):
        bad = [i for i in asked if i >= count]
        if bad:
            raise ConfigError("trainer.devices", devices, f"device indices below {count}: {has}")
        asked = len(asked)
    if asked > count:
        raise ConfigError("trainer.devices", devices, f"at most {count}: {has}")
    if asked > 1:
        raise ConfigError(
            "trainer.devices",
            devices,
            f"1: hpml runs a job as one process with one MLflow run, and "
            f"{asked} devices would start a DDP process per device ({has})",
        )
    nodes = trainer.get("num_nodes", 1)
    if nodes != 1:
        raise ConfigError("trainer.num_nodes", nodes, "1: hpml runs a job on this machine only")
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
