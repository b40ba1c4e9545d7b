"""``python -m hpml.train`` as users run it: runs, sweeps and failures as MLflow records them."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

import pytest

from tests.conftest import QUICK, QUICK_BATCH, cli_env, options, run_cli, stderr_lines
from tests.helpers import fresh_python

pytestmark = pytest.mark.slow


def only_run(client, experiment: str = "hpml"):
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return runs[0]


def artifact_paths(client, run_id: str, path: str = "") -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifact_paths(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def test_single_run_is_recorded_with_params_metrics_tags_and_artifacts(root, client):
    result = run_cli(
        ["model=vae", *QUICK, "trainer.max_epochs=2", "logger.system_metrics_interval_s=0.1"], root
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = only_run(client)
    assert run.info.status == "FINISHED"
    assert f"hpml: run {run.info.run_id} finished" in result.stdout
    assert "make ui" in result.stdout
    # what bounded training: its tag agrees with its data wait, and the run said so in one line
    wait, bound = run.data.metrics["train/data_wait_pct"], run.data.tags["hpml.bound.train"]
    assert bound == ("input" if wait >= 5 else "device")  # a CPU: never host
    said = f"hpml: train bound by {bound}: {wait:.0f}% of a step waits for data"
    assert said in result.stdout + result.stderr

    params = run.data.params
    # per-job paths are tags: MLflow's compare view offers only knobs as params
    assert not [key for key in params if key.startswith("paths.") or key.endswith(("dir", "path"))]
    assert run.data.tags["hpml.path.paths.output_dir"] == run.data.tags["hpml.output_dir"]
    assert run.data.tags["hpml.path.callbacks.checkpoint.dirpath"].startswith(
        run.data.tags["hpml.output_dir"]
    )
    assert params["model._target_"] == "hpml.models.vae.VAEModule"
    assert params["data.batch_size"] == str(QUICK_BATCH)
    assert params["data.channels"] == "1"  # the VAE picked MNIST-shaped synthetic data

    metrics = run.data.metrics
    for name in (
        "model/fwd_flops_per_sample",
        "model/fwd_bwd_flops_per_sample",
        "train/achieved_flops_per_s",
        "train/mfu_measured_pct",
        "test/achieved_flops_per_s",
        "memory/weights_bytes",
        "memory/gradients_bytes",
        "memory/optimizer_state_bytes",
        "memory/activations_bytes",
        "memory/training_total_bytes",
        "machine/load_avg_1m_procs",
    ):
        assert name in metrics, name
    assert metrics["model/fwd_flops_per_sample"] == 2 * 651_200  # study 3's MACs, 2 x MAC
    assert metrics["train/achieved_flops_per_s"] == pytest.approx(
        metrics["model/fwd_bwd_flops_per_sample"] * metrics["train/throughput_samples_per_s"],
        rel=1e-6,
    )
    # MFU over the peak the run logged beside it: the same cycles' medians, in float32
    assert metrics["train/mfu_measured_pct"] == pytest.approx(
        100 * metrics["train/achieved_flops_per_s"] / metrics["mfu/peak_measured_flops_per_s"],
        rel=1e-5,
    )
    assert "mfu/peak_table_flops_per_s" not in metrics  # no datasheet figure for a CPU
    # 32-true: a peak taken in fp32, at the CPU's default (IEEE) fp32 matmuls and convolutions
    assert run.data.tags["hpml.mfu.peak_measured_dtype"] == "fp32 (matmul ieee, conv ieee)"
    assert metrics["memory/weights_bytes"] == 4 * metrics["model/params_count"]
    for name in (
        "train/throughput_samples_per_s",
        "train/step_time_p50_ms",
        "train/step_time_p90_ms",
        "train/data_wait_pct",
        "train/epoch_time_s",
        "train/peak_memory_bytes",
        "test/throughput_samples_per_s",
        "val/loss",
        "val/bce",
        "val/kld",
        "model/params_count",
        "model/size_bytes",
    ):
        assert name in metrics, name
    assert (
        metrics["model/params_count"]
        == 784 * 400 + 400 + 2 * (400 * 20 + 20) + 20 * 400 + 400 + 400 * 784 + 784
    )
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert len(history) == 2  # one point per epoch
    assert history[1].value < history[0].value

    tags = run.data.tags
    assert tags["hpml.command"].startswith("python -m hpml.train model=vae")
    assert tags["hpml.choice.model"] == "vae"
    assert tags["hpml.device"].startswith("cpu")
    assert tags["hpml.peak_memory_source"] == "process peak RSS"
    assert len(tags["hpml.git_commit"]) == 40
    assert "system/cpu_utilization_percentage" in metrics  # MLflow's system metrics ran

    arts = artifact_paths(client, run.info.run_id)
    assert {
        "config/config_resolved.yaml",
        "config/hydra/overrides.yaml",
        "logs/train.log",
        "model/architecture.txt",
        "flops/by_module.csv",
        "memory/breakdown.png",
    } <= arts
    artifact_dir = root / "mlartifacts" / "hpml"
    assert artifact_dir.is_dir()  # artifacts beside the store, not in the working directory


def test_multirun_gives_one_parent_and_a_child_per_job(root, client):
    result = run_cli(["-m", "model=lstm", *QUICK, "data.batch_size=16,32"], root)
    assert result.returncode == 0, result.stderr[-3000:]
    exp = client.get_experiment_by_name("hpml")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name.startswith("hpml: data.batch_size (")
    # one summary for the sweep, no end-of-run lines per job; no device lines
    assert "finished in" not in result.stdout
    lines = stderr_lines(result)
    assert (
        lines[-2] == f"hpml: sweep {parent.info.run_name} ({parent.info.run_id}): 2 runs, 0 failed"
    )
    assert "make ui" in lines[-1] and lines[-1].endswith(f"/runs/{parent.info.run_id}")
    assert "GPU available: " not in result.stdout, result.stdout[-3000:]
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert sorted(c.data.params["data.batch_size"] for c in children) == ["16", "32"]
    assert sorted(c.data.tags["hpml.job_num"] for c in children) == ["0", "1"]
    for child in children:
        assert child.info.status == "FINISHED"
        for name in (
            "train/throughput_samples_per_s",
            "train/step_time_iqr_ms",
            "train/peak_memory_bytes",
            "val/acc",
            "test/acc",
        ):
            assert name in child.data.metrics, name
    sweep_dir = Path(parent.data.tags["hpml.sweep_dir"])
    assert sweep_dir.parent.parent == root / "multirun"
    assert (
        json.loads((sweep_dir / "mlflow_parent_run.json").read_text())["run_id"]
        == parent.info.run_id
    )


def test_failure_mid_training_keeps_earlier_metrics_and_ends_failed(root, client):
    result = run_cli(
        [
            "model=vae",
            *QUICK,
            "trainer.max_epochs=3",
            "+callbacks.fail._target_=tests.helpers.FailAtEpoch",
            "+callbacks.fail.epoch=1",
        ],
        root,
    )
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr[-3000:]
    assert "RuntimeError: injected failure at epoch 1" in lines[0]
    assert "Traceback" not in result.stderr
    log_file = Path(lines[0].split("(traceback: ")[1].rstrip(")"))
    assert "injected failure" in log_file.read_text()

    run = only_run(client)
    assert run.info.status == "FAILED"
    assert "injected failure at epoch 1" in run.data.tags["hpml.error"]
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert len(history) == 1  # epoch 0 was logged before the failure, and kept
    assert "val/loss" in run.data.metrics
    assert {"error/traceback.txt", "logs/train.log"} <= artifact_paths(client, run.info.run_id)


def test_failed_job_in_a_sweep_does_not_stop_the_others(root, client):
    result = run_cli(["-m", "model=vae", *QUICK, "data.batch_size=-1,32"], root)
    assert result.returncode == 1  # the sweep reports its failure once all jobs ran
    assert any("data.batch_size=-1 is invalid" in line for line in stderr_lines(result))
    exp = client.get_experiment_by_name("hpml")
    runs = client.search_runs([exp.experiment_id])
    children = {
        r.data.params.get("data.batch_size"): r for r in runs if "mlflow.parentRunId" in r.data.tags
    }
    assert {size: r.info.status for size, r in children.items()} == {
        "-1": "FAILED",
        "32": "FINISHED",
    }
    # refused before training, yet listed under the sweep with its error and its log
    refused = children["-1"]
    assert "data.batch_size=-1 is invalid" in refused.data.tags["hpml.error"]
    assert "logs/train.log" in artifact_paths(client, refused.info.run_id)
    assert "train/loss" not in refused.data.metrics  # no step was taken
    parent = next(r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true")
    assert parent.info.status == "FAILED"
    assert {r.data.tags["mlflow.parentRunId"] for r in children.values()} == {parent.info.run_id}
    assert "2 runs, 1 failed" in result.stderr


def test_negative_batch_size_is_one_line_and_no_run(root, client):
    result = run_cli(["data.batch_size=-1"], root)
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    assert "data.batch_size=-1 is invalid: expected an integer >= 1" in lines[0]
    assert "Traceback" not in result.stderr
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


def test_unknown_model_is_one_line_listing_valid_models(root):
    result = run_cli(["model=resnet9000"], root)
    assert result.returncode == 2
    valid = ", ".join(options("model"))
    assert result.stderr.strip().splitlines() == [
        f"hpml: error: unknown model 'resnet9000' for model= (valid: {valid})"
    ]


def test_too_small_input_names_the_smallest_size_that_works(root):
    result = run_cli(["model=alexnet", "data=synthetic", *QUICK], root)
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1
    assert "input 32x32 is too small for alexnet: it needs at least 63x63 pixels" in lines[0]


def test_two_sweeps_started_together_do_not_collide(root, client):
    args = ["-m", "model=vae", *QUICK, "data.batch_size=32", "test=false"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run_cli(args, root), range(2)))
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    sweep_dirs = {p for p in (root / "multirun").glob("*/*") if p.is_dir()}
    assert len(sweep_dirs) == 2
    parents = [
        r
        for r in client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
        if r.data.tags.get("hpml.sweep_parent") == "true"
    ]
    assert len({p.data.tags["hpml.sweep_dir"] for p in parents}) == 2, [
        (p.info.run_id, p.data.tags["hpml.sweep_dir"], p.info.experiment_id) for p in parents
    ]


def test_help_and_a_refused_config_import_no_torch_lightning_or_mlflow(root):
    """Each answers in about the time Python and Hydra take to start: a fresh process, the only
    way to see what it imported. However the command ends, what it made is frozen out of the
    interpreter's last garbage collection."""
    code = (
        "import gc, runpy, sys\n"
        "for args in (['--help'], ['data.batch_size=-1']):\n"
        "    sys.argv = ['hpml.train', *args]\n"
        "    try: runpy.run_module('hpml.train', run_name='__main__', alter_sys=True)\n"
        "    except SystemExit as exc: print('exit', exc.code, gc.get_freeze_count() > 0)\n"
        "    gc.unfreeze()\n"
        "print(sorted(m for m in ('torch', 'lightning', 'mlflow') if m in sys.modules))"
    )
    done = fresh_python(code, cwd=root, env=cli_env(root))
    lines = done.stdout.splitlines()[-3:]
    assert lines == ["exit 0 True", "exit 1 True", "[]"], done.stdout + done.stderr
    assert "data.batch_size=-1 is invalid: expected an integer >= 1" in done.stderr


def test_missing_dataset_is_one_line_naming_the_path_looked_at(root, client):
    result = run_cli(["model=vgg11", "data=cifar10", "data.data_dir=/nonexistent"], root)
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    assert "CIFAR-10 not found at /nonexistent/cifar-10-batches-py" in lines[0]
    assert "data.download=true" in lines[0]
    assert only_run(client).info.status == "FAILED"


def test_train_returns_fit_and_test_metrics_for_sweepers(composed):
    from hpml.train import train

    metrics = train(composed(["model=vae", *QUICK]))
    assert {"val/loss", "train/loss", "test/loss"} <= set(metrics)  # val/loss: optimized_metric
