"""MLflow run lifecycle: hpml starts and ends every run itself, Lightning only logs into it."""

from __future__ import annotations

from typing import Any

__all__ = ["MlflowTracker", "TrackedRun"]


def __getattr__(name: str) -> Any:
    """Load ``run`` (and with it Lightning and torch) on first use, not on ``import``: the store's
    preflight (``hpml.tracking.remote``) answers in a second, before those seconds of imports."""
    if name in __all__:
        from hpml.tracking import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
