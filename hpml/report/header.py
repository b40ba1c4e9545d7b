"""A report's header, read back from its runs' tags (:mod:`hpml.tracking.tags`): what ran, from
which command and commit, on which machine and store, under what load, when."""

from __future__ import annotations

import contextlib
import statistics
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from hpml import names
from hpml.names import OTHER_CPU
from hpml.report.comparisons import noisy
from hpml.report.environment import STORE, env_value, is_env, summary
from hpml.report.machine import header_line
from hpml.report.table import short_name, value

if TYPE_CHECKING:
    from mlflow.entities import Run

    from hpml.report.machine import Slowdown


def _one(values: Sequence[str]) -> str:
    """Values the runs share as one; differing ones listed, said to differ."""
    found = list(dict.fromkeys(v for v in values if v))
    if len(found) <= 1:
        return found[0] if found else ""
    return f"{'; '.join(found)} (differs between runs)"


def _tag(runs: Sequence[Run], tag: str) -> list[str]:
    return [run.data.tags.get(tag, "") for run in runs]


def _when(runs: Sequence[Run]) -> str:
    starts = [r.info.start_time for r in runs if r.info.start_time]
    ends = [r.info.end_time or r.info.start_time for r in runs if r.info.start_time]
    if not starts:
        return ""
    first = datetime.fromtimestamp(min(starts) / 1000, UTC)
    last = datetime.fromtimestamp(max(ends) / 1000, UTC)
    minutes = (last - first).total_seconds() / 60
    to = last.strftime("%H:%M" if last.date() == first.date() else "%Y-%m-%d %H:%M")
    return f"{first:%Y-%m-%d %H:%M} to {to} UTC ({minutes:.0f} min)"


def _load(runs: Sequence[Run]) -> str:
    """The load average at each run's start, other processes' CPU share during timed work and
    the runs tagged noisy."""
    parts, ones = [], []
    for text in _tag(runs, names.LOAD_TAG):
        with contextlib.suppress(IndexError, ValueError):
            ones.append(float(text.split()[0]))
    cores = _one(_tag(runs, names.CPU_COUNT_TAG))
    if ones:
        per = f" on {cores} logical CPUs" if cores else ""
        parts.append(
            f"1-min load average at run start {min(ones):.2f} to {max(ones):.2f} "
            f"(median {statistics.median(ones):.2f}, {len(ones)} runs){per}"
        )
    other = [v for r in runs if (v := r.data.metrics.get(OTHER_CPU)) is not None]
    if other:
        parts.append(
            f"other processes' CPU during timed work: median {statistics.median(other):.0f} %, "
            f"at most {max(other):.0f} %"
        )
    if any(names.NOISY_TAG in r.data.tags for r in runs):
        loud = [r for r in runs if noisy(r)]
        reasons = [r for r in _tag(loud, names.NOISY_REASON_TAG) if r]
        example = (
            f", e.g. {reasons[0]}; each run's reason in its hpml.noisy.reason tag"
            if reasons
            else ""
        )
        parts.append(f"{len(loud)} of {len(runs)} runs tagged noisy{example}")
    return "; ".join(parts)


def header(
    runs: Sequence[Run],
    parent: Run | None,
    experiment: str,
    keys: Sequence[str],
    slow: dict[str, Slowdown] | None = None,
) -> list[tuple[str, str]]:
    """The page's header as ``(field, text)`` pairs. A field the runs did not record is left
    out; one they share is said once; one that differs lists each value.

    Args:
        parent: their sweep's parent run, None for runs chosen one by one.
        experiment: the MLflow experiment(s) they belong to, by name.
        keys: the keys that differ between them (swept config keys and environment keys).
        slow: each judged run's canary slowdown, by run id (:mod:`hpml.report.machine`).
    """
    swept = "; ".join(
        f"{k} = {', '.join(dict.fromkeys(value(r, k) for r in runs))}"
        for k in keys
        if not is_env(k)
    )
    own = parent.data.tags.get(names.SWEEP_COMMAND_TAG) if parent is not None else None
    sweep = _one(_tag(runs, names.SWEEP_COMMAND_TAG))
    command = own or sweep or _one(_tag(runs, names.COMMAND_TAG))
    commits = [
        f"{c} (uncommitted changes)" if d == "True" else c
        for c, d in zip(_tag(runs, names.COMMIT_TAG), _tag(runs, names.DIRTY_TAG), strict=True)
    ]
    devices = _tag(runs, names.DEVICE_TAG)
    gpus = [d.removeprefix("cuda: ") for d in devices if d.startswith("cuda")]
    models = _tag(runs, names.CPU_MODEL_TAG)
    cpus = (
        models if any(models) else [d.removeprefix("cpu: ") for d in devices if d.startswith("cpu")]
    )
    threads = _one(_tag(runs, names.CPU_THREADS_TAG))
    cores = _one(_tag(runs, names.CPU_COUNT_TAG))
    cpu = _one(cpus)
    if cpu and cores:
        cpu += f", {cores} logical CPUs"
    if cpu and threads:
        cpu += f", torch threads: {threads}"
    torch_version = _one(_tag(runs, names.TORCH_TAG))
    cuda = _one([c for c in _tag(runs, names.CUDA_TAG) if c != "None"])
    if torch_version and cuda:
        torch_version += f" (CUDA {cuda})"
    fields = [
        ("experiment", experiment),
        ("swept", swept or "nothing (runs chosen one by one)" if parent is None else swept),
        ("environment differs", summary(runs)),
        ("command", command),
        ("git commit", _one(commits)),
        ("host", _one(_tag(runs, names.HOST_TAG))),
        ("OS", _one(_tag(runs, names.OS_TAG))),
        ("CPU", cpu),
        ("GPU", _one(gpus)),
        ("torch", torch_version),
        ("store", _stores(runs)),
        ("load", _load(runs)),
        ("machine", header_line({r.info.run_id: short_name(r) for r in runs}, slow or {})),
        ("date", _when(runs)),
    ]
    return [(name, text) for name, text in fields if text]


def _stores(runs: Sequence[Run]) -> str:
    """``sqlite:///a.db (6 runs); sqlite:///b.db (6 runs)``, where the runs came from several."""
    counts = Counter(store for run in runs if (store := env_value(run, STORE)))
    if len(counts) < 2:
        return ""
    return "; ".join(f"{store} ({n} runs)" for store, n in counts.items())
