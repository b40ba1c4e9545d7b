"""Lightning's MLflow logger, bound to a run that hpml started and will end."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import MLFlowLogger

from hpml.names import BEST_TAG, LAST_TAG, WRITER_TAG
from hpml.tracking.jobs import this_process
from hpml.tracking.resume import CHECKPOINT_ARTIFACTS

log = logging.getLogger(__name__)
Select = Callable[[dict[str, float]], dict[str, float]]  # the metrics a run keeps, named


class AttachedMLFlowLogger(MLFlowLogger):
    """Logs metrics into an existing run and leaves its status to the run's owner (Lightning's
    ``finalize`` would mark it FINISHED before ``test`` and before a failure is recorded).

    Checkpoints go to ``checkpoints/<file>`` as soon as they are written, unless larger than
    ``checkpoint_max_bytes`` (None: no cap, 0: never); their paths on disk are tags for ``resume``.
    ``select`` picks and names the run's metrics among those logged (a fused array's member: its
    own, under their serial names), as whoever trains the run knows them; None: all, as logged.
    """

    def __init__(
        self,
        *args: Any,
        checkpoint_max_bytes: int | None = None,
        select: Select | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.checkpoint_max_bytes = checkpoint_max_bytes
        self.select = select
        self._uploaded: dict[str, tuple[float, int]] = {}  # path -> (mtime, size) when logged
        self._over_cap: set[str] = set()

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Log the checkpoint files that changed since the last call, and where they are."""
        paths = {
            LAST_TAG: checkpoint_callback.last_model_path,
            BEST_TAG: checkpoint_callback.best_model_path,
        }
        self.experiment.set_tag(self.run_id, WRITER_TAG, this_process())
        for tag, path in paths.items():
            if not path or not os.path.isfile(path):
                continue
            self.experiment.set_tag(self.run_id, tag, str(Path(path).resolve()))
            stat = os.stat(path)
            if self._uploaded.get(path) != (stat.st_mtime, stat.st_size) and self._fits(path):
                self.experiment.log_artifact(self.run_id, path, CHECKPOINT_ARTIFACTS)
                self._uploaded[path] = (stat.st_mtime, stat.st_size)

    def _fits(self, path: str) -> bool:
        """Whether ``path`` is under the size cap; warns once per file when it is not."""
        cap, size = self.checkpoint_max_bytes, os.path.getsize(path)
        if cap is None or size <= cap:
            return True
        if cap > 0 and path not in self._over_cap:
            log.warning(
                "checkpoint %s is %d bytes, over logger.checkpoint_max_bytes=%d: kept on "
                "disk only, not logged to MLflow",
                path,
                size,
                cap,
            )
        self._over_cap.add(path)
        return False

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        super().log_metrics(self.select(metrics) if self.select else metrics, step)

    def finalize(self, status: str = "success") -> None:
        """Nothing to close: checkpoints were logged as they were saved, the run is hpml's."""
