"""``python -m hpml.report.roofline`` on a store written by a sweep with the roofline callback."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from hpml.callbacks.roofline import RooflineCallback
from hpml.data.synthetic import SyntheticDataModule
from hpml.errors import ConfigError
from hpml.models.classifier import ImageClassifier
from hpml.models.nets.vgg import vgg
from hpml.names import INTENSITY
from hpml.report.roofline import main
from tests.conftest import QUICK, REPO, built_once, run_cli, run_module
from tests.helpers import fresh_python
from tests.report.test_report import report

pytestmark = pytest.mark.slow
# Small: 2 training steps per run (1 after warm-up), the roofline of 4 images.
# No checkpoints: the roofline reads none, and each VGG's is over 100 MB with its optimiser.
SMALL = [
    "data.train_samples=64",
    "data.val_samples=32",
    "test=false",
    "trainer.enable_checkpointing=false",
]
ROOFLINE = [
    "callbacks=analysis",
    "callbacks.roofline.timing_passes=1",
    "callbacks.roofline.batch_size=4",
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, store_template):
    """A project root holding one VGG11/VGG13 sweep, run once for the session's workers (each
    test writes under a name of its own); returns (root, client, parent, children)."""
    from mlflow import MlflowClient

    def run_sweep(root: Path) -> None:
        shutil.copy(store_template, root / "mlflow.db")
        result = run_cli(["-m", "model=vgg11,vgg13", *QUICK, *SMALL, *ROOFLINE], root)
        assert result.returncode == 0, result.stderr[-3000:]

    root = built_once(tmp_path_factory, "roofline_root", run_sweep)
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"]
    children = sorted(
        (r for r in runs if "mlflow.parentRunId" in r.data.tags),
        key=lambda r: r.data.tags["hpml.choice.model"],
    )
    return root, client, parent, children


def roofline_cli(args: list[str], root) -> subprocess.CompletedProcess:
    """``python -m hpml.report.roofline ARGS`` for ``root``, with no virtual environment's
    programs on the PATH."""
    return run_module(
        "hpml.report.roofline", args, root, timeout=120, env={"PATH": "/usr/bin:/bin"}
    )


def test_callback_logs_metrics_layer_table_and_plot(sweep):
    _, client, _, children = sweep
    assert [r.data.tags["hpml.choice.model"] for r in children] == ["vgg11", "vgg13"]
    for run in children:
        m = run.data.metrics
        assert m[INTENSITY] > 0 and m["roofline/bytes_per_sample_bytes"] > 0
        # VGG-CIFAR: every image pays the same products; backward does twice the forward's
        assert m["roofline/fwd_bwd_flops_per_sample"] == pytest.approx(
            3 * m["roofline/fwd_flops_per_sample"], rel=0.01
        )
        assert m["roofline/peak_fp32_flops_per_s"] > 0
        if run.data.tags["hpml.device"].startswith("cpu"):  # no table for CPUs: measured
            # a peak cached under load is raised to the best point that beats it (and says so)
            peak = run.data.tags["hpml.roofline.peak"]
            assert peak.endswith(("(measured)", "(measured), raised to the best point"))
        arts = {a.path for a in client.list_artifacts(run.info.run_id, "roofline")}
        assert arts == {"roofline/layers.csv", "roofline/roofline.png", "roofline/roofline.svg"}
        text = client.download_artifacts(run.info.run_id, "roofline/layers.csv")
        with open(text) as file:
            rows = list(csv.DictReader(file))
        convs = [r for r in rows if r["type"] == "Conv2d"]
        assert len(convs) == (8 if run.data.tags["hpml.choice.model"] == "vgg11" else 10)
        assert rows[-1]["layer"] == "model (forward)"
        assert {r["bound"] for r in rows} <= {"memory-bound", "compute-bound"}
    vgg11, vgg13 = (r.data.metrics["roofline/fwd_flops_per_sample"] for r in children)
    assert vgg13 > vgg11


def test_last_sweep_on_one_roofline_logged_to_the_parent(sweep):
    root, client, parent, children = sweep
    result = roofline_cli(["--sweep", "last", "--out", str(root / "plots")], root)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("roof: ")
    for run in children:
        (line,) = [row for row in out.splitlines() if row.startswith(run.info.run_id)]
        assert run.data.tags["hpml.choice.model"] in line
        assert "compute-bound" in line or "memory-bound" in line
        assert "train fwd+bwd" in line  # performance from training throughput
    assert (root / "plots" / "roofline.png").stat().st_size > 20_000
    assert (root / "plots" / "roofline.svg").is_file()
    arts = {a.path for a in client.list_artifacts(parent.info.run_id, "roofline")}
    assert arts == {"roofline/roofline.png", "roofline/roofline.svg"}


def test_chosen_runs_against_a_table_device(sweep, tmp_path, capsys):
    root, _, parent, children = sweep
    uri = f"sqlite:///{root}/mlflow.db"
    ids = [r.info.run_id for r in children]
    assert (
        main(["--runs", *ids, "--device", "v100", "--tracking-uri", uri, "--out", str(tmp_path)])
        == 0
    )
    out = capsys.readouterr().out
    assert "roof: Tesla V100 SXM2: 15.7 TFLOP/s (32-true), 900 GB/s, ridge 17.4 FLOP/byte" in out
    assert all(run_id in out for run_id in ids)
    assert (tmp_path / "roofline.png").is_file()
    assert (
        main(
            [
                "--sweep",
                parent.info.run_id,
                "--tracking-uri",
                uri,
                "--device",
                "measured",
                "--out",
                str(tmp_path / "by_id"),
            ]
        )
        == 0
    )
    assert "(measured): " in capsys.readouterr().out  # this machine's roof
    assert (tmp_path / "by_id" / "roofline.svg").is_file()


def error_line(argv: list[str], capsys) -> str:
    assert main(argv) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("hpml: error: ")
    return line


def test_errors_are_one_line(sweep, tmp_path, store_template, capsys):
    root, client, parent, children = sweep
    uri = f"sqlite:///{root}/mlflow.db"
    line = error_line(["--runs", "0123abcd", "--tracking-uri", uri], capsys)
    assert "unknown run id '0123abcd'" in line
    line = error_line(["--sweep", children[0].info.run_id, "--tracking-uri", uri], capsys)
    assert "not a sweep's parent run" in line
    bare = client.create_run(parent.info.experiment_id, run_name="bare run")
    client.set_terminated(bare.info.run_id)
    line = error_line(["--runs", bare.info.run_id, "--tracking-uri", uri], capsys)
    assert "without roofline metrics" in line and "bare run" in line and bare.info.run_id in line
    empty = tmp_path / "empty.db"
    shutil.copy(store_template, empty)
    line = error_line(["--tracking-uri", f"sqlite:///{empty}"], capsys)
    assert line.startswith("hpml: error: no sweep in sqlite:///")
    assert line.endswith("or report single runs with --runs RUN_ID ...")  # what else to do
    line = error_line(["--experiment", "nope", "--tracking-uri", uri], capsys)
    assert "no experiment 'nope'" in line


def test_runs_without_metrics_beside_others_are_named_and_skipped(sweep, tmp_path, capsys):
    root, client, parent, children = sweep
    bare = client.create_run(parent.info.experiment_id, run_name="no callback")
    assert (
        main(
            [
                "--runs",
                children[0].info.run_id,
                bare.info.run_id,
                "--out",
                str(tmp_path),
                "--tracking-uri",
                f"sqlite:///{root}/mlflow.db",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "hpml: warning: skipping runs without roofline metrics" in err and "no callback" in err


def test_help_imports_nothing_heavy():
    code = (
        "import sys, contextlib, io\n"
        "from hpml.report.roofline import parse_args\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    parse_args(['--help'])\n"
        "heavy = {'torch', 'mlflow', 'matplotlib', 'lightning'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = fresh_python(code, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr


def test_callback_rejects_an_unknown_device():
    with pytest.raises(ConfigError, match="device='v200' is invalid: expected one of k80"):
        RooflineCallback(device="v200")


@pytest.mark.parametrize("precision", ["64-true", "bf16-mixed"])
def test_callback_in_process_at_other_precisions(tmp_path, precision):
    data = SyntheticDataModule(train_samples=4, val_samples=2, test_samples=2, batch_size=2)
    model = ImageClassifier(partial(vgg, depth=11), data.spec, partial(torch.optim.SGD, lr=0.01))
    logger = CSVLogger(tmp_path)
    trainer = L.Trainer(
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=0,
        logger=logger,
        precision=precision,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[RooflineCallback(device="a100-40gb", timing_passes=0)],
    )
    trainer.fit(model, datamodule=data)
    with open(f"{logger.log_dir}/metrics.csv") as file:
        (row,) = [r for r in csv.DictReader(file) if r["roofline/intensity_flop_per_byte"]]
    ridge = 19.5e12 / 1555e9 if precision == "64-true" else 312e12 / 1555e9
    assert float(row["roofline/ridge_flop_per_byte"]) == pytest.approx(ridge)
    assert float(row["roofline/intensity_flop_per_byte"]) > 0


def test_report_draws_the_sweep_on_its_roofline(sweep):
    root, _, _, children = sweep
    result = report(root, "--last", "--out", str(root / "report"))
    assert result.returncode == 0, result.stderr[-3000:]
    md = (root / "report" / "report.md").read_text()
    assert "## Roofline" in md and "ridge" in md  # the caption names the roof it drew
    figures = dict(re.findall(r"!\[(.+?)\]\((figures/\d+\.svg)\)", md))
    svg = ET.parse(root / "report" / figures["Roofline"]).getroot()
    tips = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title") if t.text]
    assert len(tips) == len(children)  # one point per run, each naming its run and numbers
    for run in children:
        (tip,) = [t for t in tips if t.startswith(f"{run.info.run_name}:")]
        m = run.data.metrics
        achieved = m["roofline/fwd_bwd_flops_per_sample"] * m["train/throughput_samples_per_s"]
        gflops = achieved / 1e9
        assert f"{m[INTENSITY]:.3g} FLOP/byte, {gflops:.3g} GFLOP/s (train fwd+bwd)" in tip
