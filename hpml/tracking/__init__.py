"""MLflow run lifecycle: hpml starts and ends every run itself, Lightning only logs into it."""

from __future__ import annotations

from typing import Any

__all__ = ["MlflowTracker", "TrackedRun"]


def __getattr__(name: str) -> Any:
    """Load ``run`` (and with it Lightning and torch) on first use, not on ``import``: the store's
    preflight (``hpml.tracking.remote``) answers in a second, before those seconds of imports."""
    if name == "MlflowTracker":
        from hpml.tracking.run import MlflowTracker

        return MlflowTracker
    if name == "TrackedRun":
        from hpml.tracking.tracked import TrackedRun

        return TrackedRun
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
