"""Precision as trainer options: 32-true (default), 16-mixed (fp16, CUDA), bf16-mixed."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("option", "precision"), [("default", "32-true"), ("bf16", "bf16-mixed"), ("fp16", "16-mixed")]
)
def test_trainer_options_set_precision(option, precision, composed):
    cfg = composed([f"trainer={option}"])
    assert cfg.trainer.precision == precision


def test_bf16_trainer_builds_on_cpu(composed):
    from hpml.build import build

    trainer = build("trainer", composed(["trainer=bf16", "trainer.accelerator=cpu"]).trainer)
    assert trainer.precision == "bf16-mixed"
