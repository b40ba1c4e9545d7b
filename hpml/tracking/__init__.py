"""MLflow run lifecycle: hpml starts and ends every run itself, Lightning only logs into it."""

from hpml.tracking.run import MlflowTracker, TrackedRun

__all__ = ["MlflowTracker", "TrackedRun"]
