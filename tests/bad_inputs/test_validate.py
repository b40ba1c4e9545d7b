"""The validation step itself: nothing valid is refused, and every numeric knob is checked."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from hpml.errors import ConfigError, HpmlError
from hpml.optimize.quant.torch_ao import EAGER_INT8_MODELS
from hpml.train import hydra_job, job_parts

VALID = [
    [],
    ["model=vgg19"],
    ["model=resnet18"],
    ["model=lstm"],
    ["model=vae"],
    ["model=vae", "data=mnist"],
    ["model=vgg11", "data=cifar10"],
    ["model=lstm", "data=imdb"],
    ["model=alexnet", "data.image_size=224"],
    ["model=vgg16_imagenet", "data.image_size=224"],
    ["data=imagenet", "data.image_size=32"],
    ["model.net.layout=imagenet", "data=imagenet"],
    ["experiment=roofline_vgg"],
    ["experiment=batch_scaling"],
    ["experiment=imdb_lstm"],
    ["experiment=vae_pruning"],
    ["experiment=lstm_pruning"],
    ["experiment=vgg_quant", "quant=qat"],
    ["quant=static_int8"],
    ["quant=dynamic_int8", "model=lstm"],
    ["compile=torch_compile"],
    ["profile=torch"],
    ["profile=advanced"],
    ["callbacks=analysis"],
    ["trainer=bf16"],
    ["model/optimizer=adam", "model/scheduler=cosine"],
    ["trainer.devices=[0]"],
    ["trainer=ddp_cpu"],
    ["trainer=ddp_cpu", "prune=l1_unstructured"],
    ["trainer=ddp_cpu", "quant=dynamic_int8"],
    ["trainer.max_epochs=-1"],
    ["+trainer.limit_train_batches=0.5"],
    ["data.limit=10"],
    ["trainer.enable_checkpointing=false"],
]


@pytest.mark.parametrize("overrides", VALID, ids=[" ".join(o) or "default" for o in VALID])
def test_valid_configs_pass(overrides: list[str], composed) -> None:
    job_parts(composed(overrides), hydra_job())


@pytest.mark.parametrize("devices", ["auto", "-1"])
def test_all_devices_are_accepted_where_the_accelerator_has_them(devices: str, composed) -> None:
    from hpml.validate.machine import resolve_accelerator

    if devices == "-1" and resolve_accelerator("auto") == "cpu":
        with pytest.raises(ConfigError, match=r"trainer.devices=-1 .*a number of processes on CPU"):
            job_parts(composed([f"trainer.devices={devices}"]), hydra_job())
        return
    job_parts(composed([f"trainer.devices={devices}"]), hydra_job())


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["trainer=ddp_cpu", "trainer.num_nodes=2"], "expected 1 outside a cluster"),
        (
            ["trainer=ddp_cpu", "trainer.strategy=ddp_spawn"],
            "trainer.strategy='ddp_spawn' is invalid: expected ddp",
        ),
        (
            ["trainer=ddp_cpu", "prune=l1_structured"],
            "prune.mode='physical' is invalid: expected mask with 2 DDP processes",
        ),
        (
            ["trainer=ddp_cpu", "quant=qat"],
            "quant.method='qat' is invalid: expected a post-training method with 2 DDP",
        ),
        (
            ["trainer=ddp_cpu", "compile=torchscript"],
            "compile.method='torchscript' is invalid: expected compile=none with 2 DDP",
        ),
        (
            ["trainer=ddp_cpu", "trainer.devices=4096"],
            "trainer.devices=4096 is invalid: expected at most",
        ),
    ],
)
def test_ddp_that_cannot_run_here_is_refused(
    overrides: list[str], expected: str, composed, monkeypatch
) -> None:
    for name in ("SLURM_NTASKS", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as caught:
        job_parts(composed(overrides), hydra_job())
    assert expected in str(caught.value)


@pytest.mark.parametrize("model", EAGER_INT8_MODELS)
def test_models_named_for_static_int8_do_quantise_and_run(model: str, composed) -> None:
    """The refusal's hint must hold: each model it names runs as eager static int8."""
    from hydra.utils import instantiate

    from hpml.optimize.quant.torch_ao import Static

    size = 64 if model == "alexnet" else 32
    cfg = composed([f"model={model}", f"data.image_size={size}"])
    net = instantiate(cfg.model.net, _partial_=True)(num_classes=10)
    spec = instantiate(cfg.data).planned_spec()
    Static().check_net(lambda: net, torch.rand(2, *spec.input_shape), model)


# Group selections that between them hold every option's numeric knobs.
SELECTIONS = [
    [],
    ["model=lstm"],
    ["model=vae"],
    ["model=vae", "data=mnist"],
    ["data=cifar10"],
    ["data=imagenet", "data.image_size=32"],
    ["model=lstm", "data=imdb"],
    ["model/scheduler=cosine"],
    ["model/scheduler=step", "model/optimizer=adam"],
    ["prune=l1_structured"],
    ["quant=qat"],
    ["quant=static_int8"],
    ["quant=dynamic_int8"],
    ["compile=torch_compile"],
    ["profile=torch"],
    ["profile=advanced"],
    ["callbacks=analysis"],
]


def numeric_knobs(cfg: Any) -> dict[str, Any]:
    """Every int or float leaf of the resolved config, by dotted key."""
    found: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        elif isinstance(node, int | float) and not isinstance(node, bool):
            found[prefix.rstrip(".")] = node

    walk(OmegaConf.to_container(cfg, resolve=True), "")
    return found


def refusal(cfg: Any) -> str | None:
    """What the checks ``hpml.train.train`` makes before any run say about ``cfg``, in its
    order: the config alone, the store, then the built parts."""
    from hpml.tracking.remote import prepare
    from hpml.validate import check_config

    try:
        check_config(cfg)
        prepare(cfg.logger)
        job_parts(cfg, hydra_job())
    except HpmlError as exc:
        return str(exc)
    return None


def test_every_numeric_knob_refuses_text_and_a_negative_number(composed) -> None:
    """Types and ranges of every numeric knob in every config option, checked before training."""
    seen: set[str] = set()
    unchecked: list[str] = []
    for selection in SELECTIONS:
        cfg = composed(selection)
        for key in sorted(set(numeric_knobs(cfg)) - seen):
            seen.add(key)
            for bad in ("abc", -7):
                broken = copy.deepcopy(cfg)
                OmegaConf.update(broken, key, bad)
                message = refusal(broken)
                if message is None or f"{key}={bad!r}" not in message:
                    unchecked.append(f"{key}={bad!r}: {message}")
    assert len(seen) > 60, sorted(seen)
    assert not unchecked, "\n".join(unchecked)


def test_layout_and_size_messages_point_both_ways(composed) -> None:
    """They name the model by its ``model=`` option (vgg11, where its builder is ``vgg``)."""
    named = r"model vgg11 .*: set model.net.layout=imagenet or data.image_size=32"
    with pytest.raises(HpmlError, match=named):
        job_parts(composed(["data.image_size=224"]), hydra_job())
    with pytest.raises(HpmlError, match=r"set model.net.layout=cifar or data.image_size=224"):
        job_parts(composed(["model.net.layout=imagenet"]), hydra_job())


def test_validation_touches_no_data_file_and_leaves_torch_as_it_was(composed, tmp_path) -> None:
    """A missing dataset is the run's failure (recorded FAILED), not the config's."""
    before = torch.backends.quantized.engine
    job_parts(composed(["data=cifar10", f"data.data_dir={tmp_path}/absent"]), hydra_job())
    job_parts(
        composed(["model=lstm", "data=imdb", f"data.data_dir={tmp_path}/absent"]), hydra_job()
    )
    assert torch.backends.quantized.engine == before
    assert not (tmp_path / "absent").exists()


def test_inf_and_nan_are_refused_wherever_they_appear() -> None:
    """No knob takes them, declared or not; in lists too."""
    from hpml.validate.knobs import range_problems

    found = range_problems(
        {
            "callbacks": {"x": {"limit": float("inf")}},
            "data": {"split": [0.5, [float("nan")]]},
            "trainer": {"max_epochs": 2, "gradient_clip_val": float("-inf")},
        }
    )
    assert [str(p) for p in found] == [
        "callbacks.x.limit=inf is invalid: expected a finite number",
        "data.split=[0.5, [nan]] is invalid: expected finite numbers",
        "trainer.gradient_clip_val=-inf is invalid: expected a finite number >= 0, "
        "or null (no clipping)",
    ]


def test_several_problems_print_a_line_each_and_tag_as_one() -> None:
    from hpml.errors import DatasetNotFoundError, Problems, one_line, problem_lines

    problems = Problems(
        [
            ConfigError("model.optimizer.lr", float("nan"), "a finite number > 0"),
            DatasetNotFoundError("MNIST", "/nowhere", "data.download=true"),
        ]
    )
    assert problem_lines(problems) == [
        "ConfigError: model.optimizer.lr=nan is invalid: expected a finite number > 0",
        "DatasetNotFoundError: MNIST not found at /nowhere: data.download=true",
    ]
    assert "\n" not in one_line(problems) and "lr=nan" in one_line(problems)
