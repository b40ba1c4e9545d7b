"""TorchScript, torch.compile, export and AOTInductor give eager's outputs; untraceable models
fail in a line."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config
from torch import nn

from hpml.errors import IncompatibleError
from hpml.optimize.compile import apply_compile
from hpml.optimize.compile.aot_inductor import AotInductor
from hpml.optimize.compile.eager import Eager
from hpml.optimize.compile.export import Export
from hpml.optimize.compile.torch_compile import TorchCompile
from hpml.optimize.compile.torchscript import Torchscript


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 8 * 8, 10),
    ).eval()


def examples() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn(1, 3, 16, 16, generator=g), torch.randn(8, 3, 16, 16, generator=g)]


@pytest.mark.parametrize("method", [Eager, Torchscript, TorchCompile, Export, AotInductor])
def test_compiled_outputs_equal_eager(method, tmp_path, request):
    """Each method in its default cache (under ``tmp_path``); inductor's instruction-set probe
    is the session's (``inductor_cache``), as it is not what these compare. AOTInductor builds
    without a precompiled header: this is the suite's one AOTInductor build, where building
    the header (once per machine and compiler flags, then reused by later builds) cost more
    CPU time than it saved (docs/testing.md)."""
    if method in (TorchCompile, AotInductor):
        request.getfixturevalue("inductor_cache")
    net = small_cnn()
    headers = {"aot_inductor.precompile_headers": False} if method is AotInductor else {}
    with inductor_config.patch(headers):
        compiled = apply_compile(net, method(), examples(), tmp_path)
    assert compiled.report.method == method.name
    assert compiled.report.seconds > 0
    x = torch.randn(4, 3, 16, 16)  # a batch size it was not compiled for
    with torch.inference_mode():
        torch.testing.assert_close(compiled.module(x), net(x), rtol=1e-4, atol=1e-4)
    if method is Export:
        assert compiled.report.artifact == tmp_path / "model.pt2"
        loaded = torch.export.load(compiled.report.artifact).module()
        with torch.inference_mode():
            torch.testing.assert_close(loaded(x), net(x), rtol=1e-4, atol=1e-4)
    if method is AotInductor:  # the package loads back as the same program
        assert compiled.report.artifact == tmp_path / "model_aoti.pt2"
        assert compiled.report.size_bytes == compiled.report.artifact.stat().st_size
        loaded = torch._inductor.aoti_load_package(str(compiled.report.artifact))
        with torch.inference_mode():
            torch.testing.assert_close(loaded(x), net(x), rtol=1e-4, atol=1e-4)
    if method in (TorchCompile, AotInductor):
        assert (tmp_path / "inductor_cache").is_dir()


class ReturnsText(nn.Module):
    def forward(self, x: torch.Tensor):
        return {"logits": x.sum(1), "label": "text"}


def test_torchscript_on_an_untraceable_model_is_one_line(tmp_path):
    with pytest.raises(IncompatibleError) as info:
        apply_compile(ReturnsText(), Torchscript(), examples(), tmp_path)
    message = str(info.value)
    assert message.startswith("torchscript cannot compile ReturnsText: ")
    assert "\n" not in message and "try another compile= option" in message


class BranchOnValue(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if float(x.sum()) > 0 else x - 1


def test_torchscript_that_traces_wrong_outputs_is_caught(tmp_path):
    xs = [torch.ones(1, 3), -torch.ones(2, 3)]
    with pytest.raises(IncompatibleError, match="torchscript"):
        apply_compile(BranchOnValue(), Torchscript(), xs, tmp_path)
