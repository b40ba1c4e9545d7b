"""The compile callback: eager vs compiled metrics, compile time apart, the export artifact."""

from __future__ import annotations

import pytest

from hpml.errors import ConfigError
from tests.conftest import QUICK


def latest_run(client):
    return client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]


def test_compile_run_logs_eager_and_compiled_variants(composed, client):
    from hpml.train import train

    method = "export"  # torchscript and torch.compile: tests/optimize/compile, and the CLI

    cfg = composed(["model=lstm", f"compile={method}", *QUICK, "compile.latency_rounds=3"])
    metrics = train(cfg)
    assert "test/acc" in metrics
    run = latest_run(client)
    m = run.data.metrics
    for stage in ("compile_before", "compile_after"):
        for name in (
            "size_bytes",
            "latency_b1_ms",
            "latency_b32_ms",
            "val_acc_pct",
            "val_loss_nats",
        ):
            assert f"{stage}/{name}" in m, f"{stage}/{name}"
    assert m["compile/time_s"] > 0
    assert m["compile/output_diff_max_abs"] < 1e-3
    assert m["compile_after/val_acc_pct"] == pytest.approx(m["compile_before/val_acc_pct"])
    assert run.data.tags["hpml.compile.method"] == method
    assert run.data.tags["hpml.compile.device"] == "cpu"
    if method == "export":
        names = [a.path for a in client.list_artifacts(run.info.run_id, "compile")]
        assert names == ["compile/model.pt2"]


def test_unknown_compile_mode_is_a_config_error(composed):
    from hpml.train import build

    cfg = composed(["compile=torch_compile", "compile.mode=fastest"])
    with pytest.raises(ConfigError, match=r"compile\.mode='fastest' is invalid"):
        build("compile", cfg.compile)
