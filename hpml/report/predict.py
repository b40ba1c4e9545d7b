"""``python -m hpml.report.predict``: throughput and memory at other batch sizes, from runs.

Fits the runs of a sweep (or ``--runs``) over ``data.batch_size`` and prints, for each
``--batch``, predicted step time, throughput (samples/s) and memory (bytes), and the largest batch
that fits the device's memory. Memory is CUDA's peak allocation where the runs used a GPU, else
``memory/training_total_bytes`` (weights + gradients + optimiser state + saved activations).
"""

from __future__ import annotations

import argparse
import sys

from hpml import names
from hpml.errors import HpmlError
from hpml.names import MEMORY_TOTAL, PEAK_MEMORY, STEP_CPU_TIME, STEP_TIME
from hpml.report.runs import add_run_choice, default_tracking_uri

STEP = {"wall": STEP_TIME, "cpu": STEP_CPU_TIME}


def observations(
    runs: list, clock: str = "wall"
) -> tuple[list[int], list[float], list[float], str]:
    """Batch sizes, step times (s, by ``clock``), memory (bytes) of ``runs``, and its metric."""
    on_cuda = all(
        r.data.tags.get(names.PEAK_MEMORY_SOURCE_TAG, "").startswith("torch.cuda") for r in runs
    )
    memory_metric = PEAK_MEMORY if on_cuda else MEMORY_TOTAL
    batches, steps, memory = [], [], []
    for run in runs:
        missing = [m for m in (STEP[clock], memory_metric) if m not in run.data.metrics]
        if missing or "data.batch_size" not in run.data.params:
            raise HpmlError(
                f"run {run.info.run_id} lacks {', '.join(missing) or 'data.batch_size'}"
                ": it needs the default perf and memory callbacks"
            )
        batches.append(int(run.data.params["data.batch_size"]))
        steps.append(run.data.metrics[STEP[clock]] / 1e3)
        memory.append(run.data.metrics[memory_metric])
    return batches, steps, memory, memory_metric


def capacity_bytes(runs: list) -> float:
    """Device memory from the runs' tags (CUDA), else this host's RAM."""
    if all(tagged := [r.data.tags.get(names.DEVICE_MEMORY_TAG) for r in runs]):
        return float(tagged[0])
    import psutil

    return float(psutil.virtual_memory().total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpml.report.predict", description=__doc__)
    add_run_choice(parser)
    parser.add_argument(
        "--batch", nargs="+", type=int, default=[1, 8, 32, 128, 512], help="batch sizes to predict"
    )
    parser.add_argument(
        "--clock",
        choices=sorted(STEP),
        default="wall",
        help="step time to fit: wall (default) or process CPU time, which a "
        "busy shared machine disturbs less (one-thread runs)",
    )
    args = parser.parse_args(argv)

    from hpml.analysis.scaling import ScalingModel
    from hpml.report.stores import Stores

    try:
        stores = Stores.open([args.tracking_uri or default_tracking_uri()])
        runs, parent = stores.select(args.sweep, args.runs, args.experiment)
        batches, steps, memory, memory_metric = observations(runs, args.clock)
        model = ScalingModel.fit(batches, steps, memory)
    except HpmlError as exc:
        print(f"hpml: error: {exc}", file=sys.stderr)
        return 2
    capacity = capacity_bytes(runs)
    print(
        f"fitted on batch sizes {sorted(batches)}: step time ({args.clock}) = "
        f"{model.step_time_s.intercept * 1e3:.2f} ms + {model.step_time_s.slope * 1e3:.3f} "
        f"ms/sample; memory ({memory_metric}) = {model.memory_bytes.intercept:.0f} B + "
        f"{model.memory_bytes.slope:.0f} B/sample"
    )
    print(f"{'batch':>7} {'step_ms':>10} {'samples/s':>11} {'memory_bytes':>14} fits")
    lines = []
    for batch in args.batch:
        p = model.predict(batch, capacity)
        lines.append(
            f"{batch:>7} {p.step_time_s * 1e3:>10.2f} {p.throughput_samples_per_s:>11.1f} "
            f"{p.memory_bytes:>14.0f} {'yes' if p.fits else 'no'}"
        )
    print("\n".join(lines))
    print(f"largest batch that fits {capacity:.0f} bytes: {model.largest_batch(capacity)}")
    if parent is not None:
        stores.of(parent).log_text(
            parent.info.run_id, "\n".join(lines) + "\n", "predict/scaling.txt"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
