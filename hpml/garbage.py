"""Full garbage collections held back while a command starts, and spared as it exits.

Importing torch, Lightning and MLflow makes a great many objects that live as long as the
process. Each full collection, triggered as objects pile up, walks all of them again, and the
interpreter walks them once more as it exits: a large share of a short run's wall time
(docs/metrics.md, start-up). ``python -m hpml.train`` runs inside :func:`command`: no full
collection until its job starts (:func:`job_started`), which freezes what exists out of later
ones (:func:`gc.freeze`) and lets them run again. The report commands, which start no job and
end in seconds, hold them to the end. Young collections go on throughout, so
short-lived garbage is freed as usual. What the command made is frozen again as it ends: the
process is exiting, and its memory goes back with it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

NEVER = 2**31 - 1  # a full-collection threshold no count reaches
_held: list[tuple[int, int, int]] = []  # the thresholds a command holds back until its job starts


@contextmanager
def command() -> Iterator[None]:
    """Run a command's body with full collections held back until :func:`job_started`, or to
    its end for a command that starts no job; at its end, spare the exiting process the
    interpreter's last collection."""
    thresholds = gc.get_threshold()
    _held.append(thresholds)
    gc.set_threshold(thresholds[0], thresholds[1], NEVER)
    try:
        yield
    finally:
        if _held:
            gc.set_threshold(*_held.pop())
        gc.freeze()


def job_started() -> None:
    """A held command's job starts: freeze what exists out of later full collections, then let
    them run again. Anywhere else (a sweep's later jobs, a launcher's worker, a test calling
    ``train``) it changes nothing."""
    if _held:
        gc.freeze()
        gc.set_threshold(*_held.pop())
