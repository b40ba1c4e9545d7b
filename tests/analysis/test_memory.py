"""Memory breakdown against byte sums of the tensors themselves and a hand count of activations."""

from __future__ import annotations

import mmap

import pytest
import torch
from torch import nn

from hpml.analysis.memory import (
    CLEAR_REFS,
    SavedActivations,
    optimizer_state_tensors,
    peak_rss_bytes,
    reset_peak_memory,
    tensor_bytes,
)


def step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> SavedActivations:
    with SavedActivations(model) as saved:
        loss = model(x).sum()
    loss.backward()
    optimizer.step()
    return saved


@pytest.mark.parametrize(
    ("make", "states_per_param"),
    [
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 1),  # momentum buffer
        (lambda p: torch.optim.Adam(p, lr=1e-3), 2),  # exp_avg and exp_avg_sq (+ a scalar step)
    ],
)
def test_weights_gradients_and_optimizer_state_are_exact_byte_sums(make, states_per_param):
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    optimizer = make(model.parameters())
    step(model, optimizer, torch.randn(4, 10))
    param_bytes = sum(p.numel() * 4 for p in model.parameters())  # fp32
    assert param_bytes == (10 * 20 + 20 + 20 * 5 + 5) * 4
    assert tensor_bytes(model.parameters()) == param_bytes
    assert tensor_bytes(p.grad for p in model.parameters()) == param_bytes
    state = tensor_bytes(optimizer_state_tensors(optimizer))
    steps = 4 * 4 if states_per_param == 2 else 0  # Adam keeps a 0-d fp32 step per parameter
    assert state == states_per_param * param_bytes + steps


def test_saved_activations_match_a_hand_count():
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    saved = step(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(4, 10))
    # first Linear saves its input (4 x 10) for its weight gradient; ReLU saves its output
    # (4 x 20), which the second Linear saves too (same storage, counted once); weights excluded
    assert saved.bytes == (4 * 10 + 4 * 20) * 4


def test_views_share_storage_and_count_once():
    base = torch.zeros(100)
    assert tensor_bytes([base, base[:10], base.view(10, 10)]) == 400


@pytest.mark.skipif(not CLEAR_REFS.exists(), reason="needs Linux's /proc/self/clear_refs")
def test_cpu_peak_rss_starts_afresh_so_a_later_job_does_not_inherit_an_earlier_peak():
    # 256 MiB of its own mapping, touched (resident) and unmapped below: a tensor that size
    # may instead reuse freed, already resident heap (the workers keep theirs: tests/conftest.py)
    big = mmap.mmap(-1, 256 * 2**20)
    for offset in range(0, len(big), mmap.PAGESIZE):
        big[offset] = 1
    peak = peak_rss_bytes()
    big.close()
    reset_peak_memory(torch.device("cpu"))
    assert peak_rss_bytes() < peak - 200 * 2**20
