"""Refuse, before training, what the config alone shows to be impossible: one line each.

``validate(cfg, job)`` runs in :func:`hpml.train.checked` before the MLflow run starts, so a
refused job never reaches a training step (in a sweep it is recorded as a FAILED child run; a
single run leaves none). Every problem found is reported, one line each; checks that build on
one another stop at the first failure of their chain. In order:

1. values against their declared ranges and the types their targets declare
   (:mod:`hpml.validate.knobs`): all of them, and any ``inf`` or ``nan``;
2. the data module and callbacks are constructed (their constructors check their own knobs),
   once: the job trains with these (:class:`hpml.build.Parts`), and the model is built on the
   meta device with its optimiser and scheduler (the real one needs the data read); any other
   ``TypeError``/``ValueError`` a constructor raises is reported against its config group;
3. the model against the data (modality and channels, named by the ``model=`` and ``data=``
   options with the data options that fit; image size vs ``model.net.layout``) and the steps
   that will transform it (pruning targets, quantisation vs the net's ops, checkpointed stages
   and the steps that would replace them) (:mod:`hpml.validate.fit`);
4. the trainer's accelerator, devices and strategy against this machine (a value the
   ``trainer=`` option set is named by the option), and under DDP the steps that cannot run
   there (:mod:`hpml.validate.machine`), and the store's directory (:mod:`hpml.validate.store`).

Data files are looked for only when the config is refused anyway, so the one answer lists them
too; otherwise a corrupt or missing file fails the run, recorded FAILED.
Importing this package is cheap; the checks import torch and Lightning when they run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from omegaconf import DictConfig

from hpml.build import Parts, build, build_callbacks
from hpml.errors import ConfigError, HpmlError, Problems, raise_all
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


def validate(cfg: DictConfig, job: HydraJob | None) -> Parts:
    """The job's data module and callbacks, built once and checked; raise an
    :class:`~hpml.errors.HpmlError` for what cannot work: one problem, or several as
    :class:`~hpml.errors.Problems` (one line each), so one try shows all a user must fix.

    Checks that build on one another stop at the first failure in their chain (a data module
    that cannot be built has no spec to fit a model to); the machine and the store are checked
    either way. A refused config also reports the data files its run would not find, which
    otherwise fail the run itself. ``job`` (None outside Hydra) gives the options the user chose
    (``model=lstm``) that refusals name.
    """
    from hpml.validate import knobs, machine, store

    problems: list[HpmlError] = list(knobs.problems(cfg))
    parts = Parts()
    if not any(p.key.startswith("data.") for p in problems):
        try:
            parts.datamodule = datamodule = constructed("data", lambda: build("data", cfg.data))
            if not problems:
                parts.callbacks = check_model(cfg, job, datamodule)
        except HpmlError as exc:
            problems.append(exc)
    known = {getattr(p, "key", None) for p in problems} - {None}
    for check in (
        lambda: machine.check_processes(cfg, machine.check_trainer_option(cfg, job)),
        lambda: store.check_store(cfg.logger.tracking_uri, cfg.logger.get("artifact_root")),
    ):
        try:
            check()
        except HpmlError as exc:
            if getattr(exc, "key", None) not in known:
                problems.append(exc)
    datamodule = parts.datamodule
    if problems and datamodule is not None and not getattr(datamodule, "download", True):
        try:
            datamodule.prepare_data()  # download off: only looks for the files
        except HpmlError as exc:
            problems.append(exc)
    raise_all(problems)
    return parts


def check_model(cfg: DictConfig, job: HydraJob | None, datamodule: Any) -> list[Any]:
    """The model against the data, then the steps that will transform it, each check built on
    the one before (the first failure ends them); the job's callbacks, built and checked."""
    import torch

    from hpml.validate import fit

    spec = datamodule.planned_spec()
    name = fit.model_name(cfg, job)
    fit.check_layout(cfg, spec, name)
    fit.check_checkpointing(cfg)

    def build_model(device: str, data: Any = spec) -> Any:
        with torch.device(device):
            return build("model", cfg.model, data=data)

    model = constructed(
        "model", lambda: fit.built_for_data(cfg, job, spec, lambda s: build_model("meta", s))
    )
    constructed("model.optimizer", model.configure_optimizers)
    callbacks = constructed("callbacks", lambda: build_callbacks(cfg))
    for callback in callbacks:
        if isinstance(callback, fit.ChecksModel):  # a step that transforms the net: prune, quant
            callback.check_model(model, lambda: build_model("cpu").net, spec.input_shape, name)
        if hasattr(callback, "stages"):
            fit.check_activations(callback, model)
    return callbacks


__all__ = ["ConfigError", "HpmlError", "Problems", "validate"]
