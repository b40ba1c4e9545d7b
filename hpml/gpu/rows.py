"""The GPU check's summary rows, read back from its MLflow store and its commands' output.

A part's rows say what ran and what it measured: every comparison with its interval and verdict,
as hpml logged them (``<name>_ci_low_x`` / ``_ci_high_x`` beside ``<name>_x``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpml.names import (
    BYTES,
    DATA_WAIT,
    HOST_ISSUE,
    J_PER_SAMPLE,
    MFU_MEASURED,
    MFU_PEAK_DTYPE_TAG,
    PCT,
    PEAK_MEMORY,
    SAMPLES_PER_S,
    STAGES,
    THROUGHPUT,
    VAL_ACC,
    bound_tag,
    metric,
    mfu_peak,
)

ENERGY = {stage: metric(stage, "energy", J_PER_SAMPLE) for stage in ("train", "test")}


@dataclass(frozen=True)
class Row:
    """One line of the summary: a CUDA path, whether it ran, and what it measured."""

    path: str
    ran: str  # yes | no | failed | partly
    measured: str


@dataclass
class Store:
    """The runs of the check's MLflow store by experiment name, the check's work folder, the
    parts' output, and the bench's results folder with the time the check started (results
    written before it are an earlier check's)."""

    runs: Mapping[str, Sequence[Any]]  # experiment -> mlflow Run objects (children and singles)
    work: str
    outputs: dict[str, str] = field(default_factory=dict)  # part -> its commands' output
    bench: str = ""
    since: float = 0.0  # seconds since the epoch

    def of(self, experiment: str) -> list[Any]:
        """The experiment's runs that trained: a sweep's children and single runs, not parents."""
        runs = self.runs.get(experiment, ())
        parents = {r.data.tags.get("mlflow.parentRunId") for r in runs}
        return [r for r in runs if r.info.run_id not in parents]


def ran(run: Any) -> str:
    """``yes`` for a finished run, ``cut`` for one stopped at its part's budget (KILLED),
    ``failed`` for the rest."""
    return {"FINISHED": "yes", "KILLED": "cut"}.get(run.info.status, "failed")


def mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:,.1f} MiB"


def tflops(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e12:,.1f} TFLOP/s"


def number(value: float | None, fmt: str = ",.1f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def comparisons(metrics: Mapping[str, float], tags: Mapping[str, str]) -> list[str]:
    """Every before/after a run logged, as ``name ratio [low, high] (n=.., verdict)``, with the
    devices it compared where they differ (``hpml.compare.<name>.devices``)."""
    found = []
    for key in sorted(metrics):
        match = re.fullmatch(r"(.+)_ci_low_x", key)
        if not match:
            continue
        name = match.group(1)
        ratio, low = metrics.get(f"{name}_x"), metrics[key]
        high, n = metrics.get(f"{name}_ci_high_x"), metrics.get(f"{name}_rounds_count")
        if ratio is None or high is None:
            continue
        verdict = (
            "within noise"
            if (n or 0) < 2 or low <= 1 <= high
            else ("faster" if low > 1 else "slower")
        )
        stage = name.split("/")[0]
        devices = tags.get(f"hpml.compare.{stage}.devices", "")
        where = f", {devices}" if devices else ""
        found.append(
            f"{name} {ratio:.2f}x [{low:.2f}, {high:.2f}] (n={n or 0:.0f}, {verdict}{where})"
        )
    return found


def default_rows(store: Store) -> list[Row]:
    rows = []
    runs = store.of("gpu_default")
    for run in sorted(runs, key=lambda r: r.data.params.get("trainer.precision", "")):
        m, p, t = run.data.metrics, run.data.params, run.data.tags
        precision = p.get("trainer.precision", "?")
        ok = ran(run)
        rows.append(
            Row(
                f"default run, {precision} ({t.get('hpml.device', '?')})",
                ok,
                f"train {number(m.get(THROUGHPUT))} samples/s "
                f"(IQR {number(m.get(metric('train', 'throughput_iqr', SAMPLES_PER_S)))}); "
                f"peak {mib(m.get(PEAK_MEMORY))} "
                f"({t.get('hpml.peak_memory_source', '?')}); "
                f"MFU {number(m.get(metric('train', 'mfu_table', PCT)), '.1f', '%')} of datasheet "
                f"({tflops(m.get(mfu_peak('table')))}), "
                f"{number(m.get(MFU_MEASURED), '.1f', '%')} of measured peak "
                f"({tflops(m.get(mfu_peak('measured')))}, taken in "
                f"{t.get(MFU_PEAK_DTYPE_TAG, '?')}); "
                f"val/acc {number(m.get(VAL_ACC), '.3f')}",
            )
        )
        rows.append(bound_row(run, f"data and bound, {precision}"))
        breakdown = ", ".join(
            f"{part} {mib(m.get(metric('memory', part, BYTES)))}"
            for part in ("weights", "gradients", "optimizer_state", "activations")
        )
        rows.append(
            Row(
                f"memory breakdown, {precision}",
                ok if metric("memory", "weights", BYTES) in m else "no",
                breakdown,
            )
        )
        rows.append(
            Row(
                f"energy, {precision}",
                "yes" if ENERGY["train"] in m else "no",
                f"train {number(m.get(ENERGY['train']), '.4f', ' J/sample')}, "
                f"test {number(m.get(ENERGY['test']), '.4f', ' J/sample')} "
                "(NVML board energy, idle included)",
            )
        )
    return rows or [Row("default run on trainer=gpu, bf16, fp16", "failed", "no run logged")]


def bound_row(run: Any, path: str) -> Row:
    """Where a run's samples lived, its data wait per stage (at most 5% is the goal on a GPU),
    and what bounded its training, with the evidence."""
    m, p, t = run.data.metrics, run.data.params, run.data.tags
    waits = ", ".join(
        f"{stage} {number(m.get(metric(stage, DATA_WAIT, PCT)), '.1f', '%')}" for stage in STAGES
    )
    issue = m.get(metric("train", HOST_ISSUE, PCT))
    return Row(
        path,
        ran(run),
        f"data.chosen.placement={p.get('data.chosen.placement', '?')}; data wait {waits}; "
        f"host issue {number(issue, '.0f', '%')}; train bound by {t.get(bound_tag('train'), '?')}"
        f" ({t.get(bound_tag('train', 'why'), 'no reason logged')})",
    )


def bound_rows(store: Store) -> list[Row]:
    """What bounded the default run through a loader, on the device, and VGG11-CIFAR at batch
    64 in bf16 (``host`` expected)."""
    rows = []
    for run in [*store.of("gpu_loader"), *store.of("gpu_bound")]:
        if "hpml.choice.advise_arm" in run.data.tags:
            continue  # the try's arms: in the advice lines below
        p = run.data.params
        rows.append(
            bound_row(
                run,
                f"bound: {p.get('trainer.precision', '?')}, batch {p.get('data.batch_size', '?')}, "
                f"data.placement={p.get('data.placement', '?')}",
            )
        )
    advice = [line for line in store.outputs.get("bound", "").splitlines() if "advise:" in line]
    rows.append(Row("advise --try on the loader run", "yes" if advice else "no", "; ".join(advice)))
    return rows


def nvtx_rows(store: Store) -> list[Row]:
    """The NVTX ranges Nsight Compute saw around the kernel it profiled (the lines of its
    ``NVTX Push/Pop Stack``: ``<0,hpml/forward>``) in a ``profile=nvtx`` run, and how that run
    ended."""
    ranges = re.findall(r"<\d+,(hpml/[a-z_]+)>", store.outputs.get("nvtx", ""))
    kernels = re.findall(r"==PROF== Profiling \"([^\"]+)\"", store.outputs.get("nvtx", ""))
    runs = store.of("gpu_nvtx")
    status = runs[0].info.status if runs else "not started"
    seen = f"{', '.join(sorted(set(ranges)))}{f' around {kernels[0]}' if kernels else ''}"
    done = "yes" if status == "FINISHED" else "partly"
    return [
        Row(
            "NVTX ranges (Nsight Compute, profile=nvtx)",
            done if ranges else "no",
            f"{seen if ranges else 'no hpml range seen (see logs)'}; the run {status}",
        )
    ]


def nvtx_torch_rows(store: Store) -> list[Row]:
    """A diagnosis: how a ``profile=torch`` run ended under Nsight Compute. CUPTI, through which
    torch.profiler traces CUDA, serves one tracer, and NVIDIA documents Nsight's tools as one;
    the run's end and CUPTI's own lines in its output say what happened on this machine."""
    runs = store.of("gpu_nvtx_torch")
    out = store.outputs.get("nvtx_torch", "")
    cupti = sorted(set(re.findall(r"^.*CUPTI.*$", out, re.M)))[:2]
    if not runs:
        return [Row("profile=torch under Nsight Compute", "no", "no run started (see logs)")]
    status = runs[0].info.status
    said = f"; CUPTI said: {' | '.join(line.strip()[:160] for line in cupti)}" if cupti else ""
    return [Row("profile=torch under Nsight Compute", "yes", f"the run {status}{said}")]


def pytest_rows(store: Store) -> list[Row]:
    out = store.outputs.get("pytest", "")
    # pytest -q ends with a bare "16 passed, 32 warnings in 50.02s"; without -q it is framed by =
    summary = re.findall(
        r"^=* ?(\d+ (?:passed|failed|skipped|errors?|deselected)\b.*?) ?=*$", out, re.M
    )
    ok = summary and not re.search(r"failed|error|skipped", summary[-1])  # none skip on a GPU
    return [
        Row("pytest -m gpu", "yes" if ok else "failed", summary[-1] if summary else "no summary")
    ]
