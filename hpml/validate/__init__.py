"""Refuse, before training, what the config and the parts it built show to be impossible.

``check(parts, cfg, job)`` reads the parts :func:`hpml.build.build_parts` built (the job trains
with these very objects) before the MLflow run starts, so a refused job never reaches a training
step (in a sweep it is recorded as a FAILED child run; a single run leaves none). Every problem
found is reported, one line each; checks that build on one another stop at the first failure of
their chain. In order:

1. values against their declared ranges and the types their targets declare
   (:mod:`hpml.validate.knobs`): all of them, and any ``inf`` or ``nan``; then what a data
   module's or callback's constructor refused (reported against its config group);
2. the model against the data (modality and channels, named by the ``model=`` and ``data=``
   options with the data options that fit; image size vs ``model.net.layout``) and the steps
   that will transform it (pruning targets, quantisation vs the net's ops, checkpointed stages
   and the steps that would replace them) (:mod:`hpml.validate.fit`), on a model built on the
   meta device with its optimiser and scheduler (the real one needs the data read);
3. the trainer's accelerator, devices and strategy against this machine (a value the
   ``trainer=`` option set is named by the option), and under DDP the steps that cannot run
   there (:mod:`hpml.validate.machine`), and the store's directory (:mod:`hpml.validate.store`).

Data files are looked for only when the config is refused anyway, so the one answer lists them
too; otherwise a corrupt or missing file fails the run, recorded FAILED.
Importing this package is cheap; the checks import torch and Lightning when they run.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from hpml.build import Parts, build, constructed
from hpml.errors import ConfigError, HpmlError, Problems, raise_all
from hpml.hydra_job import HydraJob


def check(parts: Parts, cfg: DictConfig, job: HydraJob | None) -> None:
    """Raise an :class:`~hpml.errors.HpmlError` for what cannot work in job ``cfg`` with its
    built ``parts``: one problem, or several as :class:`~hpml.errors.Problems` (one line each),
    so one try shows all a user must fix.

    Checks that build on one another stop at the first failure in their chain (a data module
    that could not be built has no spec to fit a model to); the machine and the store are
    checked either way. A refused config also reports the data files its run would not find,
    which otherwise fail the run itself. ``job`` (None outside Hydra) gives the options the
    user chose (``model=lstm``) that refusals name.
    """
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
