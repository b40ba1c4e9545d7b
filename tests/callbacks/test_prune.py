"""The ``prune`` group end to end in-process: schedules, metrics in MLflow, one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpml.errors import ConfigError
from hpml.names import FLOPS_REDUCTION, X, metric
from tests.callbacks.comparisons import assert_side_by_side
from tests.conftest import QUICK, QUICK_BATCH, run_cli, stderr_lines

FAST = [*QUICK, "prune.latency_rounds=2", "prune.latency_min_run_time_s=0.002"]
FAST += ["prune.latency_budget_s=0"]  # exactly 2 rounds


def only_run(client):
    exp = client.get_experiment_by_name("hpml")
    (run,) = client.search_runs([exp.experiment_id])
    return run


def test_after_fit_physical_logs_before_after_final_and_fine_tunes(composed, client):
    from hpml.train import train

    train(composed(["model=vae", "prune=l1_structured", "prune.amount=0.5", *FAST]))
    run = only_run(client)
    m = run.data.metrics
    for stage in ("prune_before", "prune_after", "prune_final"):
        for quantity in (
            "params_count",
            "nonzero_params_count",
            "size_bytes",
            "fwd_flops_per_sample",
            "sparsity_pct",
            "row_sparsity_pct",
            "val_loss_nats",
            "val_bce_nats",
            "val_kld_nats",
        ):
            assert f"{stage}/{quantity}" in m, f"{stage}/{quantity}"
    assert m["prune/target_sparsity_pct"] == 50
    assert abs(m["prune_after/row_sparsity_pct"] - 50) < 1
    assert m["prune_after/params_count"] < m["prune_before/params_count"]
    assert m["prune/flops_reduction_x"] > 1.9
    assert_side_by_side(run, "prune", (1, QUICK_BATCH), rounds=2)
    assert run.data.tags["hpml.compare.prune.devices"] == "cpu vs cpu"
    assert "prune_final/latency_b1_ms" not in m  # fine-tuning changes no shape: after's speed
    assert "prune_layer/fc1.weight_row_sparsity_pct" in m
    # the optimiser was rebuilt on the pruned parameters: fine-tuning lowers the loss
    assert m["prune_final/val_loss_nats"] < m["prune_after/val_loss_nats"]
    assert m["model_final/params_count"] == m["prune_after/params_count"]
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 2  # 1 + 1 epochs
    arts = {a.path for a in client.list_artifacts(run.info.run_id, "prune")}
    assert {
        "prune/architecture_before.txt",
        "prune/architecture_after.txt",
        "prune/layers.json",
    } <= arts


def test_gradual_mask_reaches_the_target_without_compounding(composed, client):
    from hpml.train import train

    train(
        composed(
            [
                "model=vae",
                "prune=l1_unstructured",
                "prune.amount=0.6",
                "prune.schedule=gradual",
                "prune.finetune_epochs=0",
                "prune.sensitivity=[0.5]",
                "prune.save_model=true",
                *FAST,
                "trainer.max_epochs=2",
            ]
        )
    )
    m = only_run(client).data.metrics
    assert abs(m["prune_after/sparsity_pct"] - 60) < 1  # 0.3 then 0.6, not 1 - 0.7 * 0.4
    assert abs(m["prune_final/sparsity_pct"] - 60) < 1
    assert m["prune_after/params_count"] == m["prune_before/params_count"]  # masks: same shapes
    assert m["prune_after/size_bytes"] == m["prune_before/size_bytes"]  # masks folded in
    assert "prune_sensitivity/fc1.weight_val_loss_nats" in m


def test_lstm_physical_before_fit(composed, client):
    from hpml.train import train

    train(
        composed(
            [
                "model=lstm",
                "prune=l2_structured",
                "prune.amount=0.5",
                "prune.schedule=before_fit",
                *FAST,
            ]
        )
    )
    m = only_run(client).data.metrics
    assert m["prune_after/row_sparsity_pct"] == 50
    assert m["prune/flops_reduction_x"] > 2.5
    assert "prune_after/val_acc_pct" in m and "prune_final/val_acc_pct" in m


def linear_shapes(client, run_id: str, name: str) -> list[tuple[int, int]]:
    """``(in, out)`` of every Linear in a logged ``print(net)``."""
    text = Path(client.download_artifacts(run_id, f"prune/{name}")).read_text()
    found = re.findall(r"Linear\(in_features=(\d+), out_features=(\d+)", text)
    return [(int(i), int(o)) for i, o in found]


def test_round_to_widths_and_logged_reductions_follow_the_rounded_shapes(composed, client):
    from hpml.train import train

    overrides = ["model=vae", "prune=l2_structured", "prune.amount=0.5", "prune.round_to=8"]
    train(composed([*overrides, "prune.schedule=before_fit", *FAST]))
    run = only_run(client)
    m = run.data.metrics
    before = linear_shapes(client, run.info.run_id, "architecture_before.txt")
    after = linear_shapes(client, run.info.run_id, "architecture_after.txt")
    assert [o for _, o in after[:-1]] == [200, 8, 8, 200]  # the heads' 10 rounded down to 8
    assert all(o % 8 == 0 for _, o in after[:-1]) and after[-1][1] == 784
    flops_before = 2 * sum(i * o for i, o in before)
    flops_after = 2 * sum(i * o for i, o in after)
    assert m["prune_after/fwd_flops_per_sample"] == flops_after
    assert m[FLOPS_REDUCTION] == pytest.approx(flops_before / flops_after, rel=1e-12)
    for when, shapes in (("before", before), ("after", after)):
        params = sum(i * o + o for i, o in shapes)
        assert m[f"prune_{when}/params_count"] == params
        # float32 weights and biases, plus the archive's own bytes (names, headers)
        assert 4 * params < m[f"prune_{when}/size_bytes"] < 4 * params + 16_384
    size_ratio = m["prune_before/size_bytes"] / m["prune_after/size_bytes"]
    assert m[metric("prune", "size_reduction", X)] == pytest.approx(size_ratio, rel=1e-12)


@pytest.mark.parametrize(
    "override,key",
    [
        ("prune.amount=1.0", "prune.amount"),
        ("prune.amount=-0.2", "prune.amount"),
        ("prune.targets=[Nope]", "prune.targets"),
        ("prune.exclude=[Linear]", "prune.exclude"),
        ("prune.mode=physical", "prune.mode"),
        ("prune.round_to=0", "prune.round_to"),
        ("prune.round_to=8", "prune.round_to"),  # with l1_unstructured: masks keep shapes
    ],
)
def test_bad_prune_settings_are_config_errors(composed, override, key):
    from hpml.train import train

    masks = "mode" in override or override == "prune.round_to=8"
    method = "prune=l1_unstructured" if masks else "prune=l1_structured"
    with pytest.raises(ConfigError) as info:
        train(composed(["model=vae", method, override, *FAST]))
    assert info.value.key == key


@pytest.mark.slow
def test_bad_amount_on_the_command_line_is_one_line_and_no_run(root, client):
    result = run_cli(["model=vae", "prune=fpgm", "prune.amount=1.5", *QUICK], root)
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr[-2000:]
    assert "prune.amount=1.5 is invalid: expected a fraction in [0, 1)" in lines[0]
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []
