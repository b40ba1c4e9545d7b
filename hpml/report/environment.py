"""Where a run ran, as the report reads it: the environment keys (``env.device``, ...) and the
store a run was read from. Runs in another environment are never repeats (:data:`SPLITS`); the
host and the store are shown but split nothing (:data:`SHOWN`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpml import names
from hpml.names import STORE_TAG

if TYPE_CHECKING:
    from mlflow.entities import Run

# the report's name of each environment key -> the tag a run carries (hpml.tracking.tags)
TAGS = {
    "env.device": names.DEVICE_TAG,
    "env.cpu": names.CPU_MODEL_TAG,
    "env.host": names.HOST_TAG,
    "env.cpu_threads": names.CPU_THREADS_TAG,
    "env.torch": names.TORCH_TAG,
    "env.cuda": names.CUDA_TAG,
    "env.commit": names.COMMIT_TAG,
}
COMMIT_CHARS = 12  # a commit as the report names it, as `git log --abbrev=12` would
STORE = "store"  # the report's key of the store a run was read from
SPLITS = tuple(k for k in TAGS if k != "env.host")  # keys that tell repeats apart
SHOWN = ("env.host", STORE)  # shown where they differ, splitting nothing unless compared by


def is_env(key: str) -> bool:
    """Whether ``key`` names where a run ran rather than its config."""
    return key in TAGS or key == STORE


def env_value(run: Run, key: str) -> str:
    """A run's value of environment key ``key`` (``""`` where it did not record it), a commit
    shortened to :data:`COMMIT_CHARS`."""
    text = run.data.tags.get(STORE_TAG if key == STORE else TAGS[key], "")
    return text[:COMMIT_CHARS] if key == "env.commit" else text


def entries(run: Run) -> set[tuple[str, str]]:
    """``(key, value)`` of each environment key that splits repeats, as the run recorded it."""
    return {(key, text) for key in SPLITS if (text := env_value(run, key))}


def differing(runs: Sequence[Run]) -> list[str]:
    """The environment keys (and the store) whose values differ between ``runs``."""
    return [k for k in [*TAGS, STORE] if len({env_value(run, k) for run in runs}) > 1]


def summary(runs: Sequence[Run]) -> str:
    """``env.cpu_threads = 1, 2; env.commit = <first>, <second>``: each differing environment
    key but the store, with its values."""
    parts = []
    for key in [k for k in differing(runs) if k != STORE]:
        values = dict.fromkeys(env_value(run, key) or "(none)" for run in runs)
        parts.append(f"{key} = {', '.join(values)}")
    return "; ".join(parts)
