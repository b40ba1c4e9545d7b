"""``python -m hpml.report``: a sweep's (or any runs') report, as HTML and Markdown, logged to
the sweep's parent run (artifacts ``report/``); ``--by``, ``--baseline`` and ``--fail-on`` compare
runs, for CI too.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpml import garbage
from hpml.errors import HpmlError
from hpml.names import SWEEP_DIR_TAG, SWEEP_PARENT_TAG, step_tag
from hpml.report.runs import default_tracking_uri, project_root

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

    from hpml.report.page import Report
    from hpml.report.pairs import Compared
    from hpml.report.stores import Stores

ARTIFACTS = "report"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hpml.report",
        description="Write the report of a sweep or of runs: HTML and Markdown, logged to the "
        "sweep's parent run.",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--last", action="store_true", help="the latest sweep (the default)")
    which.add_argument("--sweep", metavar="RUN_ID", help="the sweep whose parent run this is")
    which.add_argument("--runs", nargs="+", metavar="RUN_ID", help="these runs")
    which.add_argument(
        "--filter",
        metavar="FILTER",
        help="runs an MLflow filter string selects, e.g. "
        "\"params.model.optimizer.lr = '0.01'\" (child and single runs, not sweep parents)",
    )
    parser.add_argument(
        "--twin",
        nargs="+",
        default=[],
        metavar="RUN_ID",
        help="serial runs, or the parent of the serial sweep, to compare the fused members of "
        "the report with (their twins are looked for among the report's runs too)",
    )
    parser.add_argument(
        "--by-seed",
        action="store_true",
        help="keep runs of different seeds apart (default: runs whose configs differ only in "
        "replicate, seed and data.seed are repeats of one config, summarised together)",
    )
    parser.add_argument(
        "--by",
        metavar="KEY",
        help="compare runs equal but for KEY, a param (data.batch_size), a config group or where "
        "they ran (env.device, env.cpu, env.host, env.cpu_threads, env.torch, env.cuda, "
        "env.commit, store): a ratio with its interval and verdict per config and speed measure",
    )
    parser.add_argument(
        "--baseline",
        metavar="RUN_ID",
        help="with --sweep: compare the sweep with this earlier sweep of the same configs",
    )
    parser.add_argument(
        "--fail-on",
        choices=["slower"],
        help="exit 1 when a config compared (--baseline, --by) is slower beyond --threshold "
        "over its whole interval",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="the smallest difference --by and --baseline call faster or slower, and --fail-on's "
        "margin: a fraction of the reference's speed (default: 0.05)",
    )
    parser.add_argument(
        "--slow-machine",
        type=float,
        metavar="FRACTION",
        help="flag a run 'slow machine' whose canary is slower than the median of the other "
        "runs of its environment and host by more than this (default: each run's own "
        "callbacks.canary.slow_above, 0.25 unless set); --by and --baseline note sides whose "
        "canaries differ by more",
    )
    parser.add_argument("--experiment", help="only this MLflow experiment (default: all)")
    parser.add_argument(
        "--tracking-uri",
        action="append",
        help="the store, again for several (default: MLFLOW_TRACKING_URI, else ./mlflow.db)",
    )
    parser.add_argument("--out", type=Path, help="folder for the report (default: the sweep's)")
    args = parser.parse_args(argv)
    if args.baseline and not args.sweep:
        parser.error("--baseline needs --sweep (the sweep to compare with it)")
    if args.baseline and args.by:
        parser.error("--baseline compares by sweep: give --by or --baseline, not both")
    if args.fail_on and not (args.baseline or args.by):
        parser.error("--fail-on needs --baseline or --by (what to compare)")
    if not 0 <= args.threshold < 1:
        parser.error(f"--threshold {args.threshold}: a fraction, from 0 to below 1")
    if args.slow_machine is not None and not args.slow_machine > 0:
        parser.error(f"--slow-machine {args.slow_machine}: a fraction above 0 (0.25: 25% slower)")
    return args


def chosen(
    stores: Stores, args: argparse.Namespace
) -> tuple[list[Run], Run | None, Compared | None]:
    """The runs ``args`` name (with ``--baseline``, the baseline sweep's jobs too), their sweep's
    parent run (None for ``--runs``/``--filter``), and what ``--by`` or ``--baseline`` compares
    (None for neither)."""
    from hpml.report import pairs

    if args.filter is not None:
        from mlflow.exceptions import MlflowException

        try:
            runs = stores.search(args.filter, args.experiment)
        except MlflowException as exc:
            raise HpmlError(f"--filter {args.filter!r}: {exc.message}") from None
        runs = [r for r in runs if r.data.tags.get(SWEEP_PARENT_TAG) != "true"]
        if not runs:
            raise HpmlError(f"no run matches --filter {args.filter!r} in {stores.where}")
        parent = None
    else:
        runs, parent = stores.select(args.sweep, args.runs, args.experiment)
    options = (args.by_seed, args.threshold, args.slow_machine)  # --by and --baseline alike
    if args.baseline and parent is not None:
        base = stores.sweep(args.baseline)
        if base.info.run_id == parent.info.run_id:
            raise HpmlError(f"--baseline {args.baseline} is the sweep itself")
        runs += stores.jobs(base)
        return runs, parent, pairs.by_sweep(runs, parent, base, *options)
    return runs, parent, pairs.by_key(runs, args.by, *options) if args.by else None


def build(
    client: MlflowClient | Stores,
    runs: list[Run],
    parent: Run | None,
    serial: Sequence[Run] = (),
    by_seed: bool = False,
    by: Compared | None = None,
    slow_above: float | None = None,
) -> Report:
    """The report of ``runs``: table, plots, learning curves, fused members against their
    twins, repeats of a config summarised as one, every comparison with its verdict.

    Args:
        parent: their sweep's parent run, None for runs chosen one by one.
        serial: more runs to find the fused members' serial twins among (``--twin``).
        by_seed: keep runs of different seeds apart (default: repeats of one config).
        by: what ``--by`` or ``--baseline`` compares, in the table that leads the report.
        slow_above: ``--slow-machine``: the canary threshold (default: each run's own).
    """
    from tqdm import tqdm

    from hpml.names import VAL_LOSS
    from hpml.report import figures, fused, groups, machine, pairs, roofline, search, studies, table
    from hpml.report.comparisons import in_run
    from hpml.report.environment import is_env
    from hpml.report.header import header as page_header
    from hpml.report.order import run_order
    from hpml.report.page import Report
    from hpml.report.stores import Stores

    stores = client if isinstance(client, Stores) else Stores([client])

    keys, columns, rows = table.rows(runs)
    slow = machine.slowdowns(stores, runs, slow_above)
    rows = [table.flagged(row, slow.get(row.run_id)) for row in rows]
    found = groups.group(runs, by_seed)
    base = groups.baseline(found)
    versus = groups.against_baseline(found, base)
    comparisons = [c for run in runs for c in in_run(run)] + versus
    comparisons += by.comparisons if by is not None else []
    config_keys = groups.label_keys(runs, by_seed)  # plots: a point per config, repeats pooled
    if by is not None and by.key in table.differing_keys(runs) and by.key not in config_keys:
        config_keys.append(by.key)  # a series per value of what is compared (env.host, store)
    histories: dict[tuple[str, str], list[tuple[int, float]]] = {}
    texts: dict[str, dict[str, str | None]] = {}
    for run in tqdm(runs, desc="hpml: reading runs", unit="run", disable=not sys.stderr.isatty()):
        points = stores.of(run).get_metric_history(run.info.run_id, VAL_LOSS)
        histories[(run.info.run_id, VAL_LOSS)] = sorted((m.step, m.value) for m in points)
        texts[run.info.run_id] = stores.texts(run, studies.TEXTS)
    tables = [studies.repeats(found, columns), studies.against_baseline(versus, base)]
    tables += [make(found, lambda r, p: texts[r.info.run_id].get(p)) for make in studies.TABLES]
    tables.append(fused.table(runs, serial))
    plots = [plot(runs, config_keys) for plot in figures.PLOTS]
    plots += [roofline.figure(runs, keys), fused.speeds(runs, serial)]
    plots += [search.parallel_coordinates(runs, config_keys), search.importances(parent)]
    plots.append(figures.learning_curves(runs, keys, lambda r, n: histories[(r.info.run_id, n)]))
    statuses = Counter(run.info.status for run in runs)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    if parent is not None:
        title = str(parent.info.run_name)
        summary = f"{len(runs)} runs ({counts}) of sweep {parent.info.run_id}"
        own = sum(r.data.tags.get("mlflow.parentRunId") == parent.info.run_id for r in runs)
        if own < len(runs):  # --baseline: the earlier sweep's jobs too
            summary = f"{len(runs)} runs ({counts}): {own} of sweep {parent.info.run_id}, the "
            summary += f"other {len(runs) - own} of the baseline sweep"
        if (best := parent.data.tags.get(step_tag("optuna", "best_value"))) is not None:
            trial = parent.data.tags.get(step_tag("optuna", "best_trial"))
            summary += f"; Optuna best {best} (trial {trial})"
    else:
        title, summary = f"{len(runs)} runs", f"{len(runs)} runs ({counts})"
    swept = [k for k in keys if not is_env(k)]
    summary += f", in {stores.where}; swept: {', '.join(swept) or 'nothing'}."
    if (order := run_order(runs, by_seed)) is not None:
        summary += f" {order}"
    lead = pairs.table(by.pairs, by.key, by.alone, by.title) if by is not None else None
    experiments = {(stores.of(run), run.info.experiment_id): None for run in runs}
    experiment = ", ".join(dict.fromkeys(c.get_experiment(i).name for c, i in experiments))
    return Report(
        title,
        summary,
        keys,
        columns,
        rows,
        [t for t in tables if t is not None],
        [p for p in plots if p is not None],
        comparisons,
        header=page_header(runs, parent, experiment, keys, slow),
        lead=[lead] if lead is not None else [],
    )


def out_folder(args: argparse.Namespace, runs: list[Run], parent: Run | None) -> Path:
    if args.out is not None:
        return args.out
    sweep_dir = parent.data.tags.get(SWEEP_DIR_TAG) if parent is not None else None
    if sweep_dir:
        return Path(sweep_dir) / "report"
    return project_root() / "outputs" / "report" / (parent or runs[0]).info.run_id


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per file
    try:
        from hpml.report.fused import members
        from hpml.report.stores import Stores

        stores = Stores.open(args.tracking_uri or [default_tracking_uri()])
        runs, parent, by = chosen(stores, args)
        serial = stores.runs_or_jobs(args.twin)
        if serial and not members(runs):
            print("hpml: warning: --twin: the report's runs have no fused members", file=sys.stderr)
        if by is not None and not by.pairs:
            print(f"hpml: warning: --by {by.key}: no two runs equal but for it", file=sys.stderr)
        folder = out_folder(args, runs, parent)
        report = build(stores, runs, parent, serial, args.by_seed, by, args.slow_machine)
        html, md = report.write(folder)
        if parent is not None:
            stores.of(parent).log_artifacts(parent.info.run_id, str(folder), ARTIFACTS)
    except HpmlError as exc:
        print(f"hpml: error: {exc}", file=sys.stderr)
        return 1
    where = f" (and to run {parent.info.run_id}, artifacts {ARTIFACTS}/)" if parent else ""
    print(f"hpml: wrote {html}\nhpml: wrote {md}{where}")
    return failed(args, by)


def failed(args: argparse.Namespace, by: Compared | None) -> int:
    """``--fail-on slower``: 1 where a compared config got slower, each named on stderr."""
    from hpml.report.regression import slower

    if args.fail_on != "slower" or by is None:
        return 0
    lines = slower(by.pairs, args.threshold)
    for line in lines:
        print(f"hpml: slower: {line}", file=sys.stderr)
    if lines:
        print(
            f"hpml: --fail-on slower: {len(lines)} config(s) slower by more than "
            f"{args.threshold:.0%} over the whole interval",
            file=sys.stderr,
        )
    return 1 if lines else 0


if __name__ == "__main__":
    with garbage.command():  # no job to start: full collections held to the end
        raise SystemExit(main())
