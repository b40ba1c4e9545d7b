"""Compose and instantiate: where the configs live (``conf/``) and how a group becomes its object.

Low in the layers (``[tool.importlinter]`` in pyproject.toml): ``hpml.train`` builds a run with
the :class:`Parts` that ``hpml.validate`` built and checked, ``hpml.cli`` and resuming read
``conf/`` through :data:`CONF_DIR`. Imports nothing heavy: Lightning only when callbacks are built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig

from hpml.errors import ConfigError
from hpml.hydra_job import HydraJob

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


@dataclass
class Parts:
    """What a job trains with, each built once from its config: the data module and callbacks
    when the job is checked (:func:`hpml.validate.validate` checks these very objects), the
    model and trainer once its run is open and it is seeded (:func:`hpml.lifecycle.assemble`). A
    fused array's parts wrap its members' (:mod:`hpml.fused`)."""

    datamodule: Any = None
    callbacks: list[Any] = field(default_factory=list)
    model: Any = None
    trainer: Any = None


@dataclass
class Member:
    """A member of a job (a single run has one, a fused array several): its config, what Hydra
    knows of it (None outside Hydra) and its parts."""

    cfg: DictConfig
    job: HydraJob | None
    parts: Parts


def build(group: str, node: DictConfig, **kwargs: Any) -> Any:
    """Instantiate config group ``group``, passing live objects (data spec, callbacks) as-is.

    The config becomes a partial first, so ``kwargs`` never pass through OmegaConf; errors come
    back with the group's name in their keys.
    """
    try:
        return hydra.utils.instantiate(node, _partial_=True)(**kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__ or exc
        if isinstance(cause, ConfigError):
            raise cause.under(group) from cause
        raise cause from exc
    except ConfigError as exc:
        raise exc.under(group) from exc


def build_callbacks(cfg: DictConfig) -> list[Any]:
    """The ``callbacks`` group (a dict of callbacks), then each of ``callback_groups`` in order."""
    unknown = [group for group in cfg.callback_groups if group not in cfg]
    if unknown:
        raise ConfigError(
            "callback_groups",
            list(cfg.callback_groups),
            f"config groups of this config ({unknown[0]!r} is none)",
        )
    callbacks = [
        build(f"callbacks.{name}", node)
        for name, node in (cfg.get("callbacks") or {}).items()
        if node and "_target_" in node
    ]
    for group in cfg.callback_groups:
        node = cfg.get(group)
        if node and "_target_" in node:
            callbacks.append(build(group, node))
    if cfg.trainer.get("enable_checkpointing") is False:  # off: Lightning refuses checkpointers
        from lightning.pytorch.callbacks import Checkpoint

        callbacks = [c for c in callbacks if not isinstance(c, Checkpoint)]
    return callbacks
