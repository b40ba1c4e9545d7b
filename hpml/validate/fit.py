"""The model against its data and against the steps that will transform it, before training.

Everything here reads the model as planned (:attr:`hpml.build.Parts.planned`, on the meta
device). The steps that transform the model are asked what they cannot do to it (their own
``check_model``); eager int8's check runs a quantised CPU copy of the net once, the only way to
learn whether it has kernels for every op.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import torch
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from hpml.build import build, planned_model
from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, IncompatibleError
from hpml.hydra_job import HydraJob
from hpml.models.input_fit import probe, size_range, sizes_text
from hpml.validate import options

if TYPE_CHECKING:
    from hpml.models.base import HpmlModule


def model_name(cfg: DictConfig, job: HydraJob | None) -> str:
    """The ``model=`` option the job was composed with, else the model's target name."""
    choice = job.choices.get("model") if job is not None else None
    if choice:
        return str(choice)
    net = cfg.model.get("net") or {}
    return str(net.get("_target_", cfg.model.get("_target_", "model"))).rsplit(".", 1)[-1]


def check_layout(cfg: DictConfig, spec: DataSpec, name: str, planned: HpmlModule | None) -> None:
    """Refuse images of a size the net's ``layout`` was not built for, naming both fixes (nets
    whose builder lists ``LAYOUTS``; a net that takes no size at all is left to the model's own
    check). The ``planned`` model's net is probed; the other layouts are built only to name a
    fix."""
    net_cfg = cfg.model.get("net")
    if spec.modality != "image" or not net_cfg or "layout" not in net_cfg:
        return
    layouts = getattr(inspect.getmodule(get_object(net_cfg._target_)), "LAYOUTS", ())
    current = net_cfg.layout
    if current not in layouts:
        return  # the builder names the valid layouts itself
    channels, size = spec.input_shape[0], min(spec.input_shape[1:])
    if planned is not None and probe(planned.net, channels, size).as_laid_out:
        return
    builder = instantiate(net_cfg, _partial_=True)
    nets: dict[str, nn.Module] = {}
    try:
        for layout in layouts:
            with torch.device("meta"):
                nets[layout] = builder(layout=layout, num_classes=spec.num_classes)
    except ConfigError as exc:
        raise exc.under("model.net") from None
    here = probe(nets[current], channels, size)
    if here.as_laid_out:
        return
    sizes = size_range(lambda s: probe(nets[current], channels, s).as_laid_out)
    if sizes is None:
        return
    fixes = [
        f"model.net.layout={layout}"
        for layout in layouts
        if layout != current and probe(nets[layout], channels, size).as_laid_out
    ]
    if "image_size" in cfg.data:
        fixes.append(f"data.image_size={sizes[0]}")
    else:
        fixes.append(f"data with images of {sizes_text(sizes)}")
    why = f" ({here.stretched} at {size}x{size})" if here.runs and here.stretched else ""
    raise IncompatibleError(
        f"model {name} (model.net.layout={current}) is laid out for images of "
        f"{sizes_text(sizes)}, not {size}x{size}{why}: set {' or '.join(fixes)}"
    )


SAMPLES = {"image": "images", "tokens": "token sequences"}


def describe(spec: DataSpec) -> str:
    """What a data config gives, in a user's words: ``1-channel 28x28 images``."""
    if spec.modality == "image":
        channels, height, width = spec.input_shape
        return f"{channels}-channel {height}x{width} images"
    return f"{SAMPLES.get(spec.modality, spec.modality)} of length {spec.input_shape[0]}"


def built_for_data(
    cfg: DictConfig,
    job: HydraJob | None,
    spec: DataSpec,
    planned: HpmlModule | None,
    refused: dict[str, Exception],
) -> HpmlModule:
    """The ``planned`` model, built for the data; a model/data clash named by the options the
    user chose and the data options that would fit, found by building the model on each data
    option's planned spec. A clash from a ``data.*`` value keeps the model's own message.

    Args:
        planned: the model as the builder planned it; None where its constructor raised.
        refused: what each part's constructor raised, by config group (``model``: this one).
    """
    wanted = getattr(get_object(cfg.model._target_), "modality", spec.modality)
    clash = None
    if wanted == spec.modality:
        if planned is not None:
            return planned
        clash = refused["model"]
        if not isinstance(clash, IncompatibleError):
            raise clash

    def fits(node: DictConfig) -> None:
        planned_model(cfg, build("data", node).planned_spec())

    def fits_with(override: str) -> bool:
        """Whether the chosen option fits with this one ``data.*`` override of the user's."""
        key = override.lstrip("+~").split("=", 1)[0]
        node = options.in_place_of(cfg, "data", str(job.choices["data"]), job)
        OmegaConf.update(node, key.removeprefix("data."), OmegaConf.select(cfg, key))
        return options.works(lambda: fits(node))

    fitting = options.working(cfg, "data", fits, job)
    chosen_fits = job is None or job.choices.get("data") in fitting
    if clash is not None and chosen_fits:
        raise clash
    model = options.choice(job, "model") or f"model {model_name(cfg, job)}"
    data = options.choice(job, "data") or "the data"
    if chosen_fits:  # the option's defaults fit: name the data.* values the user set that do not
        typed = options.typed(job, "data")
        data = " ".join([data, *([t for t in typed if not fits_with(t)] or typed)])
    if clash is None:
        why = f"takes {SAMPLES.get(wanted, wanted)}, but {data} gives {describe(spec)}"
    else:
        why = f"does not fit {data}, which gives {describe(spec)} ({clash})"
    raise IncompatibleError(f"{model} {why}: use {options.alternatives('data', fitting)}")
