"""Every option of every config group composes, and everything it names instantiates.

Groups and options are read from ``conf/`` (nested groups such as ``model/optimizer`` too), so a
new option is covered without editing this file. Each option is composed as ``@hydra.main``
would compose it, then built as ``hpml.train.train`` builds a run, with the same live arguments:
the data module (prepared and set up, on tiny real-format files for real datasets), the model
from the data's spec, its optimiser and scheduler on its parameters, every callback, the trainer
and the tracker. Experiments are composed here and run end to end in ``test_experiments.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_class
from omegaconf import DictConfig

from hpml.build import build, build_callbacks
from hpml.errors import ConfigError, IncompatibleError
from tests.conftest import CONF
from tests.real_data import write_real_data

# conf/base/ holds the bases options inherit (`- /base/<name>@_here_`); it is not a group.
GROUPS = sorted(
    str(d.relative_to(CONF))
    for d in CONF.rglob("*")
    if d.is_dir() and any(d.glob("*.yaml")) and d != CONF / "base"
)
OPTIONS = [
    pytest.param(group, p.stem, id=f"{group}={p.stem}")
    for group in GROUPS
    for p in sorted((CONF / group).glob("*.yaml"))
]


def test_every_group_is_found() -> None:
    assert {
        "data",
        "model",
        "model/optimizer",
        "model/scheduler",
        "trainer",
        "callbacks",
        "quant",
        "prune",
        "compile",
        "profile",
        "logger",
        "experiment",
    } <= set(GROUPS)


def needs_missing_device(cfg: DictConfig) -> str | None:
    """Why this machine cannot build the trainer (a GPU option without CUDA), else None."""
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        return f"trainer.accelerator={accelerator} and torch sees no CUDA device here"
    return None


def build_run(cfg: DictConfig) -> dict[str, Any]:
    """What ``train`` builds before it fits, with the live arguments it passes."""
    datamodule = build("data", cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    inputs, _ = next(iter(datamodule.train_dataloader()))
    assert tuple(inputs.shape[1:]) == tuple(datamodule.spec.input_shape)
    model = build("model", cfg.model, data=datamodule.spec)
    optimizers = model.configure_optimizers()  # model/optimizer and model/scheduler
    callbacks = build_callbacks(cfg)
    trainer = build(
        "trainer", cfg.trainer, callbacks=callbacks, logger=False, enable_progress_bar=False
    )
    tracker = build("logger", cfg.logger)
    sweep_callbacks = [
        build("hydra.callbacks", node) for node in (HydraConfig.get().callbacks or {}).values()
    ]
    return {
        "data": datamodule,
        "model": model,
        "optimizers": optimizers,
        "callbacks": callbacks,
        "trainer": trainer,
        "logger": tracker,
        "hydra": sweep_callbacks,
    }


def fitting_size(cfg: DictConfig) -> list[str]:
    """Overrides for the other of the two sizes hpml's image layouts are built for (CIFAR's 32,
    ImageNet's 224), for a model that said its data's images do not fit it."""
    size = 224 if int(cfg.data.image_size) < 224 else 32
    small = ["data.train_samples=16", "data.val_samples=16", "data.test_samples=16"]
    return [f"data.image_size={size}", *(small if "train_samples" in cfg.data else [])]


def targets(node: Any) -> list[str]:
    """The ``_target_`` of ``node``, or of each node in a dict of them (``callbacks``)."""
    if not isinstance(node, DictConfig):
        return []
    if "_target_" in node:
        return [str(node._target_)]
    return [t for value in node.values() for t in targets(value)]


def pairings(group: str, overrides: list[str]) -> list[list[str]]:
    """The option as composed, then, for data, with each model: the default model (VGG11-CIFAR)
    eats neither tokens nor 1-channel images, and the model that does is found, not listed."""
    models = (
        []
        if group != "data"
        else [[f"model={p.stem}"] for p in sorted((CONF / "model").glob("*.yaml"))]
    )
    return [overrides, *([*overrides, *model] for model in models)]


def build_fitting(
    composed, group: str, overrides: list[str], cfg: DictConfig
) -> tuple[DictConfig, dict]:
    """Build the first pairing whose model takes its data (``cfg``: ``overrides`` composed,
    the first pairing); fail naming every refusal."""
    refusals = []
    for attempt in pairings(group, overrides):
        if attempt != overrides:
            cfg = composed(attempt)
        try:
            return cfg, build_run(cfg)
        except IncompatibleError as exc:  # AlexNet on 32x32 images, VGG-CIFAR on 224x224
            refusals.append(f"{' '.join(attempt)}: {exc}")
            if "data.image_size=" not in str(exc) or "image_size" not in cfg.data:
                continue
        cfg = composed([*attempt, *fitting_size(cfg)])
        try:
            return cfg, build_run(cfg)
        except IncompatibleError as exc:
            refusals.append(f"{' '.join(attempt)} {' '.join(fitting_size(cfg))}: {exc}")
    pytest.fail("no model takes this option's data:\n" + "\n".join(refusals))


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_option_composes_and_instantiates(group: str, option: str, composed, root: Path) -> None:
    # one batch of each split is all that is drawn or read: the build is what is tested
    overrides = [f"{group}={option}", "data.limit=${data.batch_size}"]
    if group == "data":
        overrides += write_real_data(option, root / "data") or []
    cfg = composed(overrides)
    assert HydraConfig.get().runtime.choices[group] == option
    if group == "experiment":
        return  # each one runs end to end, every job of its sweep: test_experiments.py
    reason = needs_missing_device(cfg)
    if reason is not None:
        pytest.skip(f"{group}={option}: {reason}")
    cfg, built = build_fitting(composed, group, overrides, cfg)
    if group in ("callbacks", *cfg.callback_groups):
        for target in targets(cfg.get(group)):
            cls = get_class(target)
            assert any(isinstance(c, cls) for c in built["callbacks"]), target


def test_one_callback_groups_run_in_the_configured_order(composed) -> None:
    chosen = ["prune=l1_unstructured", "quant=dynamic_int8", "compile=torchscript"]
    built = [type(c).__name__ for c in build_callbacks(composed(chosen))]
    assert [name for name in built if name in ("Prune", "Quantize", "Compile")] == [
        "Prune",
        "Quantize",
        "Compile",
    ]
    reordered = composed([*chosen, "callback_groups=[compile,quant,prune]"])
    built = [type(c).__name__ for c in build_callbacks(reordered)]
    assert [name for name in built if name in ("Prune", "Quantize", "Compile")] == [
        "Compile",
        "Quantize",
        "Prune",
    ]


def test_a_misspelt_callback_group_is_refused_naming_it(composed) -> None:
    with pytest.raises(ConfigError, match=r"callback_groups=.*'qaunt' is none"):
        build_callbacks(composed(["callback_groups=[prune,qaunt]"]))
