"""What a run prints: upstream noise dropped where it is raised, a progress bar only on a terminal.

Each known upstream warning or log record is dropped by a filter naming its exact message, so
any other still shows; ``hpml.verbose=true`` keeps them all. An upstream deprecation hpml still
uses is said once, by :func:`notice_once`.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, TextIO

# (category, regex matched at the start of the message, regex of the raising module or "" for
# any); subclasses match too, so UserWarning covers Lightning's PossibleUserWarning.
NOISY_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    # lightning 2.6 builds torch's deprecated LeafSpec when it moves every batch
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", ""),
    # hpml logs metrics per epoch, never per step: the logging interval does not matter
    (
        UserWarning,
        r"The number of training batches \(\d+\) is smaller than the logging interval",
        "",
    ),
    # torch.ao's own deprecation notes, per observer and per quantised layer: hpml already says
    # once that torch.ao is deprecated upstream (hpml.optimize.quant)
    (UserWarning, r"Please use quant_min and quant_max to specify the range for observers", ""),
    (
        UserWarning,
        r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other quantized",
        "",
    ),
    # inductor's int8 lowering (quant=static_int8 through PT2E) copies its own zero points
    (UserWarning, r"To copy construct from a tensor", r"torch\._inductor\.mkldnn_lowerings"),
    # torch.jit's own deprecation notes, one per call: compile=torchscript says it once
    (FutureWarning, r"`torch\.jit\.\w+` is deprecated", r"torch\.jit"),
)
# (variable, value): C++ libraries' log levels, read from the environment once, set where the
# user has not. The torch profiler's library (kineto) writes its start and stop marks and, on a
# machine without a GPU, a failed device count, unless its level is above them all; torch's own
# (c10, read when torch is imported) writes warnings no Python filter sees, such as the
# profiler's "Memory block of unknown size was allocated before the profiling started"
QUIET_ENV: tuple[tuple[str, str], ...] = (
    ("KINETO_LOG_LEVEL", "6"),
    ("TORCH_CPP_LOG_LEVEL", "ERROR"),
)
# (logger, message start): log records dropped by a filter on the logger that emits them
NOISY_RECORDS: tuple[tuple[str, str], ...] = (
    ("lightning.pytorch.utilities.rank_zero", "💡 Tip: For seamless cloud logging"),
    # the start-up lines of every fit: hpml tags the device a run used (hpml.device)
    ("lightning.pytorch.utilities.rank_zero", "GPU available: "),
    ("lightning.pytorch.utilities.rank_zero", "TPU available: "),
    ("lightning.pytorch.accelerators.cuda", "LOCAL_RANK: "),
    # the epoch lines already say how many epochs ran, or that max_steps was reached
    # (hpml.callbacks.epoch_summary)
    ("lightning.pytorch.utilities.rank_zero", "`Trainer.fit` stopped: `max_"),
    # `trainer.limit_val_batches=1` and the like: Lightning says an int 1 is one batch, where
    # the float 1.0 is all of them (hpml's config records which was given)
    ("lightning.pytorch.utilities.rank_zero", "`Trainer(limit_"),
    # hparams_search=...: Optuna's study in hpml's store (the search says its best at the end)
    ("optuna.storages._rdb.storage", "A new study created in RDB"),
    # a fresh SQLite store's schema, made once by hpml.tracking.store
    ("mlflow.store.db.utils", "Creating initial MLflow database tables"),
    ("mlflow.store.db.utils", "Updating database tables"),
    # without GitPython, three per run: hpml records the commit itself (hpml.git_commit)
    ("mlflow.utils.git_utils", "Failed to import Git"),
    # torchao registers an Enum with torch's pytree on import (PT2E): torch's own to settle
    ("torch.utils._pytree", "%s is an Enum subclass and is now natively supported"),
    # Matplotlib's font cache, built once at its first import with a fresh MPLCONFIGDIR
    ("matplotlib.font_manager", "generated new fontManager"),
    # inductor looks for a CUDA toolkit when it compiles on CPU: nothing a CPU run lacks
    ("torch.utils.cpp_extension", "No CUDA runtime is found"),
)


def _loggers(name: str) -> list[logging.Logger]:
    """Logger ``name`` and, for one of Lightning's, the standalone package's of the same module:
    Lightning's rank-zero lines go through one logger, named by whichever of ``lightning.pytorch``
    and ``pytorch_lightning`` was imported last (``import mlflow.pytorch``, as a run with
    ``logger.log_model=true`` does, imports the latter)."""
    names = dict.fromkeys([name, name.replace("lightning.pytorch.", "pytorch_lightning.", 1)])
    return [logging.getLogger(alias) for alias in names]


def _kept(start: str, record: logging.LogRecord) -> bool:
    """A record filter: False for a record whose message starts with ``start``."""
    return not str(record.msg).startswith(start)


_installed_warnings: list[Any] = []
_installed_filters: list[tuple[logging.Logger, Callable[[logging.LogRecord], bool]]] = []
_notices: set[str] = set()
_env_set: set[str] = set()  # QUIET_ENV's variables hpml (not the user) set
log = logging.getLogger(__name__)


def notice_once(key: str, message: str) -> None:
    """Log ``message`` once per process (upstream deprecations: shown, not repeated per call)."""
    if key not in _notices:
        _notices.add(key)
        log.warning(message)


def quiet_upstream(verbose: bool = False) -> None:
    """Drop the known upstream noise unless ``verbose`` (drop nothing), replacing an earlier
    call's filters: a later ``hpml.verbose=true`` job of the same process shows everything
    again. Called before anything that can make the noise: a job's store, its trainer, a
    sweep's parent run. The C++ libraries read their levels once (kineto at the process's first
    profile, torch when imported): a user's own ``QUIET_ENV`` variables are left alone."""
    for name, quiet in QUIET_ENV:
        if verbose and name in _env_set:
            os.environ.pop(name, None)
            _env_set.discard(name)
        elif not verbose and name not in os.environ:
            os.environ[name] = quiet
            _env_set.add(name)
    for item in _installed_warnings:
        if item in warnings.filters:
            warnings.filters.remove(item)
    # forget "already shown" marks (the stdlib's own hook; absent elsewhere, nothing to forget)
    getattr(warnings, "_filters_mutated", lambda: None)()
    _installed_warnings.clear()
    for logger, record_filter in _installed_filters:
        logger.removeFilter(record_filter)
    _installed_filters.clear()
    if verbose:
        return
    for category, message, module in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
        _installed_warnings.append(warnings.filters[0])
    for name, start in NOISY_RECORDS:
        for logger in _loggers(name):
            record_filter = partial(_kept, start)
            logger.addFilter(record_filter)
            _installed_filters.append((logger, record_filter))


def compare_hint(uri: str, ui_path: str) -> str:
    """Where to look at a run or a sweep (``ui_path``: its page in MLflow's UI) in store ``uri``."""
    if uri.startswith(("http://", "https://")):  # a server: its own UI shows the run
        return f"compare runs at {uri.rstrip('/')}/{ui_path}"
    return (
        f"compare runs with `make ui` (or `mlflow ui --backend-store-uri {uri}`), "
        f"then open http://127.0.0.1:5000/{ui_path}"
    )


def progress_bar(setting: bool | None, stream: TextIO | None = None) -> bool:
    """``trainer.enable_progress_bar``: true or false as given; null (auto) on a terminal only."""
    if setting is not None:
        return bool(setting)
    stream = stream or sys.stdout  # where Lightning's TQDM bar writes
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


# hpml's loggers whose lines have a shape of their own: epoch lines, verdicts, and the fused
# launcher's job lines (as Hydra's launcher writes them)
OWN_SHAPE = ("hpml.callbacks.epoch_summary", "hpml.callbacks.measure", "hpml.fused.launch")


class BarSafeHandler(logging.StreamHandler):
    """The job log's console handler: a record logged while a tqdm bar (Lightning's) is drawn
    goes through ``tqdm.write``, which clears the bar, writes the line and draws the bar again.
    tqdm is looked up, never imported, so a job without a bar pays nothing. hpml's own lines
    start with ``hpml:``, but for those of :data:`OWN_SHAPE`; upstream lines are left as
    they are."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if not record.name.startswith("hpml.") or record.name in OWN_SHAPE:
            return line
        return line if line.startswith("hpml:") else f"hpml: {line}"

    def emit(self, record: logging.LogRecord) -> None:
        tqdm_module = sys.modules.get("tqdm.std")
        bars = getattr(getattr(tqdm_module, "tqdm", None), "_instances", None)
        if not bars:
            super().emit(record)
            return
        try:
            tqdm_module.tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
