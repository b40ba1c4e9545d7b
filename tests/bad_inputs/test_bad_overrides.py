"""Overrides the config alone shows to be impossible: refused before any MLflow run or step.

Each case runs the job in-process as the CLI does (see ``harness``) and checks: exit 1, exactly
one ``hpml: error:`` line naming the bad value and what would be valid, no traceback on stderr,
and no run in the store at all (so none RUNNING). ``test_bad_cli.py`` runs a subset for real.
"""

from __future__ import annotations

import pytest

from hpml.validate.machine import resolve_accelerator
from tests.bad_inputs.harness import assert_names, refused_lines, run_statuses

# Small, in case a case is not refused and trains: keys every data config has.
SMALL = ["trainer.max_epochs=1", "data.limit=64", "trainer.enable_progress_bar=false"]
# (overrides, substrings the error line must hold: the key and bad value, then what is valid)
CASES: dict[str, tuple[list[str], list[str]]] = {
    # the observations this suite was written for
    "seed_not_int": (["seed=abc"], ["seed='abc'", "an integer in [0, 4294967295]"]),
    "threads_zero": (["threads=0"], ["threads=0", "an integer >= 1"]),
    "lr_not_number": (
        ["model.optimizer.lr=foo"],
        ["model.optimizer.lr='foo'", "a finite number > 0"],
    ),
    "prune_exclude_int": (
        ["prune=l1_unstructured", "prune.exclude=42"],
        ["prune.exclude=42", "a list of strings or null"],
    ),
    "limit_negative": (["data.limit=-5"], ["data.limit=-5", "a positive integer"]),
    "prune_targets_empty": (
        ["prune=l1_structured", "prune.targets=[]"],
        ["prune.targets=[]", "at least one module"],
    ),
    "share_over_100": (["callbacks.perf.noise.max_other_cpu_pct=150"], ["=150", "100]"]),
    "max_epochs_negative": (
        ["trainer.max_epochs=-3"],
        ["trainer.max_epochs=-3", "an integer >= -1"],
    ),
    "devices_more_than_machine": (
        ["trainer.devices=4096"],
        ["trainer.devices=4096", "at most", "on this machine"],
    ),
    "static_int8_resnet_add": (
        ["quant=static_int8", "model=resnet18", "quant.method.backend=torch_ao"],
        ["quant=static_int8", "resnet18", "aten::add", "quant.method.backend=pt2e", "model=vgg11"],
    ),
    "checkpoint_with_compiled_training": (
        ["activations=checkpoint", "compile=torch_compile", "compile.train=true"],
        ["activations=checkpoint", "compile.train=true", "activations=bf16"],
    ),
    "checkpoint_with_qat": (
        ["activations=checkpoint", "quant=qat"],
        ["activations=checkpoint", "quant.method=qat"],
    ),
    "cifar_layout_on_224": (
        ["model=vgg11", "data=imagenet"],
        [
            "model.net.layout=cifar",
            "32x32 to 63x63, not 224x224",
            "model.net.layout=imagenet",
            "data.image_size=32",
        ],
    ),
    "imagenet_layout_on_32": (
        ["model=vgg16_imagenet"],
        [
            "model.net.layout=imagenet",
            "224x224 and larger, not 32x32",
            "model.net.layout=cifar",
            "data.image_size=224",
        ],
    ),
    # image size, channels and modality against the model
    "no_layout_fits_128": (
        ["model=vgg11", "data.image_size=128"],
        ["not 128x128", "data.image_size=32"],
    ),
    "imagenet_layout_on_cifar10": (
        ["model=vgg16_imagenet", "data=cifar10"],
        ["not 32x32", "model.net.layout=cifar", "224x224"],
    ),
    "alexnet_too_small": (
        ["model=alexnet", "data=synthetic"],
        ["input 32x32 is too small for alexnet", "at least 63x63", "data.image_size=224"],
    ),
    "resnet_on_one_channel": (
        ["model=resnet18", "data=synthetic_mnist"],
        ["1-channel", "channel count"],
    ),
    # a model/data clash names the options typed and the data options that fit
    "lstm_on_images": (
        ["model=lstm", "data=synthetic"],
        [
            "model=lstm takes token sequences",
            "data=synthetic gives 3-channel 32x32 images",
            "use data=imdb or data=synthetic_text",
        ],
    ),
    "vae_on_tokens": (
        ["model=vae", "data=synthetic_text"],
        ["model=vae takes images", "data=synthetic_text gives token sequences", "data=mnist,"],
    ),
    "images_from_a_token_knob": (
        ["data=synthetic", "data.modality=tokens"],
        ["model=vgg11 takes images", "data=synthetic data.modality=tokens gives token", "cifar10"],
    ),
    "vgg_on_one_channel_option": (
        ["data=synthetic_mnist"],
        ["model=vgg11 does not fit data=synthetic_mnist", "1-channel 28x28", "data=synthetic"],
    ),
    "vae_on_normalised_mnist": (
        ["model=vae", "data=mnist", "data.normalize=true"],
        ["normalised", "data.normalize=false"],
    ),
    "vgg_depth": (["model.net.depth=12"], ["model.net.depth=12", "one of 11, 13, 16, 19"]),
    "vgg_layout_name": (["model.net.layout=tiny"], ["model.net.layout='tiny'", "cifar, imagenet"]),
    "lstm_hidden_zero": (
        ["model=lstm", "model.net.hidden_size=0"],
        ["model.net.hidden_size=0", "an integer >= 1"],
    ),
    "lstm_dropout_one": (
        ["model=lstm", "model.net.dropout=1.5"],
        ["model.net.dropout=1.5", "[0, 1)"],
    ),
    "vae_latent_zero": (["model=vae", "model.net.latent=0"], ["model.net.latent=0", ">= 1"]),
    # data knobs
    "batch_size_zero": (["data.batch_size=0"], ["data.batch_size=0", "an integer >= 1"]),
    "batch_size_text": (["data.batch_size=abc"], ["data.batch_size='abc'", "an integer"]),
    "batch_size_float": (["data.batch_size=3.5"], ["data.batch_size=3.5", "an integer"]),
    "num_workers_negative": (["data.num_workers=-1"], ["data.num_workers=-1", ">= 0"]),
    "train_samples_zero": (["data.train_samples=0"], ["data.train_samples=0", "positive"]),
    "image_size_zero": (["data.image_size=0"], ["data.image_size=0", "positive"]),
    "noise_negative": (["data.noise=-0.5"], ["data.noise=-0.5", "a finite number >= 0"]),
    "signal_above_one": (["model=lstm", "data.signal=2"], ["data.signal=2", "[0, 1]"]),
    "vocab_too_small": (["model=lstm", "data.vocab_size=3"], ["data.vocab_size=3", "at least 5"]),
    "modality_unknown": (["data.modality=audio"], ["data.modality='audio'", "image, tokens"]),
    "pin_memory_text": (["data.pin_memory=maybe"], ["data.pin_memory='maybe'", "true or false"]),
    "val_fraction_one": (
        ["data=cifar10", "data.val_fraction=1"],
        ["data.val_fraction=1", "strictly between 0 and 1"],
    ),
    "transform_target_unknown": (
        ["data=cifar10", "data.train_transforms=[{_target_: torchvision.transforms.Flip}]"],
        ["data.train_transforms.0._target_='torchvision.transforms.Flip'", "importable"],
    ),
    "transform_argument_typo": (
        [
            "data=cifar10",
            "data.train_transforms=[{_target_: torchvision.transforms.RandomCrop, sise: 32}]",
        ],
        ["data.train_transforms.0.sise=32", "did you mean size?"],
    ),
    "transforms_not_a_list": (
        ["data=mnist", "data.eval_transforms=ToTensor"],
        ["data.eval_transforms='ToTensor'", "a list of {_target_: ...} nodes"],
    ),
    "transforms_without_tensor": (
        [
            "data=cifar10",
            "data.eval_transforms=[{_target_: torchvision.transforms.RandomHorizontalFlip}]",
        ],
        ["data.eval_transforms=[RandomHorizontalFlip(p=0.5)]", "3x32x32 float tensor", "PIL"],
    ),
    "transforms_crop_size": (
        [
            "data=imagenet",
            "data.image_size=32",
            "data.train_transforms=[{_target_: torchvision.transforms.RandomResizedCrop,"
            " size: 24}, ${data.eval_transforms.2}]",
        ],
        ["data.train_transforms=[RandomResizedCrop(size=(24, 24)", "a 3x24x24 float32 tensor"],
    ),
    "imdb_split_two": (
        ["model=lstm", "data=imdb", "data.split=[0.5,0.5]"],
        ["data.split=[0.5, 0.5]", "three positive fractions"],
    ),
    "imdb_vocab_two": (
        ["model=lstm", "data=imdb", "data.vocab_size=2"],
        ["data.vocab_size=2", "at least 3"],
    ),
    # optimiser and scheduler
    "lr_negative": (["model.optimizer.lr=-0.1"], ["model.optimizer.lr=-0.1", "> 0"]),
    "momentum_above_one": (
        ["model/optimizer=sgd", "model.optimizer.momentum=1.5"],
        ["model.optimizer.momentum=1.5", "[0, 1)"],
    ),
    "weight_decay_negative": (
        ["model.optimizer.weight_decay=-1"],
        ["model.optimizer.weight_decay=-1", ">= 0"],
    ),
    "adam_betas": (
        ["model/optimizer=adam", "+model.optimizer.betas=[0.9,2]"],
        ["model.optimizer.betas=[0.9, 2]", "two finite numbers in [0, 1)"],
    ),
    # inf and nan parse as floats: every float knob of an optimiser must be finite
    "lr_inf": (["model.optimizer.lr=inf"], ["model.optimizer.lr=inf", "a finite number > 0"]),
    "lr_nan": (["model.optimizer.lr=nan"], ["model.optimizer.lr=nan", "a finite number > 0"]),
    "lr_minus_inf": (["model.optimizer.lr=-inf"], ["model.optimizer.lr=-inf", "finite"]),
    "weight_decay_inf": (
        ["model.optimizer.weight_decay=inf"],
        ["model.optimizer.weight_decay=inf", "a finite number >= 0"],
    ),
    "momentum_nan": (
        ["model/optimizer=sgd", "model.optimizer.momentum=nan"],
        ["model.optimizer.momentum=nan", "[0, 1)"],
    ),
    "adam_eps_inf": (
        ["model/optimizer=adam", "+model.optimizer.eps=inf"],
        ["model.optimizer.eps=inf", "a finite number > 0"],
    ),
    "adam_betas_nan": (
        ["model/optimizer=adam", "+model.optimizer.betas=[0.9,nan]"],
        ["model.optimizer.betas=[0.9, nan]", "two finite numbers in [0, 1)"],
    ),
    "undeclared_float_inf": (["+model.optimizer.maximize_by=inf"], ["maximize_by=inf", "finite"]),
    "step_gamma_zero": (
        ["model/scheduler=step", "model.scheduler.gamma=0"],
        ["model.scheduler.gamma=0", "> 0"],
    ),
    "cosine_t_max_zero": (
        ["model/scheduler=cosine", "model.scheduler.T_max=0"],
        ["model.scheduler.T_max=0", ">= 1"],
    ),
    # trainer and machine
    "max_epochs_text": (["trainer.max_epochs=abc"], ["trainer.max_epochs='abc'", "an integer"]),
    "log_every_zero": (["trainer.log_every_n_steps=0"], ["trainer.log_every_n_steps=0", ">= 1"]),
    "limit_batches_fraction": (
        ["+trainer.limit_train_batches=1.5"],
        ["trainer.limit_train_batches=1.5", "a fraction in [0.0, 1.0]"],
    ),
    "accumulate_zero": (
        ["+trainer.accumulate_grad_batches=0"],
        ["trainer.accumulate_grad_batches=0", ">= 1"],
    ),
    "precision_unknown": (["trainer.precision=fp17"], ["trainer.precision='fp17'", "bf16-mixed"]),
    "deterministic_text": (
        ["trainer.deterministic=maybe"],
        ["trainer.deterministic='maybe'", "true or false"],
    ),
    "trainer_key_typo": (["+trainer.max_epoch=3"], ["trainer.max_epoch=3", "max_epochs"]),
    "accelerator_absent": (
        ["trainer.accelerator=tpu"],
        ["trainer.accelerator='tpu'", "auto", "no tpu device"],
    ),
    "accelerator_unknown": (
        ["trainer.accelerator=quantum"],
        ["trainer.accelerator='quantum'", "one of auto"],
    ),
    "devices_zero": (["trainer.devices=0"], ["trainer.devices=0", "a positive integer, -1"]),
    "devices_index": (["trainer.devices=[0,7]"], ["trainer.devices=[0, 7]", "device"]),
    "num_nodes_two": (["+trainer.num_nodes=2"], ["trainer.num_nodes=2", "expected 1"]),
    "strategy_unknown": (["+trainer.strategy=nope"], ["trainer.strategy='nope'", "ddp"]),
    # pruning, quantisation, compilation, profiling, callbacks, logger
    "prune_amount_one": (
        ["prune=l1_structured", "prune.amount=1.5"],
        ["prune.amount=1.5", "[0, 1)"],
    ),
    "prune_target_absent": (
        ["prune=l1_structured", "prune.targets=[nothing_here]"],
        ["prune.targets='nothing_here'", "matches nothing", "Conv2d"],
    ),
    "prune_schedule": (
        ["prune=l1_structured", "prune.schedule=sometimes"],
        ["prune.schedule='sometimes'", "before_fit"],
    ),
    "prune_sensitivity": (
        ["prune=l1_structured", "prune.sensitivity=[2]"],
        ["prune.sensitivity=2", "[0, 1)"],
    ),
    "quant_engine": (
        ["quant=dynamic_int8", "quant.method.engine=arm"],
        ["quant.method.engine='arm'", "x86, fbgemm, onednn, qnnpack"],
    ),
    "quant_calibration_zero": (
        ["quant=static_int8", "quant.calibration_batches=0"],
        ["quant.calibration_batches=0", "a positive integer"],
    ),
    "static_int8_on_tokens": (
        ["quant=static_int8", "model=lstm"],
        ["quant=static_int8", "int64 ids", "quant=dynamic_int8"],
    ),
    "qat_vae_tuple": (["quant=qat", "model=vae"], ["quant=qat", "vae", "quant=dynamic_int8"]),
    "qat_epochs_zero": (["quant=qat", "quant.qat_epochs=0"], ["quant.qat_epochs=0", "positive"]),
    "compile_mode": (
        ["compile=torch_compile", "compile.mode=fastest"],
        ["compile.mode='fastest'", "reduce-overhead"],
    ),
    "compile_tolerance": (
        ["compile=torchscript", "compile.tolerance=0"],
        ["compile.tolerance=0", "> 0"],
    ),
    "profile_active_zero": (["profile=torch", "profile.active=0"], ["profile.active=0", ">= 1"]),
    "perf_warmup_negative": (
        ["callbacks.perf.warmup_steps=-1"],
        ["callbacks.perf.warmup_steps=-1", ">= 0"],
    ),
    "roofline_device": (
        ["callbacks=analysis", "callbacks.roofline.device=tpu-v9"],
        ["callbacks.roofline.device='tpu-v9'", "a100-40gb"],
    ),
    "metrics_interval_zero": (
        ["logger.system_metrics_interval_s=0"],
        ["logger.system_metrics_interval_s=0", "> 0"],
    ),
}


@pytest.mark.parametrize(("overrides", "expected"), list(CASES.values()), ids=list(CASES))
def test_refused_before_any_run(
    overrides: list[str], expected: list[str], composed, root, capsys: pytest.CaptureFixture[str]
) -> None:
    first, *more = refused_lines(composed([*SMALL, *overrides]), capsys)
    assert_names(first, expected)
    # the one other line a refusal may bring: the real data files the run would not find
    assert all(" not found at " in line for line in more), more
    assert run_statuses(root) == []  # refused before the MLflow run: nothing left RUNNING


def test_every_problem_is_its_own_line(composed, root, capsys: pytest.CaptureFixture[str]) -> None:
    """Ranges, a data option's missing files and a value the user typed once: each a line."""
    lines = refused_lines(
        composed([*SMALL, "model.optimizer.lr=nan", "data.noise=-1", "seed=abc"]), capsys
    )
    assert len(lines) == 3, lines
    for named in ("model.optimizer.lr=nan", "data.noise=-1", "seed='abc'"):  # data.seed: ${seed}
        assert sum(named in line for line in lines) == 1, (named, lines)


def test_a_clash_and_missing_files_are_both_reported(
    composed, root, capsys: pytest.CaptureFixture[str]
) -> None:
    """``data=mnist data.data_dir=/nonexistent`` with the default model (vgg11, 3 channels)."""
    clash, missing = refused_lines(
        composed([*SMALL, "data=mnist", "data.data_dir=/nonexistent"]), capsys
    )
    assert_names(
        clash,
        [
            "model=vgg11 does not fit data=mnist",
            "1-channel 28x28",
            "data=cifar10 or data=synthetic",
        ],
    )
    assert "data.data_dir" not in clash  # the clash is the option's, not the folder's
    assert_names(missing, ["MNIST not found at /nonexistent/MNIST/raw", "data.download=true"])
    assert run_statuses(root) == []


@pytest.mark.skipif(resolve_accelerator("auto") != "cpu", reason="this machine has a GPU")
def test_a_trainer_option_the_machine_cannot_run_is_named(
    composed, root, capsys: pytest.CaptureFixture[str]
) -> None:
    (line,) = refused_lines(composed([*SMALL, "trainer=fp16"]), capsys)
    assert_names(
        line,
        [
            "trainer=fp16 sets trainer.accelerator='gpu'",
            "this machine has no GPU",
            "trainer=bf16, trainer=cpu, trainer=ddp_cpu or trainer=default",
        ],
    )
    # typed by the user: the key is what they typed, and what is named
    (line,) = refused_lines(composed([*SMALL, "trainer.accelerator=gpu"]), capsys)
    assert_names(line, ["trainer.accelerator='gpu' is invalid", "no GPU"])


def test_a_users_own_trainer_option_is_refused_in_one_line_naming_it(
    composed, root, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An option of the user's own config dir (``--config-dir``, or ``hydra.searchpath`` as
    here) is read where Hydra found it: refused as hpml's own are, and suggested when it runs."""
    user = tmp_path / "my_conf" / "trainer"
    user.mkdir(parents=True)
    (user / "mytrainer.yaml").write_text("defaults:\n  - default\n\nnum_nodes: 0\n")
    (user / "mycpu.yaml").write_text("defaults:\n  - cpu\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]"
    (line,) = refused_lines(composed([*SMALL, searchpath, "trainer=mytrainer"]), capsys)
    assert_names(
        line,
        [
            "trainer=mytrainer sets trainer.num_nodes=0",
            "trainer.num_nodes must be a positive integer",
            "trainer=mycpu",
            "trainer=cpu",
        ],
    )
    assert "trainer=mytrainer or" not in line and ", trainer=mytrainer" not in line
    assert run_statuses(root) == []
