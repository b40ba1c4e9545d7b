"""torch.compile's CPU inference options (freezing, channels_last): eager's outputs, and the
pre-packed oneDNN convolution whatever grad mode the caller runs it under."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters
from torch.profiler import profile

from hpml.optimize.compile import FAST_CONV, apply_compile, conv_kernels, fast_path
from hpml.optimize.compile.torch_compile import TorchCompile
from tests.optimize.compile.test_compile_engines import examples, small_cnn


def test_frozen_channels_last_compile_matches_eager_on_nchw_batches(tmp_path, inductor_cache):
    net, reference = small_cnn(), small_cnn()
    method = TorchCompile(freezing=True, channels_last=True, cache_dir=inductor_cache)
    compiled = apply_compile(net, method, examples(), tmp_path)
    assert net[0].weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(4, 3, 16, 16)  # NCHW, as loaders give, at a batch size not compiled for
    with torch.inference_mode():
        torch.testing.assert_close(compiled.module(x), reference(x), rtol=1e-4, atol=1e-4)
    assert compiled.report.max_abs_diff < 1e-4


def called(module, x, mode) -> set[str]:
    """Operator names one forward of ``module`` records under the grad mode ``mode``."""
    with mode(), profile() as prof:
        module(x)
    return {event.key for event in prof.key_averages()}


@pytest.mark.parametrize("channels_last", [False, True])
def test_frozen_compile_calls_the_prepacked_convolution_under_any_grad_mode(
    channels_last, tmp_path, inductor_cache
):
    """Compiled under inference_mode and called under no_grad (or with grad on), dynamo
    recompiles; the module hpml returns freezes that graph too, so it stays on the fast path."""
    method = TorchCompile(freezing=True, channels_last=channels_last, cache_dir=inductor_cache)
    compiled = apply_compile(small_cnn(), method, examples(), tmp_path)
    assert compiled.report.conv_kernels == (FAST_CONV,)
    x = examples()[1]
    for mode in (torch.no_grad, torch.enable_grad, torch.inference_mode):
        ops = called(compiled.module, x, mode)
        assert FAST_CONV in ops and "aten::mkldnn_convolution" not in ops, mode
    graphs = counters["stats"]["unique_graphs"]
    with torch.inference_mode():  # a test stage's inference tensor: the graph compiled for x
        compiled.module(x.clone())
    assert counters["stats"]["unique_graphs"] == graphs


def test_unfrozen_compile_and_eager_call_the_eager_convolution(tmp_path, inductor_cache):
    net = small_cnn()
    compiled = apply_compile(net, TorchCompile(cache_dir=inductor_cache), examples(), tmp_path)
    assert compiled.report.conv_kernels == ("aten::mkldnn_convolution",)
    assert conv_kernels(net, examples()[1]) == ("aten::mkldnn_convolution",)
    assert not fast_path(compiled.report.conv_kernels)
    assert not fast_path(())  # no convolution: no fast path to claim
