"""Joules per sample of each stage's epoch, for the speed monitor, from the board's counter.

The window is the stage's epoch, between edges where the monitor has synchronised the GPU; a
training epoch leaves its validation out. Whole-board energy, idle not subtracted; under DDP
summed over the ranks' devices; on a fused array per sample of every member. Nothing is logged
where the counter cannot be read.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L

from hpml.analysis.energy import Energy, EnergyWindows, open_meter
from hpml.callbacks.ranks import across_ranks
from hpml.models.base import ArrayModule
from hpml.names import J_PER_SAMPLE, J, W, metric


class StageEnergy:
    """Each stage's window on the board's counter, opened at its start, figures at its end."""

    def __init__(self) -> None:
        self.windows: EnergyWindows | None = None
        self.looked = False  # the meter is looked for once, at the first window

    def start(self, stage: str, pl_module: L.LightningModule) -> None:
        if not self.looked:
            meter, self.looked = open_meter(pl_module.device), True
            self.windows = EnergyWindows(meter) if meter is not None else None
        if self.windows is not None:
            self.windows.open(stage)

    def end(
        self,
        stage: str,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        seconds: float,
        batches: Sequence[int],
    ) -> dict[str, float]:
        """``stage``'s figures over its window of ``seconds`` and the samples of its ``batches``
        (every step's, warm-up included); none where the counter cannot be read or the window
        is too short, on every rank alike under DDP."""
        if pl_module.device.type != "cuda":  # no counter, and no collective to keep in step
            return {}
        samples = sum(batches)
        joules = self.windows.close(stage) if self.windows is not None else None
        mine = Energy(joules or 0.0, seconds, samples)
        measured = float(joules is not None and mine.measurable)
        mine_w = mine.watts if measured else 0.0
        job = {"joules": mine.joules, "watts": mine_w, "samples": samples, "measured": measured}
        job = across_ranks(trainer, job, "sum")
        if job["measured"] < trainer.world_size:  # a rank without its board's energy: none
            return {}
        members = len(pl_module.members) if isinstance(pl_module, ArrayModule) else 1
        return {
            metric(stage, "energy", J): job["joules"],
            metric(stage, "power", W): job["watts"],
            metric(stage, "energy", J_PER_SAMPLE): job["joules"] / (job["samples"] * members),
        }
