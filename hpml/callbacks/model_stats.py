"""Parameters, non-zero parameters and saved size of the model, when fit starts and after test."""

from __future__ import annotations

import lightning as L

from hpml.analysis.model_stats import nonzero_param_count, param_count, state_dict_bytes
from hpml.callbacks.logging import log_metrics, log_text, resuming
from hpml.names import BYTES, COUNT, metric


class ModelStats(L.Callback):
    """Logs ``model/params_count``, ``model/trainable_params_count``, ``model/nonzero_params_count``
    and ``model/size_bytes`` (bytes of the saved state dict), plus ``print(model)`` as an artifact.

    Measured again at the end of ``test`` (as ``model_final/...``) so that anything that changed the
    model during the run (pruning, quantisation) shows before and after.
    """

    def stats(self, module: L.LightningModule, stage: str) -> dict[str, float]:
        """Counts and size; a quantised or compiled net keeps no parameters in the module tree,
        so its counts are left out rather than logged as 0 (its saved size still counts)."""
        found: dict[str, float] = {}
        if param_count(module) > 0:
            found |= {
                metric(stage, "params", COUNT): param_count(module),
                metric(stage, "trainable_params", COUNT): param_count(module, trainable_only=True),
                metric(stage, "nonzero_params", COUNT): nonzero_param_count(module),
            }
        if module.state_dict():
            found[metric(stage, "size", BYTES)] = state_dict_bytes(module)
        return found

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if resuming(trainer):
            return
        log_metrics(trainer, self.stats(pl_module, "model"))
        log_text(trainer, str(pl_module), "model/architecture.txt")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_metrics(trainer, self.stats(pl_module, "model_final"))
