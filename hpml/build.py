"""The one place a job's parts are built from its composed config, each once, typed.

Data module, callbacks and the model as planned come first (:func:`build_parts`: validation
reads these very objects), then, once they are judged, the model for its prepared data
(:func:`build_model`) and the trainer (:func:`build_trainer`), before any run opens: the runs
give the trainer their loggers. Importing this is cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig

from hpml.errors import ConfigError, constructed
from hpml.hydra_job import HydraJob

if TYPE_CHECKING:
    import lightning as L
    from torch import nn

    from hpml.data.base import HpmlDataModule
    from hpml.data.spec import DataSpec
    from hpml.models.base import HpmlModule

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
T = TypeVar("T")


@dataclass(frozen=True)
class Parts:
    """What a job's config builds before its run opens, each part once. A part whose
    constructor raised is None (no callbacks: empty), what it raised in ``refused`` under its
    config group, for validation to report.

    Args:
        planned: the model as planned: built on the meta device (no memory, no compute) from
            the data's planned spec, as the model that trains needs its data prepared.
        cpu_net: builds the planned model's net for real on the CPU, for a check that must
            run one (eager int8 kernels); not kept here, so its weights go with the check.
    """

    datamodule: HpmlDataModule | None
    callbacks: list[L.Callback]
    planned: HpmlModule | None = None
    cpu_net: Callable[[], nn.Module] | None = None
    refused: dict[str, Exception] = field(default_factory=dict)


@dataclass(frozen=True)
class Member:
    """A member of a job (a single run has one, a fused array several): its config, what Hydra
    knows of it (None outside Hydra) and its parts, built and checked."""

    cfg: DictConfig
    job: HydraJob | None
    parts: Parts


@dataclass(frozen=True)
class Assembled:
    """What a job trains with once its runs are open: a fused array's data module and model
    wrap its members' (:mod:`hpml.fused`)."""

    datamodule: L.LightningDataModule
    model: L.LightningModule
    trainer: L.Trainer


def build(group: str, node: DictConfig, **kwargs: Any) -> Any:
    """Instantiate config group ``group``, passing live objects (data spec, callbacks) as-is
    through a partial, so ``kwargs`` never pass through OmegaConf."""
    try:
        return hydra.utils.instantiate(node, _partial_=True)(**kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__ or exc
        if isinstance(cause, ConfigError):
            raise cause.under(group) from cause
        raise cause from exc
    except ConfigError as exc:
        raise exc.under(group) from exc


def callback_nodes(cfg: DictConfig) -> list[tuple[str, DictConfig]]:
    """``(group, node)`` of each callback ``cfg`` sets, in the order they are built: the
    ``callbacks`` dict's (group ``callbacks.<name>``), then each of ``callback_groups``."""
    named = [(f"callbacks.{name}", node) for name, node in (cfg.get("callbacks") or {}).items()]
    named += [(group, cfg.get(group)) for group in cfg.get("callback_groups") or ()]
    return [(group, node) for group, node in named if node and "_target_" in node]


def build_callbacks(cfg: DictConfig) -> list[L.Callback]:
    """The ``callbacks`` group (a dict of callbacks), then each of ``callback_groups`` in order."""
    unknown = [group for group in cfg.callback_groups if group not in cfg]
    if unknown:
        raise ConfigError(
            "callback_groups",
            list(cfg.callback_groups),
            f"config groups of this config ({unknown[0]!r} is none)",
        )
    callbacks = [build(group, node) for group, node in callback_nodes(cfg)]
    if cfg.trainer.get("enable_checkpointing") is False:  # off: Lightning refuses checkpointers
        from lightning.pytorch.callbacks import Checkpoint

        callbacks = [c for c in callbacks if not isinstance(c, Checkpoint)]
    return callbacks


def build_parts(cfg: DictConfig) -> Parts:
    """Job ``cfg``'s data module, callbacks and planned model (its optimiser made once to
    try it), each built once; what a constructor raised is kept in :attr:`Parts.refused` for
    validation, not raised."""
    refused: dict[str, Exception] = {}

    def attempt(group: str, make: Callable[[], T]) -> T | None:
        try:
            with constructed(group):
                return make()
        except Exception as exc:
            refused[group] = exc
            return None

    datamodule = attempt("data", lambda: build("data", cfg.data))
    callbacks = attempt("callbacks", lambda: build_callbacks(cfg))
    spec = attempt("data", datamodule.planned_spec) if datamodule is not None else None
    if spec is None:
        return Parts(datamodule, callbacks or [], refused=refused)
    planned = attempt("model", lambda: planned_model(cfg, spec))
    if planned is not None:  # its optimiser and scheduler, as fit will make them
        attempt("model.optimizer", planned.configure_optimizers)
    return Parts(
        datamodule, callbacks or [], planned, lambda: planned_model(cfg, spec, "cpu").net, refused
    )


def planned_model(cfg: DictConfig, spec: DataSpec, device: str = "meta") -> HpmlModule:
    """Job ``cfg``'s model built on ``device`` for data of ``spec``, not seeded: what is
    checked before the data is prepared, and how :mod:`hpml.validate` tries other data options
    for one that would fit."""
    import torch

    with torch.device(device):
        return build("model", cfg.model, data=spec)


def build_model(cfg: DictConfig, datamodule: HpmlDataModule) -> HpmlModule:
    """Job ``cfg``'s model, seeded and built for its data once prepared (read or downloaded:
    the model takes the data's real spec), as its serial job builds it."""
    import lightning as L

    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule.prepare_data()
    return build("model", cfg.model, data=datamodule.spec)


def build_tracker(cfg: DictConfig) -> Any:
    """Job ``cfg``'s ``logger``: the MLflow tracker that opens, records and closes its runs,
    built once per job (a sweep's parent run, made before any job, builds its own)."""
    return build("logger", cfg.logger)


def build_trainer(cfg: DictConfig, callbacks: Sequence[L.Callback], array: bool) -> L.Trainer:
    """Job ``cfg``'s trainer, with ``callbacks`` and the epoch summary, and no logger until its
    runs open (they set ``trainer.loggers``, one per run); an ``array`` keeps no checkpoint."""
    from hpml.callbacks.epoch_summary import EpochSummary
    from hpml.console import progress_bar

    return build(
        "trainer",
        cfg.trainer,
        callbacks=[*callbacks, EpochSummary()],
        logger=False,
        enable_progress_bar=progress_bar(cfg.trainer.get("enable_progress_bar")),
        **({"enable_checkpointing": False} if array else {}),
    )
