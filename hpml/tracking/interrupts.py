"""Whether a job is ending by a stop signal (Ctrl-C, SIGTERM), so its run ends KILLED, not FAILED.

A leaf both :mod:`hpml.tracking.stop` (which registers jobs in :data:`active`) and the run import.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.utilities.exceptions import SIGTERMException

active: list[Any] = []  # the StopOnSignals of the jobs in progress in this process (one, or none)


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C or SIGTERM: Lightning turns KeyboardInterrupt into SystemExit(1), keeping it as
    the context, and a signal into SIGTERMException at the next batch (hpml.tracking.stop). Once
    the job in progress got a stop signal, whatever it raises is that stop's doing (SLURM signals
    DataLoader workers too, and their death raises a RuntimeError)."""
    return (
        isinstance(exc, KeyboardInterrupt | SIGTERMException)
        or isinstance(exc.__context__, KeyboardInterrupt)
        or any(job.received is not None for job in active)
    )
