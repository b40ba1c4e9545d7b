"""Shared fixtures: one MLflow SQLite store made per session and copied per test, CLI runners."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig

from tests import hydra_cache

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"

pytest_plugins = ["tests.budget"]  # CPU seconds per test file, against the areas' budgets


def options(group: str) -> list[str]:
    """The options of config group ``group``, read from ``conf/`` so tests follow new files."""
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


# Small, quick runs: four training batches and two of each other split, each of 16 samples (the
# default VGG11 costs per sample: half the batch is half the run), no progress bar in captured
# output, the canary timed once at each end (its own tests time its repeats).
QUICK_SAMPLES, QUICK_BATCH = 64, 16  # training samples, batch size
QUICK = [
    "trainer.max_epochs=1",
    f"data.train_samples={QUICK_SAMPLES}",
    f"data.val_samples={QUICK_SAMPLES // 2}",
    f"data.test_samples={QUICK_SAMPLES // 2}",
    f"data.batch_size={QUICK_BATCH}",
    "trainer.enable_progress_bar=false",
    "callbacks.perf.warmup_steps=1",
    "logger.system_metrics_interval_s=0.5",
    "callbacks.canary.repeats=1",
    "callbacks.canary.warmup=0",
]


# glibc malloc settings for the workers and every process below them: freed memory stays in
# the heap for the next tensor (no trim, a fixed 32 MiB mmap threshold, sbrk in 256 MiB
# steps), where by default each training step's freed activations and gradients went back to
# the kernel and were faulted in again, all of it system time (docs/testing.md)
KEPT_HEAP = {
    "MALLOC_TRIM_THRESHOLD_": str(4 << 30),
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TOP_PAD_": str(256 << 20),
}


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test`` runs one worker per core) each worker, and every run
    it starts, uses one torch thread: workers of one thread each share the cores, where several
    threads each would fight over them. Set here, before any test module imports torch. The
    controller sets ``KEPT_HEAP`` before it starts the workers (glibc reads it at a process's
    start). A worker keeps Hydra's loaded configs across composes (``tests/hydra_cache.py``)."""
    worker = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    if worker or not getattr(config.option, "numprocesses", None):  # a process that composes
        hydra_cache.install()
    if worker:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    else:  # the controller, before it starts the workers: they and their children inherit
        for name, value in KEPT_HEAP.items():
            os.environ.setdefault(name, value)


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session) -> Iterator[None]:
    """xdist's controller imports the module of each warning a worker reports, to show it; torch
    imported that way mid-run, beside the workers' traffic, once failed half-way ("partially
    initialized module 'torch'") and took the session down. So the controller imports it before
    its loop reads the workers' reports, once it has started them: the import overlaps theirs."""
    yield
    config = session.config
    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "numprocesses", None):
        import lightning.pytorch  # noqa: F401


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collecting imported (torch, Lightning, MLflow, hpml, the test modules) lives as long
    as the worker: frozen out of the garbage collector, so that each full collection during the
    tests walks only what the tests made, as ``python -m hpml.train`` does once its job starts
    (:mod:`hpml.garbage`)."""
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process is about to exit: spare it the interpreter's last garbage collection, a walk
    over everything the session made (:mod:`hpml.garbage`)."""
    gc.freeze()


NO_CUDA = "needs a CUDA device: torch.cuda.is_available() is False"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files with the most ``slow`` (end-to-end) tests first, each file's tests in their
    order: ``make test`` hands whole files to its workers, the next to the first one free
    (``--dist loadfile``), so none of the long ones starts last and holds the suite's end, and
    a module's fixtures are made once.

    Tests marked ``gpu`` are skipped, saying why, where torch sees no CUDA device: the one
    place that decides it, so a GPU test needs only ``@pytest.mark.gpu``. ``pytest -m gpu``
    runs them on a GPU host; ``make test`` collects them and skips them on a CPU one."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: -slow[item.path])  # stable: a file's tests stay together
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu:
        return
    import torch

    if torch.cuda.is_available():
        return
    for item in gpu:
        item.add_marker(pytest.mark.skip(reason=NO_CUDA))


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """Folder ``name``, filled by ``build(folder)`` once for the whole session: under
    pytest-xdist the first worker to ask builds it while the others wait, then all share it
    (pytest-xdist's recipe for a session fixture that runs once). A build that raised is
    removed, so the next worker to ask tries again."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    from filelock import FileLock

    folder = tmp_path_factory.getbasetemp().parent / name  # the session's, above each worker's
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            (folder / ".built").touch()
    return folder


def probe_vector_isas(cache: Path) -> None:
    """Inductor's probe of the CPU's vector instruction sets, run in this process against the
    cache ``cache``: the first time, a C++ build of a test program per instruction set (seconds
    each) into it; after that, those builds read back. The answer is kept for the process, so
    its compiles skip the probe, whatever cache they then use."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    try:
        valid_vec_isa_list()
    finally:
        if previous is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One inductor cache for the session's compile tests (``compile.cache_dir``), shared by
    the workers: a graph one test compiled is a cache hit for the next, where per-run caches
    compiled cold every time. It holds the instruction-set probe's builds, made once for the
    session (:func:`probe_vector_isas`), so neither this worker nor a CLI run given this cache
    builds them again."""
    folder = built_once(tmp_path_factory, "inductor_cache", probe_vector_isas)
    probe_vector_isas(folder)
    return folder


@pytest.fixture
def alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The machine to this test among those that ask for it: a test that burns CPU on purpose
    and one whose verdict needs a quiet machine each take this lock, so that under pytest-xdist
    neither runs while the other does on another worker."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    folder = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with FileLock(f"{folder / 'alone'}.lock"):
        yield


@pytest.fixture(scope="session")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An initialised MLflow SQLite store: creating the schema is the slow part, done once."""

    def create(folder: Path) -> None:
        from mlflow import MlflowClient

        MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").search_experiments()

    return built_once(tmp_path_factory, "store", create) / "mlflow.db"


@pytest.fixture(scope="session", autouse=True)
def peak_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One measured-peak cache for the session's workers: the GEMM micro-benchmark runs once,
    not per run."""
    path = built_once(tmp_path_factory, "peaks", lambda folder: None)
    previous = os.environ.get("HPML_PEAK_CACHE")
    os.environ["HPML_PEAK_CACHE"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("HPML_PEAK_CACHE", None)
    else:
        os.environ["HPML_PEAK_CACHE"] = previous


@pytest.fixture
def root(tmp_path: Path, store_template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project root (HPML_ROOT) with its own copy of the store; MLFLOW_TRACKING_URI unset."""
    shutil.copy(store_template, tmp_path / "mlflow.db")
    monkeypatch.setenv("HPML_ROOT", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


@pytest.fixture
def client(root: Path):
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{root}/mlflow.db")


def pythonpath(*first: str) -> str:
    """``first``, then this process's own ``PYTHONPATH`` (where a machine without hpml's
    dependencies has them, e.g. a GPU kit): for the processes the tests start."""
    return os.pathsep.join([*first, *filter(None, [os.environ.get("PYTHONPATH")])])


def cli_env(root: Path) -> dict[str, str]:
    """The environment of a ``python -m hpml.train`` the tests start: this one, with the project
    root ``root`` (HPML_ROOT), this checkout importable (ahead of this process's ``PYTHONPATH``),
    and no MLFLOW_TRACKING_URI."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return env | {
        "HPML_ROOT": str(root),
        "PYTHONPATH": pythonpath(str(REPO)),
        "PYTHONUNBUFFERED": "1",
    }


def run_cli(
    args: list[str],
    root: Path,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``python -m hpml.train ARGS`` as a user runs it, against the project root ``root``;
    ``env`` adds to :func:`cli_env`. The call is forked from a warm interpreter
    (:mod:`tests.warm`: the same process but for the imports of torch and friends; calls made
    at once run at once)."""
    return run_module("hpml.train", args, root, timeout, env)


def run_module(
    module: str,
    args: list[str],
    root: Path,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` for the project root ``root`` (HPML_ROOT), in ``cwd`` (``root``
    unless given), as :func:`run_cli` runs hpml.train."""
    from tests.warm import WARM

    full_env = cli_env(root) | (env or {})
    with tempfile.TemporaryDirectory(prefix="hpml-cli-") as tmp:
        return WARM.run(module, args, cwd or root, full_env, timeout, Path(tmp))


def start_cli(args: list[str], root: Path):
    """``python -m hpml.train ARGS`` in the background, as :func:`run_cli` runs it: used as a
    ``subprocess.Popen`` with text pipes (``pid`` leads its own process group)."""
    from tests.warm import WARM

    tmp = Path(tempfile.mkdtemp(prefix="hpml-cli-", dir=root.parent))
    return WARM.popen("hpml.train", args, root, cli_env(root), tmp)


def stderr_lines(result: subprocess.CompletedProcess, prefix: str = "hpml:") -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith(prefix)]


@pytest.fixture
def composed(root: Path) -> Iterator:
    """Compose ``conf/train.yaml`` in-process as ``@hydra.main`` would, for fast in-process runs."""
    from hpml.train import compose_job

    yield lambda overrides: compose_job(overrides, root / "outputs" / "job")
    HydraConfig.instance().cfg = None


@pytest.fixture
def after_mlflow_pytorch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's rank-zero lines going through the logger ``import mlflow.pytorch`` leaves
    them in: the standalone ``pytorch_lightning``'s, which renames it at its first import in a
    process. An earlier test of the worker may have made that import (and put the logger
    back), so the rename is replayed by reloading the module that makes it; the logger is put
    back after the test."""
    import importlib

    from lightning.fabric.utilities.rank_zero import rank_zero_module

    monkeypatch.setattr(rank_zero_module, "log", rank_zero_module.log)
    import mlflow.pytorch  # noqa: F401
    import pytorch_lightning.utilities.rank_zero

    importlib.reload(pytorch_lightning.utilities.rank_zero)
    assert rank_zero_module.log.name == "pytorch_lightning.utilities.rank_zero"
