"""The GPU check's summary rows, read back from its MLflow store and its commands' output.

A part's rows say what ran and what it measured: every comparison with its interval and verdict,
as hpml logged them (``<name>_ci_low_x`` / ``_ci_high_x`` beside ``<name>_x``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpml.names import (
    BYTES,
    FORWARD_ACHIEVED,
    INTENSITY,
    J_PER_SAMPLE,
    MFU_MEASURED,
    PCT,
    PEAK_BANDWIDTH,
    PEAK_MEMORY,
    RIDGE,
    SAMPLES_PER_S,
    THROUGHPUT,
    VAL_ACC,
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


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:,.1f} MiB"


def _tflops(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e12:,.1f} TFLOP/s"


def _num(value: float | None, fmt: str = ",.1f", unit: str = "") -> str:
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
                f"train {_num(m.get(THROUGHPUT))} samples/s "
                f"(IQR {_num(m.get(metric('train', 'throughput_iqr', SAMPLES_PER_S)))}); "
                f"peak {_mib(m.get(PEAK_MEMORY))} "
                f"({t.get('hpml.peak_memory_source', '?')}); "
                f"MFU {_num(m.get(metric('train', 'mfu_table', PCT)), '.1f', '%')} of datasheet "
                f"({_tflops(m.get(mfu_peak('table')))}), "
                f"{_num(m.get(MFU_MEASURED), '.1f', '%')} of measured peak "
                f"({_tflops(m.get(mfu_peak('measured')))}); "
                f"val/acc {_num(m.get(VAL_ACC), '.3f')}",
            )
        )
        breakdown = ", ".join(
            f"{part} {_mib(m.get(metric('memory', part, BYTES)))}"
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
                f"train {_num(m.get(ENERGY['train']), '.4f', ' J/sample')}, "
                f"test {_num(m.get(ENERGY['test']), '.4f', ' J/sample')} "
                "(NVML board energy, idle included)",
            )
        )
    return rows or [Row("default run on trainer=gpu, bf16, fp16", "failed", "no run logged")]


def _shares(runs: Iterable[Any], category: str) -> dict[tuple[str, int], float]:
    return {
        (
            r.data.params.get("model.name", r.data.tags.get("hpml.choice.model", "?")),
            int(r.data.params.get("data.batch_size", 0)),
        ): r.data.metrics[metric("profile", category, PCT)]
        for r in runs
        if metric("profile", category, PCT) in r.data.metrics
    }


def study2_rows(store: Store) -> list[Row]:
    runs = store.of("gpu_study2")
    rows = []
    copy, kernel = _shares(runs, "memcpy"), _shares(runs, "kernel")
    for model in sorted({m for m, _ in kernel}):
        sizes = sorted(b for m, b in kernel if m == model)
        text = ", ".join(
            f"b{b}: kernel {kernel[(model, b)]:.1f}% memcpy {copy.get((model, b), 0):.1f}%"
            for b in sizes
        )
        falls = len(sizes) > 1 and copy.get((model, sizes[-1]), 0) < copy.get((model, sizes[0]), 0)
        rows.append(
            Row(
                f"study 2 execution summary, {model}",
                "yes",
                f"{text}; memcpy share {'falls' if falls else 'does not fall'} "
                f"from b{sizes[0]} to b{sizes[-1]}",
            )
        )
    if not rows:
        rows.append(Row("study 2 execution summary", "failed", "no profiled run logged"))
    failed = sum(r.info.status != "FINISHED" for r in runs)
    report = store.outputs.get("study2", "")
    rows.append(
        Row(
            "study 2 report (time-share plot)",
            "yes" if "report.html" in report else "no",
            f"{len(runs)} runs, {failed} failed",
        )
    )
    return rows


def roofline_rows(store: Store) -> list[Row]:
    rows = []
    for run in store.of("gpu_study5"):
        names = (INTENSITY, FORWARD_ACHIEVED, RIDGE, PEAK_BANDWIDTH)
        if any(name not in run.data.metrics for name in names):
            rows.append(Row(f"study 5 roofline, {run.info.run_name}", "failed", "no roofline"))
            continue
        intensity, achieved, ridge, bandwidth = (run.data.metrics[name] for name in names)
        roof = min(ridge, intensity) * bandwidth  # the precision's compute roof, or the slope
        where = "above the roof" if achieved > roof * (1 + 1e-9) else "under the roof"
        rows.append(
            Row(
                f"study 5 roofline, {run.data.tags.get('hpml.choice.model', '?')}",
                "yes",
                f"{intensity:.1f} FLOP/B at {achieved / 1e12:.2f} TFLOP/s, roof {roof / 1e12:.2f} "
                f"TFLOP/s ({where})",
            )
        )
    drawn = "roofline.png" in store.outputs.get("study5", "")
    rows.append(Row("study 5 roofline plot", "yes" if drawn else "no", "one roofline, three VGGs"))
    return rows


def fused_rows(store: Store) -> list[Row]:
    runs = store.of("gpu_fused")
    fused = [r for r in runs if r.data.tags.get("hpml.fused") == "true"]
    size = fused[0].data.tags.get("hpml.fused.array_size", "?") if fused else "-"
    ratios = re.compile(r"N=(8|16) samples/s").search
    return [
        Row(
            "fuse=array on CUDA (no force)",
            "yes" if fused else "no",
            f"{len(fused)} of {len(runs)} runs trained fused, array size {size}",
        ),
        bench_row(store, "fuse", "fused vs serial (bench fuse)", ratios),
    ]


def optimise_rows(store: Store) -> list[Row]:
    rows = []
    for run in store.of("gpu_optimise"):
        t = run.data.tags
        choice = next(
            (
                f"{g}={t[f'hpml.choice.{g}']}"
                for g in ("prune", "quant", "compile")
                if t.get(f"hpml.choice.{g}", "none") != "none"
            ),
            "none",
        )
        found = comparisons(run.data.metrics, t)
        rows.append(
            Row(
                f"optimise {choice}",
                ran(run),
                "; ".join(found) or "no comparison logged",
            )
        )
    path = "AMP, channels_last, compiled training (bench train_speed)"
    return [*rows, bench_row(store, "train_speed", path, lambda metric: "speed-up" in metric)]


def bench_row(store: Store, case: str, path: str, keep: Callable[[str], object]) -> Row:
    """A row of the ratios of bench ``case`` (its results JSON) whose metric ``keep`` picks,
    each as ``metric ratio [low, high] (n, coverage, verdict)`` with its goal where it has one."""
    file = Path(store.bench) / f"{case}.json"
    if not file.is_file() or file.stat().st_mtime < store.since:
        return Row(path, "no", "no results written")
    found = []
    for r in json.loads(file.read_text())["ratios"]:
        if not keep(r["metric"]):
            continue
        goal = (
            ""
            if r["goal"] is None
            else f", goal {r['goal']:g}: {'met' if r['meets_goal'] else 'not met'}"
        )
        found.append(
            f"{r['metric']}: {r['median']:.2f}x [{r['ci_low']:.2f}, {r['ci_high']:.2f}] "
            f"(n={len(r['values'])}, {r['ci_coverage']:.0%} interval, {r['verdict']}{goal})"
        )
    return Row(path, "yes" if found else "no", "; ".join(found) or "no ratio written")


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
