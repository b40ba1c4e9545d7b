"""Validation asks the built steps what they do, not their names or config keys: a plug-in
quantiser that trains, written here outside hpml, is refused under DDP and beside activation
checkpointing in the one line ``quant=qat`` gets."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from torch import nn

from hpml.optimize.quant import Quantizer
from tests.bad_inputs.harness import refused_job, run_statuses

# small, as test_bad_overrides.py's, in case a case is not refused and trains
SMALL = ["trainer.max_epochs=1", "data.limit=64", "trainer.enable_progress_bar=false"]


class FineTunedInt8(Quantizer):
    """Fine-tunes a net of its own during fit, then converts it, as QAT does: no hpml name."""

    backend = "plugin"  # named fine_tuned_int8, by its class
    trains = True
    supported = (nn.Linear, nn.Conv2d)

    def quantize(self, net: nn.Module, calibration: Iterable[Any] = ()) -> nn.Module:
        raise NotImplementedError("fine_tuned_int8 converts the net it fine-tuned")

    def prepare_qat(self, net: nn.Module, example: Any = None) -> nn.Module:
        return nn.Sequential(net)  # the net fit trains from here on: its stages renamed

    def convert(self, net: nn.Module) -> nn.Module:
        return net


# the plug-in in the place of quant=qat's method, chosen by config alone
PLUGIN = [
    "quant=qat",
    "~quant.method",
    f"+quant.method={{_target_:{__name__}.FineTunedInt8,_partial_:true}}",
]


@pytest.mark.parametrize(
    ("setting", "line"),
    [
        (
            "trainer=ddp_cpu",
            "quant.method='fine_tuned_int8' is invalid: expected a post-training method with 2 "
            "DDP processes",
        ),
        (
            "activations=checkpoint",
            "activations=checkpoint cannot run with quant.method=fine_tuned_int8: it replaces "
            "the net during training",
        ),
    ],
)
def test_a_plugin_quantiser_that_trains_is_refused_as_qat_is(
    setting: str,
    line: str,
    composed,
    root,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SLURM_NTASKS", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    qat = refused_job(composed([*SMALL, setting, "quant=qat"]), capsys)
    plugin = refused_job(composed([*SMALL, setting, *PLUGIN]), capsys)
    assert line in plugin
    assert plugin == qat.replace("qat", "fine_tuned_int8")
    assert run_statuses(root) == []  # refused before any run, as qat is
