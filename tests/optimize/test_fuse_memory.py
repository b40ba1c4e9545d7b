"""The memory guard of fused arrays: a member's footprint against an independent count, the
capacity arithmetic, and the split of a sweep into arrays that the footprint decides."""

from __future__ import annotations

import re
from collections import Counter

import psutil
import pytest
import torch
from mlflow import MlflowClient

from hpml.fused.array import FusedArray
from hpml.fused.launch import capacity, member_model
from hpml.fused.plan import plan
from hpml.optimize.fuse.array import member_output
from hpml.optimize.fuse.memory import array_capacity, free_bytes, member_footprint
from tests.conftest import QUICK, QUICK_BATCH, run_cli

VAE = ["model=vae"]  # Adam, synthetic MNIST at batch 128
VGG11 = ["model=vgg11", "model/optimizer=sgd", "data.batch_size=32"]  # SGD with momentum
LSTM = ["model=lstm", "data.batch_size=3"]  # Adam; a batch the probe measures as it is
FUSED = ["fuse=array", "fuse.force=true"]


def array_activations(array: FusedArray, batch_size: int) -> tuple[int, int]:
    """Bytes autograd saves for one training step of ``array`` (its vmapped forward over its
    stacked parameters, as it trains, and every member's loss), counted by torch's saved-tensor
    hooks, each storage once, parameters not; and the bytes of the input the members share."""
    array.fused.link()
    params = {p.untyped_storage().data_ptr() for p in array.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    x = array.example_input(batch_size)
    y = torch.zeros(batch_size, dtype=torch.long)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = array(x)
        for index, member in enumerate(array.members):
            member.measure(member_output(output, index), (x, y), "train")
    return sum(saved.values()), x.nbytes


@pytest.mark.parametrize(
    ("overrides", "moments"), [(VAE, 2), (VGG11, 1), (LSTM, 2)], ids=["vae", "vgg11", "lstm"]
)
def test_member_footprint_agrees_with_an_independent_count(composed, overrides, moments):
    cfg = composed(overrides)
    model, batch_size = member_model(cfg)
    footprint = member_footprint(model, batch_size)
    params = sum(p.numel() for p in model.parameters())
    assert footprint.weights == 4 * params
    assert footprint.gradients == 4 * params
    # Adam: two fp32 moments per parameter; SGD: one momentum buffer (plus Adam's step scalars)
    assert footprint.optimizer_state == pytest.approx(moments * 4 * params, rel=1e-3)
    # per member of a real 3-member array at the job's full batch (the guard probes 2 and 4
    # samples on 2 members, so counts the input the members share once per two members, not
    # once per three)
    members = 3
    array = FusedArray([member_model(cfg)[0] for _ in range(members)])
    saved, shared = array_activations(array, batch_size)
    per_member = saved / members
    assert footprint.activations == pytest.approx(per_member + shared * (1 / 2 - 1 / 3), rel=0.01)
    assert footprint.total == pytest.approx((2 + moments) * 4 * params + per_member, rel=0.05)
    assert all(p.grad is None for p in model.parameters())  # the probe trained copies


def test_array_capacity_fills_the_fraction_of_free_memory_with_whole_members():
    assert array_capacity(100, 1000, 1.0) == 10
    assert array_capacity(100, 1000, 0.8) == 8
    assert array_capacity(100, 999, 1.0) == 9  # whole members only
    assert array_capacity(300, 1000, 0.5) == 1
    assert array_capacity(2000, 1000, 0.8) == 1  # fits none: the job still runs, alone
    for fraction in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            array_capacity(100, 1000, fraction)


def test_free_memory_of_the_cpu_is_the_hosts_available_memory():
    free = free_bytes(torch.device("cpu"))
    assert 0 < free <= psutil.virtual_memory().total


def test_a_real_footprint_splits_a_sweep_into_arrays_that_fit(composed):
    configs = [composed([*VAE, *FUSED, f"model.optimizer.lr={lr}"]) for lr in (1, 2, 3, 4, 5)]
    model, batch_size = member_model(configs[0])
    footprint = member_footprint(model, batch_size)
    assert 10 * 2**20 < footprint.total < 12.8 * 2**20  # 12.3 MiB: two fit 0.8 of 32 MiB
    decided = plan(configs, False, lambda: array_capacity(footprint.total, 32 * 2**20, 0.8))
    assert decided.arrays == [[0, 1], [2, 3]]
    assert decided.serial == [4]
    ample = plan(configs, False, lambda: array_capacity(footprint.total, 2**30, 0.8))
    assert ample.arrays == [[0, 1, 2, 3, 4]]


def test_the_guard_is_asked_only_for_jobs_that_fuse(composed):
    asked: list[int] = []

    def guard() -> int:
        asked.append(1)
        return 1

    configs = [composed([*VAE, "fuse=array", f"model.optimizer.lr={lr}"]) for lr in (1, 2)]
    assert plan(configs, True, guard).serial == [0, 1]  # on CPU, not forced: no model built
    assert asked == []
    forced = [composed([*VAE, *FUSED, f"seed={seed}"]) for seed in (1, 2)]
    assert plan(forced, True, guard).serial == [0, 1]  # asked once; its 1: each job alone
    assert asked == [1]


def test_the_launchers_capacity_is_max_members_or_the_guards_figure(composed):
    assert capacity([composed([*VAE, *FUSED, "fuse.max_members=3"])]) == 3
    # measured from the config and this machine's free memory: a tiny share fits no second
    # member, the whole of it fits many 12 MiB VAEs
    assert capacity([composed([*VAE, *FUSED, "fuse.memory_fraction=1e-9"])]) == 1
    assert capacity([composed([*VAE, *FUSED, "fuse.memory_fraction=1.0"])]) > 2


def groups(count: int, size: int) -> Counter:
    """How many jobs each array of a ``count``-job sweep capped at ``size`` members holds."""
    sizes = [min(size, count - start) for start in range(0, count, size)]
    return Counter(s for s in sizes if s > 1)


@pytest.mark.slow
def test_a_small_memory_fraction_splits_a_cli_sweep(root, composed):
    """Capacity comes from this machine's free memory, read again by the CLI seconds later: the
    fraction aims at 2.5 members, so any capacity from 1 to 3 is a real cap, and the arrays the
    runs record must be the split of the 4 jobs by the capacity the guard printed."""
    args = [*VAE, *QUICK, *FUSED]
    model, batch_size = member_model(composed(args))
    member = member_footprint(model, batch_size).total
    fraction = 2.5 * member / free_bytes(torch.device("cpu"))
    result = run_cli(
        ["-m", *args, "model.optimizer.lr=1e-3,2e-3,3e-3,4e-3", f"fuse.memory_fraction={fraction}"],
        root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (guard,) = [line for line in result.stdout.splitlines() if "memory guard:" in line]
    assert f"one member trains in {member / 2**20:.1f} MiB (batch {QUICK_BATCH})" in guard
    fits = int(re.search(r"fits (\d+)$", guard).group(1))
    assert 1 <= fits <= 3
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    members = [r for r in runs if r.data.tags.get("hpml.fused") == "true"]
    arrays = Counter(r.data.tags["hpml.fused.array"] for r in members)
    assert Counter(arrays.values()) == groups(4, fits)
    assert {r.info.status for r in runs} == {"FINISHED"}
