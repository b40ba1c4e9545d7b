"""A user's first run: into a fresh store, on a machine without GitPython, it prints no MLflow or
Lightning start-up line, only hpml's own; ``hpml.verbose=true`` shows them again."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from hpml.console import quiet_upstream

# The upstream lines a first run used to print, as their emitters word them
START_UP = (
    "Creating initial MLflow database tables",  # mlflow.store.db.utils, a fresh store
    "Updating database tables",
    "Failed to import Git",  # mlflow.utils.git_utils, three per run without GitPython
    "GPU available: ",  # lightning.pytorch.utilities.rank_zero, every fit
    "TPU available: ",
    "`Trainer.fit` stopped: `max_epochs=1` reached.",
)
TINY = [
    "model=vae",
    "trainer.max_epochs=1",
    "data.limit=64",
    "data.batch_size=32",
    "trainer.enable_progress_bar=false",
    "logger.log_system_metrics=false",
]


@pytest.fixture
def without_gitpython(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import git`` fails, as on a machine without GitPython, and MLflow looks for the commit
    afresh, as in a new process (it looks once per process, at its first run)."""
    from mlflow.tracking.context.git_context import GitRunContext
    from mlflow.tracking.context.registry import _run_context_provider_registry

    monkeypatch.setitem(sys.modules, "git", None)
    for provider in _run_context_provider_registry:
        if isinstance(provider, GitRunContext):
            monkeypatch.setattr(provider, "_cache", {})


def shown(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> tuple[list[str], list[str]]:
    """The lines the terminal would get: printed (MLflow's own handler writes to stderr too),
    and logged (Hydra's job logging would print what reaches the root logger)."""
    captured = capsys.readouterr()
    return (captured.out + captured.err).splitlines(), [r.getMessage() for r in caplog.records]


@pytest.mark.usefixtures("without_gitpython")
def test_a_first_run_into_a_fresh_store_prints_no_upstream_start_up_line(
    composed, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from hpml.train import train

    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    caplog.set_level(logging.INFO)
    train(composed([*TINY, f"logger.tracking_uri={uri}"]))
    printed, logged = shown(capsys, caplog)
    assert [line for line in printed + logged if any(s in line for s in START_UP)] == []
    assert [line for line in printed if not line.startswith("hpml: ")] == [], printed
    assert any(line.startswith("hpml: run ") and uri in line for line in printed), printed
    assert any(line.startswith("epoch 1/1 ") for line in logged), logged
    (run,) = MlflowClient(uri).search_runs(["1"])  # the store was made by this run
    assert run.info.status == "FINISHED"


@pytest.mark.usefixtures("without_gitpython", "after_mlflow_pytorch")
def test_a_run_after_mlflow_pytorch_is_imported_prints_no_lightning_start_up_line(
    composed,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``import mlflow.pytorch`` (a run with ``logger.log_model=true`` makes it) imports the
    standalone ``pytorch_lightning``, whose logger then carries all of Lightning's rank-zero
    lines: every later job of the process (a sweep's) printed its start-up lines again."""
    from hpml.train import train

    caplog.set_level(logging.INFO)
    train(composed([*TINY, f"logger.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]))
    printed, logged = shown(capsys, caplog)
    assert [line for line in printed + logged if any(s in line for s in START_UP)] == []
    assert any(line.startswith("epoch 1/1 ") for line in logged), logged


@pytest.mark.usefixtures("without_gitpython")
def test_verbose_shows_the_upstream_start_up_lines(
    composed, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The first run's steps that make the lines, without the training between them, into the
    test's store: making a fresh one again would cost seconds, and verbose lifts the filters on
    MLflow's loggers all alike."""
    from hpml.build import build_tracker, build_trainer
    from hpml.tracking.remote import prepare
    from hpml.train import quiet

    caplog.set_level(logging.INFO)
    cfg = composed([*TINY, "hpml.verbose=true"])
    try:
        quiet(cfg)  # the first run's steps, as train takes them
        prepare(cfg.logger)
        tracker = build_tracker(cfg)
        build_trainer(cfg, [], array=False).loggers = [tracker.attached_logger(None)]
        with tracker.runs([(cfg, None)], [None], [{}], lambda run, trained: None):
            pass
    finally:
        quiet_upstream()  # as every run starts: the next test's output as quiet as a job's
    printed, logged = shown(capsys, caplog)
    for start in ("Failed to import Git", "GPU available: ", "TPU available: "):
        assert any(start in line for line in printed + logged), (start, printed + logged)


def test_matplotlibs_font_cache_is_built_without_a_line(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run with an empty Matplotlib cache (a fresh clone, a new ``MPLCONFIGDIR``) builds
    the font cache as its first figure is drawn: Matplotlib logs that at INFO, which the
    terminal showed. Built here afresh, into a cache folder of the test's own."""
    import matplotlib
    from matplotlib import font_manager

    monkeypatch.setattr(matplotlib, "get_cachedir", lambda: str(tmp_path))
    caplog.set_level(logging.INFO)
    quiet_upstream()
    font_manager._load_fontmanager(try_read_cache=False)
    assert (tmp_path / f"fontlist-v{font_manager.FontManager.__version__}.json").is_file()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("matplotlib")] == []
    try:  # the filter is what hides it: verbose shows the line again
        quiet_upstream(verbose=True)
        font_manager._log.info("generated new fontManager")
    finally:
        quiet_upstream()
    assert "generated new fontManager" in [r.getMessage() for r in caplog.records]
