"""Fault injection for end-to-end tests: callbacks that fail or stall part-way through training;
callbacks that say (or do not say) how they run in a fused array; a reading of the CUDA
allocator's peak taken apart from hpml's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import lightning as L
import torch

from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.in_array import InArray
from hpml.callbacks.logging import log_metrics
from hpml.data.synthetic import SyntheticDataModule

ALLOCATOR_PEAK = "spy/train_max_memory_allocated_bytes"


class FailAtEpoch(HpmlCallback):
    """Raises at the start of epoch ``epoch``, after earlier epochs have logged their metrics; on
    a fused array, once, failing the whole array."""

    in_array: ClassVar[InArray] = InArray.ONCE

    def __init__(self, epoch: int = 1, rank: int | None = None) -> None:
        self.epoch, self.rank = epoch, rank  # rank: only that DDP rank fails (None: all)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch and self.rank in (None, trainer.global_rank):
            raise RuntimeError(f"injected failure at epoch {self.epoch}")


class Undeclared(L.Callback):
    """Does nothing and says nothing of fused arrays (no :class:`HpmlCallback`), as a user's own
    callback or a Lightning one: a ``fuse=array`` sweep with it runs one job at a time."""


class EachMember(HpmlCallback):
    """Declared per member: ``for_members(size)`` gives one per member, numbered, with this
    one's ``label``."""

    in_array: ClassVar[InArray] = InArray.PER_MEMBER

    def __init__(self, label: str = "", member: int | None = None) -> None:
        self.label, self.member = label, member

    def for_members(self, size: int) -> list[L.Callback]:
        return [EachMember(self.label, member) for member in range(size)]


class SlowBatches(L.Callback):
    """Sleeps ``seconds`` after each training batch from epoch ``from_epoch`` on.

    Slows training just enough for a test to signal the process mid-epoch; Lightning checks for
    SIGTERM after every batch, so the run stops within one batch of the signal.
    """

    def __init__(self, seconds: float = 0.3, from_epoch: int = 1) -> None:
        self.seconds, self.from_epoch = seconds, from_epoch

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        if trainer.current_epoch >= self.from_epoch:
            time.sleep(self.seconds)


class WaitAtEpoch(L.Callback):
    """Holds training at the start of epoch ``epoch`` until the test creates ``<gate_dir>/go``.

    Writes ``<gate_dir>/reached`` first: by then every earlier epoch's metrics have been sent, so
    a test can take the tracking server down at a known point and release the run into it.
    """

    def __init__(self, gate_dir: str, epoch: int = 1, timeout_s: float = 300.0) -> None:
        self.gate_dir, self.epoch, self.timeout_s = Path(gate_dir), epoch, timeout_s

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch != self.epoch:
            return
        self.gate_dir.mkdir(parents=True, exist_ok=True)
        (self.gate_dir / "reached").touch()
        deadline = time.monotonic() + self.timeout_s
        while not (self.gate_dir / "go").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {self.gate_dir / 'go'} within {self.timeout_s} s")
            time.sleep(0.05)


class AllocatorPeak(L.Callback):
    """Reads ``torch.cuda.max_memory_allocated`` itself after every training step of an epoch
    and logs the last reading as ``ALLOCATOR_PEAK`` at the epoch's end: the training peak as the
    allocator reports it, taken before validation inside the epoch resets the statistics. Added
    after hpml's callbacks (``+callbacks.<name>._target_=...``), it reads after their hooks."""

    def __init__(self) -> None:
        self.peak = 0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.peak = 0

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        self.peak = torch.cuda.max_memory_allocated(pl_module.device)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_metrics(trainer, {ALLOCATOR_PEAK: float(self.peak)})


def fresh_python(
    code: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python -c CODE`` in an interpreter of its own, text out and err captured: for the
    tests about what a process's start imports, prints or leaves set, which a fork of the warm
    interpreter (:mod:`tests.warm`) has already done."""
    # subprocess: start-up is what the callers test (imports, first lines, exit state)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def spinning(cpu: int | None = None) -> subprocess.Popen:
    """A child process spinning on one core (on ``cpu`` alone where given), returned once it
    runs: a load whose CPU time is this process's children's."""
    pin = f"import os; os.sched_setaffinity(0, {{{cpu}}})" if cpu is not None else "pass"
    spin = f"{pin}; print(flush=True)\nwhile True: pass"
    # subprocess: a second process is the load these tests measure
    child = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    child.stdout.readline()
    return child


@contextmanager
def cpu_neighbour() -> Iterator[int]:
    """A CPU-burning process beside this one, not its child (a shell starts it and exits at
    once), as another user's job is; killed on leaving. Yields its pid."""
    command = f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"
    # subprocess: a process that is not this one's child is what the callers need
    started = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    pid = int(started.stdout)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)


class SigtermOnPrepare(SyntheticDataModule):
    """Synthetic data whose ``prepare_data`` (where a real dataset downloads) is stopped by a
    SIGTERM: the job is stopped after its parts were judged and before any run opened."""

    def prepare_data(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in here
