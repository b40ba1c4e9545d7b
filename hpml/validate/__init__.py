"""Refuse, before training, what the config and the parts it built show to be impossible.

:func:`check_config` judges the composed config alone, the signatures its ``_target_`` nodes
name read from their source, before Lightning or MLflow is imported: a mistyped value is
answered in about the time Python takes to start. :func:`check` reads the built parts before
the MLflow run starts, one line per problem: values against their declared ranges and types,
what a constructor refused, the model against the data and the steps that will transform it,
the trainer against this machine and the store's directory. Importing this package is cheap.
"""

from __future__ import annotations

from omegaconf import DictConfig

from hpml.build import Parts
from hpml.errors import HpmlError, IncompatibleError, constructed, raise_all
from hpml.hydra_job import HydraJob


def check_config(cfg: DictConfig) -> None:
    """Raise what the config alone shows to be impossible, importing none of its targets: the
    values their source declares a range or type for (the targets whose source cannot be read
    are left to :func:`check`, once they are imported) and the store's directory."""
    from hpml.validate import knobs, source, store

    problems: list[HpmlError] = list(knobs.problems(cfg, read=source.signature))
    try:
        store.check_store(cfg.logger.tracking_uri, cfg.logger.get("artifact_root"))
    except HpmlError as exc:
        if getattr(exc, "key", None) not in {p.key for p in problems}:
            problems.append(exc)
    raise_all(problems)


def check(parts: Parts, cfg: DictConfig, job: HydraJob | None) -> None:
    """Raise an :class:`~hpml.errors.HpmlError` for what cannot work in job ``cfg`` with its
    built ``parts``: one problem, or several as :class:`~hpml.errors.Problems`, so one try shows
    all a user must fix. ``job`` (None outside Hydra) gives the options refusals name. What
    :func:`check_config`, run before it, judged is not judged again."""
    from hpml.validate import knobs, machine, source

    problems: list[HpmlError] = list(knobs.problems(cfg, source.unread, everywhere=False))
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
        lambda: machine.check_processes(parts.callbacks, machine.check_trainer_option(cfg, job)),
        lambda: machine.check_placement(parts.datamodule, cfg.trainer),
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
    """The planned model against the data, then the steps that will transform it, the first
    failure ending them."""
    from hpml.callbacks.base import HpmlCallback
    from hpml.callbacks.measure_settings import OptimizationStep
    from hpml.validate import fit

    assert parts.datamodule is not None and parts.cpu_net is not None  # not refused
    spec = parts.datamodule.planned_spec()
    name = fit.model_name(cfg, job)
    fit.check_layout(cfg, spec, name, parts.planned)
    with constructed("model"):
        model = fit.built_for_data(cfg, job, spec, parts.planned, parts.refused)
    for group in ("model.optimizer", "callbacks"):
        if group in parts.refused:
            raise parts.refused[group]
    steps = [c for c in parts.callbacks if isinstance(c, OptimizationStep)]
    hpml_callbacks = [c for c in parts.callbacks if isinstance(c, HpmlCallback)]
    for callback in hpml_callbacks:
        callback.check_model(model, parts.cpu_net, spec.input_shape, name)
    for step in steps if any(c.recomputes_stages for c in hpml_callbacks) else ():
        if step.replaces_net_during_fit:  # the stages would not be found mid-fit
            key, value = step.knob
            raise IncompatibleError(
                f"activations=checkpoint cannot run with {step.stage}.{key}={value}: it "
                "replaces the net during training, and the checkpointed stages are the eager "
                "net's; use activations=bf16, or drop one of the two"
            )
