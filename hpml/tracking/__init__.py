"""MLflow run lifecycle: hpml starts and ends every run itself, Lightning only logs into it."""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {"MlflowTracker": "hpml.tracking.run", "TrackedRun": "hpml.tracking.tracked"}
__all__ = list(_MODULES)


def __getattr__(name: str) -> Any:
    """Load ``run`` (and with it Lightning and torch) on first use, not on ``import``: the store's
    preflight (``hpml.tracking.remote``) answers in a second, before those seconds of imports."""
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
