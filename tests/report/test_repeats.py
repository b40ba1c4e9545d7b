"""Repeats and verdicts in the report, on runs in a real MLflow store: a sweep of configs each
run with replicate=0,1,2 (own seeds and job folders), with and without the side-by-side
metrics and the noisy tag, recorded as hpml logs them; grouped, summarised and compared, and
every table written as CSV that agrees with what MLflow holds."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from omegaconf import OmegaConf

from hpml.analysis.stats import FASTER, SLOWER, WITHIN_NOISE, median_ci, ratio_ci
from hpml.report.__main__ import main
from hpml.report.comparisons import COLUMNS, in_run
from hpml.report.figures import pareto
from hpml.report.groups import against_baseline, baseline, group
from hpml.report.runs import sweep_children
from hpml.report.studies import runs_cell, spread

SPEED = "train/throughput_samples_per_s"
STEP = "train/step_time_p50_ms"
# samples/s of each config's three repeats: "same" is the baseline's twin in all but lr
SPEEDS = {
    "plain": [1000.0, 1010.0, 990.0],
    "same": [1005.0, 995.0, 1012.0],
    "pruned": [2900.0, 3050.0, 2980.0],
    "noisy": [2950.0, 3000.0, 3100.0],
    "old": [1500.0, 1490.0, 1520.0],
}


def sweep(client: MlflowClient, folder: Path) -> str:
    experiment = client.create_experiment("hpml", artifact_location=(folder / "art").as_uri())
    parent = client.create_run(
        experiment, tags={"hpml.sweep_parent": "true", "hpml.sweep_dir": str(folder)}
    )
    client.set_terminated(parent.info.run_id)
    return parent.info.run_id


def job(
    client: MlflowClient,
    parent: str,
    num: int,
    params: dict[str, str],
    metrics: dict[str, float],
    tags: dict[str, str] | None = None,
    status: str = "FINISHED",
) -> str:
    """Job ``num`` of sweep ``parent`` with the per-job folders and bookkeeping a Hydra job
    logs (they differ between every two jobs)."""
    folder = Path(client.get_run(parent).data.tags["hpml.sweep_dir"])
    output = folder / str(num)
    config = {
        "optimized_metric": "val/loss",
        "data.batch_size": "32",
        "model.optimizer.lr": "0.001",
        "paths.output_dir": str(output),
        "trainer.default_root_dir": str(output),
        "callbacks.checkpoint.dirpath": f"{output}/checkpoints",
        "callbacks.perf.peak_cache_dir": f"{output}/peaks",
        **params,
    }
    run = client.create_run(
        client.get_run(parent).info.experiment_id,
        tags={
            "mlflow.parentRunId": parent,
            "hpml.job_num": str(num),
            "hpml.output_dir": str(output),
            "hpml.sweep_dir": str(folder),
            "hpml.choice.prune": "l1_structured" if "prune.method" in params else "none",
            **(tags or {}),
        },
    )
    client.log_batch(
        run.info.run_id,
        metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
        params=[Param(k, v) for k, v in config.items()],
        tags=[RunTag("mlflow.runName", f"job-{num}")],
    )
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


PRUNE = {"prune.method": "l1_structured", "prune.amount": "0.5"}


def pruned_metrics(speedup: float, side_by_side: bool) -> dict[str, float]:
    """What the prune callback logs: counts, sizes, before/after latency, and the speed-up
    with its interval over 7 rounds where it timed both sides side by side."""
    found = {
        "prune_before/fwd_flops_per_sample": 1302400.0,
        "prune_after/fwd_flops_per_sample": 651200.0,
        "prune/flops_reduction_x": 2.0,
        "prune_before/size_bytes": 2_000_000.0,
        "prune_after/size_bytes": 1_000_000.0,
        "prune_before/val_loss_nats": 540.0,
        "prune_after/val_loss_nats": 545.0,
        "prune_before/latency_b1_ms": 0.3 * speedup,
        "prune_after/latency_b1_ms": 0.3,
        "prune/speedup_b1_x": speedup,
    }
    if side_by_side:
        found |= {
            "prune_before/latency_b1_iqr_ms": 0.01,
            "prune_after/latency_b1_iqr_ms": 0.004,
            "prune/speedup_b1_ci_low_x": speedup * 0.95,
            "prune/speedup_b1_ci_high_x": speedup * 1.05,
            "prune/speedup_b1_rounds_count": 7.0,
        }
    return found


@pytest.fixture
def runs(client: MlflowClient, tmp_path: Path) -> tuple[str, dict[str, list[str]]]:
    """Five configs, three repeats each (replicate 0-2, seeds 1-3): the baseline ("plain"), a
    twin differing in lr only ("same"), a pruned config timed side by side ("pruned"), the same
    with one repeat tagged noisy ("noisy", lr 0.01) and an older pruned config that logged only
    its speed-up ("old", 0.3 sparsity)."""
    parent = sweep(client, tmp_path / "multirun")
    configs = {
        "plain": {},
        "same": {"model.optimizer.lr": "0.002"},
        "pruned": PRUNE,
        "noisy": PRUNE | {"model.optimizer.lr": "0.01"},
        "old": PRUNE | {"prune.amount": "0.3"},
    }
    ids: dict[str, list[str]] = {name: [] for name in configs}
    num = 0
    for replicate in range(3):
        for name, params in configs.items():
            metrics = {SPEED: SPEEDS[name][replicate], STEP: 32000 / SPEEDS[name][replicate]}
            tags = {}
            if name in ("pruned", "noisy"):
                metrics |= pruned_metrics(2.9 + 0.1 * replicate, side_by_side=True)
                tags["hpml.verdict.prune.speedup_b1"] = FASTER
            elif name == "old":
                metrics |= pruned_metrics(1.5, side_by_side=False)
            if name == "noisy" and replicate == 1:
                tags |= {"hpml.noisy": "true", "hpml.noisy.reason": "load average 3.1 > 2 cores"}
            seed = {"seed": str(replicate + 1), "replicate": str(replicate)}
            ids[name].append(job(client, parent, num, params | seed, metrics, tags))
            num += 1
    return parent, ids


def test_repeats_group_by_config_whatever_their_seeds_and_folders(client, runs):
    parent, ids = runs
    found = group(sweep_children(client, client.get_run(parent)))
    assert [sorted(r.info.run_id for r in g.runs) for g in found] == [
        sorted(ids[name]) for name in ids
    ]
    labels = [g.label for g in found]
    assert labels[:3] == [
        "prune=none, model.optimizer.lr=0.001",
        "prune=none, model.optimizer.lr=0.002",
        "prune=l1_structured, model.optimizer.lr=0.001, prune.amount=0.5",
    ]
    assert all("replicate" not in label and "seed" not in label for label in labels)
    assert baseline(found) is found[0]
    # --by-seed: every repeat ran its own seed, so each is a config of its own
    assert len(group(sweep_children(client, client.get_run(parent)), by_seed=True)) == 15


def test_a_group_has_its_median_interval_and_n(client, runs):
    parent, _ = runs
    plain = group(sweep_children(client, client.get_run(parent)))[0]
    ci = plain.interval(SPEED)
    assert (ci.median, ci.low, ci.high, ci.n) == (1000.0, 990.0, 1010.0, 3)
    assert ci.coverage == pytest.approx(0.75)  # three values: [min, max] covers 1 - 2/8
    assert spread(plain.values(SPEED)) == "1000 [990, 1010]"
    assert runs_cell(plain) == "3 (75% intervals): job 0, job 5, job 10"
    assert spread([2.0, 2.0, 2.0]) == "2"  # repeats that agree: the value


def test_verdicts_against_the_baseline(client, runs):
    parent, _ = runs
    found = group(sweep_children(client, client.get_run(parent)))
    verdicts = {
        (c.comparison.split(" vs ")[0], c.measure): c for c in against_baseline(found, found[0])
    }
    same, pruned, noisy, old = (g.label for g in found[1:])
    # a config that differs in nothing that matters is never faster or slower than the baseline
    assert verdicts[(same, SPEED)].verdict == WITHIN_NOISE
    assert verdicts[(same, STEP)].verdict == WITHIN_NOISE
    assert verdicts[(pruned, SPEED)].verdict == FASTER
    assert verdicts[(pruned, STEP)].verdict == FASTER  # step time: baseline's / the config's
    assert verdicts[(old, SPEED)].verdict == FASTER
    # as fast as "pruned", but a repeat ran under a noisy neighbour
    assert verdicts[(noisy, SPEED)].verdict == WITHIN_NOISE
    c = verdicts[(pruned, SPEED)]
    expected = ratio_ci(SPEEDS["pruned"], SPEEDS["plain"])
    assert (c.ratio, c.ci_low, c.ci_high, c.n) == (
        expected.median,
        expected.low,
        expected.high,
        3,
    )
    assert (c.before, c.after) == (1000.0, 2980.0)
    assert c.cell() == f"{c.ratio:.3g}x [{c.ci_low:.3g}, {c.ci_high:.3g}] faster (n=3)"
    # the baseline against a slower config, seen from it: slower
    slower = {c.measure: c.verdict for c in against_baseline(found, found[2])}
    assert slower[SPEED] == SLOWER


def test_in_run_comparisons_with_and_without_their_interval(client, runs):
    _, ids = runs
    (side_by_side,) = in_run(client.get_run(ids["pruned"][0]))
    assert (side_by_side.ratio, side_by_side.n, side_by_side.verdict) == (2.9, 7, FASTER)
    assert side_by_side.ci_low == pytest.approx(2.9 * 0.95)
    assert side_by_side.cell() == "2.9x [2.75, 3.04] faster (n=7)"
    (noisy,) = in_run(client.get_run(ids["noisy"][1]))
    # a noisy run's side-by-side interval keeps its verdict: each round's load hit both sides,
    # which widens the interval; the cell still says the run was noisy
    assert noisy.verdict == FASTER
    assert noisy.cell() == "3x [2.85, 3.15] faster (n=7, a run noisy)"
    (old,) = in_run(client.get_run(ids["old"][0]))
    assert (old.ratio, old.ci_low, old.ci_high, old.n, old.verdict) == (
        1.5,
        None,
        None,
        1,
        WITHIN_NOISE,
    )
    assert old.cell() == "1.5x [no interval] — within noise (n=1)"


def test_only_latencies_give_their_ratio_within_noise(client, tmp_path):
    parent = sweep(client, tmp_path)
    metrics = {"quant_before/latency_b1_ms": 1.33, "quant_after/latency_b1_ms": 0.7}
    (c,) = in_run(client.get_run(job(client, parent, 0, {}, metrics)))
    assert c.ratio == pytest.approx(1.9) and (c.n, c.verdict) == (1, WITHIN_NOISE)
    assert c.cell() == "1.9x [no interval] — within noise (n=1)"


def rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def number(cell: str) -> float | None:
    return None if cell == "" else float(cell)


def test_the_report_collapses_repeats_and_its_csv_agrees_with_mlflow(client, runs, tmp_path):
    parent, ids = runs
    out = tmp_path / "report"
    assert main(["--sweep", parent, "--tracking-uri", client.tracking_uri, "--out", str(out)]) == 0
    tables = {p.stem for p in (out / "tables").glob("*.csv")}
    assert tables == {"runs", "repeats", "baseline", "pruning", "comparisons"}
    columns, comparisons = rows(out / "tables" / "comparisons.csv")
    assert columns == list(COLUMNS)
    in_runs = [r for r in comparisons if " " not in r["run"]]
    assert len(in_runs) == 9  # each of the 9 pruned runs' batch-1 before/after
    for row in in_runs:  # every in-run row is what the run logged
        run = client.get_run(row["run"])
        m, tags = run.data.metrics, run.data.tags
        assert row["comparison"] == "prune: before vs after" and row["measure"] == "latency_b1_ms"
        assert number(row["before"]) == m["prune_before/latency_b1_ms"]
        assert number(row["after"]) == m["prune_after/latency_b1_ms"]
        assert number(row["ratio"]) == m["prune/speedup_b1_x"]
        assert number(row["ci_low"]) == m.get("prune/speedup_b1_ci_low_x")
        assert number(row["ci_high"]) == m.get("prune/speedup_b1_ci_high_x")
        assert int(row["n"]) == m.get("prune/speedup_b1_rounds_count", 1)
        assert row["verdict"] == tags.get("hpml.verdict.prune.speedup_b1", WITHIN_NOISE)
    groups = [r for r in comparisons if " " in r["run"]]
    assert len(groups) == 4 * 2  # four configs against the baseline, samples/s and step time
    for row in groups:  # every group row from the runs' values in MLflow
        members = [client.get_run(i) for i in row["run"].split()]
        base = [client.get_run(i) for i in ids["plain"]]
        mine = [r.data.metrics[row["measure"]] for r in members]
        theirs = [r.data.metrics[row["measure"]] for r in base]
        expected = ratio_ci(mine, theirs) if row["measure"] == SPEED else ratio_ci(theirs, mine)
        assert number(row["before"]) == median_ci(theirs).median
        assert number(row["after"]) == median_ci(mine).median
        assert number(row["ratio"]) == expected.median
        assert (number(row["ci_low"]), number(row["ci_high"])) == (expected.low, expected.high)
        assert int(row["n"]) == 3 and row["verdict"] in (FASTER, SLOWER, WITHIN_NOISE)
    columns, pruning = rows(out / "tables" / "pruning.csv")
    assert len(pruning) == 3 and {r["n"] for r in pruning} == {"3"}  # repeats: one row each
    runs_columns, all_runs = rows(out / "tables" / "runs.csv")
    assert len(all_runs) == 15 and "replicate" in runs_columns and SPEED in runs_columns
    by_id = {r["run_id"]: r for r in all_runs}
    for run_id in ids["plain"]:
        assert number(by_id[run_id][SPEED]) == client.get_run(run_id).data.metrics[SPEED]
    md = (out / "report.md").read_text()
    assert "the first config that prunes, quantises and compiles nothing" in md
    assert "Runs in the order they ran (hpml.job_num): repeats interleaved" in md
    # the pruned config's row: its repeats' speed-ups' median [min, max] over 3 runs
    assert "| 3x [2.9, 3.1] faster (n=3, 75% interval) |" in md
    # older runs: three repeats agree, but none timed before and after side by side
    assert "| 1.5x [1.5, 1.5] within noise (n=3, 75% interval) |" in md
    assert "| 3x [2.9, 3.1] faster (n=3, 75% interval, a run noisy) |" in md
    assert "| 0.9 [0.87, 0.93] | 0.3 |" in md  # latency b1 before, after: repeats pooled


def test_configs_run_once_are_not_compared(client, tmp_path):
    """Without repeats of the baseline no config can be told apart from it: no such rows."""
    parent = sweep(client, tmp_path / "multirun")
    job(client, parent, 0, {}, {SPEED: 1000.0})
    job(client, parent, 1, {"model.optimizer.lr": "0.1"}, {SPEED: 5000.0})
    runs = sweep_children(client, client.get_run(parent))
    found = group(runs)
    assert len(found) == 2 and against_baseline(found, baseline(found)) == []


def test_a_config_repeated_is_never_compared_with_itself(client, tmp_path):
    parent = sweep(client, tmp_path / "multirun")
    for replicate, speed in enumerate(SPEEDS["plain"]):
        job(client, parent, replicate, {"replicate": str(replicate)}, {SPEED: speed})
    out = tmp_path / "report"
    assert main(["--sweep", parent, "--tracking-uri", client.tracking_uri, "--out", str(out)]) == 0
    _, comparisons = rows(out / "tables" / "comparisons.csv")
    assert comparisons == []
    assert "Repeats: median and interval per config" in (out / "report.md").read_text()


def test_the_pareto_front_counts_only_differences_beyond_noise():
    points = [(10.0, 5.0), (10.0, 4.9), (20.0, 1.0), (30.0, 0.5)]
    assert pareto(points) == [1, 2, 3]  # 4.9 < 5 by the numbers

    def faster(i: int, j: int) -> int:  # 5 against 4.9: within noise; the rest are real
        if {i, j} == {0, 1}:
            return 0
        mine, theirs = points[i][1], points[j][1]
        return (theirs < mine) - (theirs > mine)

    assert pareto(points, faster) == [0, 1, 2, 3]


def test_replicate_is_a_config_key_logged_as_a_param(composed):
    from hpml.tracking.records import flatten

    assert OmegaConf.select(composed([]), "replicate") == 0
    cfg = composed(["replicate=2"])
    assert flatten(OmegaConf.to_container(cfg, resolve=True))["replicate"] == "2"


def test_before_after_rows_say_their_interval_and_verdict(client, tmp_path):
    """A quantised config run once (side-by-side metrics, IQRs) and one repeated twice whose
    runs logged only their latencies: every speed-up cell has its interval or says it has none."""
    from hpml.report.studies import before_after

    parent = sweep(client, tmp_path)
    side = {
        "quant_before/size_bytes": 4e6,
        "quant_after/size_bytes": 1e6,
        "quant_before/latency_b1_ms": 1.2,
        "quant_after/latency_b1_ms": 0.4,
        "quant_before/latency_b1_iqr_ms": 0.05,
        "quant_after/latency_b1_iqr_ms": 0.02,
        "quant/speedup_b1_x": 3.0,
        "quant/speedup_b1_ci_low_x": 2.8,
        "quant/speedup_b1_ci_high_x": 3.2,
        "quant/speedup_b1_rounds_count": 7.0,
    }
    job(client, parent, 0, {"quant.method": "dynamic"}, side)
    for replicate, after in enumerate([0.5, 0.6]):
        latencies = {"quant_before/latency_b1_ms": 1.2, "quant_after/latency_b1_ms": after}
        params = {"quant.method": "static", "replicate": str(replicate)}
        job(client, parent, 1 + replicate, params, {"quant_after/size_bytes": 1e6} | latencies)
    table = before_after(group(sweep_children(client, client.get_run(parent))), lambda r, p: None)
    rows = [dict(zip(table.headings, row, strict=True)) for row in table.rows]
    assert [r["step"] for r in rows] == ["quant: dynamic", "quant: static"]
    once, twice = rows
    assert once["runs (n, interval coverage)"] == "job 0"
    assert (once["latency b1 before (ms)"], once["latency b1 after (ms)"]) == (
        "1.2 (IQR 0.05)",
        "0.4 (IQR 0.02)",
    )
    assert once["speed-up b1 (x, before/after)"] == "3x [2.8, 3.2] faster (n=7)"
    assert twice["runs (n, interval coverage)"] == "2 (50% intervals): job 1, job 2"
    assert twice["latency b1 after (ms)"] == "0.55 [0.5, 0.6]"
    # each repeat's ratio (2.4, 2) has no interval of its own: pooled, still within noise
    assert twice["speed-up b1 (x, before/after)"] == (
        "2.2x [2, 2.4] within noise (n=2, 50% interval)"
    )


def test_plots_draw_a_config_once_with_its_repeats_interval(client, tmp_path):
    from hpml.report.figures import batch_scaling
    from hpml.report.groups import label_keys

    parent = sweep(client, tmp_path)
    for num, (batch, replicate) in enumerate((b, r) for b in (16, 64) for r in range(3)):
        speed = {16: 400.0, 64: 900.0}[batch] + 10 * replicate
        params = {"data.batch_size": str(batch), "replicate": str(replicate)}
        job(client, parent, num, params, {SPEED: speed, STEP: 1000 * batch / speed})
    runs = sweep_children(client, client.get_run(parent))
    keys = label_keys(runs)
    assert keys == ["data.batch_size"]  # replicate is no series of its own
    svg = batch_scaling(runs, keys).svg
    assert svg.count("n=3 (75% interval)") == 4  # 2 batch sizes x 2 panels, one point each
    assert "median 410 [400, 420], n=3" in svg


@pytest.mark.parametrize(
    ("target", "loss"),
    [
        ("hpml.models.vae.VAEModule", "(VAE: BCE + KL summed per sample)"),
        ("hpml.models.classifier.ImageClassifier", "(cross-entropy, mean over samples)"),
    ],
)
def test_the_pruning_caption_names_the_loss_of_the_models_pruned(client, tmp_path, target, loss):
    """A VGG pruning study's losses are cross-entropies: its caption says so, not the VAE's."""
    from hpml.report.studies import pruning

    parent = sweep(client, tmp_path)
    job(client, parent, 0, PRUNE | {"model._target_": target}, pruned_metrics(2.0, True))
    table = pruning(group(sweep_children(client, client.get_run(parent))), lambda r, p: None)
    assert f"validation loss in nats {loss}, right after pruning" in table.caption
