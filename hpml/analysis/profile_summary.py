"""Execution summary of a profiled window: where the step time went, in shares that sum to 100%.

Every instant of the profiled steps goes to the highest-priority activity running then (the
PyTorch profiler TensorBoard plugin's rule), in the order of ``CUDA_CATEGORIES`` or
``CPU_CATEGORIES``; framework overhead is time in hpml's step regions but in no operator.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Interval = tuple[float, float]

DATA_REGION = "hpml/data"
STEP_REGIONS = ("hpml/forward", "hpml/zero_grad", "hpml/backward", "hpml/optimizer_step")
# the categories, highest priority first ("other" takes what none of them holds)
CUDA_CATEGORIES = ("kernel", "memcpy", "memset", "runtime", "data_loading", "cpu_exec")
CPU_CATEGORIES = ("data_loading", "operator_compute", "framework_overhead")
CATEGORIES = (*dict.fromkeys([*CUDA_CATEGORIES, *CPU_CATEGORIES]), "other")  # every one, once


def breakdown(
    window: Interval, categories: Sequence[tuple[str, Iterable[Interval]]]
) -> dict[str, float]:
    """Seconds of ``window`` owned by each category (highest priority first) and ``other``:
    a sweep over the sorted span edges."""
    names = [name for name, _ in categories]
    lo, hi = window
    edges: list[tuple[float, int, int]] = []  # (time, +1 opens / -1 closes, category)
    for index, (_, spans) in enumerate(categories):
        for start, end in spans:
            if end > lo and start < hi:  # clipped to the window
                edges += [(max(start, lo), 1, index), (min(end, hi), -1, index)]
    edges.sort()
    owned = dict.fromkeys([*names, "other"], 0.0)
    open_count = [0] * len(names)
    cursor = lo
    for time, change, index in [*edges, (hi, 0, -1)]:
        if time > cursor:
            owner = next((names[i] for i, n in enumerate(open_count) if n > 0), "other")
            owned[owner] += time - cursor
            cursor = time
        if index >= 0:
            open_count[index] += change
    return owned


def shares_pct(seconds: dict[str, float]) -> dict[str, float]:
    total = sum(seconds.values())
    return {name: 100.0 * value / total if total else 0.0 for name, value in seconds.items()}


def _span(event) -> Interval:
    return (event.time_range.start, event.time_range.end)


def _on_host(event) -> bool:
    return str(event.device_type).endswith("CPU")


def _is_device_range(event) -> bool:
    """The device timeline's copy of a host range (``gpu_user_annotation`` in the trace): a
    ``record_function`` region or ``ProfilerStep#n`` drawn from its first kernel to its last.
    It spans the idle gaps and copies between them, so it is no device work of its own."""
    return not _on_host(event) and bool(getattr(event, "is_user_annotation", False))


def summarise_events(events: Iterable, cuda: bool) -> dict[str, float]:
    """Shares (percent) of the profiled steps' time per category, from ``profiler.events()``,
    over the span of the ``ProfilerStep*`` regions (on CUDA with their device copies)."""
    events = list(events)
    steps = [_span(e) for e in events if e.name.startswith("ProfilerStep")]
    if not steps:
        return {}
    window = (min(s for s, _ in steps), max(e for _, e in steps))
    data = [
        _span(e)
        for e in events
        if _on_host(e) and (e.name == DATA_REGION or e.name.startswith("enumerate(DataLoader)"))
    ]
    cpu_ops = [_span(e) for e in events if e.name.startswith("aten::") and _on_host(e)]
    if cuda:
        device = [
            e for e in events if str(e.device_type).endswith("CUDA") and not _is_device_range(e)
        ]
        memcpy = [_span(e) for e in device if "memcpy" in e.name.lower()]
        memset = [_span(e) for e in device if "memset" in e.name.lower()]
        kernels = [
            _span(e)
            for e in device
            if "memcpy" not in e.name.lower() and "memset" not in e.name.lower()
        ]
        runtime = [_span(e) for e in events if e.name.startswith("cuda") and _on_host(e)]
        spans = [kernels, memcpy, memset, runtime, data, cpu_ops]
        categories = list(zip(CUDA_CATEGORIES, spans, strict=True))
    else:
        framework = [_span(e) for e in events if e.name in STEP_REGIONS]
        categories = list(zip(CPU_CATEGORIES, [data, cpu_ops, framework], strict=True))
    return shares_pct(breakdown(window, categories))
