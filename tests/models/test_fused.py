"""A fused training array trains each member as its serial job would (issue 13's acceptance
tests): after K steps every member's weights and BatchNorm statistics equal those of a model
trained alone with the same seed and hyper-parameters, whatever the members' learning rates,
optimisers, seeds or schedulers; a diverging member is frozen without touching the others, and
a member frozen by its target keeps the weights and BatchNorm statistics of its stopped twin.

Members are built as :meth:`hpml.lifecycle.Job.assemble` builds a job's (seed, data,
``prepare_data``, model) and trained by a real Lightning Trainer, the fused array on
:class:`FusedData`, each serial twin on its own data module.

The VGG cases run in float64, as the gap in float32 is rounding: vmap's grouped convolution
differs from the plain one by about 3e-6 relative in a forward pass, which three SGD steps grow
to 6e-6 .. 3e-5 (BatchNorm's shift and running variance); the conv biases ahead of BatchNorm
have a true gradient of zero, so their float32 gradients are rounding noise (about 1e-7) that
Adam scales into full-size steps (0.1 .. 0.95 apart after three steps, 1e-3 in BatchNorm's
shift). In float64 the members match their twins to 1e-14 .. 6e-14 (SGD) and 7e-10 .. 6e-9
(Adam, those biases: noise of 1e-16 against Adam's eps of 1e-8). The LSTM holds in float32.

Those figures are full-width VGG11-BN's. The VGG family here is its CIFAR layout (eight
conv-BN-ReLU blocks, five poolings, one Linear) at an eighth of its widths: the same layers
through the same vmapped grouped convolutions and BatchNorm syncing, at 1/64 of the weights and
convolution work, so that its float64 fits (a fused array and three serial twins per test) cost
a second, not ten.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn
from torchvision.models.vgg import make_layers

from hpml.data.synthetic import SyntheticDataModule
from hpml.errors import IncompatibleError
from hpml.fused.array import FusedArray
from hpml.fused.data import FusedData
from hpml.models.base import HpmlModule
from hpml.models.classifier import ImageClassifier, TextClassifier
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vae import VAE
from hpml.models.nets.vgg import CONFIGS
from hpml.models.vae import VAEModule
from hpml.optimize.fuse.array import FusedNets

STEPS = 3  # optimiser steps each equivalence test trains
TOLERANCE = 1e-5  # ||fused - serial|| / ||serial|| per tensor of the state dict


@dataclass(frozen=True)
class Member:
    """What a member's job sets: its seed, optimiser and (optional) scheduler."""

    seed: int
    optimizer: Callable[..., torch.optim.Optimizer]
    scheduler: Callable[..., Any] | None = None


def sgd(lr: float) -> Callable[..., torch.optim.Optimizer]:
    return partial(torch.optim.SGD, lr=lr, momentum=0.9, weight_decay=5e-4)


def adam(lr: float) -> Callable[..., torch.optim.Optimizer]:
    return partial(torch.optim.Adam, lr=lr)


def images(seed: int) -> SyntheticDataModule:
    return SyntheticDataModule(
        train_samples=16, val_samples=4, test_samples=4, batch_size=4, seed=seed
    )


def tokens(seed: int) -> SyntheticDataModule:
    return SyntheticDataModule(
        modality="tokens",
        num_classes=2,
        seq_len=12,
        vocab_size=40,
        train_samples=24,
        val_samples=6,
        test_samples=6,
        batch_size=6,
        seed=seed,
    )


def digits(seed: int) -> SyntheticDataModule:
    return SyntheticDataModule(
        channels=1,
        image_size=28,
        train_samples=48,
        val_samples=16,
        test_samples=16,
        batch_size=16,
        seed=seed,
    )


WIDTH = 8  # VGG11's channel counts divided by this (see the module docstring)


class NarrowVGG11(nn.Module):
    """:class:`hpml.models.nets.vgg.CifarVGG` at depth 11 with BatchNorm, each conv ``WIDTH``
    times narrower."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        layers = [c if c == "M" else c // WIDTH for c in CONFIGS[11]]
        pool = nn.AvgPool2d(kernel_size=1, stride=1)
        self.features = nn.Sequential(*make_layers(layers, batch_norm=True), pool)
        self.classifier = nn.Linear(512 // WIDTH, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def vgg11(data: SyntheticDataModule, member: Member) -> HpmlModule:
    return ImageClassifier(NarrowVGG11, data.spec, member.optimizer, member.scheduler)


def lstm(data: SyntheticDataModule, member: Member) -> HpmlModule:
    net = partial(LSTMClassifier, embedding_dim=16, hidden_size=16, num_layers=2, dropout=0.0)
    return TextClassifier(net, data.spec, member.optimizer, member.scheduler)


def vae(data: SyntheticDataModule, member: Member) -> HpmlModule:
    net = partial(VAE, hidden=32, latent=4)
    return VAEModule(net, data.spec, member.optimizer, member.scheduler)


# family: (its data, its model, the precision the equivalence holds in; see the module docstring)
FAMILIES = {
    "vgg11_bn": (images, vgg11, "64-true"),
    "lstm": (tokens, lstm, "32-true"),
}


def built(family: str, member: Member) -> tuple[SyntheticDataModule, HpmlModule]:
    """A member's data and model, made in the order its job makes them (assemble_array)."""
    data_of, model_of, _ = FAMILIES[family]
    L.seed_everything(member.seed, workers=True, verbose=False)
    data = data_of(member.seed)
    data.prepare_data()
    return data, model_of(data, member)


def trainer(precision: str = "32-true", accelerator: str = "cpu", **limits: Any) -> L.Trainer:
    limits = limits or {"max_steps": STEPS}
    return L.Trainer(
        accelerator=accelerator,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        **limits,
    )


def fit_fused(
    family: str, members: Sequence[Member], accelerator: str = "cpu", **limits: Any
) -> tuple[FusedArray, L.Trainer]:
    """The members trained as one array: shared data when their seeds (so data) are equal."""
    parts = [built(family, member) for member in members]
    shared = len({member.seed for member in members}) == 1
    array = FusedArray([model for _, model in parts], shared_data=shared)
    fit = trainer(FAMILIES[family][2], accelerator, **limits)
    fit.fit(array, datamodule=FusedData([data for data, _ in parts], shared=shared))
    return array, fit


def fit_serial(family: str, member: Member, accelerator: str = "cpu", **limits: Any) -> HpmlModule:
    data, model = built(family, member)
    trainer(FAMILIES[family][2], accelerator, **limits).fit(model, datamodule=data)
    return model


def differences(got: nn.Module, want: nn.Module) -> dict[str, float]:
    """Per state-dict tensor: ||got - want|| / ||want|| (||got|| where ``want`` is all zeros, as
    BatchNorm's shift at init; integer counters: 0 if equal, else 1)."""
    theirs = want.state_dict()
    out = {}
    for name, mine in got.state_dict().items():
        other = theirs[name]
        if not other.is_floating_point():
            out[name] = float(not torch.equal(mine, other))
        elif other.any():
            out[name] = float((mine - other).norm() / other.norm())
        else:
            out[name] = float(mine.norm())
    return out


def assert_same(got: nn.Module, want: nn.Module, what: str) -> None:
    measured = differences(got, want)
    worst = sorted(measured.items(), key=lambda item: -item[1])[:3]
    assert all(value <= TOLERANCE for value in measured.values()), f"{what}: worst {worst}"


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("optimizer", [sgd, adam], ids=["sgd_momentum_wd", "adam"])
def test_members_equal_serial_twins(family: str, optimizer: Callable[[float], Any]) -> None:
    lrs = [0.01, 0.03, 0.1] if optimizer is sgd else [1e-3, 3e-3, 1e-2]
    members = [Member(0, optimizer(lr)) for lr in lrs]
    array, fit = fit_fused(family, members)

    assert fit.global_step == STEPS  # one step per batch, as a serial run counts
    assert array.frozen == set()
    nets = [member.net for member in array.members]
    for index, member in enumerate(members):
        assert_same(nets[index], fit_serial(family, member).net, f"member {index}")
    # the lrs differ enough that members differ far beyond the tolerance: no trivial pass
    for other in nets[1:]:
        assert max(differences(other, nets[0]).values()) > 1e3 * TOLERANCE
    if family == "vgg11_bn":  # the running statistics were synced into each member's net
        bn = nets[0].features[1]
        assert isinstance(bn, nn.BatchNorm2d) and int(bn.num_batches_tracked) == STEPS
        assert bn.running_mean.abs().max() > 1e-3


@pytest.mark.gpu
def test_members_equal_serial_twins_on_cuda() -> None:
    """The narrow VGG11-BN in float64 (no TF32 on either side) with its own learning rate per
    member: the grouped convolutions vmap makes on cuDNN against each member's own, trained
    alone."""
    members = [Member(0, sgd(lr)) for lr in (0.01, 0.03, 0.1)]
    array, fit = fit_fused("vgg11_bn", members, accelerator="gpu")
    assert fit.strategy.root_device.type == "cuda"  # Lightning hands the module back on CPU
    assert fit.global_step == STEPS and array.frozen == set()
    nets = [member.net for member in array.members]
    for index, member in enumerate(members):
        twin = fit_serial("vgg11_bn", member, accelerator="gpu").net
        assert_same(nets[index], twin, f"member {index}")
    for other in nets[1:]:
        assert max(differences(other, nets[0]).values()) > 1e3 * TOLERANCE
    bn = nets[0].features[1]
    assert isinstance(bn, nn.BatchNorm2d) and int(bn.num_batches_tracked) == STEPS


def test_members_with_own_seeds_read_own_data_and_init() -> None:
    members = [Member(seed, adam(3e-3)) for seed in (0, 1, 2)]
    parts = [built("lstm", member) for member in members]
    starts = [copy.deepcopy(model.net) for _, model in parts]
    for data, _ in parts:
        data.setup("fit")
    firsts = [next(iter(data.train_dataloader()))[0] for data, _ in parts]
    assert not torch.equal(firsts[0], firsts[1]) and not torch.equal(firsts[1], firsts[2])
    assert max(differences(starts[1], starts[0]).values()) > 0.5  # own init per seed

    array, fit = fit_fused("lstm", members)

    assert not array.shared_data and fit.global_step == STEPS
    for index, member in enumerate(members):
        assert_same(array.members[index].net, fit_serial("lstm", member).net, f"seed {index}")


def test_diverging_member_is_frozen_and_the_others_train_on() -> None:
    # 1e30: finite first steps (the LSTM saturates; 1e10 stays finite), then NaN at step 3
    members = [Member(0, sgd(0.05)), Member(0, sgd(0.1)), Member(0, sgd(1e30))]
    array, fit = fit_fused("lstm", members, max_steps=4)

    assert array.frozen == {2}
    assert array.diverged == {2: 2}  # the third batch's loss (after two steps) was NaN
    assert fit.global_step == 4  # the array went on after the freeze
    assert not all(torch.isfinite(p).all() for p in array.members[2].parameters())
    for index in (0, 1):
        twin = fit_serial("lstm", members[index], max_steps=4)
        assert_same(array.members[index].net, twin.net, f"member {index}")


class FreezeAt(L.Callback):
    """Freezes ``member`` after ``step`` optimiser steps, as its target would, and keeps its
    stacked buffers as they were then."""

    def __init__(self, member: int, step: int) -> None:
        self.member, self.step = member, step
        self.buffers: dict[str, torch.Tensor] = {}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            pl_module.frozen.add(self.member)
            stacked = pl_module.fused.stacked_buffers().items()
            self.buffers = {name: buffer[self.member].clone() for name, buffer in stacked}


def test_member_frozen_by_its_target_keeps_its_batchnorm_statistics() -> None:
    members = [Member(0, sgd(lr)) for lr in (0.01, 0.03, 0.1)]
    parts = [built("vgg11_bn", member) for member in members]
    array = FusedArray([model for _, model in parts], shared_data=True)
    freeze = FreezeAt(member=1, step=2)
    fit = trainer("64-true", max_steps=4, callbacks=[freeze])

    fit.fit(array, datamodule=FusedData([data for data, _ in parts], shared=True))

    assert fit.global_step == 4 and array.frozen == {1} and array.diverged == {}
    frozen = dict(array.members[1].net.named_buffers())
    assert frozen.keys() == freeze.buffers.keys() and len(frozen) == 3 * 8  # 8 BatchNorms
    for name, buffer in freeze.buffers.items():
        assert torch.equal(frozen[name], buffer), name
    assert int(array.members[0].net.features[1].num_batches_tracked) == 4
    # weights and statistics: member 1 equals its twin stopped after 2 steps, the others theirs
    assert_same(array.members[1].net, fit_serial("vgg11_bn", members[1], max_steps=2).net, "1")
    for index in (0, 2):
        twin = fit_serial("vgg11_bn", members[index], max_steps=4)
        assert_same(array.members[index].net, twin.net, f"member {index}")


def test_an_all_frozen_array_held_by_min_steps_takes_no_step() -> None:
    members = [Member(0, sgd(0.1)), Member(0, sgd(0.3))]
    parts = [built("lstm", member) for member in members]
    array = FusedArray([model for _, model in parts], shared_data=True)
    array.frozen.update({0, 1})  # e.g. both stopped by their targets
    start = copy.deepcopy(array.state_dict())
    fit = trainer(min_steps=6, max_epochs=2)  # 4 batches an epoch

    fit.fit(array, datamodule=FusedData([data for data, _ in parts], shared=True))

    assert fit.global_step == 0 and fit.current_epoch == 2
    assert all(torch.equal(start[name], value) for name, value in array.state_dict().items())


def test_an_array_whose_members_all_diverge_stops_stepping() -> None:
    members = [Member(0, sgd(1e30)), Member(0, sgd(3e30))]
    array, fit = fit_fused("lstm", members, min_steps=6, max_epochs=2)

    assert array.frozen == {0, 1} and array.diverged == {0: 2, 1: 2}
    assert fit.global_step == 2  # no step after the last member diverged


halving = partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)


def reduce_on_plateau(optimizer: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)


def configured(optimizer: torch.optim.Optimizer, **config: Any) -> dict[str, Any]:
    """A StepLR halving the lr every epoch, in Lightning's scheduler config dict with
    ``config`` (bound with ``partial``: a member's hyper-parameters must pickle)."""
    return {"scheduler": halving(optimizer), **config}


@pytest.mark.parametrize(
    ("scheduler", "reason"),
    [
        (reduce_on_plateau, "ReduceLROnPlateau cannot be fused: it steps on a metric"),
        (partial(configured, interval="step"), "StepLR cannot be fused: its interval is 'step'"),
        (partial(configured, frequency=2), "StepLR cannot be fused: its .* with frequency 2"),
    ],
    ids=["plateau", "per_step", "every_2_epochs"],
)
def test_member_scheduler_other_than_once_per_epoch_is_refused(
    scheduler: Callable[..., Any], reason: str
) -> None:
    members = [Member(0, sgd(0.04)), Member(0, sgd(0.04), scheduler)]
    parts = [built("lstm", member) for member in members]
    array = FusedArray([model for _, model in parts], shared_data=True)

    with pytest.raises(IncompatibleError, match=f"^member 1's scheduler {reason}") as error:
        trainer().fit(array, datamodule=FusedData([data for data, _ in parts], shared=True))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fused_forward_equals_each_nets_own(family: str) -> None:
    """Train mode (BatchNorm on batch statistics, each member its own running ones), one input
    for all and one input per member."""
    data = FAMILIES[family][0](0)
    data.setup("fit")
    loader = iter(data.train_dataloader())
    shared, own = next(loader)[0], torch.stack([next(loader)[0] for _ in range(3)])
    for inputs, stacked in ((shared, False), (own, True)):
        nets = [built(family, Member(seed, sgd(0.1)))[1].net.train() for seed in (0, 1, 2)]
        alone = copy.deepcopy(nets)
        fused = FusedNets(nets).train()

        with torch.no_grad():
            output = fused(inputs, stacked)
            fused.sync_buffers()
            wants = [net(inputs[index] if stacked else inputs) for index, net in enumerate(alone)]

        for index, (net, want) in enumerate(zip(alone, wants, strict=True)):
            assert float((output[index] - want).norm() / want.norm()) <= TOLERANCE
            assert_same(fused.nets[index], net, f"member {index}")  # BN's running statistics
        assert max(differences(alone[1], alone[0]).values()) > 0.5  # own init per member


class EpochLosses(L.Callback):
    """Each member's mean training loss per epoch, as the array logs it."""

    def __init__(self, size: int) -> None:
        self.losses: list[list[float]] = [[] for _ in range(size)]

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for index, losses in enumerate(self.losses):
            losses.append(float(trainer.callback_metrics[f"fused{index}/train/loss"]))


def test_vae_trains_as_an_array() -> None:
    lrs = [1e-3, 3e-3, 1e-2]
    datamodules, models = [], []
    for lr in lrs:
        L.seed_everything(0, workers=True, verbose=False)
        datamodules.append(digits(0))
        datamodules[-1].prepare_data()
        models.append(vae(datamodules[-1], Member(0, adam(lr))))
    array = FusedArray(models, shared_data=True)
    losses = EpochLosses(len(lrs))
    fit = trainer(max_epochs=4)
    fit.callbacks.append(losses)

    fit.fit(array, datamodule=FusedData(datamodules, shared=True))

    assert array.frozen == set() and fit.global_step == 4 * 3
    for index, curve in enumerate(losses.losses):  # every epoch lower (BCE + KL per sample)
        assert all(b < a for a, b in itertools.pairwise(curve)), f"lr {lrs[index]}: {curve}"
    finals = [curve[-1] for curve in losses.losses]
    # each member its own lr (measured 547.2, 543.5, 542.6): a larger sane lr learns faster
    assert finals[2] < finals[1] < finals[0], finals


class EpochLrs(L.Callback):
    """Each optimiser's learning rate at the start of every epoch."""

    def __init__(self) -> None:
        self.lrs: list[list[float]] = []

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.lrs.append([opt.param_groups[0]["lr"] for opt in trainer.optimizers])


@pytest.mark.parametrize("as_dict", [False, True], ids=["scheduler", "config_dict"])
def test_member_scheduler_steps_per_epoch_and_only_its_own_lr(as_dict: bool) -> None:
    # Lightning's config dict of a once-per-epoch scheduler fuses as a bare scheduler does
    step = partial(configured, interval="epoch", frequency=1) if as_dict else halving
    members = [Member(0, sgd(0.04), step), Member(0, sgd(0.04))]
    parts = [built("lstm", member) for member in members]
    array = FusedArray([model for _, model in parts], shared_data=True)
    lrs = EpochLrs()
    fit = trainer(max_epochs=3)
    fit.callbacks.append(lrs)

    fit.fit(array, datamodule=FusedData([data for data, _ in parts], shared=True))

    assert lrs.lrs == [[0.04, 0.04], [0.02, 0.04], [0.01, 0.04]]
    twin = fit_serial("lstm", members[0], max_epochs=3)  # Lightning steps its scheduler
    assert_same(array.members[0].net, twin.net, "scheduled member")
