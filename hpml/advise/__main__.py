"""``python -m hpml.advise RUN_ID [--try]``: the bound of a run's training and the next steps
for it, each with the gain it predicts; ``--try`` runs them beside the original in one sweep
and writes that sweep's report, led by the table of predictions against measurements.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpml import garbage
from hpml.errors import HpmlError
from hpml.report.runs import default_tracking_uri, project_root

if TYPE_CHECKING:
    from mlflow.entities import Run

    from hpml.advise.evidence import Evidence
    from hpml.report.stores import Stores
    from hpml.report.studies import Table

ARTIFACTS = "report"  # the try's report, on its sweep's parent run


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hpml.advise",
        description="Say what bounds a run's training and the next steps to try, each with the "
        "gain it predicts; --try runs them beside the run in one sweep.",
    )
    parser.add_argument(
        "run_id",
        metavar="RUN_ID",
        help="a run, or a sweep's parent run (each of its configs); last: the newest sweep",
    )
    parser.add_argument("--experiment", help="with last: the newest sweep of this experiment")
    parser.add_argument(
        "--try",
        dest="tried",
        action="store_true",
        help="run the proposals beside the original, one interleaved sweep into the run's store, "
        "and compare each with it on train throughput",
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs of each arm in the try (default: 2)"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="the smallest difference a verdict calls faster or slower, a fraction (default: "
        "0.05, as the report's --by)",
    )
    parser.add_argument(
        "--tracking-uri",
        help="the store (default: MLFLOW_TRACKING_URI, else sqlite:///<HPML_ROOT or "
        "cwd>/mlflow.db)",
    )
    parser.add_argument(
        "--out", type=Path, help="folder for the try's report (default: its sweep's)"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: at least 1 (2 or more give an interval)")
    if not 0 <= args.threshold < 1:
        parser.error(f"--threshold {args.threshold}: a fraction, from 0 to below 1")
    return args


def configs(stores: Stores, run: Run) -> list[tuple[str, list[Run]]]:
    """The runs advised together, each set named: ``run``; for a sweep's parent, each config's
    finished repeats, named by the keys that tell them apart."""
    from hpml.report.table import short_name

    if run.data.tags.get("hpml.sweep_parent") != "true":
        return [(short_name(run), [run])]
    from hpml.report.groups import group

    groups = [g for g in group(stores.jobs(run)) if g.finished]
    found = [(f"{g.label} ({len(g.runs)} runs)", list(g.runs)) for g in groups]
    if not found:
        raise HpmlError(f"sweep {run.info.run_id} has no finished run to advise")
    return found


def evidence(stores: Stores, runs: list[Run]) -> Evidence:
    """What the rules need of ``runs``: their record, and what it cannot say (whether the data
    can be held as tensors, the device's peaks, the sweep's runs a fused array could train)."""
    from hpml.advise import evidence, peaks, recorded
    from hpml.names import COMPUTE, DEVICE, HOST, INPUT, bound_tag

    first = runs[0]
    bound = first.data.tags.get(bound_tag("train"))
    found: dict[str, object] = {}
    if bound == INPUT and first.data.params.get("data.chosen.placement") == "loader":
        try:
            found["held"], found["not_held"] = recorded.held(recorded.overrides(first))
        except HpmlError as exc:
            found["not_held"] = f"not known: {exc}"
    if bound in (COMPUTE, DEVICE):
        found["peaks"] = peaks.run_peaks(first)
    parent = first.data.tags.get("mlflow.parentRunId")
    if bound == HOST and parent:
        found["fusable"] = recorded.fusable(first, stores.jobs(stores.run(parent)))
    return evidence.read(runs, **found)


def advise(stores: Stores, name: str, runs: list[Run], args: argparse.Namespace) -> None:
    """Say ``runs``' bound and proposals; with ``--try``, run them and write the try's report
    (in ``args.out``, where given)."""
    from hpml.advise import results, rules

    e = evidence(stores, runs)
    print(f"hpml: {name} ({runs[0].info.run_id}): train bound by {e.bound or '?'}: {e.why}")
    for note in rules.notes(e):
        print(f"hpml: note: {note}")
    proposals = rules.propose(e)
    if not args.tried or not proposals:
        for proposal in proposals:
            print(f"hpml: advise: {results.line(proposal)}")
        return
    from hpml.advise import trial

    parent, _ = trial.run_arms(stores, runs[0], proposals, args.repeats, project_root())
    tried = trial.compare(stores.jobs(parent), proposals, args.threshold)
    folder = args.out or Path(parent.data.tags.get("hpml.sweep_dir", "")) / "report"
    written = write_report(stores, parent, results.table(tried, name), folder)
    for proposal, done in zip(proposals, tried, strict=True):
        print(f"hpml: advise: {results.line(proposal, done)}")
    print(f"hpml: wrote {written} (and to run {parent.info.run_id}, artifacts {ARTIFACTS}/)")


def write_report(stores: Stores, parent: Run, advice: Table, folder: Path) -> Path:
    """The try-sweep's report, ``advice`` leading it, in ``folder`` and on ``parent``; the
    advice CSV's path."""
    from hpml.advise.results import NAME
    from hpml.report.__main__ import build

    report = build(stores, stores.jobs(parent), parent)
    report.lead.insert(0, advice)
    report.write(folder)
    stores.of(parent).log_artifacts(parent.info.run_id, str(folder), ARTIFACTS)
    return folder / "tables" / f"{NAME}.csv"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        from hpml.report.stores import Stores

        stores = Stores.open([args.tracking_uri or default_tracking_uri()])
        run = (
            stores.sweep("last", args.experiment)
            if args.run_id == "last"
            else stores.run(args.run_id)
        )
        found = configs(stores, run)
        for index, (name, runs) in enumerate(found):
            out = args.out / str(index) if args.out and len(found) > 1 else args.out
            advise(stores, name, runs, argparse.Namespace(**{**vars(args), "out": out}))
    except HpmlError as exc:
        print(f"hpml: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with garbage.command():  # held to the end, or to the try's first job
        raise SystemExit(main())
