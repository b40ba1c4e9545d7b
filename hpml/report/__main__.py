"""``python -m hpml.report``: a sweep's (or any runs') report, as HTML and Markdown.

It shows the runs side by side (the config keys that differ, metrics with their units, failed
runs marked) and the plots their data allows, writes ``report.html`` (one file that opens
offline) and ``report.md`` with ``figures/*.svg``, prints their paths, and logs them to the
sweep's parent run (artifacts ``report/``) so they open from the MLflow UI.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpml.errors import HpmlError

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

    from hpml.report.page import Report

ARTIFACTS = "report"
# artifacts the studies' tables read (hpml.report.studies), when a run has them
TEXTS = ("prune/layers.json", "prune/architecture_before.txt", "prune/architecture_after.txt")


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
    parser.add_argument("--experiment", help="only this MLflow experiment (default: all)")
    parser.add_argument("--tracking-uri", help="default: MLFLOW_TRACKING_URI, else ./mlflow.db")
    parser.add_argument("--out", type=Path, help="folder for the report (default: the sweep's)")
    return parser.parse_args(argv)


def chosen(client: MlflowClient, args: argparse.Namespace) -> tuple[list[Run], Run | None]:
    """The runs ``args`` name, and their sweep's parent run (None for ``--runs``/``--filter``)."""
    from hpml.report.runs import experiment_ids, select_runs

    if args.filter is not None:
        from mlflow.exceptions import MlflowException

        try:
            runs = client.search_runs(experiment_ids(client, args.experiment), args.filter)
        except MlflowException as exc:
            raise HpmlError(f"--filter {args.filter!r}: {exc.message}") from None
        runs = [r for r in runs if r.data.tags.get("hpml.sweep_parent") != "true"]
        if not runs:
            raise HpmlError(f"no run matches --filter {args.filter!r} in {client.tracking_uri}")
        return runs, None
    return select_runs(client, args.sweep, args.runs, args.experiment)


def build(
    client: MlflowClient,
    runs: list[Run],
    parent: Run | None,
    serial: Sequence[Run] = (),
    by_seed: bool = False,
) -> Report:
    """The report of ``runs``: table, plots, learning curves (their histories fetched with a
    progress bar on a terminal); fused members compared with their twins among ``runs`` and
    ``serial``; repeats of a config (``replicate``, and seeds unless ``by_seed``) summarised
    as one, every comparison with its verdict."""
    from tqdm import tqdm

    from hpml.report import figures, fused, groups, roofline, search, studies, table
    from hpml.report.comparisons import in_run
    from hpml.report.header import header as page_header
    from hpml.report.page import Report

    keys, columns, rows = table.rows(runs)
    found = groups.group(runs, by_seed)
    base = groups.baseline(found)
    versus = groups.against_baseline(found, base)
    comparisons = [c for run in runs for c in in_run(run)] + versus
    config_keys = groups.label_keys(runs, by_seed)  # plots: a point per config, repeats pooled
    histories: dict[tuple[str, str], list[tuple[int, float]]] = {}
    texts: dict[tuple[str, str], str | None] = {}
    for run in tqdm(runs, desc="hpml: reading runs", unit="run", disable=not sys.stderr.isatty()):
        points = client.get_metric_history(run.info.run_id, "val/loss")
        histories[(run.info.run_id, "val/loss")] = sorted((m.step, m.value) for m in points)
        for path in TEXTS:
            texts[(run.info.run_id, path)] = artifact_text(client, run, path)
    tables = [studies.repeats(found, columns), studies.against_baseline(versus, base)]
    tables += [make(found, lambda r, p: texts.get((r.info.run_id, p))) for make in studies.TABLES]
    tables.append(fused.table(runs, serial))
    plots = [plot(runs, config_keys) for plot in figures.PLOTS]
    plots.append(roofline.figure(runs, keys))
    plots.append(fused.speeds(runs, serial))
    plots += [search.parallel_coordinates(runs, config_keys), search.importances(parent)]
    plots.append(figures.learning_curves(runs, keys, lambda r, n: histories[(r.info.run_id, n)]))
    statuses = Counter(run.info.status for run in runs)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    if parent is not None:
        title = str(parent.info.run_name)
        summary = f"{len(runs)} runs ({counts}) of sweep {parent.info.run_id}"
        best = parent.data.tags.get("hpml.optuna.best_value")
        if best is not None:
            summary += (
                f"; Optuna best {best} (trial {parent.data.tags.get('hpml.optuna.best_trial')})"
            )
    else:
        title, summary = f"{len(runs)} runs", f"{len(runs)} runs ({counts})"
    summary += f", in {client.tracking_uri}; swept: {', '.join(keys) or 'nothing'}."
    return Report(
        title,
        summary,
        keys,
        columns,
        rows,
        [t for t in tables if t is not None],
        [p for p in plots if p is not None],
        comparisons,
        header=page_header(runs, parent, _experiment(client, runs), keys),
    )


def _experiment(client: MlflowClient, runs: list[Run]) -> str:
    """The MLflow experiment(s) the runs belong to, by name."""
    ids = dict.fromkeys(run.info.experiment_id for run in runs)
    return ", ".join(client.get_experiment(i).name for i in ids)


def artifact_text(client: MlflowClient, run: Run, path: str) -> str | None:
    """The text of artifact ``path`` of ``run``, None when it has none."""
    import tempfile

    folder, _, name = path.rpartition("/")
    if name not in {Path(a.path).name for a in client.list_artifacts(run.info.run_id, folder)}:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        return Path(client.download_artifacts(run.info.run_id, path, tmp)).read_text()


def out_folder(args: argparse.Namespace, runs: list[Run], parent: Run | None) -> Path:
    if args.out is not None:
        return args.out
    sweep_dir = parent.data.tags.get("hpml.sweep_dir") if parent is not None else None
    if sweep_dir:
        return Path(sweep_dir) / "report"
    from hpml.report.runs import project_root

    name = parent.info.run_id if parent is not None else runs[0].info.run_id
    return project_root() / "outputs" / "report" / name


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per file
    try:
        from mlflow import MlflowClient

        from hpml.report.fused import members
        from hpml.report.runs import default_tracking_uri, runs_or_jobs

        client = MlflowClient(args.tracking_uri or default_tracking_uri())
        runs, parent = chosen(client, args)
        serial = runs_or_jobs(client, args.twin)
        if serial and not members(runs):
            print("hpml: warning: --twin: the report's runs have no fused members", file=sys.stderr)
        report = build(client, runs, parent, serial, args.by_seed)
        folder = out_folder(args, runs, parent)
        html, md = report.write(folder)
        if parent is not None:
            client.log_artifacts(parent.info.run_id, str(folder), ARTIFACTS)
    except HpmlError as exc:
        print(f"hpml: error: {exc}", file=sys.stderr)
        return 1
    where = f" (and to run {parent.info.run_id}, artifacts {ARTIFACTS}/)" if parent else ""
    print(f"hpml: wrote {html}\nhpml: wrote {md}{where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
