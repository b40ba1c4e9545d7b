"""Lightning's MLflow logger, bound to a run that hpml started and will end."""

from __future__ import annotations

from lightning.pytorch.loggers import MLFlowLogger


class AttachedMLFlowLogger(MLFlowLogger):
    """Logs metrics into an existing run and leaves its status alone.

    Lightning's ``MLFlowLogger.finalize`` marks the run FINISHED at the end of ``fit``, before
    ``test`` has logged anything and before hpml has recorded a failure; the run's owner ends it.
    """

    def finalize(self, status: str = "success") -> None:
        if self._initialized and self._checkpoint_callback:
            self._scan_and_log_checkpoints(self._checkpoint_callback)
