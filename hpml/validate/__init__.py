"""Refuse, before training, what the config alone shows to be impossible: one line each.

``validate(cfg, job)`` runs in :func:`hpml.train.prepared` before the MLflow run starts, so a
refused job never reaches a training step (in a sweep it is recorded as a FAILED child run; a
single run leaves none). In order:

1. values against their declared ranges and the types their targets declare
   (:mod:`hpml.validate.knobs`);
2. the data module and callbacks are constructed (their constructors check their own knobs),
   and the model is built on the meta device with its optimiser and scheduler; any other
   ``TypeError``/``ValueError`` a constructor raises is reported against its config group;
3. the model against the data (image size vs ``model.net.layout``) and the steps that will
   transform it (pruning targets, quantisation vs the net's ops, checkpointed stages and the
   steps that would replace them)
   (:mod:`hpml.validate.fit`);
4. the trainer's accelerator, devices and strategy against this machine, and under DDP the
   steps that cannot run there (:mod:`hpml.validate.machine`), and the store's directory
   (:mod:`hpml.validate.store`).

Data files are not opened here: a corrupt or missing file fails the run, recorded FAILED.
Importing this package is cheap; the checks import torch and Lightning when they run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from omegaconf import DictConfig

from hpml.errors import ConfigError, HpmlError
from hpml.hydra_job import HydraJob

T = TypeVar("T")


def constructed(group: str, make: Callable[[], T]) -> T:
    """``make()``, with a constructor's own TypeError/ValueError turned into one line naming
    ``group``: the checks before it should have named the key; this is the net below them."""
    try:
        return make()
    except HpmlError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        message = " ".join(str(exc).split())
        raise HpmlError(
            f"{group}: {type(exc).__name__}: {message} (check the {group}.* values "
            f"against `python -m hpml.train --cfg job`)"
        ) from exc


def validate(cfg: DictConfig, job: HydraJob | None) -> None:
    """Raise an :class:`~hpml.errors.HpmlError` for the first thing that cannot work.

    ``job`` (None outside Hydra) gives the ``model=`` option the refusals name the model by.
    """
    import torch

    from hpml.train import build, build_callbacks
    from hpml.validate import fit, knobs, machine, store

    knobs.check(cfg)
    datamodule = constructed("data", lambda: build("data", cfg.data))
    spec = datamodule.planned_spec()
    name = fit.model_name(cfg, job)
    fit.check_layout(cfg, spec, name)
    fit.check_checkpointing(cfg)

    def build_model(device: str) -> Any:
        with torch.device(device):
            return build("model", cfg.model, data=spec)

    model = constructed("model", lambda: build_model("meta"))
    constructed("model.optimizer", model.configure_optimizers)
    callbacks = constructed("callbacks", lambda: build_callbacks(cfg))
    for callback in callbacks:
        if hasattr(callback, "pruner"):
            fit.check_prune(callback.pruner, model.net)
        if hasattr(callback, "stages"):
            fit.check_activations(callback, model)
        if hasattr(callback, "quantizer"):
            fit.check_quant(callback.quantizer, model, lambda: build_model("cpu").net, spec, name)
    machine.check_processes(cfg, machine.check_trainer(cfg.trainer))
    store.check_store(cfg.logger.tracking_uri, cfg.logger.get("artifact_root"))


__all__ = ["ConfigError", "HpmlError", "validate"]
