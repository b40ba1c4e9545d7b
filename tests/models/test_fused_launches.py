"""What one training step of a fused array launches does not grow with its size N, counted from
torch's profiler: the engine's forward, backward and optimiser step are one set of ops for all
members; only a family's own metric updates (its ``measure`` with metric objects) run per member.
Scoring members as one vmapped ``measure`` gives what each member's own gives."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import torch
from torch import nn

from hpml.bench.fuse import (
    CIFAR,
    Family,
    attached,
    launched_ops,
    pristine,
    quiet_barebones,
    step_ops,
    vae,
)
from hpml.fused.array import FusedArray
from hpml.models.base import HpmlModule
from hpml.models.classifier import ImageClassifier
from hpml.models.vae import VAEModule
from hpml.optimize.fuse.array import member_output
from tests.models.test_fused import Member, assert_same, fit_fused, fit_serial

CPU = torch.device("cpu")
FIXED = 8  # ops a larger array may add whatever its size (none measured: 0 for the VAE)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_cnn(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, num_classes),
    )


class WithUnused(nn.Module):
    """:func:`small_cnn` with a layer its forward never calls."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.body, self.unused = small_cnn(num_classes), nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def classifier(net: Callable[[int], nn.Module] = small_cnn) -> Family:
    """Image classifiers with top-1 accuracy (a metric object each), an SGD lr sweep."""

    def member(index: int) -> HpmlModule:
        optimizer = partial(torch.optim.SGD, lr=0.01 * 1.15**index, momentum=0.9)
        return ImageClassifier(net, CIFAR, optimizer)

    def batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(size, 3, 32, 32), torch.randint(0, 10, (size,))

    return Family("small CNN", 4, member, batch)


def measure_ops(family: Family) -> int:
    """What one member's own ``measure`` of its output, and its backward, launch."""
    member = pristine(family, 1)[0]
    x, y = family.batch(family.batch_size)
    output = member.net(x).detach().requires_grad_()

    def scored() -> None:
        member.measure(output, (x, y), "train")["loss"].backward()

    return sum(launched_ops(scored).values())


def test_a_vae_arrays_step_launches_the_same_ops_at_every_size():
    family = vae(8)  # Adam; no metric object: one vmapped measure scores all members
    members = pristine(family, 8)
    ops = {size: step_ops(family, members[:size], CPU) for size in (2, 8)}
    assert ops[2] > 50  # the profiler saw the step
    assert ops[8] <= ops[2] + FIXED, ops


def test_a_classifier_arrays_step_grows_by_its_members_metric_updates_only():
    family = classifier()
    members = pristine(family, 8)
    ops = {size: step_ops(family, members[:size], CPU) for size in (2, 8)}
    per_member = measure_ops(family)
    assert per_member > 10
    # members stepped, backpropagated or sliced one by one would add their own ops per member
    assert ops[8] <= ops[2] + 6 * per_member + FIXED, (ops, per_member)


def vae_array(shared: bool) -> tuple[FusedArray, list[tuple[torch.Tensor, torch.Tensor]]]:
    family = vae(4)
    array = FusedArray(pristine(family, 3), shared_data=shared)
    torch.manual_seed(0)
    batches = [family.batch(4) for _ in range(1 if shared else 3)]
    return array, batches * (3 if shared else 1)


@pytest.mark.parametrize("shared", [True, False], ids=["shared_batch", "own_batches"])
def test_one_vmapped_measure_scores_each_member_as_its_own(shared: bool):
    array, batches = vae_array(shared)
    assert array.vmapped_measure
    x = batches[0][0] if shared else torch.stack([b[0] for b in batches])
    output = array(x, not shared)
    measured, losses = array._measured(output, batches, "train", [0, 1, 2])
    for index, member in enumerate(array.members):
        alone = member.measure(member_output(output, index), batches[index], "train")
        assert measured[index].keys() == alone.keys() == {"loss", "bce", "kld"}
        for name, value in alone.items():
            torch.testing.assert_close(measured[index][name], value, rtol=1e-6, atol=0)
        torch.testing.assert_close(losses[index], alone["loss"], rtol=1e-6, atol=0)
    assert len(set(losses.detach().tolist())) == 3  # own weights: own losses


class ItemVAE(VAEModule):
    """A VAE whose measure reads a value to the host, which vmap cannot batch."""

    def measure(self, output, batch, stage):
        measured = super().measure(output, batch, stage)
        return {**measured, "kld": measured["kld"] * (float(measured["kld"].detach()) > -1)}


def test_a_measure_vmap_cannot_batch_is_scored_member_by_member():
    array, batches = vae_array(shared=True)
    for member in array.members:
        member.__class__ = ItemVAE
    output = array(batches[0][0])
    measured, losses = array._measured(output, batches, "val", [0, 2])
    assert not array.vmapped_measure  # from now on member by member
    assert losses.shape == (2,)
    alone = array.members[2].measure(member_output(output, 2), batches[2], "val")
    torch.testing.assert_close(measured[1]["loss"], alone["loss"])


def test_members_whose_optimizers_do_not_fuse_step_in_turn_as_their_twins():
    rmsprop = [partial(torch.optim.RMSprop, lr=lr) for lr in (1e-3, 3e-3)]
    members = [Member(0, optimizer) for optimizer in rmsprop]
    array, fit = fit_fused("lstm", members)
    assert array.fused_step is None and fit.global_step == 3
    for index, member in enumerate(members):
        assert_same(array.members[index].net, fit_serial("lstm", member).net, f"member {index}")


def test_a_parameter_outside_the_loss_makes_the_members_step_one_by_one():
    family = classifier(WithUnused)
    with quiet_barebones():
        array = attached(FusedArray(pristine(family, 2)), CPU)
        assert array.fused_step is not None
        nets = [member.net for member in array.members]
        before = [[p.detach().clone() for p in net.parameters()] for net in nets]
        array.training_step(family.batch(family.batch_size), 0)
    assert array.fused_step is None
    for net, was in zip(nets, before, strict=True):
        moved = {
            name: not torch.equal(p, w)
            for (name, p), w in zip(net.named_parameters(), was, strict=True)
        }
        assert not moved["unused.weight"] and not moved["unused.bias"]  # as its optimiser skips it
        assert moved["body.0.weight"] and moved["body.5.weight"]
