"""Every experiment of ``conf/experiment/`` runs end to end, all jobs of its sweep, in a tiny form.

The experiments are read from disk, so a new one is covered without editing this file. Each runs
as a user runs it (``python -m hpml.train experiment=<name> -m``) with overrides that make it
small without changing what it sweeps: the jobs are the ones Hydra's sweeper makes from the
experiment's own ``hydra.sweeper.params``, and MLflow must end with one parent and one FINISHED
child per job. Experiments that read real data get tiny files in the real format
(``tests/real_data.py``). A sweep whose values only repeat one code path in the tiny form runs
fewer of them, or at fewer shapes (``FEWER_JOBS``: a command-line override of the key, which
Hydra's basic sweeper puts in place of the config's sweep): still its own overlay, every model
builder, method and mode it sweeps, and more than one job. An experiment whose nets are laid out
for large images runs them in a small layout where the code path is the same (``SMALLER``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from tests.conftest import CONF, REPO, run_cli, run_module
from tests.real_data import write_real_data

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# the experiments the Makefile's study-* targets run, each followed by its report, and the
# study table their reports must hold
STUDY_TABLES = {
    "vae_pruning": "Pruning: pruner x sparsity",
    "vgg_quant": "Before and after each optimisation",
}
# and a figure each of their reports must draw
STUDY_FIGURES = {
    "batch_scaling": "Time share by category vs batch size",
    "roofline_vgg": "Roofline",
    "vae_pruning": "Loss and FLOPs vs sparsity",
    "vgg_quant": "Latency vs size of the optimised variants",
}
STUDIED = set(
    re.findall(r"^study-[\w-]+: EXPERIMENT = (\w+)$", (REPO / "Makefile").read_text(), re.M)
)
# Sweeps cut where their values (or shapes) only repeat one code path at the tiny size, each
# keeping every model builder, method and mode it sweeps:
FEWER_JOBS = {
    # with `data.limit=2` its five batch sizes all train on the same 2 samples, and each of its
    # 15 jobs builds a 224 px net (VGG16: 138 M parameters); the smallest and largest size of
    # each model still make the report's figures against batch size (6 jobs)
    "batch_scaling": ["data.batch_size=4,64"],
    # one size for each of its four worker counts (4 jobs, not 16): at `data.limit=2` every size
    # loads the same 2 samples, and no report of it plots against the size
    "loader_sweep": ["data.batch_size=32"],
    # masks and physical pruning at one amount (2 jobs, not 6): amounts are one code path
    "vgg_pruning": ["prune.amount=0.5"],
    # its report plots against sparsity: two amounts for each of the 3 pruners (6 jobs, not 9)
    "vae_pruning": ["prune.amount=0.2,0.8"],
    # torch.compile compiles once per input shape, and batch 1 is always timed: at batch 1 the
    # compiled job compiles one shape, not two (still every compile method the sweep names)
    "compile_compare": ["data.batch_size=1"],
}
# Experiments whose tiny form is also a small image: the same code path on fewer pixels
SMALLER = {
    # its VGGs in the CIFAR layout at 32 px: the per-layer roofline, its timings and its report
    # run as at 224 px (ImageNet's torchvision layout runs end to end in batch_scaling), and
    # all three depths cost less than one 224 px VGG did
    "roofline_vgg": ["model.net.layout=cifar", "data.image_size=32"],
    # its nets stay at 224 px (hpml refuses VGG16's ImageNet layout below that), but with 10
    # classes, not 1000: the synthetic data draws one figure per class, which for 1000 took
    # seconds, and the classifiers' last Linear is the same layer narrower; nothing it profiles
    # or reports depends on the class count
    "batch_scaling": ["data.num_classes=10"],
}
CASES = [pytest.param(name, [], id=name) for name in EXPERIMENTS]
# the study's own data, as the README runs it: covers the real-format path end to end
CASES.append(pytest.param("imdb_lstm", ["data=imdb"], id="imdb_lstm-data=imdb"))

# Always valid: Lightning takes any Trainer argument, and every dataset has `limit`.
ALWAYS = [
    "trainer.max_epochs=1",
    "++trainer.limit_train_batches=1",
    "++trainer.limit_val_batches=1",
    "++trainer.limit_test_batches=1",
    "data.limit=2",  # samples per split: one tiny batch, whatever batch size a job sweeps
    "logger.system_metrics_interval_s=0.5",
    # checkpoints have their own suite; VGG16's with optimizer state is 1.6 GB a job
    "trainer.enable_checkpointing=false",
]
ABSENT = object()
# Set where some job of the sweep has the key (a `none` option of a group takes the key and
# ignores it: no `_target_`), and never on a key the sweep itself varies. A function gets the
# configured value: sizes only shrink. Image sizes stay: models are laid out for theirs (SMALLER
# changes an experiment's layout and its size together).
WHERE_PRESENT: dict[str, Any] = {
    "data.train_samples": 16,  # synthetic data: generate little, `limit` takes 2 of it
    "data.val_samples": 16,
    "data.test_samples": 16,
    "data.batch_size": lambda size: min(size, 4),
    "data.seq_len": lambda length: min(length, 32),
    "callbacks.perf.warmup_steps": 0,
    "callbacks.canary.repeats": 1,
    "callbacks.canary.warmup": 0,
    "callbacks.roofline.timing_passes": 1,
    "callbacks.roofline.batch_size": 1,
    "callbacks.roofline.peak_seconds": 0.2,
    "profile.skip_first": 0,
    "profile.wait": 0,
    "profile.warmup": 0,
    "profile.active": 1,
    **{
        f"{group}.{key}": value
        for group in ("prune", "quant", "compile")
        for key, value in (
            ("latency_rounds", 2),
            ("latency_min_run_time_s", 0.001),
            ("latency_budget_s", 0),
            ("eval_batches", 1),
        )
    },
    "quant.calibration_batches": 1,
}


def sweep_jobs(cfg: DictConfig, sweeps: list[str]) -> list[list[str]]:
    """The jobs Hydra's basic sweeper launches for this config's ``hydra.sweeper.params`` and
    the command line's ``sweeps`` (which replace the config's sweep of the same key)."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    overrides = [f"{key}={value}" for key, value in params.items()] + sweeps
    parsed = OverridesParser.create().parse_overrides(overrides)
    return BasicSweeper.split_arguments(parsed, None)[0]


def has_key(cfg: DictConfig, key: str) -> bool:
    """Whether ``cfg`` holds the dotted ``key``, its value left unresolved (it may name the
    Hydra run, absent here)."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return False
        node = node._get_node(part)
    return True


def tiny_overrides(
    jobs: list[DictConfig], swept: set[str], session: dict[str, Callable[[], Any]] | None = None
) -> list[str]:
    """``ALWAYS``, each ``WHERE_PRESENT`` key some job has and the sweep does not vary, and
    each of ``session``'s (values of this test session, as its shared caches) some job has."""
    overrides = list(ALWAYS)
    for key, value in WHERE_PRESENT.items():
        present = [
            v for cfg in jobs if (v := OmegaConf.select(cfg, key, default=ABSENT)) is not ABSENT
        ]
        if not present or key in swept:
            continue
        if callable(value):
            configured = [v for v in present if v is not None]
            if not configured:
                continue
            value = value(configured[0])
        overrides.append(f"++{key}={value}")
    for key, make in (session or {}).items():
        if key not in swept and any(has_key(cfg, key) for cfg in jobs):
            overrides.append(f"++{key}={make()}")
    return overrides


def plan(
    name: str,
    extra: list[str],
    data_dir: Path,
    sweeps: list[str],
    session: dict[str, Callable[[], Any]] | None = None,
) -> tuple[list[str], int, str]:
    """Overrides of the tiny form, the number of jobs, and the MLflow experiment name."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        base = [f"experiment={name}", *extra]
        cfg = compose("train", overrides=base, return_hydra_config=True)
        jobs = sweep_jobs(cfg, sweeps)
        configs = [
            compose("train", overrides=[*base, *job], return_hydra_config=True) for job in jobs
        ]
    swept = {job.split("=", 1)[0].lstrip("+~") for job in jobs[0]}
    overrides = tiny_overrides(configs, swept, session)
    real = {
        str(c.hydra.runtime.choices.data)
        for c in configs
        if not str(c.data._target_).startswith("hpml.data.synthetic")
    }
    for option in sorted(real):
        needed = write_real_data(option, data_dir)
        if needed is None:
            pytest.fail(
                f"experiment={name} reads data={option}: add a writer of tiny files "
                f"in that format to tests/real_data.py"
            )
        overrides += needed
    return overrides, len(jobs), str(cfg.logger.experiment_name)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "extra"), CASES)
def test_experiment_runs_every_job_of_its_sweep(
    name: str, extra: list[str], root: Path, client, request: pytest.FixtureRequest
) -> None:
    """The dearest cases, and why they stay so: batch_scaling (about 20 CPU seconds) trains
    torchvision's ImageNet-layout VGG16 at 224 px, the one end-to-end run of that layout, at two
    batch sizes; compile_compare's torch.compile job compiles VGG11 cold, as a user's would."""
    sweeps = FEWER_JOBS.get(name, [])
    extra = [*extra, *SMALLER.get(name, [])]
    # a compiling job takes the session's inductor cache: its instruction-set probe built once
    session = {"compile.cache_dir": lambda: request.getfixturevalue("inductor_cache")}
    overrides, jobs, experiment = plan(name, extra, root / "data", sweeps, session)
    args = [f"experiment={name}", "-m", *extra, *sweeps, *overrides]
    result = run_cli(args, root, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(runs) == 1 + jobs
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    failed = [
        (r.data.tags.get("hpml.job_num"), r.data.tags.get("hpml.error"))
        for r in children
        if r.info.status != "FINISHED"
    ]
    assert not failed and len(children) == jobs
    assert sorted(int(r.data.tags["hpml.job_num"]) for r in children) == list(range(jobs))
    assert parents[0].info.status == "FINISHED"
    if name in STUDIED:  # its make target's second half: the report builds and marks no failure
        report = run_module("hpml.report", ["--last"], root)
        assert report.returncode == 0, report.stderr[-3000:]
        page = Path(report.stdout.split()[2]).read_text()
        assert "<h2>Runs</h2>" in page and 'class="failed"' not in page
        shown = page[page.index('<table id="runs">') :]
        assert shown[: shown.index("</table>")].count("<tr title=") == jobs  # a row per job
        if name in STUDY_TABLES:
            assert f"<h2>{STUDY_TABLES[name]}</h2>" in page
        if name in STUDY_FIGURES:
            assert f"<h2>{STUDY_FIGURES[name]}</h2>" in page
        if name == "batch_scaling":  # every profiled step's shares, stacked, fill its bar
            shares: dict[str, float] = {}
            for run, share in re.findall(r"<title>(.+?)\n\w+: ([\d.]+) % of the step", page):
                shares[run] = shares.get(run, 0.0) + float(share)
            assert len(shares) == jobs and all(abs(t - 100) < 0.5 for t in shares.values())
        if name == "vae_pruning":  # study 3's VAE: 651,200 multiply-accumulates, 2 FLOPs each
            assert page.count("<td>1,302,400 -&gt; ") == jobs
