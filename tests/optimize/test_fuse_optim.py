"""A fused array's flat parameters and its one optimiser step: each member's weights follow its
own torch optimiser's path (SGD's and Adam's variants, hyper-parameters differing per member), a
frozen member keeps its weights bit for bit, and what cannot step as one says why."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from hpml.errors import IncompatibleError
from hpml.optimize.fuse.array import FusedNets
from hpml.optimize.fuse.optim import FusedStep, unfused_reason

STEPS = 3
Factory = Callable[..., torch.optim.Optimizer]


def net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).double()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(100)
    return torch.randn(10, 6, dtype=torch.float64), torch.randint(0, 3, (10,))


def serial(model: nn.Module, factory: Factory, steps: int) -> nn.Module:
    x, y = batch()
    optimizer = factory(model.parameters())
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model


def fused(
    models: Sequence[nn.Module],
    factories: Sequence[Factory],
    frozen_after: dict[int, int],
    steps: int = STEPS,
) -> FusedNets:
    """``models`` trained as one array for ``steps`` steps; member ``i`` frozen after
    ``frozen_after[i]`` steps (its loss left out, as the array leaves it out)."""
    x, y = batch()
    array = FusedNets(models)
    flat = array.link()
    step = FusedStep([f(m.parameters()) for f, m in zip(factories, array.nets, strict=True)], flat)
    for done in range(steps):
        frozen = {i for i, after in frozen_after.items() if done >= after}
        output = array(x)
        live = [i for i in range(len(models)) if i not in frozen]
        torch.stack([F.cross_entropy(output[i], y) for i in live]).sum().backward()
        step.step(frozen)
        flat.zero_grad()
    return array


VARIANTS = {
    "sgd": [partial(torch.optim.SGD, lr=lr) for lr in (0.1, 0.2, 0.4)],
    "sgd_momentum_dampening_decay": [
        partial(torch.optim.SGD, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=5e-3),
        partial(torch.optim.SGD, lr=0.2, momentum=0.0, dampening=0.3, weight_decay=0.0),
        partial(torch.optim.SGD, lr=0.3, momentum=0.5, weight_decay=1e-2),
    ],
    "sgd_nesterov_maximize": [  # a few steps up the loss: still finite
        partial(torch.optim.SGD, lr=lr, momentum=m, nesterov=True, maximize=True)
        for lr, m in ((0.1, 0.9), (0.2, 0.8), (0.05, 0.7))
    ],
    "adam": [
        partial(torch.optim.Adam, lr=1e-2, betas=(0.9, 0.999), eps=1e-8),
        partial(torch.optim.Adam, lr=3e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2),
        partial(torch.optim.Adam, lr=1e-1, betas=(0.5, 0.9), eps=1e-3),
    ],
    "adam_amsgrad": [partial(torch.optim.Adam, lr=lr, amsgrad=True) for lr in (1e-2, 3e-2, 0.1)],
    "adamw": [
        partial(torch.optim.AdamW, lr=lr, weight_decay=wd)
        for lr, wd in ((1e-2, 0.1), (3e-2, 0.0), (0.1, 0.5))
    ],
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_member_follows_its_own_optimizer(variant: str) -> None:
    factories = VARIANTS[variant]
    array = fused([net(i) for i in range(3)], factories, frozen_after={})
    for index, factory in enumerate(factories):
        twin = serial(net(index), factory, STEPS)
        pairs = zip(array.nets[index].parameters(), twin.parameters(), strict=True)
        for mine, theirs in pairs:
            torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-14)
    # the members moved apart: a step that ignored their own values would not pass
    first, last = (next(iter(array.nets[i].parameters())) for i in (0, 2))
    assert (first - last).abs().max() > 0.1


def test_a_frozen_member_keeps_its_weights_bit_for_bit() -> None:
    factories = VARIANTS["adamw"]  # decoupled decay: the step that scales the weights themselves
    one_step = fused([net(i) for i in range(3)], factories, frozen_after={}, steps=1)
    after_one = [p.detach().clone() for p in one_step.nets[1].parameters()]
    array = fused([net(i) for i in range(3)], factories, frozen_after={1: 1})
    kept = zip(array.nets[1].parameters(), after_one, strict=True)
    assert all(torch.equal(mine, then) for mine, then in kept)
    twin = serial(net(2), factories[2], STEPS)
    for mine, theirs in zip(array.nets[2].parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-12, atol=1e-14)


def test_members_parameters_are_views_of_the_flat_rows_until_unlinked() -> None:
    conv = [nn.Conv2d(2, 4, 3).to(memory_format=torch.channels_last) for _ in range(2)]
    array = FusedNets(conv)
    values = [m.weight.detach().clone() for m in conv]
    flat = array.link()
    (group,) = flat.groups
    assert group.data.shape == (2, 4 * 2 * 3 * 3 + 4)
    with torch.no_grad():
        group.data.mul_(2)  # what a step does: the members see it
    assert torch.equal(array.nets[1].weight, 2 * values[1])
    array.double()  # a conversion stacks them again, in the new dtype
    assert array.flat is not None and array.flat.groups[0].data.dtype == torch.float64
    row = array.nets[0].weight.untyped_storage().data_ptr()
    assert row == array.flat.groups[0].data.untyped_storage().data_ptr()
    array.unlink()
    storages = {m.weight.untyped_storage().data_ptr() for m in array.nets}
    assert len(storages) == 2 and array.flat is None
    assert torch.equal(array.nets[0].weight, 2 * values[0].double())
    assert array.nets[0].weight.is_contiguous(memory_format=torch.channels_last)


def test_what_cannot_step_as_one_says_why() -> None:
    array = FusedNets([net(0), net(1)])
    params = array.member_params
    members = list(array.nets)

    def reason(*factories: Factory) -> str | None:
        optimizers = [f(m.parameters()) for f, m in zip(factories, members, strict=True)]
        return unfused_reason(optimizers, params)

    sgd = partial(torch.optim.SGD, lr=0.1)
    assert reason(sgd, partial(sgd, momentum=0.9)) is None  # values may differ
    assert "RMSprop" in reason(sgd, torch.optim.RMSprop)
    assert "differ in class or switches: Adam, SGD" in reason(sgd, torch.optim.Adam)
    assert "switches" in reason(sgd, partial(sgd, momentum=0.9, nesterov=True))
    two_groups = [{"params": members[1][0].parameters()}, {"params": members[1][2].parameters()}]
    optimizers = [sgd(members[0].parameters()), sgd(two_groups)]
    assert "several parameter groups" in unfused_reason(optimizers, params)
    optimizers = [sgd(members[0].parameters()), sgd(members[1][0].parameters())]
    assert "member 1's optimiser does not hold exactly" in unfused_reason(optimizers, params)
    half = FusedNets([net(0).bfloat16(), net(1).bfloat16()])
    optimizers = [sgd(m.parameters()) for m in half.nets]
    assert unfused_reason(optimizers, half.member_params) == (
        "the members' parameters are torch.bfloat16"
    )
    optimizers = [sgd(members[0].parameters()), torch.optim.RMSprop(members[1].parameters())]
    with pytest.raises(IncompatibleError, match=r"cannot step as one: .*RMSprop"):
        FusedStep(optimizers, array.link())


class WithUnused(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.body, self.unused = net(seed), nn.Linear(2, 2).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_a_parameter_without_gradient_is_refused_before_any_update() -> None:
    array = FusedNets([WithUnused(0), WithUnused(1)])
    flat = array.link()
    step = FusedStep([torch.optim.SGD(m.parameters(), lr=0.1) for m in array.nets], flat)
    before = [group.data.clone() for group in flat.groups]
    x, y = batch()
    output = array(x)
    (F.cross_entropy(output[0], y) + F.cross_entropy(output[1], y)).backward()
    with pytest.raises(IncompatibleError, match=r"^parameter unused.weight got no gradient"):
        step.step()
    assert all(torch.equal(g.data, b) for g, b in zip(flat.groups, before, strict=True))
