"""What compiling reports is right: TorchScript's size is its saved weights', the convolution
kernels are named (or ``unknown``, never ``none`` for a net that convolves), and a compiled
module called under a global module hook (the FLOP counter's) does not warn."""

from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

from hpml.analysis.flops import count_flops
from hpml.optimize.compile import UNKNOWN, apply_compile
from hpml.optimize.compile.kernels import deployed_kernels
from hpml.optimize.compile.torch_compile import TorchCompile
from hpml.optimize.compile.torchscript import Torchscript
from tests.optimize.compile.test_compile_engines import examples, small_cnn

HOOKS_WARNING = "global hooks on modules"


def weighty_cnn() -> nn.Module:
    """A convolution and 0.5 M weights: the saved code's few kB are under 1% of them."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 16 * 16, 32),
    ).eval()


def saved_bytes(net: nn.Module) -> int:
    buffer = io.BytesIO()
    torch.save(net.state_dict(), buffer)
    return buffer.tell()


def test_torchscript_size_is_the_saved_weights_and_its_file_loads_back(tmp_path):
    net = weighty_cnn()
    eager_bytes = saved_bytes(net)
    compiled = apply_compile(net, Torchscript(), examples(), tmp_path)
    assert compiled.report.artifact == tmp_path / "model.ts"
    assert compiled.report.size_bytes == compiled.report.artifact.stat().st_size
    assert compiled.report.size_bytes == pytest.approx(eager_bytes, rel=0.01)
    loaded = torch.jit.load(compiled.report.artifact)
    x = torch.randn(4, 3, 16, 16)
    with torch.inference_mode():
        torch.testing.assert_close(loaded(x), net(x), rtol=1e-4, atol=1e-4)


def test_torchscript_names_the_convolution_its_graph_runs(tmp_path):
    """optimize_for_inference's oneDNN convolution is a JIT operator the profiler misses."""
    compiled = apply_compile(small_cnn(), Torchscript(), examples(), tmp_path)
    assert compiled.report.conv_kernels == ("prim::mkldnn_convolution",)


def test_kernels_unseen_in_a_net_that_convolves_are_unknown_not_none():
    net, lstm = small_cnn(), nn.LSTM(4, 4, batch_first=True)
    assert deployed_kernels(net, nn.Identity(), examples()) == (UNKNOWN,)
    sequences = [torch.randn(1, 3, 4), torch.randn(2, 3, 4)]
    assert deployed_kernels(lstm, lstm, sequences) == ()  # no convolution: none to name


def test_torch_compile_under_a_global_module_hook_does_not_warn(tmp_path, inductor_cache):
    method = TorchCompile(cache_dir=inductor_cache)
    compiled = apply_compile(small_cnn(), method, examples(), tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flops = count_flops(compiled.module, examples()[0])  # FlopCounterMode's module tracker
        handle = nn.modules.module.register_module_forward_hook(lambda *_: None)
        try:
            compiled.module(examples()[1])
        finally:
            handle.remove()
    assert flops.per_sample == count_flops(small_cnn(), examples()[0]).per_sample
    assert not [w for w in caught if HOOKS_WARNING in str(w.message)]
