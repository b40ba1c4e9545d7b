"""``--try``: the proposals run beside the original as one sweep of ``hpml.train`` (its own
entry point and interleaving sweeper) into the run's store, then each arm compared with the
original on train throughput by the report's own rule (:func:`hpml.report.groups.versus`):
its ratio, interval and verdict, gated by a bound both sides share unless the arm changes what
feeds the input."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpml.advise.arms import GROUP, ORIGINAL, Arm, arm_name, key, split, sweep_args, write
from hpml.advise.recorded import overrides
from hpml.advise.rules import Proposal
from hpml.errors import HpmlError
from hpml.names import THROUGHPUT
from hpml.report.comparisons import Comparison
from hpml.report.groups import FINISHED, Group, feeds, versus
from hpml.tracking.jobs import PARENT_FILE

if TYPE_CHECKING:
    from mlflow.entities import Run

    from hpml.report.stores import Stores

ARM_TAG = f"hpml.choice.{GROUP}"  # a try's run: the arm it ran


@dataclass(frozen=True)
class Tried:
    """A proposal after the try: its arm's comparison with the original on train throughput
    (None: not run, or no run of a side finished: ``said`` why)."""

    proposal: Proposal
    arm: str
    comparison: Comparison | None = None
    said: str = ""

    @property
    def off(self) -> float | None:
        """How far the prediction was off: measured over predicted."""
        if self.comparison is None or not self.proposal.gain:
            return None
        return self.comparison.ratio / self.proposal.gain


def launch(args: list[str]) -> int:
    """``python -m hpml.train ARGS`` in this process, run as ``-m`` runs it (its module as
    ``__main__``: Hydra finds ``conf/`` beside it); its exit status."""
    import runpy
    import warnings

    saved = sys.argv
    sys.argv = [saved[0], *args]
    try:
        with warnings.catch_warnings():  # this process imported hpml.train: its state is none
            warnings.filterwarnings("ignore", "'hpml.train' found in sys.modules", RuntimeWarning)
            runpy.run_module("hpml.train", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved
    return 0


def sweep_folder(root: Path, run: Run) -> Path:
    """Where a try of ``run`` sweeps: under ``multirun/advise/``, by run and time."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S") + f"_{time.time_ns() // 1000 % 10**6:06d}"
    return root / "multirun" / "advise" / f"{run.info.run_id[:12]}_{stamp}"


def run_arms(
    stores: Stores, run: Run, proposals: list[Proposal], repeats: int, root: Path
) -> tuple[Run, list[Arm]]:
    """Sweep the original and each proposal ``--try`` can run, ``repeats`` each; the sweep's
    parent run and the arms."""
    arms = [Arm(arm_name(p.overrides), p.overrides) for p in proposals if not p.untried]
    original = overrides(run)
    if any(key(text) == GROUP for text in original):
        raise HpmlError(
            f"run {run.info.run_id} is an arm of an earlier try ({GROUP}): try the run it was "
            "tried beside, or a run of the arm's overrides"
        )
    shared, moved = split(original, arms)
    folder = sweep_folder(root, run)
    config_dir = write(folder / "advise_conf", moved, arms)
    client = stores.of(run)
    store = (str(client.tracking_uri), client.get_experiment(run.info.experiment_id).name)
    code = launch(sweep_args(shared, config_dir, arms, repeats, store, folder))
    record = folder / PARENT_FILE
    if not record.is_file():
        raise HpmlError(f"the try's sweep did not start (hpml.train exited {code}): {folder}")
    return stores.run(json.loads(record.read_text())["run_id"]), arms


def compare(jobs: list[Run], proposals: list[Proposal], margin: float = 0.0) -> list[Tried]:
    """Each proposal's arm among a try's ``jobs`` against the original arm on train
    throughput; ``margin``: the smallest difference called faster or slower."""
    finished: dict[str, list[Run]] = {}
    for job in jobs:
        if job.info.status == FINISHED:
            finished.setdefault(job.data.tags.get(ARM_TAG, ""), []).append(job)
    base = finished.get(ORIGINAL)
    found = []
    for proposal in proposals:
        name = arm_name(proposal.overrides)
        if proposal.untried:
            found.append(Tried(proposal, "", said=f"not tried: {proposal.untried}"))
            continue
        mine = finished.get(name)
        if not base or not mine:
            side = "the original" if not base else "this arm"
            found.append(Tried(proposal, name, said=f"no run of {side} finished"))
            continue
        other, reference = Group(name, tuple(mine)), Group(ORIGINAL, tuple(base))
        compared = versus(
            other, reference, f"{name} vs {ORIGINAL}", margin, feeds(other, reference)
        )
        speed = next((c for c in compared if c.measure == THROUGHPUT), None)
        said = "" if speed is not None else f"no {THROUGHPUT} on both sides"
        found.append(Tried(proposal, name, speed, said))
    return found
