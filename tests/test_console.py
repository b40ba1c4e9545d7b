"""Quiet output: no upstream noise and no bar off a terminal, one line per epoch instead; log
lines that start on their own line under a bar; a sweep says once what each job would repeat."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import select
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpml.console import QUIET_ENV, BarSafeHandler, progress_bar, quiet_upstream
from tests.conftest import cli_env
from tests.helpers import fresh_python

NOISE = ("LeafSpec", "litlogger", "log_every_n_steps")
TINY = [
    "model=lstm",
    "trainer.max_epochs=2",
    "data.train_samples=64",
    "data.val_samples=32",
    "data.test_samples=32",
    "data.batch_size=32",
    "logger.system_metrics_interval_s=0.5",
]


def test_progress_bar_follows_the_terminal_unless_set() -> None:
    leader, follower = os.openpty()
    with open(follower, "w") as terminal:
        assert progress_bar(None, terminal) is True
        assert progress_bar(False, terminal) is False
    os.close(leader)
    assert progress_bar(None, io.StringIO()) is False
    assert progress_bar(True, io.StringIO()) is True


def test_only_the_named_warnings_are_dropped_and_verbose_undoes_it() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_upstream(verbose=False)
        warnings.warn(
            "`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning, stacklevel=1
        )
        warnings.warn("something else is deprecated", FutureWarning, stacklevel=1)
        quiet_upstream(verbose=True)
        warnings.warn(
            "`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning, stacklevel=1
        )
    assert [str(w.message)[:12] for w in caught] == ["something el", "`isinstance("]


def run_merged(args: list[str], root: Path) -> str:
    """``python -m hpml.train ARGS`` with stdout and stderr in one file, in the order written."""
    from tests.warm import WARM

    tmp = Path(tempfile.mkdtemp(prefix="hpml-cli-", dir=root.parent))
    proc = WARM.popen("hpml.train", args, root, cli_env(root), tmp, merged=True)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.mark.slow
def test_captured_output_is_quiet_with_epoch_lines_and_verbose_shows_all(root: Path) -> None:
    output = run_merged(["-m", *TINY, "hpml.verbose=false,true"], root)
    assert "\r" not in output  # no progress bar: output is a pipe
    quiet, verbose = output.split("[HYDRA] \t#1 : ", 1)
    for noise in NOISE:
        assert noise not in quiet, noise
    lines = [line for line in quiet.splitlines() if line.strip()]
    epochs = [line for line in lines if line.startswith(("epoch ", "test "))]
    hydra = re.compile(r"\[[\d\-: ,]+\](\[HYDRA\]|$)")  # the launcher's own lines
    others = [line for line in lines if line not in epochs and not hydra.match(line)]
    assert all(line.startswith("hpml: ") for line in others), others  # no logger or time prefix
    assert [line.split("  ")[0] for line in epochs] == [
        "epoch 1/2",
        "epoch 2/2",
        "test",
    ]
    assert all("/loss " in line for line in epochs) and "val/loss" in epochs[0]
    for noise in NOISE:  # the same process: the quiet job's filters are gone
        assert noise in verbose, noise


def read_all(leader: int) -> str:
    """What a pseudo-terminal's other side has written so far (a read returns what has arrived,
    so read until nothing more comes)."""
    chunks = []
    while select.select([leader], [], [], 0.5)[0]:
        chunks.append(os.read(leader, 65536))
    return b"".join(chunks).decode()


def on_screen(written: str) -> list[str]:
    """The lines a terminal shows for ``written``: a carriage return goes back to the start of
    the line, and what follows overwrites what was there."""
    shown = []
    for line in written.split("\n"):
        screen = ""
        for part in line.split("\r"):
            screen = part + screen[len(part) :]
        shown.append(screen.rstrip())
    return shown


@pytest.mark.parametrize("handler_class", [BarSafeHandler, logging.StreamHandler])
def test_a_line_logged_under_a_progress_bar_starts_on_its_own_line(handler_class) -> None:
    """Through a pseudo-terminal, as Lightning's bar and Hydra's console handler share stdout:
    the plain handler (the control) glues the line onto the bar, hpml's does not."""
    from tqdm import tqdm

    leader, follower = os.openpty()
    terminal = open(follower, "w")  # noqa: SIM115 - closed below, after the bar
    handler = handler_class(terminal)
    handler.setFormatter(logging.Formatter("[%(name)s] - %(message)s"))
    logger = logging.getLogger("tests.console.bar")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        bar = tqdm(total=10, file=terminal, desc="Epoch 0", ascii=True, mininterval=0)
        bar.update(4)
        logger.warning("checkpoint saved")
        bar.update(6)
        bar.close()
        terminal.flush()
        written = read_all(leader).replace("\r\n", "\n")  # the pty's own CRLF
    finally:
        logger.removeHandler(handler)
        terminal.close()
        os.close(leader)
    glued = handler_class is logging.StreamHandler
    assert ("[tests.console.bar] - checkpoint saved" in on_screen(written)) is not glued, written
    assert any(line.startswith("Epoch 0: 100%") for line in on_screen(written)), written


def test_a_bar_safe_handler_without_a_bar_writes_as_a_stream_handler() -> None:
    stream = io.StringIO()
    handler = BarSafeHandler(stream)
    handler.emit(logging.LogRecord("x", logging.INFO, __file__, 1, "plain %s", ("line",), None))
    assert stream.getvalue() == "plain line\n"


def test_hpmls_own_lines_start_with_hpml_but_epoch_lines_verdicts_and_upstream_lines() -> None:
    stream = io.StringIO()
    handler = BarSafeHandler(stream)
    for name, message in [
        ("hpml.callbacks.prune", "pruned VGG to 0.500"),
        ("hpml.callbacks.perf", "hpml: timings of this run are noisy"),  # not twice
        ("hpml.callbacks.epoch_summary", "epoch 1/2  train/loss 2.3"),
        ("hpml.callbacks.measure", "prune: speed-up at batch 1: 1.46x [1.40, 1.56]"),
        ("lightning.pytorch.utilities.rank_zero", "Trainer.fit stopped"),
    ]:
        handler.emit(logging.LogRecord(name, logging.INFO, __file__, 1, message, None, None))
    assert stream.getvalue().splitlines() == [
        "hpml: pruned VGG to 0.500",
        "hpml: timings of this run are noisy",
        "epoch 1/2  train/loss 2.3",
        "prune: speed-up at batch 1: 1.46x [1.40, 1.56]",
        "Trainer.fit stopped",
    ]


def test_an_epoch_cut_by_max_steps_says_so(caplog) -> None:
    """Lightning's "`Trainer.fit` stopped: `max_steps=1` reached." is dropped as noise: the
    epoch line says it instead of reading as the first of two whole epochs."""
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from hpml.callbacks.epoch_summary import EpochSummary

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: list[torch.Tensor], *_: object) -> torch.Tensor:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = L.Trainer(
        max_epochs=2,
        max_steps=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[EpochSummary()],
    )
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
    with caplog.at_level(logging.INFO, logger="hpml.callbacks.epoch_summary"):
        trainer.fit(Tiny(), data)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch")]
    assert line.startswith("epoch 1/2 (trainer.max_steps=1 reached)  "), line


@contextlib.contextmanager
def quieted_lines(name: str, verbose: bool) -> Iterator[list[str]]:
    """The messages logger ``name`` emits (INFO and up) while hpml's filters are set for
    ``verbose``; the filters are taken off after."""
    logger = logging.getLogger(name)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    try:
        quiet_upstream(verbose=verbose)
        yield seen
    finally:
        quiet_upstream(verbose=True)
        logger.removeHandler(handler)
        logger.level = level


@pytest.mark.parametrize("verbose", [False, True])
def test_a_trainers_start_up_lines_show_only_when_verbose(verbose: bool) -> None:
    """A real Trainer given ``limit_*_batches=1`` (as a quick run is) says its device and that
    an int 1 means one batch: Lightning's start-up lines, none unless verbose; any other line
    of the same logger still shows. The logger is the one Lightning writes to in this process:
    ``lightning.pytorch``'s, or ``pytorch_lightning``'s once an earlier test of the worker has
    imported ``mlflow.pytorch`` (:func:`hpml.console._loggers`)."""
    import lightning as L
    from lightning.fabric.utilities.rank_zero import rank_zero_module

    name = rank_zero_module.log.name
    with quieted_lines(name, verbose) as seen:
        L.Trainer(logger=False, limit_train_batches=1, limit_val_batches=1, limit_test_batches=1)
        logging.getLogger(name).info("something else")
    limits = [line for line in seen if line.startswith("`Trainer(limit_")]
    assert len(limits) == (3 if verbose else 0), seen
    assert any(line.startswith("GPU available: ") for line in seen) is verbose, seen
    assert any(line.startswith("TPU available: ") for line in seen) is verbose, seen
    assert seen[-1] == "something else"


@pytest.mark.parametrize("verbose", [False, True])
def test_torch_jits_deprecation_notes_are_one_line_unless_verbose(verbose, tmp_path, caplog):
    """torch.jit warns per call that it is deprecated; compile=torchscript says it once."""
    import torch
    from torch import nn

    from hpml.optimize.compile.torchscript import Torchscript

    examples = [torch.randn(2, 4), torch.randn(3, 4)]
    try:
        quiet_upstream(verbose=verbose)
        with warnings.catch_warnings(record=True) as caught:
            Torchscript().compile(nn.Linear(4, 2).eval(), examples, tmp_path / "a")
            Torchscript().compile(nn.Linear(4, 2).eval(), examples, tmp_path / "b")
    finally:
        quiet_upstream(verbose=True)
    jit = [w for w in caught if "`torch.jit." in str(w.message)]
    assert bool(jit) is verbose, [str(w.message) for w in caught]
    notices = [r for r in caplog.records if "torch.jit (TorchScript)" in r.getMessage()]
    assert len(notices) <= 1  # once per process: an earlier test may have said it


@pytest.mark.parametrize("verbose", [False, True])
def test_the_profilers_own_marks_show_only_when_verbose(verbose: bool) -> None:
    """Kineto, the torch profiler's C++ library, writes "USDT: ... profiler_start" (and on a
    machine without a GPU, "gpuGetDeviceCount failed") to the process's stderr, and torch's C++
    log a warning for memory freed in a profile that was allocated before it: a fresh process,
    quieted before torch is imported, as a run is (both libraries read their level once)."""
    script = (
        "from hpml.console import quiet_upstream\n"
        f"quiet_upstream(verbose={verbose})\n"
        "import torch\n"
        "before = torch.ones(1000)\n"
        "cpu = [torch.profiler.ProfilerActivity.CPU]\n"
        "with torch.profiler.profile(activities=cpu, profile_memory=True):\n"
        "    del before\n"
        "    torch.ones(2) + 1\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in dict(QUIET_ENV)}
    done = fresh_python(script, env=env)
    assert done.returncode == 0, done.stderr
    assert ("profiler_start" in done.stderr) is verbose, done.stderr
    assert ("Memory block of unknown size" in done.stderr) is verbose, done.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_optunas_study_creation_line_shows_only_when_verbose(verbose, tmp_path) -> None:
    """hparams_search=...: the search's own summary names the study; Optuna's "A new study
    created in RDB" start-up line is dropped like Lightning's."""
    optuna = pytest.importorskip("optuna")
    with quieted_lines("optuna", verbose) as seen:
        optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert any(m.startswith("A new study created in RDB") for m in seen) is verbose, seen


@pytest.mark.parametrize(("name", "quiet"), QUIET_ENV)
def test_a_users_own_cpp_log_level_is_left_alone(name: str, quiet: str, monkeypatch) -> None:
    monkeypatch.delenv(name, raising=False)
    quiet_upstream(verbose=False)
    assert os.environ[name] == quiet  # hpml's
    quiet_upstream(verbose=True)
    assert name not in os.environ
    monkeypatch.setenv(name, quiet)  # the user's, the same value
    quiet_upstream(verbose=False)
    quiet_upstream(verbose=True)
    assert os.environ[name] == quiet


def test_the_job_logs_console_handler_is_bar_safe() -> None:
    """Hydra's job logging (conf/hydra/default.yaml) builds hpml's handler on stdout."""
    import logging.config

    from hydra import compose, initialize_config_dir

    from hpml.cli import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", return_hydra_config=True)
    console = dict(cfg.hydra.job_logging.handlers.console)
    assert console["stream"] == "ext://sys.stdout"
    console.pop("formatter")
    logger = logging.getLogger("tests.console.configured")
    logging.config.dictConfig(
        {
            "version": 1,
            "handlers": {"console": console},
            "loggers": {"tests.console.configured": {"handlers": ["console"]}},
            "disable_existing_loggers": False,
        }
    )
    try:
        assert [type(h) for h in logger.handlers] == [BarSafeHandler]
    finally:
        logger.handlers.clear()
