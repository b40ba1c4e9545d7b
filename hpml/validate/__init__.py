"""Refuse, before training, what the config and the parts it built show to be impossible.

:func:`check` reads the parts :func:`hpml.build.build_parts` built, before the MLflow run
starts, one line per problem. In order: values against their declared ranges and types
(:mod:`~hpml.validate.knobs`), then what a constructor refused; the model, built on the meta
device, against the data and the steps that will transform it (:mod:`~hpml.validate.fit`); the
trainer against this machine (:mod:`~hpml.validate.machine`) and the store's directory
(:mod:`~hpml.validate.store`). Data files are looked for only when the config is refused
anyway, so the one answer lists them too. Importing this package is cheap.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from hpml.build import Parts, build, constructed
from hpml.errors import ConfigError, HpmlError, Problems, raise_all
from hpml.hydra_job import HydraJob


def check(parts: Parts, cfg: DictConfig, job: HydraJob | None) -> None:
    """Raise an :class:`~hpml.errors.HpmlError` for what cannot work in job ``cfg`` with its
    built ``parts``: one problem, or several as :class:`~hpml.errors.Problems`, so one try shows
    all a user must fix. Checks that build on one another stop at the first failure in their
    chain; the machine and the store are checked either way. ``job`` (None outside Hydra) gives
    the options the user chose (``model=lstm``) that refusals name."""
    from hpml.validate import knobs, machine, store

    problems: list[HpmlError] = list(knobs.problems(cfg))
    if not any(p.key.startswith("data.") for p in problems):
        try:
            if "data" in parts.refused:
                raise parts.refused["data"]
            if not problems:
                check_model(parts, cfg, job)
        except HpmlError as exc:
            problems.append(exc)
    known = {getattr(p, "key", None) for p in problems} - {None}
    for step in (
        lambda: machine.check_processes(cfg, machine.check_trainer_option(cfg, job)),
        lambda: store.check_store(cfg.logger.tracking_uri, cfg.logger.get("artifact_root")),
    ):
        try:
            step()
        except HpmlError as exc:
            if getattr(exc, "key", None) not in known:
                problems.append(exc)
    datamodule = parts.datamodule
    if problems and datamodule is not None and not datamodule.download:
        try:
            datamodule.prepare_data()  # download off: only looks for the files
        except HpmlError as exc:
            problems.append(exc)
    raise_all(problems)


def check_model(parts: Parts, cfg: DictConfig, job: HydraJob | None) -> None:
    """The model against the data, then the steps that will transform it, each check built on
    the one before (the first failure ends them).

    The model is built here on the meta device from the data's planned spec: the job's own
    model needs its data prepared (read or downloaded), which waits until the config passed."""
    import torch

    from hpml.callbacks.base import HpmlCallback
    from hpml.validate import fit

    assert parts.datamodule is not None  # not refused
    spec = parts.datamodule.planned_spec()
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
    if "callbacks" in parts.refused:
        raise parts.refused["callbacks"]
    for callback in parts.callbacks:
        if isinstance(callback, HpmlCallback):
            callback.check_model(model, lambda: build_model("cpu").net, spec.input_shape, name)
            fit.check_activations(callback, model)


__all__ = ["ConfigError", "HpmlError", "Problems", "check"]
