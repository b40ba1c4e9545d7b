"""``python -m hpml.profile.ncu``: the ncu command it builds around ``hpml.train``, the run id it
finds in the job's output, and what ``--read`` logs from an export into a real SQLite run (no
Nsight Compute here: the command itself runs on a GPU machine)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from hpml.analysis.ncu import load
from hpml.analysis.ncu_work import READ, check, counters, step_metrics
from hpml.errors import ConfigError
from hpml.names import NCU_CACHE_TAG, NCU_COUNTERS_TAG, NCU_STEP_TAG, NCU_TENSOR_TAG
from hpml.profile.ncu import main, ncu_command, run_profiled, train_command

FIXTURE = Path(__file__).parents[1] / "analysis" / "ncu" / "raw_page.csv"


def test_the_run_is_trained_with_nvtx_ranges_and_nothing_else_profiling():
    assert train_command("py", ["model=vgg11"]) == [
        "py",
        "-m",
        "hpml.train",
        "model=vgg11",
        "profile=nvtx",
    ]
    assert train_command("py", ["profile=nvtx"])[-1] == "profile=nvtx"
    with pytest.raises(ConfigError, match="profile='torch' is invalid: expected nvtx"):
        train_command("py", ["profile=torch"])
    with pytest.raises(ConfigError, match="expected one run"):
        train_command("py", ["-m", "model=vgg11,vgg13"])


def test_ncu_counts_the_forward_and_backward_ranges_into_a_raw_page(tmp_path):
    train = train_command("py", ["model=vgg11"])
    command = ncu_command("ncu", train, tmp_path, counters("9.0"), "all", "base")
    assert command[0] == "ncu" and command[-len(train) :] == train
    flags = command[: -len(train)]
    includes = [flags[i + 1] for i, word in enumerate(flags) if word == "--nvtx-include"]
    assert "--nvtx" in flags and includes == ["regex:hpml.forward/", "regex:hpml.backward/"]
    assert flags[flags.index("--metrics") + 1].split(",") == counters("9.0")
    assert flags[flags.index("--cache-control") + 1] == "all"
    assert flags[flags.index("--clock-control") + 1] == "base"
    assert flags[flags.index("--page") + 1] == "raw" and "--csv" in flags
    assert flags[flags.index("--log-file") + 1] == str(tmp_path / "raw_page.csv")


def test_the_run_id_is_read_from_the_jobs_output(capfd):
    line = "hpml: run 0123456789abcdef0123456789abcdef finished in sqlite:////tmp/m.db"
    code = f"print('epoch 1/1'); print({line!r}); raise SystemExit(3)"
    assert run_profiled([sys.executable, "-c", code]) == (
        3,
        "0123456789abcdef0123456789abcdef",
        "sqlite:////tmp/m.db",
    )
    assert line in capfd.readouterr().out  # the job's output passed through
    assert run_profiled([sys.executable, "-c", "print('no run')"]) == (0, None, None)


@pytest.fixture
def store(tmp_path, store_template):
    """A real SQLite store holding one finished run; (uri, client, run id)."""
    from mlflow import MlflowClient

    shutil.copy(store_template, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    artifacts = str(tmp_path / "artifacts")  # not ./mlruns, where the tests run
    experiment = client.create_experiment("ncu", artifact_location=artifacts)
    run = client.create_run(experiment, run_name="vgg11")
    client.set_terminated(run.info.run_id)
    return uri, client, run.info.run_id


def test_read_logs_a_steps_counts_tags_and_tables_to_its_run(store, capsys):
    uri, client, run_id = store
    argv = ["--read", str(FIXTURE), "--run", run_id, "--tracking-uri", uri, "--cache-control"]
    assert main([*argv, "all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"hpml: counted step 2 of 2 into run {run_id}: fwd 5 kernels")
    assert "note: tensor-core work on sm__ops_path_tensor_src_tf32_dst_fp32.sum" in out
    run = client.get_run(run_id)
    expected = step_metrics(check(load(FIXTURE, READ))[-1])
    assert {k: v for k, v in run.data.metrics.items() if k.startswith("ncu/")} == pytest.approx(
        expected
    )
    tags = run.data.tags
    assert tags[NCU_CACHE_TAG] == "all" and tags["hpml.ncu.clock_control"] == "unstated"
    assert tags[NCU_STEP_TAG] == "2 of 2"
    assert tags[NCU_TENSOR_TAG] == "sm__ops_path_tensor_src_tf32_dst_fp32.sum"
    assert "dram__bytes_read.sum" in tags[NCU_COUNTERS_TAG].split(",")
    assert "sm__inst_executed_pipe_tensor.sum" not in tags[NCU_COUNTERS_TAG]  # not in the export
    arts = {a.path for a in client.list_artifacts(run_id, "ncu")}
    assert arts == {"ncu/raw_page.csv", "ncu/kernels.csv"}
    assert main([*argv, "none", "--step", "1"]) == 0
    first = client.get_run(run_id).data
    assert first.tags[NCU_STEP_TAG] == "1 of 2" and first.tags[NCU_CACHE_TAG] == "none"
    assert first.metrics["ncu/fwd_dram_read_bytes"] > expected["ncu/fwd_dram_read_bytes"]


def error(argv: list[str], capsys) -> str:
    assert main(argv) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("hpml: error: ")
    return line


def test_bad_reads_are_one_line(store, tmp_path, capsys):
    uri, _, run_id = store
    read = ["--read", str(FIXTURE), "--tracking-uri", uri]
    assert "unknown run id 'feedbeef'" in error([*read, "--run", "feedbeef"], capsys)
    line = error([*read, "--run", run_id, "--step", "3"], capsys)
    assert "--step=3 is invalid: expected 1 to 2, the steps counted" in line
    gone = f"sqlite:///{tmp_path / 'nothing.db'}"
    line = error(["--read", str(FIXTURE), "--run", run_id, "--tracking-uri", gone], capsys)
    assert "no MLflow store at" in line and not (tmp_path / "nothing.db").exists()
    (tmp_path / "details.csv").write_text('"ID","Kernel Name","Metric Name"\n"0","k","x"\n')
    line = error(["--read", str(tmp_path / "details.csv"), "--run", run_id], capsys)
    assert "a details page (a row per metric), not a raw page export" in line
