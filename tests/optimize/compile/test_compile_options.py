"""torch.compile's CPU inference options (freezing, channels_last) keep eager's outputs."""

from __future__ import annotations

import torch

from hpml.optimize.compile import compile_model
from tests.optimize.compile.test_compile_engines import examples, small_cnn


def test_frozen_channels_last_compile_matches_eager_on_nchw_batches(tmp_path):
    net, reference = small_cnn(), small_cnn()
    compiled = compile_model(
        net, "torch_compile", examples(), tmp_path, freezing=True, channels_last=True
    )
    assert net[0].weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(4, 3, 16, 16)  # NCHW, as loaders give, at a batch size not compiled for
    with torch.inference_mode():
        torch.testing.assert_close(compiled.module(x), reference(x), rtol=1e-4, atol=1e-4)
    assert compiled.max_abs_diff < 1e-4
