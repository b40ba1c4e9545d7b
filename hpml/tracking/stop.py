"""SIGTERM (SLURM preemption, ``kill``) and SIGINT (Ctrl-C) end a run KILLED, never RUNNING.

During ``fit`` and ``test`` both go through Lightning's SIGTERM handler, so the current batch,
checkpoint and epoch metrics finish first; outside them the stop is raised at once. The command
says how to resume and exits 128 + the signal number; in a sweep no further job starts.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from lightning.pytorch.utilities.exceptions import SIGTERMException
from mlflow import MlflowClient

from hpml.hydra_job import HydraJob
from hpml.tracking.interrupts import active, interrupted
from hpml.tracking.jobs import this_process
from hpml.tracking.redact import redact_text
from hpml.tracking.run import sweep_record


class Terminated(SIGTERMException):
    """SIGTERM received outside Lightning's loops."""


class StopOnSignals:
    """Context of one job: installs the handlers, and turns a stop into one line and an exit code.

    ``job`` places it in its sweep, whose parent run a stop ends too; ``run_id``, ``trainer`` and
    ``resumed_from`` are filled in as the job gets them.
    """

    def __init__(self, job: HydraJob | None) -> None:
        self.job = job
        self.received: signal.Signals | None = None
        self.run_id: str | None = None
        self.trainer: Any = None
        self.resumed_from: str | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self._handler = self._handle  # one bound method, so the identity test below holds

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return  # already stopping: let the run's record complete
        self.received = signal.Signals(signum)
        # SLURM and Ctrl-C signal DataLoader workers too; torch's SIGCHLD handler would raise
        # their death anywhere, even between an epoch's checkpoint and its metrics being logged.
        # Without it a dead worker shows only when the next batch is fetched.
        self._previous.setdefault(signal.SIGCHLD, signal.signal(signal.SIGCHLD, signal.SIG_DFL))
        lightning = signal.getsignal(signal.SIGTERM)
        if lightning is not self._handler and callable(lightning):  # inside fit or test
            if self.received == signal.SIGINT:  # stop as on SIGTERM, after the batch
                lightning(signal.SIGTERM, frame)
            return
        self.check()

    def check(self) -> None:
        """Raise now if a signal came while Lightning's handler held it but its loop had ended."""
        if self.received is not None:
            raise KeyboardInterrupt if self.received == signal.SIGINT else Terminated()

    def __enter__(self) -> StopOnSignals:
        active.append(self)
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        active.remove(self)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if exc is None or not (interrupted(exc) or self.received is not None):
            return
        received = self.received or (
            signal.SIGTERM if isinstance(exc, SIGTERMException) else signal.SIGINT
        )
        print(self.message(received.name), file=sys.stderr)
        _end_sweep(self.job)
        raise SystemExit(128 + received.value) from None

    def message(self, name: str) -> str:
        if self.run_id is None:
            return f"hpml: stopped by {name} before the MLflow run started"
        stopped = f"hpml: run {self.run_id} stopped by {name} (KILLED in MLflow)"
        checkpoint = self.last_checkpoint()
        if checkpoint is None:
            return f"{stopped} before its first checkpoint: nothing to resume, run it again"
        return (
            f"{stopped}; continue it from its last checkpoint ({checkpoint}) with "
            f"`python -m hpml.train resume={self.run_id}`"
        )

    def last_checkpoint(self) -> str | None:
        callback = getattr(self.trainer, "checkpoint_callback", None)
        path = getattr(callback, "last_model_path", "")
        if path and Path(path).is_file():
            return path
        return self.resumed_from


def _end_sweep(job: HydraJob | None) -> None:
    """A stopped job of a sweep run in this very process stops the sweep, its parent run
    ending KILLED (Hydra's end-of-sweep callback does not run after a SystemExit); a job in a
    process of its own leaves the sweep to go on."""
    try:
        record = sweep_record(job)
        if record is not None and record.get("process") == this_process():
            MlflowClient(record["tracking_uri"]).set_terminated(record["run_id"], "KILLED")
            print(f"hpml: sweep {record['run_id']} stopped (KILLED in MLflow)", file=sys.stderr)
    except Exception as exc:  # the stop itself matters more than its record
        print(
            f"hpml: could not end the sweep's parent run: {redact_text(str(exc))}", file=sys.stderr
        )
